package canonical

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// outerRow is one generated outer-join record.
type outerRow struct {
	side              recordstore.Side
	kg                int
	key, row          []byte
	ts, count, assocN int64
}

// genOuterJoin writes join records with association counts straight in
// the layout's format (the join driver computes association counts only
// for inner joins) and returns the operator and the records by
// "side/count/assoc/ts".
func genOuterJoin(t *testing.T, l recordstore.Layout, kind string, sides *engine.JoinSides, maxP, par, keys int, clock *engine.Clock) (Operator, map[string]int) {
	t.Helper()
	d := recordstore.StateDesc(l, joinTTL)
	s := &engine.Schema{Key: engine.RowType(joinKey...), States: []engine.StateSchema{
		{Name: d.Name, Kind: d.Kind, Namespace: engine.VoidType, TTL: d.TTL, Join: sides},
	}}
	lc, _ := rowcodec.NewCodec(mustArrow(t, sides.Left))
	rc, _ := rowcodec.NewCodec(mustArrow(t, sides.Right))
	op := Operator{UID: "outer-join", Parallelism: par, MaxParallelism: maxP}
	want := map[string]int{}
	for i := 0; i < par; i++ {
		r := keygroups.RangeForSubtask(maxP, par, i)
		lay := engine.Layout{MaxParallelism: maxP, Range: r}
		be := openBackend(t, kind, lay, s.Descs(), clock)
		var rows []outerRow
		for k := 0; k < keys; k++ {
			key, _ := keygroups.BuildRow(joinKey, []any{int32(k)})
			kg := keygroups.KeyGroupFor(keygroups.HashRow(key), maxP)
			if !r.Contains(kg) {
				continue
			}
			for j := 0; j < 1+k%3; j++ {
				lv, err := lc.EncodeRow(nil, 0, []any{int32(k), int64(j), fmt.Sprintf("left %d/%d", k, j)})
				if err != nil {
					t.Fatal(err)
				}
				rows = append(rows, outerRow{recordstore.Left, kg, key, lv[8:], testNow - int64(k*1000+j), int64(1 + j), int64((k + j) % 4)})
			}
			if k%2 == 0 {
				rv, _ := rc.EncodeRow(nil, 0, []any{int32(k), fmt.Sprintf("right %d", k), float64(k) / 3})
				rows = append(rows, outerRow{recordstore.Right, kg, key, rv[8:], testNow - int64(k), 2, int64(k % 5)})
			}
		}
		b := be.NewBatch()
		width := lay.Width()
		buckets := map[string][]recordstore.LogicalRow{}
		for _, x := range rows {
			assoc := x.assocN
			if !sides.Outer(int(x.side)) {
				assoc = 0 // inner sides keep no association count
			}
			want[fmt.Sprintf("%d/%d/%d/%d", x.side, x.count, assoc, x.ts)]++
			if l == recordstore.LayoutRecord {
				b.Put(0, recordstore.AppendRecordKey(nil, width, x.kg, x.side, x.key, x.row), recordstore.AppendRecordValue(nil, x.ts, x.count, assoc))
				continue
			}
			g := string(recordstore.AppendGroupPrefix(nil, width, x.kg, x.side, x.key))
			buckets[g] = append(buckets[g], recordstore.LogicalRow{Row: x.row, Count: x.count, Assoc: assoc, TS: x.ts})
		}
		for g, rs := range buckets {
			sort.Slice(rs, func(i, j int) bool { return string(rs[i].Row) < string(rs[j].Row) })
			b.Put(0, []byte(g), recordstore.AppendBucketValue(nil, rs))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
		op.Subtasks = append(op.Subtasks, Subtask{Index: i, Operator: engine.NewOperator(be, clock), Schema: s})
	}
	return op, want
}

// TestOuterJoinRoundTrip: outer join sides leave the engine as Flink's
// OuterJoinRecordStateViews keep them (MAP<row, Tuple2<Integer, Integer>>
// of count and association count, TTL-wrapped), inner sides as
// MAP<row, Integer>; the savepoint imports into the other backend (record
// layout, other parallelism) and exports again to the same content,
// association counts and TTL timestamps included.
func TestOuterJoinRoundTrip(t *testing.T) {
	ctx := context.Background()
	clock := engine.NewManualClock(testNow)
	for _, tc := range []struct {
		name        string
		layout      recordstore.Layout
		kind, other string
		left, right bool
		par         int
	}{
		{"left-bucket", recordstore.LayoutBucket, "heap", "rocksdb", true, false, 3},
		{"full-record", recordstore.LayoutRecord, "rocksdb", "heap", true, true, 1},
		{"right-record", recordstore.LayoutRecord, "heap", "rocksdb", false, true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sides := &engine.JoinSides{Left: joinSides.Left, Right: joinSides.Right, LeftOuter: tc.left, RightOuter: tc.right}
			op, want := genOuterJoin(t, tc.layout, tc.kind, sides, 128, 2, 200, clock)
			store, _ := s3.NewLocal(t.TempDir())
			if _, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "a", TempDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			a, err := savepoint.Open(ctx, store, "a/_metadata")
			if err != nil {
				t.Fatal(err)
			}
			if probs, _ := savepoint.Check(ctx, a, savepoint.CheckOptions{}); len(probs) != 0 {
				t.Fatalf("check: %v", probs)
			}
			got := map[string]int{}
			err = a.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
				side := map[string]int{"left-records": 0, "right-records": 1}[e.State.Name]
				outer := []bool{tc.left, tc.right}[side]
				uv := e.State.UserValue
				if uv.Class == serde.ClassTTL {
					uv = uv.Nested[1]
				}
				if outer != (uv.Class == serde.ClassTuple && uv.TupleClass == engine.OuterTupleClass) {
					t.Fatalf("%s: user value serializer %s (%s)", e.State.Name, uv.Class, uv.TupleClass)
				}
				tv, ok := e.Value.(*serde.TTLValue)
				if !ok {
					t.Fatalf("value %#v", e.Value)
				}
				var count, assoc int64
				if outer {
					tu, ok := tv.Value.(serde.Tuple)
					if !ok || len(tu) != 2 {
						t.Fatalf("outer value %#v", tv.Value)
					}
					count, assoc = int64(tu[0].(int32)), int64(tu[1].(int32))
				} else {
					count = int64(tv.Value.(int32))
				}
				got[fmt.Sprintf("%d/%d/%d/%d", side, count, assoc, tv.LastAccess)]++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("exported records differ from the generated ones:\n got %v\nwant %v", got, want)
			}
			// Into the other backend at another parallelism, and out again.
			res, err := Import(ctx, a, testFactory(t, tc.other, clock, nil), ImportOptions{Parallelism: tc.par, JoinRecords: recordstore.LayoutRecord})
			if err != nil {
				t.Fatal(err)
			}
			js := res.Operators[0].Subtasks[0].Schema.States[0].Join
			if js == nil || js.LeftOuter != tc.left || js.RightOuter != tc.right {
				t.Fatalf("imported join sides %+v", js)
			}
			for _, sub := range res.Operators[0].Subtasks {
				st, err := recordstore.Open(recordstore.LayoutRecord, sub.Backend, recordstore.Options{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				if probs, err := st.Check(); err != nil || len(probs) != 0 {
					t.Fatalf("imported join state: %v %v", probs, err)
				}
			}
			b := reexport(t, res, clock, store, "b")
			res.Close()
			wantD := mustDigest(t, a)
			if diff := wantD.Diff(mustDigest(t, b), 5); diff != nil {
				t.Fatalf("after import into %s: %v", tc.other, diff)
			}
			// Association counts are part of what the digest compares.
			if tc.left {
				flat := *sides
				flat.LeftOuter = false
				op2, _ := genOuterJoin(t, tc.layout, tc.kind, &flat, 128, 2, 200, clock)
				if _, _, err := Export(ctx, []Operator{op2}, store, ExportOptions{Dir: "c", TempDir: t.TempDir()}); err != nil {
					t.Fatal(err)
				}
				c, _ := savepoint.Open(ctx, store, "c/_metadata")
				if wantD.Diff(mustDigest(t, c), 5) == nil {
					t.Fatal("digest does not see association counts")
				}
			}
			// Without JoinRecords the sides import as plain states: inner
			// sides as multisets, outer sides as maps with raw Tuple2
			// values; they export back to the same content too.
			res, err = Import(ctx, a, testFactory(t, tc.other, clock, nil), ImportOptions{Parallelism: 2})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range res.Operators[0].Subtasks[0].Schema.States {
				outer := st.Name == "left-records" && tc.left || st.Name == "right-records" && tc.right
				if outer != (st.Kind == engine.KindMap && st.Value.Kind == engine.TypeRaw) || !outer && st.Kind != engine.KindMultiset {
					t.Fatalf("state %q imported as %s of %s", st.Name, st.Kind, st.Value.Kind)
				}
			}
			plain := reexport(t, res, clock, store, "plain")
			res.Close()
			if diff := wantD.Diff(mustDigest(t, plain), 5); diff != nil {
				t.Fatalf("plain import: %v", diff)
			}
			// Join records without the other side: an outer side cannot
			// become an engine multiset.
			if tc.left {
				calls := 0
				_, err = Import(ctx, a, testFactory(t, tc.other, clock, &calls), ImportOptions{JoinRecords: recordstore.LayoutRecord, Multisets: map[string]bool{"left-records": true, "other": true}})
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "association counts") || calls != 0 {
					t.Fatalf("outer side alone: %v (%d backends opened)", err, calls)
				}
			}
		})
	}
}

