package canonical

import (
	"context"
	"fmt"
	"github.com/apache/arrow-go/v18/arrow"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

var (
	joinKey   = []keygroups.FieldType{keygroups.TypeInt}
	leftRow   = []keygroups.FieldType{keygroups.TypeInt, keygroups.TypeBigInt, keygroups.TypeString}
	rightRow  = []keygroups.FieldType{keygroups.TypeInt, keygroups.TypeString, keygroups.TypeDouble}
	joinTTL   = 2 * time.Hour
	joinSides = &engine.JoinSides{Left: engine.RowType(leftRow...), Right: engine.RowType(rightRow...)}
)

func joinSchema(l recordstore.Layout) *engine.Schema {
	d := recordstore.StateDesc(l, joinTTL)
	return &engine.Schema{Key: engine.RowType(joinKey...), States: []engine.StateSchema{
		{Name: d.Name, Kind: d.Kind, Namespace: engine.VoidType, TTL: d.TTL, Join: joinSides},
	}}
}

// genJoin fills a join state of layout l on one subtask per range and
// returns the number of distinct (key, side, row) records.
func genJoin(t *testing.T, l recordstore.Layout, kind string, maxP, par, keys int, clock *engine.Clock) (Operator, int64) {
	t.Helper()
	s := joinSchema(l)
	lc, _ := rowcodec.NewCodec(mustArrow(t, joinSides.Left))
	rc, _ := rowcodec.NewCodec(mustArrow(t, joinSides.Right))
	op := Operator{UID: "join-" + string(l), Parallelism: par, MaxParallelism: maxP}
	var records int64
	for i := 0; i < par; i++ {
		r := keygroups.RangeForSubtask(maxP, par, i)
		be := openBackend(t, kind, engine.Layout{MaxParallelism: maxP, Range: r}, s.Descs(), clock)
		js, err := recordstore.Open(l, be, recordstore.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		var probes []recordstore.Probe
		type add struct {
			side     recordstore.Side
			key, row []byte
			n        int64
		}
		var adds []add
		for k := 0; k < keys; k++ {
			key, _ := keygroups.BuildRow(joinKey, []any{int32(k)})
			if !r.Contains(keygroups.KeyGroupFor(keygroups.HashRow(key), maxP)) {
				continue
			}
			for j := 0; j < 1+k%3; j++ {
				lv, err := lc.EncodeRow(nil, 0, []any{int32(k), int64(j), fmt.Sprintf("left %d/%d", k, j)})
				if err != nil {
					t.Fatal(err)
				}
				adds = append(adds, add{recordstore.Left, key, lv[8:], int64(1 + j)})
				records++
			}
			if k%2 == 0 {
				rv, _ := rc.EncodeRow(nil, 0, []any{int32(k), fmt.Sprintf("right %d", k), float64(k) / 3})
				adds = append(adds, add{recordstore.Right, key, rv[8:], 2})
				records++
			}
		}
		for _, a := range adds {
			probes = append(probes, recordstore.Probe{Side: a.side, Key: a.key, Row: a.row})
		}
		if err := js.Begin(probes); err != nil {
			t.Fatal(err)
		}
		for _, a := range adds {
			if _, err := js.Add(a.side, a.key, a.row, a.n); err != nil {
				t.Fatal(err)
			}
		}
		if err := js.Commit(); err != nil {
			t.Fatal(err)
		}
		op.Subtasks = append(op.Subtasks, Subtask{Index: i, Operator: engine.NewOperator(be, clock), Schema: s})
	}
	return op, records
}

func mustArrow(t *testing.T, ty engine.Type) *arrow.Schema {
	t.Helper()
	as, err := ty.ArrowSchema()
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// TestJoinRecordsExport: record and bucket layouts export the same Flink
// join state (left-records/right-records MAP<row, Integer> with TTL), which
// imports back into the record layout and as multisets at other
// parallelisms with the same digest.
func TestJoinRecordsExport(t *testing.T) {
	ctx := context.Background()
	clock := engine.NewManualClock(testNow)
	store, _ := s3.NewLocal(t.TempDir())
	var sps []*savepoint.Savepoint
	for i, l := range []recordstore.Layout{recordstore.LayoutRecord, recordstore.LayoutBucket} {
		op, records := genJoin(t, l, []string{"rocksdb", "heap"}[i], 128, 2, 300, clock)
		op.UID = "join" // same operator id for both layouts
		dir := "sp-" + string(l)
		if _, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: dir, TempDir: t.TempDir()}); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		sp, err := savepoint.Open(ctx, store, dir+"/_metadata")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		err = sp.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
			n++
			if e.State.Name != "left-records" && e.State.Name != "right-records" || e.State.Kind != "MAP" {
				t.Fatalf("state %q %s", e.State.Name, e.State.Kind)
			}
			tv, ok := e.Value.(*serde.TTLValue)
			if !ok || tv.LastAccess != testNow {
				t.Fatalf("value %#v", e.Value)
			}
			row, ok := e.UserKey.(*serde.Row)
			if !ok || len(row.Fields) != 3 || row.Fields[0] != e.Key.(*serde.Row).Fields[0] {
				t.Fatalf("user key %#v for key %#v", e.UserKey, e.Key)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if records < 100 || n != records {
			t.Fatalf("%s: %d entries, %d records", l, n, records)
		}
		if probs, _ := savepoint.Check(ctx, sp, savepoint.CheckOptions{}); len(probs) != 0 {
			t.Fatalf("%s: %v", l, probs)
		}
		sps = append(sps, sp)
	}
	want := mustDigest(t, sps[0])
	if diff := want.Diff(mustDigest(t, sps[1]), 5); diff != nil {
		t.Fatalf("record and bucket layouts export different content: %v", diff)
	}
	for _, tc := range []struct {
		kind string
		par  int
		join recordstore.Layout
	}{{"heap", 3, recordstore.LayoutRecord}, {"rocksdb", 1, recordstore.LayoutRecord}, {"heap", 4, ""}} {
		res, err := Import(ctx, sps[0], testFactory(t, tc.kind, clock, nil), ImportOptions{Parallelism: tc.par, JoinRecords: tc.join})
		if err != nil {
			t.Fatal(err)
		}
		st := res.Operators[0].Subtasks[0]
		if got := st.Schema.States[0]; (got.Join != nil) != (tc.join != "") {
			t.Fatalf("imported state %+v", got)
		}
		if tc.join != "" {
			for _, sub := range res.Operators[0].Subtasks {
				js, err := recordstore.Open(recordstore.LayoutRecord, sub.Backend, recordstore.Options{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				if probs, err := js.Check(); err != nil || len(probs) != 0 {
					t.Fatalf("imported join state: %v %v", probs, err)
				}
			}
		}
		back := reexport(t, res, clock, store, fmt.Sprintf("back-%s-%d-%s", tc.kind, tc.par, tc.join))
		res.Close()
		if diff := want.Diff(mustDigest(t, back), 5); diff != nil {
			t.Fatalf("%+v: %v", tc, diff)
		}
	}
}

// TestJoinFixtureIntoRecordStore: Flink's regular-join MapState fixture
// (with a NULL join key) restores into the record layout and exports back
// to the same logical content.
func TestJoinFixtureIntoRecordStore(t *testing.T) {
	ctx := context.Background()
	sp := fixtureSavepoints(t)["sql-rocksdb-canonical-join-mapstate"]
	if sp == nil {
		t.Fatal("fixture missing")
	}
	want := mustDigest(t, sp)
	for _, par := range []int{0, 2} {
		res, err := Import(ctx, sp, testFactory(t, "rocksdb", nil, nil), ImportOptions{Parallelism: par, JoinRecords: recordstore.LayoutRecord})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, op := range res.Operators {
			for _, st := range op.Subtasks[0].Schema.States {
				found = found || st.Join != nil
			}
		}
		if !found {
			t.Fatal("no join state imported")
		}
		store, _ := s3.NewLocal(t.TempDir())
		got := mustDigest(t, reexport(t, res, nil, store, "sp"))
		res.Close()
		if diff := want.Diff(got, 10); diff != nil {
			t.Fatalf("parallelism %d: %v", par, diff)
		}
	}
}
