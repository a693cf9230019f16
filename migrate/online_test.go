//go:build cgo

package migrate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

func logicalOf(t testing.TB, js recordstore.JoinState) []recordstore.LogicalGroup {
	t.Helper()
	var out []recordstore.LogicalGroup
	if err := js.Logical(func(g *recordstore.LogicalGroup) error {
		c := *g
		c.Key = append([]byte(nil), g.Key...)
		c.Rows = append([]recordstore.LogicalRow(nil), g.Rows...)
		for i := range c.Rows {
			c.Rows[i].Row = append([]byte(nil), c.Rows[i].Row...)
		}
		out = append(out, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

type joinOut struct {
	kind        keygroups.RowKind
	left, right string
}

func randomInputs(rng *rand.Rand, t testing.TB, n, keys int) []recordstore.Input {
	var in []recordstore.Input
	for i := 0; i < n; i++ {
		kind := keygroups.Insert
		if rng.IntN(4) == 0 {
			kind = keygroups.Delete
		}
		in = append(in, recordstore.Input{Side: recordstore.Side(rng.IntN(2)), Kind: kind,
			Key: testKey(t, int64(rng.IntN(keys))), Row: testRow(int64(rng.IntN(30)), rng.IntN(20))})
	}
	return in
}

func runJoin(t testing.TB, j *recordstore.Join, in []recordstore.Input) []joinOut {
	t.Helper()
	var out []joinOut
	if err := j.ProcessBundle(in, func(c []recordstore.Output) error {
		for _, o := range c {
			out = append(out, joinOut{o.Kind, string(o.Left), string(o.Right)})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOnlineMigration: keys migrate when first touched; mixed state has
// the same logical content as before; joins over it produce what the same
// joins over fully migrated state produce; a native checkpoint of mixed
// state restores and migrates offline to the same content.
func TestOnlineMigration(t *testing.T) {
	for _, kind := range []string{"heap", "rocksdb"} {
		t.Run(kind, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 12))
			clock := engine.NewManualClock(1_000_000)
			be := openBackend(t, kind, 128, clock, bothStates(0))
			history(t, rng, be, clock, 50, 40)
			before := logical(t, recordstore.LayoutBucket, be, clock)
			rawBefore, _ := DigestBuckets(be)
			// reference: a fully migrated copy
			ref := openBackend(t, "heap", 128, clock, bothStates(0))
			if _, err := MigrateBackend(be, ref, BackendOptions{KeepBuckets: true}); err != nil {
				t.Fatal(err)
			}
			pool := engine.NewPool(4 << 10) // small: some conversions are refused and counted
			ms, err := NewMigratingJoinState(be, recordstore.Options{Clock: clock, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			// read-only bundles over some keys: content unchanged, keys migrate
			for b := 0; b < 3; b++ {
				var probes []recordstore.Probe
				for i := 0; i < 5; i++ {
					probes = append(probes, recordstore.Probe{Side: recordstore.Left, Key: testKey(t, int64(rng.IntN(40)))})
				}
				if err := ms.Begin(probes); err != nil {
					t.Fatal(err)
				}
				if err := ms.Visit(recordstore.Right, probes[0].Key, func([]byte, int64) error { return nil }); err != nil {
					t.Fatal(err)
				}
				if err := ms.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			st := ms.OnlineStats()
			if st.KeysMigrated == 0 || st.Done {
				t.Fatalf("stats %+v: expected a partial migration", st)
			}
			if pool.Used() != 0 {
				t.Fatalf("pool holds %d bytes after the bundles", pool.Used())
			}
			if mixed := logicalOf(t, ms); !reflect.DeepEqual(before, mixed) {
				t.Fatal("logical content of mixed state differs from before the migration")
			}
			db, _ := DigestBuckets(be)
			dr, _ := DigestRecords(be)
			db.Merge(dr)
			if m := Compare(rawBefore, db); len(m) > 0 {
				t.Fatalf("mixed raw digest differs: %v", m[0])
			}
			// an unprobed key still in buckets is refused, not silently empty
			if err := ms.Begin(nil); err != nil {
				t.Fatal(err)
			}
			refused := false
			for k := 0; k < 40 && !refused; k++ {
				refused = ms.Visit(recordstore.Left, testKey(t, int64(k)), func([]byte, int64) error { return nil }) != nil
			}
			ms.Abort()
			if !refused {
				t.Fatal("no unprobed bucket key was refused")
			}
			if kind == "rocksdb" {
				mixedCheckpoint(t, be, clock, before)
			}
			if kind == "heap" {
				// sweeping finishes the migration without changing content
				for i := 0; i < 100 && !ms.OnlineStats().Done; i++ {
					if _, err := ms.Sweep(7); err != nil {
						t.Fatal(err)
					}
				}
				if !ms.OnlineStats().Done || countEntries(t, be, recordstore.BucketStateName) != 0 {
					t.Fatalf("sweep did not finish: %+v", ms.OnlineStats())
				}
				if got := logicalOf(t, ms); !reflect.DeepEqual(before, got) {
					t.Fatal("content changed by the sweep")
				}
			}
			// joins: mixed state vs the fully migrated reference
			rs, err := recordstore.Open(recordstore.LayoutRecord, ref, recordstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			jm, jr := recordstore.NewJoin(ms, recordstore.JoinOptions{}), recordstore.NewJoin(rs, recordstore.JoinOptions{})
			for b := 0; b < 20; b++ {
				in := randomInputs(rng, t, 15, 40)
				if om, or := runJoin(t, jm, in), runJoin(t, jr, in); !reflect.DeepEqual(om, or) {
					t.Fatalf("bundle %d: outputs differ (%d vs %d rows)", b, len(om), len(or))
				}
			}
			if a, r := logicalOf(t, ms), logical(t, recordstore.LayoutRecord, ref, clock); !reflect.DeepEqual(a, r) {
				t.Fatal("final content differs from the reference")
			}
		})
	}
}

// mixedCheckpoint takes a native checkpoint of mixed state, restores it,
// checks its merged logical content, then migrates it offline.
func mixedCheckpoint(t *testing.T, be engine.Backend, clock *engine.Clock, before []recordstore.LogicalGroup) {
	ctx := context.Background()
	st, _ := s3.NewLocal(filepath.Join(t.TempDir(), "store"))
	if _, err := checkpoint.New(st, checkpoint.Options{}).TakeSync(ctx, []engine.Backend{be}, 1); err != nil {
		t.Fatal(err)
	}
	rb, _, err := checkpoint.Restore(ctx, st, 1, be.Layout().Range, filepath.Join(t.TempDir(), "r"), checkpoint.RestoreOptions{Rocks: engine.RocksOptions{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	ms, err := NewMigratingJoinState(rb, recordstore.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if got := logicalOf(t, ms); !reflect.DeepEqual(before, got) {
		t.Fatal("restored mixed state differs")
	}
	dst, _ := s3.NewLocal(filepath.Join(t.TempDir(), "dst"))
	rep, err := Checkpoint(ctx, st, dst, Options{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Operators[0].Rows == 0 {
		t.Fatal("nothing migrated")
	}
	ob, _, err := checkpoint.Restore(ctx, dst, 1, be.Layout().Range, filepath.Join(t.TempDir(), "o"), checkpoint.RestoreOptions{Rocks: engine.RocksOptions{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if got := logical(t, recordstore.LayoutRecord, ob, clock); !reflect.DeepEqual(before, got) {
		t.Fatal(fmt.Sprintf("offline migration of mixed state differs (%d vs %d groups)", len(before), len(got)))
	}
}
