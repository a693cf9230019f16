//go:build cgo

package restore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
	"github.com/sfstate/sfstate/statediff"
)

var (
	jcKey   = []keygroups.FieldType{keygroups.TypeBigInt}
	jcAgg   = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString}
	jcLeft  = []keygroups.FieldType{keygroups.TypeInt, keygroups.TypeBigInt, keygroups.TypeString}
	jcRight = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString, keygroups.TypeDouble}
)

// joinCheckpointState fills par RocksDB backends of a schema with a value
// state ("agg") and a join-record state in layout l with sides, writing the
// join records straight in recordstore's format (the join driver keeps no
// association counts), so that outer sides carry association counts. It
// returns the backends, the schema and the entries Flink must see, as
// "state|key group|key|user key or value|count|assoc|ts" → occurrences.
func joinCheckpointState(t *testing.T, l recordstore.Layout, sides *engine.JoinSides, maxP, par, keys int, clock *engine.Clock) ([]engine.Backend, *engine.Schema, map[string]int) {
	t.Helper()
	d := recordstore.StateDesc(l, time.Hour)
	schema := &engine.Schema{Key: engine.RowType(jcKey...), States: []engine.StateSchema{
		{Name: "agg", Kind: engine.KindValue, Namespace: engine.VoidType, Value: engine.RowType(jcAgg...)},
		{Name: d.Name, Kind: d.Kind, Namespace: engine.VoidType, TTL: d.TTL, Join: sides},
	}}
	codec := func(fields []keygroups.FieldType) *rowcodec.Codec {
		as, err := engine.RowType(fields...).ArrowSchema()
		if err != nil {
			t.Fatal(err)
		}
		c, err := rowcodec.NewCodec(as)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	aggC, leftC, rightC := codec(jcAgg), codec(jcLeft), codec(jcRight)
	ln, rn := sides.Names()
	want := map[string]int{}
	var bes []engine.Backend
	for i := 0; i < par; i++ {
		lay := engine.Layout{MaxParallelism: maxP, Range: keygroups.RangeForSubtask(maxP, par, i)}
		be, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), fmt.Sprint("jc-", i)), lay, schema.Descs(), engine.RocksOptions{Clock: clock, WriteBufferSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		bes = append(bes, be)
		b := be.NewBatch()
		buckets := map[string][]recordstore.LogicalRow{}
		for k := 0; k < keys; k++ {
			key, _ := keygroups.BuildRow(jcKey, []any{int64(k)})
			kg := keygroups.KeyGroupFor(keygroups.HashRow(key), maxP)
			if !lay.Range.Contains(kg) {
				continue
			}
			agg := []any{int64(3 * k), fmt.Sprintf("agg %d", k)}
			v, err := aggC.EncodeRow(nil, 0, agg)
			if err != nil {
				t.Fatal(err)
			}
			b.Put(0, lay.Key(nil, kg, key, nil), v)
			want[fmt.Sprintf("agg|%d|[%d]|%v", kg, k, agg)]++
			type rec struct {
				side         recordstore.Side
				fields       []any
				count, assoc int64
				ts           int64
			}
			var recs []rec
			for j := 0; j < 1+k%3; j++ {
				var s any = fmt.Sprintf("left %d/%d", k, j)
				if (k+j)%5 == 0 {
					s = nil
				}
				recs = append(recs, rec{recordstore.Left, []any{int32(k), int64(j), s}, int64(1 + j), int64((k + j) % 4), convNow - int64(k*1000+j)})
			}
			if k%2 == 0 {
				recs = append(recs, rec{recordstore.Right, []any{int64(k), fmt.Sprintf("right %d", k), float64(k) / 4}, 2, int64(k % 5), convNow - int64(k)})
			}
			for _, r := range recs {
				c, name := leftC, ln
				if r.side == recordstore.Right {
					c, name = rightC, rn
				}
				if !sides.Outer(int(r.side)) {
					r.assoc = 0 // an inner side keeps no association count
				}
				enc, err := c.EncodeRow(nil, 0, r.fields)
				if err != nil {
					t.Fatal(err)
				}
				row := enc[8:]
				want[fmt.Sprintf("%s|%d|[%d]|%v|%d|%d|%d", name, kg, k, r.fields, r.count, r.assoc, r.ts)]++
				if l == recordstore.LayoutRecord {
					b.Put(1, recordstore.AppendRecordKey(nil, lay.Width(), kg, r.side, key, row), recordstore.AppendRecordValue(nil, r.ts, r.count, r.assoc))
					continue
				}
				g := string(recordstore.AppendGroupPrefix(nil, lay.Width(), kg, r.side, key))
				buckets[g] = append(buckets[g], recordstore.LogicalRow{Row: row, Count: r.count, Assoc: r.assoc, TS: r.ts})
			}
		}
		for g, rs := range buckets {
			sort.Slice(rs, func(i, j int) bool { return string(rs[i].Row) < string(rs[j].Row) })
			b.Put(1, []byte(g), recordstore.AppendBucketValue(nil, rs))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	return bes, schema, want
}

// flinkJoinEntries reads every entry of a canonical savepoint, decoded, in
// joinCheckpointState's form, and the user-value serializer of each join
// side ("Tuple2" for an outer side, "Integer" for an inner one).
func flinkJoinEntries(t *testing.T, sp *savepoint.Savepoint, agg string) (map[string]int, map[string]string) {
	t.Helper()
	got, ser := map[string]int{}, map[string]string{}
	render := func(v serde.Value) string {
		r, ok := v.(*serde.Row)
		if !ok {
			t.Fatalf("not a row: %#v", v)
		}
		return fmt.Sprint(r.Fields)
	}
	err := sp.WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
		if e.State.Name == agg {
			got[fmt.Sprintf("%s|%d|%s|%s", e.State.Name, e.KeyGroup, render(e.Key), render(e.Value))]++
			return nil
		}
		uv := e.State.UserValue
		if uv != nil && uv.Class == serde.ClassTTL && len(uv.Nested) == 2 {
			uv = uv.Nested[1]
		}
		v, ts := e.Value, int64(-1)
		if tv, ok := v.(*serde.TTLValue); ok {
			v, ts = tv.Value, tv.LastAccess
		} else if e.TTLTimestamp != nil {
			ts = *e.TTLTimestamp
		}
		var count, assoc int64
		switch x := v.(type) {
		case int32:
			count = int64(x)
			ser[e.State.Name] = "Integer"
		case serde.Tuple:
			if len(x) != 2 || uv.TupleClass != engine.OuterTupleClass {
				t.Fatalf("%s: value %#v of %s", e.State.Name, x, uv.TupleClass)
			}
			count, assoc = int64(x[0].(int32)), int64(x[1].(int32))
			ser[e.State.Name] = "Tuple2"
		default:
			t.Fatalf("%s: value %#v", e.State.Name, v)
		}
		got[fmt.Sprintf("%s|%d|%s|%s|%d|%d|%d", e.State.Name, e.KeyGroup, render(e.Key), render(e.UserKey), count, assoc, ts)]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, ser
}

// TestConvertEngineJoinCheckpoint takes native checkpoints of a schema with
// a join-record state — bucket layout with an outer left side, record
// layout (two-byte key groups) with renamed sides and an outer right side
// — and converts them: the canonical savepoint holds the value state and
// both Flink join states, every row with its count, association count (the
// outer side's Tuple2, the inner side's Integer) and TTL timestamp as
// written to the engine, and equals the canonical export of the same
// backends (statediff). The same backends checkpointed without a schema
// are refused with ErrNoSchema (unsupported).
func TestConvertEngineJoinCheckpoint(t *testing.T) {
	ctx := context.Background()
	left, right := engine.RowType(jcLeft...), engine.RowType(jcRight...)
	for _, tc := range []struct {
		name      string
		layout    recordstore.Layout
		maxP, par int
		sides     engine.JoinSides
	}{
		{"bucket-left-outer", recordstore.LayoutBucket, 128, 2, engine.JoinSides{Left: left, Right: right, LeftOuter: true}},
		{"record-right-outer", recordstore.LayoutRecord, 1024, 3, engine.JoinSides{Left: left, Right: right, LeftName: "auctions", RightName: "bids", RightOuter: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := engine.NewManualClock(convNow)
			bes, schema, want := joinCheckpointState(t, tc.layout, &tc.sides, tc.maxP, tc.par, 400, clock)
			defer func() {
				for _, be := range bes {
					be.Close()
				}
			}()
			var total int64
			for _, n := range want {
				total += int64(n)
			}
			st, _ := s3.NewLocal(t.TempDir())
			if _, err := checkpoint.New(st, checkpoint.Options{Schema: schema}).TakeSync(ctx, bes, 5); err != nil {
				t.Fatal(err)
			}
			// Without a schema, and with one that leaves the join state to
			// byte arrays (no join description).
			plain, _ := s3.NewLocal(t.TempDir())
			if _, err := checkpoint.New(plain, checkpoint.Options{}).TakeSync(ctx, bes, 5); err != nil {
				t.Fatal(err)
			}
			keySer, err := schema.Key.FlinkSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			typed := checkpoint.SchemaStateMeta(schema)
			bare, _ := s3.NewLocal(t.TempDir())
			if _, err := checkpoint.New(bare, checkpoint.Options{KeySerializer: keySer, StateMeta: func(d engine.StateDesc) (flinkwrite.StateMetaInfo, error) {
				if d.Name == "agg" {
					return typed(d)
				}
				return checkpoint.ByteArrayStateMeta(d)
			}}).TakeSync(ctx, bes, 5); err != nil {
				t.Fatal(err)
			}
			// The reference: the same backends exported (nothing expires).
			refStore, _ := s3.NewLocal(t.TempDir())
			op := canonical.Operator{ID: savepoint.OperatorIDFromUID("join"), Parallelism: tc.par, MaxParallelism: tc.maxP}
			for i, be := range bes {
				op.Subtasks = append(op.Subtasks, canonical.Subtask{Index: i, Operator: engine.NewOperator(be, engine.NewManualClock(0)), Schema: schema})
			}
			if _, _, err := canonical.Export(ctx, []canonical.Operator{op}, refStore, canonical.ExportOptions{TempDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}

			dst, _ := s3.NewLocal(t.TempDir())
			tmp := t.TempDir()
			res, err := ConvertNative(ctx, st, 5, dst, ConvertOptions{TempDir: tmp})
			if err != nil {
				t.Fatal(err)
			}
			emptyDir(t, tmp, "scratch")
			ln, rn := tc.sides.Names()
			if res.Entries != total || !res.Verified || res.Parallelism != tc.par || res.MaxParallelism != tc.maxP || strings.Join(res.States, ",") != "agg,"+ln+","+rn {
				t.Fatalf("result %+v, want %d entries", res, total)
			}
			out, err := savepoint.Open(ctx, dst, savepoint.MetadataName)
			if err != nil {
				t.Fatal(err)
			}
			if ps, _ := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(ps) != 0 {
				t.Fatalf("check: %+v", ps)
			}
			got, ser := flinkJoinEntries(t, out, "agg")
			perState := map[string]int{}
			for k, n := range want {
				perState[k[:strings.IndexByte(k, '|')]] += n
				if got[k] != n {
					t.Errorf("entry %s: %d in the savepoint, %d written", k, got[k], n)
				}
			}
			for k, n := range got {
				if want[k] == 0 {
					t.Errorf("entry %s: %d in the savepoint, none written", k, n)
				}
			}
			if perState["agg"] == 0 || perState[ln] == 0 || perState[rn] == 0 {
				t.Fatalf("entries per state %v", perState)
			}
			for i, name := range []string{ln, rn} {
				if w := map[bool]string{true: "Tuple2", false: "Integer"}[tc.sides.Outer(i)]; ser[name] != w {
					t.Errorf("%s: user values %s, want %s", name, ser[name], w)
				}
			}

			ref, err := savepoint.Open(ctx, refStore, savepoint.MetadataName)
			if err != nil {
				t.Fatal(err)
			}
			ref.Meta.Operators[0].ID = out.Meta.Operators[0].ID
			r, err := statediff.Diff(ctx, ref, out, statediff.Options{Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, s := range r.States {
				n += s.EntriesB
			}
			if !r.Equal || n != total {
				t.Fatalf("diff against the reference export: equal %v, %d of %d entries: %+v", r.Equal, n, total, r.States)
			}

			// A bucket-layout checkpoint migrated to the record layout
			// keeps its schema and converts to the same savepoint.
			if tc.layout == recordstore.LayoutBucket {
				migrated, _ := s3.NewLocal(t.TempDir())
				if _, err := migrate.Checkpoint(ctx, st, migrated, migrate.Options{ID: 5, WorkDir: t.TempDir()}); err != nil {
					t.Fatal(err)
				}
				mdst, _ := s3.NewLocal(t.TempDir())
				if _, err := ConvertNative(ctx, migrated, 5, mdst, ConvertOptions{TempDir: tmp}); err != nil {
					t.Fatalf("converting the migrated checkpoint: %v", err)
				}
				mout, err := savepoint.Open(ctx, mdst, savepoint.MetadataName)
				if err != nil {
					t.Fatal(err)
				}
				r, err := statediff.Diff(ctx, out, mout, statediff.Options{Limit: 3})
				if err != nil {
					t.Fatal(err)
				}
				if !r.Equal {
					t.Fatalf("migrated checkpoint converts differently: %+v", r.States)
				}
			}

			// Without a schema, or without join description, the join
			// state has no Flink types.
			for what, src := range map[string]s3.Storage{"without schema": plain, "without join description": bare} {
				dst, _ := s3.NewLocal(t.TempDir())
				_, err = ConvertNative(ctx, src, 5, dst, ConvertOptions{TempDir: tmp})
				if !errors.Is(err, ErrNoSchema) || !errors.Is(err, errclass.ErrUnsupported) {
					t.Fatalf("checkpoint %s: %v", what, err)
				}
				if what == "without join description" && (!errors.Is(err, canonical.ErrNoJoinDescription) || !strings.Contains(err.Error(), `"`+recordstore.StateDesc(tc.layout, 0).Name+`"`)) {
					t.Fatalf("checkpoint %s: %v", what, err)
				}
				t.Logf("%s: %v", what, err)
				emptyDir(t, dst.String(), "destination after refusing")
			}
			emptyDir(t, tmp, "scratch after refusing")
		})
	}
}
