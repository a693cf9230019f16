package canonical

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
)

func testFactory(t testing.TB, kind string, clock *engine.Clock, calls *int) BackendFactory {
	return func(_ savepoint.OperatorID, _ int, l engine.Layout, descs []engine.StateDesc) (engine.Backend, error) {
		if calls != nil {
			*calls++
		}
		return openBackend(t, kind, l, descs, clock), nil
	}
}

// reexport exports an import result into store/dir and opens it.
func reexport(t testing.TB, res *ImportResult, clock *engine.Clock, store s3.Storage, dir string) *savepoint.Savepoint {
	t.Helper()
	var ops []Operator
	for _, iop := range res.Operators {
		op := Operator{ID: iop.ID, Parallelism: iop.Parallelism, MaxParallelism: iop.MaxParallelism}
		for _, st := range iop.Subtasks {
			op.Subtasks = append(op.Subtasks, Subtask{Index: st.Index, Operator: engine.NewOperator(st.Backend, clock), Schema: st.Schema})
		}
		ops = append(ops, op)
	}
	if _, _, err := Export(context.Background(), ops, store, ExportOptions{Dir: dir, TempDir: t.TempDir()}); err != nil {
		t.Fatalf("re-export: %v", err)
	}
	sp, err := savepoint.Open(context.Background(), store, dir+"/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func mustDigest(t testing.TB, sp *savepoint.Savepoint) *digest.Digest {
	t.Helper()
	d, err := digest.Compute(context.Background(), sp, digest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRoundTripGenerated: export → import into the other backend at other
// parallelisms → export keeps entries, counts and TTL timestamps.
func TestRoundTripGenerated(t *testing.T) {
	ctx := context.Background()
	clock := engine.NewManualClock(testNow)
	for _, tc := range []struct {
		from, to  string
		maxP      int
		par, par2 int
	}{
		{"heap", "rocksdb", 128, 3, 5},
		{"rocksdb", "heap", 256, 4, 1},
		{"heap", "heap", 300, 2, 7},
	} {
		t.Run(fmt.Sprintf("%s%d-%s%d", tc.from, tc.par, tc.to, tc.par2), func(t *testing.T) {
			op, counts := genOperator(t, tc.from, tc.maxP, tc.par, 1500)
			store, _ := s3.NewLocal(t.TempDir())
			if _, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "a", TempDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			a, err := savepoint.Open(ctx, store, "a/_metadata")
			if err != nil {
				t.Fatal(err)
			}
			res, err := Import(ctx, a, testFactory(t, tc.to, clock, nil), ImportOptions{Parallelism: tc.par2, Workers: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			var total int64
			for _, c := range counts {
				total += c
			}
			if res.Stats.Entries != total {
				t.Fatalf("imported %d entries, exported %d", res.Stats.Entries, total)
			}
			if len(res.Operators) != 1 || len(res.Operators[0].Subtasks) != tc.par2 {
				t.Fatalf("imported %d operators", len(res.Operators))
			}
			// Each subtask holds only its own key groups.
			for _, st := range res.Operators[0].Subtasks {
				l := st.Backend.Layout()
				for i := range st.Backend.States() {
					err := st.Backend.Scan(i, nil, nil, func(k, _ []byte) bool {
						kg, _ := l.KeyGroupOf(k)
						if !l.Range.Contains(kg) {
							t.Fatalf("subtask %d holds key group %d outside %v", st.Index, kg, l.Range)
						}
						return true
					})
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			b := reexport(t, res, clock, store, "b")
			if diff := mustDigest(t, a).Diff(mustDigest(t, b), 10); diff != nil {
				t.Fatalf("digest differs after import/export:\n%v", diff)
			}
			// The digest does see changes: drop one entry and compare.
			be := res.Operators[0].Subtasks[0].Backend
			var victim []byte
			_ = be.Scan(2, nil, nil, func(k, _ []byte) bool { victim = append([]byte{}, k...); return false })
			batch := be.NewBatch()
			batch.Delete(2, victim)
			if err := batch.Commit(); err != nil {
				t.Fatal(err)
			}
			batch.Close()
			c := reexport(t, res, clock, store, "c")
			if diff := mustDigest(t, a).Diff(mustDigest(t, c), 10); len(diff) != 1 {
				t.Fatalf("one deleted entry gives diff %v", diff)
			}
		})
	}
}

func TestImportUnsupportedFailsBeforeWriting(t *testing.T) {
	// Join records only exist in the record layout.
	clock := engine.NewManualClock(testNow)
	sides := &engine.JoinSides{Left: joinSides.Left, Right: joinSides.Right, LeftOuter: true}
	op, _ := genOuterJoin(t, recordstore.LayoutRecord, "heap", sides, 128, 2, 50, clock)
	store, _ := s3.NewLocal(t.TempDir())
	if _, _, err := Export(context.Background(), []Operator{op}, store, ExportOptions{Dir: "sp", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), store, "sp/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []ImportOptions{{JoinRecords: recordstore.LayoutBucket}} {
		calls := 0
		_, err = Import(context.Background(), sp, testFactory(t, "heap", clock, &calls), o)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "left-records") && !strings.Contains(err.Error(), "layout") {
			t.Fatalf("%+v: %v", o, err)
		}
		if calls != 0 {
			t.Fatalf("%+v: %d backends opened before the error", o, calls)
		}
	}
}

// TestImportBadParallelismOpensNothing: a target parallelism above some
// operator's max parallelism fails before any backend is opened.
func TestImportBadParallelismOpensNothing(t *testing.T) {
	sp := fixtureSavepoints(t)["flink1.20-rocksdb-canonical-valuestate-timers"]
	if sp == nil {
		t.Fatal("fixture missing")
	}
	calls := 0
	if _, err := Import(context.Background(), sp, testFactory(t, "heap", nil, &calls), ImportOptions{Parallelism: 1 << 15}); err == nil || calls != 0 {
		t.Fatalf("err %v, %d backends opened", err, calls)
	}
}
