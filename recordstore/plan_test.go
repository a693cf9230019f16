//go:build cgo

package recordstore

import (
	"testing"

	"github.com/sfstate/sfstate/engine"
)

// TestVisitPlan checks that a group the bundle's probes visit once is
// streamed without taking cache reservations, that a group visited several
// times is read once and served from the cache, and that a cached group's
// reservation goes back to the pool after its last planned visit, before
// the bundle ends. Output must not depend on any of it.
func TestVisitPlan(t *testing.T) {
	for _, backend := range []string{"heap", "rocksdb"} {
		t.Run(backend, func(t *testing.T) {
			pool := engine.NewPool(64 << 20)
			e := openEnv(t, backend, LayoutRecord, 0, Options{Pool: pool})
			j := NewJoin(e.st, JoinOptions{Pool: pool})
			a, b := joinKey(t, 1), joinKey(t, 2)
			buildGroup(t, j, a, 50, 64)
			buildGroup(t, j, b, 70, 64)

			// one probe of a: streamed
			before := e.st.Stats()
			var n int64
			if err := j.ProcessBundle(probeBundle(t, a, 1), func(c []Output) error { n += int64(len(c)); return nil }); err != nil {
				t.Fatal(err)
			}
			st := e.st.Stats()
			if n != 50 || st.SingleVisits-before.SingleVisits != 1 || st.CachePeak != before.CachePeak || st.CacheHits != before.CacheHits {
				t.Fatalf("single visit: %d rows, stats %+v (before %+v)", n, st, before)
			}

			// three probes of b, then one of a: b is read once, cached for
			// the two later visits and released after the last one, so a's
			// single visit never sees b's bytes still reserved
			in := append(probeBundle(t, b, 3), probeBundle(t, a, 1)...)
			in[3].Row = payload(t, 2_000_000, 8)
			before = e.st.Stats()
			n = 0
			var usedAtA int64 = -1
			j2 := NewJoin(e.st, JoinOptions{Pool: pool, ChunkRows: 1})
			if err := j2.ProcessBundle(in, func(c []Output) error {
				n += int64(len(c))
				if n == 3*70+1 {
					usedAtA = pool.Used()
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			st = e.st.Stats()
			if n != 3*70+50 {
				t.Fatalf("%d output rows, want %d", n, 3*70+50)
			}
			if st.GroupScans-before.GroupScans != 2 || st.CacheHits-before.CacheHits != 2 || st.SingleVisits-before.SingleVisits != 1 {
				t.Fatalf("stats %+v (before %+v)", st, before)
			}
			if st.CachePeak == 0 {
				t.Fatal("the group visited three times was not cached")
			}
			// with one-row chunks the only reservation left while a's rows
			// leave is the pending output row's
			if usedAtA < 0 || usedAtA >= 70*64 {
				t.Fatalf("pool held %d bytes while the last group was visited: the cached group was not released", usedAtA)
			}
			if pool.Used() != 0 {
				t.Fatalf("%d pool bytes still reserved after the bundle", pool.Used())
			}
		})
	}
}