// TestOuterTupleSnapshotMatchesFlink: the Tuple2<Integer, Integer>
// serializer snapshot of outer join sides is byte for byte the one Flink
// wrote for the window fixture's Tuple2<Integer, Integer> list elements
// (same TupleSerializerSnapshot, same tuple class and field serializers).
func TestOuterTupleSnapshotMatchesFlink(t *testing.T) {
	sp := fixtureSavepoints(t)["flink1.20-hashmap-canonical-liststate-window-inline"]
	if sp == nil {
		t.Fatal("fixture missing")
	}
	want, err := flinkwrite.TupleSnapshot(engine.OuterTupleClass, flinkwrite.IntSnapshot, flinkwrite.IntSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := flinkwrite.AppendVersioned(nil, want)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, op := range sp.Meta.Operators {
		p, err := planOperator(context.Background(), sp, op, ImportOptions{Multisets: map[string]bool{}}, &ImportResult{})
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			continue
		}
		for _, f := range p.files {
			for _, m := range f.header.States {
				el := m.Element
				if el == nil || el.Class != serde.ClassTuple || el.TupleClass != engine.OuterTupleClass {
					continue
				}
				if !bytes.Equal(el.Raw, wb) {
					t.Fatalf("%s state %q: Flink's Tuple2 snapshot\n% x\ngenerated\n% x", f.name, m.Name, el.Raw, wb)
				}
				found++
			}
		}
	}
	if found == 0 {
		t.Fatal("no Tuple2 element serializer in the fixture")
	}
}

