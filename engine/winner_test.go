package engine

import (
	"fmt"
	"testing"
)

func TestWinnerCache(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		v := mustState(t, op, "vttl")
		pool := NewPool(1 << 20)
		wc := NewWinnerCache(pool, 4096)
		b := op.NewBundle()
		defer b.Close()
		b.SetWinnerCache(v, wc)
		k := v.Key(nil, 1, []byte("bidder-auction"), nil)

		begin(t, b, KeyRef{State: v, Key: k})
		_ = b.Put(v, k, []byte("bid1"))
		commit(t, b)
		if wc.Len() != 0 {
			t.Fatal("fresh key admitted on first write")
		}
		begin(t, b, KeyRef{State: v, Key: k})
		if b.Stats().Hydrated != 1 {
			t.Fatalf("hydrated %d", b.Stats().Hydrated)
		}
		_ = b.Put(v, k, []byte("bid2"))
		commit(t, b)
		if wc.Len() != 1 {
			t.Fatal("seen-again key not admitted")
		}
		begin(t, b, KeyRef{State: v, Key: k})
		if b.Stats().Hydrated != 0 {
			t.Fatal("cached winner was read from the backend")
		}
		if s, ok := getOne(t, b, v, k); !ok || s != "bid2" {
			t.Fatalf("cached winner %q", s)
		}
		b.Abort()
		// the cache is clean: it agrees with the backend
		if p, ok, _ := v.Get(k); !ok || string(p) != "bid2" {
			t.Fatalf("backend %q", p)
		}
		// delete drops the winner
		begin(t, b, KeyRef{State: v, Key: k})
		_ = b.Delete(v, k)
		commit(t, b)
		if wc.Len() != 0 {
			t.Fatal("deleted winner kept")
		}

		// bounded: many seen-again keys, eviction never writes
		keys := make([][]byte, 100)
		for i := range keys {
			keys[i] = v.Key(nil, i%128, []byte(fmt.Sprint("k", i)), nil)
		}
		for round := 0; round < 3; round++ {
			var refs []KeyRef
			for _, key := range keys {
				refs = append(refs, KeyRef{State: v, Key: key})
			}
			begin(t, b, refs...)
			for i, key := range keys {
				_ = b.Put(v, key, []byte(fmt.Sprint("r", round, "-", i)))
			}
			commit(t, b)
			if b.Stats().Writes != len(keys) {
				t.Fatalf("writes %d", b.Stats().Writes)
			}
		}
		if wc.Bytes() > 4096 || pool.Used() != wc.Bytes() {
			t.Fatalf("cache holds %d bytes (pool %d), bound 4096", wc.Bytes(), pool.Used())
		}
		if _, _, ev := wc.Stats(); ev == 0 || wc.Len() == 0 {
			t.Fatalf("expected evictions and a non-empty cache, len %d", wc.Len())
		}
		for i, key := range keys {
			if p, ok, _ := v.Get(key); !ok || string(p) != fmt.Sprint("r2-", i) {
				t.Fatalf("key %d = %q after evictions", i, p)
			}
		}
		begin(t, b)
		for i, key := range keys {
			if s, ok := getOne(t, b, v, key); !ok || s != fmt.Sprint("r2-", i) {
				t.Fatalf("key %d read %q", i, s)
			}
		}
		b.Abort()
		// a pool that is short means no caching, never a failure
		tiny := NewWinnerCache(NewPool(10), 4096)
		b.SetWinnerCache(v, tiny)
		for round := 0; round < 2; round++ {
			begin(t, b, KeyRef{State: v, Key: keys[0]})
			_ = b.Put(v, keys[0], []byte("x"))
			commit(t, b)
		}
		if tiny.Len() != 0 {
			t.Fatal("cache grew beyond its pool")
		}
		wc.Release()
		if pool.Used() != 0 {
			t.Fatal("release left bytes reserved")
		}
	})
}
