package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestEntryTable checks the working map against a Go map over several
// bundles (resets), through growth, with keys that differ only in state or
// length.
func TestEntryTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	var tab entryTable
	for bundle := 0; bundle < 20; bundle++ {
		want := map[bkey]*entry{}
		n := rng.IntN(3000)
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("%0*d", rng.IntN(4), rng.IntN(500))
			st := rng.IntN(3)
			e, h, slot := tab.find(st, []byte(k))
			if w := want[bkey{st, k}]; w != e {
				t.Fatalf("bundle %d: find(%d, %q) = %p, want %p", bundle, st, k, e, w)
			}
			if e == nil {
				e = &entry{st: st, key: k}
				tab.insert(h, slot, e)
				want[bkey{st, k}] = e
			}
		}
		if tab.len() != len(want) {
			t.Fatalf("bundle %d: len %d, want %d", bundle, tab.len(), len(want))
		}
		for k, w := range want {
			if e, _, _ := tab.find(k.st, []byte(k.k)); e != w {
				t.Fatalf("bundle %d: after inserts find(%d, %q) = %p, want %p", bundle, k.st, k.k, e, w)
			}
		}
		seen := 0
		for _, e := range tab.ents {
			if want[bkey{e.st, e.key}] != e {
				t.Fatalf("bundle %d: iterated entry %d %q not in the map", bundle, e.st, e.key)
			}
			seen++
		}
		if seen != len(want) {
			t.Fatalf("bundle %d: iterated %d entries, want %d", bundle, seen, len(want))
		}
		tab.reset()
		if e, _, _ := tab.find(0, []byte("1")); e != nil || tab.len() != 0 {
			t.Fatalf("bundle %d: entries left after reset", bundle)
		}
	}
}
