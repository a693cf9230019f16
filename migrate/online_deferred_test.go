//go:build cgo

package migrate

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

// groupsDisjoint fails when a (side, key) group has both a bucket and
// records: every group must be in exactly one layout.
func groupsDisjoint(t *testing.T, be engine.Backend) {
	t.Helper()
	width := be.Layout().Width()
	buckets := map[string]bool{}
	bst, _ := StateID(be, recordstore.BucketStateName)
	rst, _ := StateID(be, recordstore.RecordStateName)
	if err := be.Scan(bst, nil, nil, func(k, _ []byte) bool { buckets[string(k)] = true; return true }); err != nil {
		t.Fatal(err)
	}
	if err := be.Scan(rst, nil, nil, func(k, _ []byte) bool {
		_, _, _, row, _, err := recordstore.DecodeGroupKey(k, width)
		if err != nil {
			t.Fatal(err)
		}
		if p := k[:len(k)-len(row)]; buckets[string(p)] {
			t.Fatalf("group %x has a bucket and records", p)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
}

// TestOnlineDeferredConversion: the same join bundles run over the same
// bucket-layout history twice, through a MigratingJoinState whose pool has
// room for every conversion (the reference) and through one whose pool is
// almost all held elsewhere, so that conversions are refused: the refused
// (side, key) groups are served from their buckets. Every bundle's output
// equals the reference's, the pool holds nothing of the migration between
// bundles, no group ever has both a bucket and records, and canonical
// savepoints of both are byte-identical; the mixed state with deferred
// groups checkpoints, restores and keeps migrating (RocksDB). When the
// memory is given back, later bundles and Sweep convert the deferred
// groups, and the content still matches.
func TestOnlineDeferredConversion(t *testing.T) {
	for _, kind := range []string{"heap", "rocksdb"} {
		t.Run(kind, func(t *testing.T) {
			clock := engine.NewManualClock(5_000_000)
			both := bothStates(exTTL)
			beA := openBackend(t, kind, 128, clock, both)
			beR := openBackend(t, kind, 128, clock, both)
			hA, err := recordstore.Open(recordstore.LayoutBucket, beA, recordstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			hR, err := recordstore.Open(recordstore.LayoutBucket, beR, recordstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			gen := newExGen(t, 33, 40)
			gen.rows = 24 // groups of up to 24 rows: conversions of a few hundred bytes to a few KiB
			jhA, jhR := recordstore.NewJoin(hA, recordstore.JoinOptions{}), recordstore.NewJoin(hR, recordstore.JoinOptions{})
			for b := 0; b < 60; b++ {
				in := gen.bundle(1 + gen.rng.IntN(30))
				runJoin(t, jhA, in)
				runJoin(t, jhR, in)
				clock.Advance(time.Duration(gen.rng.IntN(2)) * time.Millisecond)
			}
			sub := func(be engine.Backend) canonical.Subtask {
				st, err := MergedSubtask(canonical.Subtask{Operator: engine.NewOperator(be, clock), Schema: exSchema(both)})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			// the pressured pool: 64 KiB, all but hogFree held by a hog
			const capacity, hogFree = 64 << 10, 3 << 10
			pool := engine.NewPool(capacity)
			hog, ok := pool.Reserve(capacity - hogFree)
			if !ok {
				t.Fatal("hog reservation refused")
			}
			refPool := engine.NewPool(64 << 20)
			msA, err := NewMigratingJoinState(beA, recordstore.Options{Clock: clock, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			defer msA.Close()
			msR, err := NewMigratingJoinState(beR, recordstore.Options{Clock: clock, Pool: refPool})
			if err != nil {
				t.Fatal(err)
			}
			defer msR.Close()
			jA := recordstore.NewJoin(msA, recordstore.JoinOptions{Pool: pool})
			jR := recordstore.NewJoin(msR, recordstore.JoinOptions{Pool: refPool})
			step := func(j *recordstore.Join, held int64, p *engine.Pool, n int, what string) {
				t.Helper()
				for b := 0; b < n; b++ {
					in := gen.bundle(1 + gen.rng.IntN(20))
					if oa, or := runJoin(t, j, in), runJoin(t, jR, in); !reflect.DeepEqual(oa, or) {
						t.Fatalf("%s bundle %d: outputs differ from the unpressured run (%d vs %d rows)", what, b, len(oa), len(or))
					}
					if p.Used() != held || refPool.Used() != 0 {
						t.Fatalf("%s bundle %d: pool holds %d bytes, want %d (reference %d)", what, b, p.Used(), held, refPool.Used())
					}
					clock.Advance(time.Duration(gen.rng.IntN(3)) * time.Millisecond)
				}
			}
			step(jA, capacity-hogFree, pool, 12, "pressured")
			st := msA.OnlineStats()
			if st.Deferred == 0 || st.PoolRefusals == 0 || st.KeysMigrated == 0 {
				t.Fatalf("stats %+v: want some conversions and some deferred", st)
			}
			if rs := msR.OnlineStats(); rs.Deferred != 0 || rs.PoolRefusals != 0 {
				t.Fatalf("reference stats %+v: refused", rs)
			}
			groupsDisjoint(t, beA)
			if !reflect.DeepEqual(logicalOf(t, msA), logicalOf(t, msR)) {
				t.Fatal("logical content differs from the unpressured run")
			}
			a1, n1 := exportBytes(t, sub(beA))
			if r1, _ := exportBytes(t, sub(beR)); !bytes.Equal(a1, r1) || n1 == 0 {
				t.Fatalf("savepoint of the pressured run differs (%d vs %d bytes, %d entries)", len(a1), len(r1), n1)
			}
			if countEntries(t, beA, recordstore.BucketStateName) <= countEntries(t, beR, recordstore.BucketStateName) {
				t.Fatal("the pressured run converted as much as the reference: nothing was deferred for good")
			}
			if kind == "rocksdb" {
				// mixed state with deferred groups: checkpoint, restore,
				// same savepoint, and the restored state keeps going
				// under pressure
				ctx := context.Background()
				store, _ := s3.NewLocal(filepath.Join(t.TempDir(), "chk"))
				if _, err := checkpoint.New(store, checkpoint.Options{}).TakeSync(ctx, []engine.Backend{beA}, 1); err != nil {
					t.Fatal(err)
				}
				rb, _, err := checkpoint.Restore(ctx, store, 1, beA.Layout().Range, filepath.Join(t.TempDir(), "r"), checkpoint.RestoreOptions{Rocks: engine.RocksOptions{Clock: clock}})
				if err != nil {
					t.Fatal(err)
				}
				defer rb.Close()
				if ar, _ := exportBytes(t, sub(rb)); !bytes.Equal(ar, a1) {
					t.Fatal("savepoint of the restored mixed state differs")
				}
				ms2, err := NewMigratingJoinState(rb, recordstore.Options{Clock: clock, Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				defer ms2.Close()
				step(recordstore.NewJoin(ms2, recordstore.JoinOptions{Pool: pool}), capacity-hogFree, pool, 6, "restored")
				if ms2.OnlineStats().Deferred == 0 {
					t.Fatalf("restored stats %+v: nothing deferred", ms2.OnlineStats())
				}
				groupsDisjoint(t, rb)
				ar, _ := exportBytes(t, sub(rb))
				if rr, _ := exportBytes(t, sub(beR)); !bytes.Equal(ar, rr) {
					t.Fatal("savepoint after the restored bundles differs")
				}
				return
			}
			// Sweep with 256 bytes free converts the buckets that fit, one
			// batch at a time, and leaves the others, no error
			hog2, ok := pool.Reserve(hogFree - 256)
			if !ok {
				t.Fatal("second hog refused")
			}
			before := msA.OnlineStats()
			if _, err := msA.Sweep(1000); err != nil {
				t.Fatal(err)
			}
			if st := msA.OnlineStats(); st.Deferred == before.Deferred || st.Done || pool.Used() != capacity-256 {
				t.Fatalf("pressured sweep: stats %+v, pool %d", st, pool.Used())
			}
			groupsDisjoint(t, beA)
			if !reflect.DeepEqual(logicalOf(t, msA), logicalOf(t, msR)) {
				t.Fatal("logical content differs after the pressured sweep")
			}
			// memory comes back: the deferred groups convert
			hog2.Release()
			hog.Release()
			migrated := msA.OnlineStats().KeysMigrated
			step(jA, 0, pool, 10, "released")
			if msA.OnlineStats().KeysMigrated == migrated {
				t.Fatalf("stats %+v: nothing converted once memory was available", msA.OnlineStats())
			}
			for i := 0; i < 50 && !msA.OnlineStats().Done; i++ {
				if _, err := msA.Sweep(16); err != nil {
					t.Fatal(err)
				}
			}
			if !msA.OnlineStats().Done || countEntries(t, beA, recordstore.BucketStateName) != 0 || pool.Used() != 0 {
				t.Fatalf("sweep did not finish: %+v, pool %d", msA.OnlineStats(), pool.Used())
			}
			a2, _ := exportBytes(t, sub(beA))
			if r2, _ := exportBytes(t, sub(beR)); !bytes.Equal(a2, r2) {
				t.Fatal("savepoint after the migration finished differs")
			}
		})
	}
}