// TestUniqueKeyOuterJoinRaw: Flink's outer join sides with unique keys
// (ValueState<Tuple2<RowData, Integer>> when the join key contains the
// unique key, MapState<uniqueKey, Tuple2<RowData, Integer>> otherwise) have
// no join-record form in the engine; they import as value and map states
// whose values are carried raw, and export back with the same rows,
// association counts and TTL timestamps.
func TestUniqueKeyOuterJoinRaw(t *testing.T) {
	ctx := context.Background()
	clock := engine.NewManualClock(testNow)
	rowT := engine.RowType(leftRow...)
	rowSnap, err := rowT.FlinkSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	tup, err := flinkwrite.TupleSnapshot(engine.OuterTupleClass, rowSnap, flinkwrite.IntSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	vb, err := flinkwrite.AppendVersioned(nil, tup)
	if err != nil {
		t.Fatal(err)
	}
	raw := engine.Type{Kind: engine.TypeRaw, Snapshot: flinkwrite.RawSnapshot{Versioned: vb}}
	s := &engine.Schema{Key: engine.RowType(joinKey...), States: []engine.StateSchema{
		{Name: "left-records", Kind: engine.KindValue, Namespace: engine.VoidType, Value: raw, TTL: joinTTL},
		{Name: "right-records", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: engine.RowType(keygroups.TypeBigInt), Value: raw, TTL: joinTTL},
	}}
	const maxP, par = 128, 2
	op := Operator{UID: "outer-unique", Parallelism: par, MaxParallelism: maxP}
	var n int
	for i := 0; i < par; i++ {
		r := keygroups.RangeForSubtask(maxP, par, i)
		lay := engine.Layout{MaxParallelism: maxP, Range: r}
		be := openBackend(t, "heap", lay, s.Descs(), clock)
		b := be.NewBatch()
		for k := 0; k < 100; k++ {
			key, _ := keygroups.BuildRow(joinKey, []any{int32(k)})
			kg := keygroups.KeyGroupFor(keygroups.HashRow(key), maxP)
			if !r.Contains(kg) {
				continue
			}
			tuple := func(j int) []byte {
				row, err := keygroups.BuildRow(leftRow, []any{int32(k), int64(j), fmt.Sprintf("row %d/%d", k, j)})
				if err != nil {
					t.Fatal(err)
				}
				v := flinkwrite.AppendInt(nil, int32(len(row)))
				v = append(v, row...)
				return flinkwrite.AppendInt(v, int32((k+j)%3)) // association count
			}
			ts := flinkwrite.AppendLong(nil, testNow-int64(k))
			b.Put(0, lay.Key(nil, kg, key, nil), append(append([]byte(nil), ts...), tuple(0)...))
			n++
			for j := 0; j < 1+k%3; j++ {
				uk, _ := keygroups.BuildRow([]keygroups.FieldType{keygroups.TypeBigInt}, []any{int64(j)})
				v := append(append([]byte(nil), ts...), 0) // not NULL
				b.Put(1, append(lay.Key(nil, kg, key, nil), uk...), append(v, tuple(j)...))
				n++
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
		op.Subtasks = append(op.Subtasks, Subtask{Index: i, Operator: engine.NewOperator(be, clock), Schema: s})
	}
	store, _ := s3.NewLocal(t.TempDir())
	if _, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "a", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	a, err := savepoint.Open(ctx, store, "a/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = a.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
		tv, ok := e.Value.(*serde.TTLValue)
		if !ok {
			t.Fatalf("%s: value %#v", e.State.Name, e.Value)
		}
		tu, ok := tv.Value.(serde.Tuple)
		if !ok || len(tu) != 2 {
			t.Fatalf("%s: %#v", e.State.Name, tv.Value)
		}
		row, ok := tu[0].(*serde.Row)
		k := e.Key.(*serde.Row).Fields[0].(int32)
		if !ok || row.Fields[0] != k || tv.LastAccess != testNow-int64(k) || tu[1].(int32) != (k+int32(row.Fields[1].(int64)))%3 {
			t.Fatalf("%s: key %d: %#v at %d", e.State.Name, k, tu, tv.LastAccess)
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != n || n < 100 {
		t.Fatalf("read %d entries, wrote %d", seen, n)
	}
	res, err := Import(ctx, a, testFactory(t, "rocksdb", clock, nil), ImportOptions{Parallelism: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range res.Operators[0].Subtasks[0].Schema.States {
		if st.Value.Kind != engine.TypeRaw {
			t.Fatalf("state %q imported with value type %s", st.Name, st.Value.Kind)
		}
	}
	back := reexport(t, res, clock, store, "b")
	res.Close()
	if diff := mustDigest(t, a).Diff(mustDigest(t, back), 5); diff != nil {
		t.Fatal(diff)
	}
}

// TestOuterJoinEntryRejects: malformed outer join values (wrong size,
// zero count, negative association count, NULL) fail with ErrConvert, as
// do export-side counts outside Flink's Integer range.
func TestOuterJoinEntryRejects(t *testing.T) {
	d := recordstore.StateDesc(recordstore.LayoutRecord, 0)
	s := engine.StateSchema{Name: d.Name, Kind: d.Kind, Namespace: engine.VoidType,
		Join: &engine.JoinSides{Left: joinSides.Left, Right: joinSides.Right, LeftOuter: true}}
	c, err := newJoinCodec(engine.RowType(joinKey...), s)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := keygroups.BuildRow(joinKey, []any{int32(1)})
	fkey := flinkwrite.AppendInt(nil, int32(len(key)))
	fkey = append(fkey, key...)
	row, _ := keygroups.BuildRow(leftRow, []any{int32(1), int64(2), "x"})
	uk := flinkwrite.AppendInt(nil, int32(len(row)))
	uk = append(uk, row...)
	val := func(parts ...int32) []byte {
		v := []byte{0}
		for _, p := range parts {
			v = flinkwrite.AppendInt(v, p)
		}
		return v
	}
	if _, vb, err := c.engineEntry(nil, nil, 1, 3, 0, fkey, []byte{0}, uk, val(2, 5)); err != nil {
		t.Fatal(err)
	} else if _, n, a, _, err := recordstore.DecodeRecordValue(vb); err != nil || n != 2 || a != 5 {
		t.Fatalf("decoded count %d assoc %d: %v", n, a, err)
	}
	for name, v := range map[string][]byte{
		"inner-sized": val(2), "zero count": val(0, 1), "negative assoc": val(1, -1),
		"null": {1}, "long": append(val(1, 1), 0),
	} {
		if _, _, err := c.engineEntry(nil, nil, 1, 3, 0, fkey, []byte{0}, uk, v); !errors.Is(err, ErrConvert) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The inner right side still takes a plain Integer.
	if _, _, err := c.engineEntry(nil, nil, 1, 3, 1, fkey, []byte{0}, uk, val(1, 1)); !errors.Is(err, ErrConvert) {
		t.Errorf("inner side with a tuple value: %v", err)
	}
	lc, _ := rowcodec.NewCodec(mustArrow(t, joinSides.Left))
	payload, _ := lc.EncodeRow(nil, 0, []any{int32(1), int64(2), "x"})
	for _, it := range []scanItem{{side: 0, count: 1, assoc: -1}, {side: 0, count: 1, assoc: 1 << 31}, {side: 0, count: 0}} {
		it.stored, it.payload = key, payload[8:]
		if _, _, err := c.flinkEntry(nil, nil, 3, 1, it); !errors.Is(err, ErrConvert) {
			t.Errorf("export of count %d assoc %d: %v", it.count, it.assoc, err)
		}
	}
}
