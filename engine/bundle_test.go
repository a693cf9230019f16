package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestListAppendInPlace appends to one list repeatedly, interleaved with
// appends to another key and with payloads held from earlier reads: the
// slab tail grows in place only for the key written last, and earlier
// payloads keep their bytes.
func TestListAppendInPlace(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		l := mustState(t, op, "l")
		b := op.NewBundle()
		defer b.Close()
		k1 := l.Key(nil, 3, []byte("a"), []byte("w"))
		k2 := l.Key(nil, 5, []byte("b"), []byte("w"))
		list := func(k []byte) string {
			var out []string
			if err := b.ListGet(l, k, func(e []byte) bool { out = append(out, string(e)); return true }); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(out)
		}
		begin(t, b, KeyRef{State: l, Key: k1}, KeyRef{State: l, Key: k2})
		var held []byte
		for i := 0; i < 50; i++ {
			if err := b.ListAdd(l, k1, []byte{byte('a' + i%26)}); err != nil {
				t.Fatal(err)
			}
			if i == 10 {
				p, ok, err := b.Get(l, k1)
				if err != nil || !ok {
					t.Fatal(ok, err)
				}
				held = p
			}
			if i%7 == 0 {
				if err := b.ListAddAll(l, k2, [][]byte{{byte(i)}, nil}); err != nil {
					t.Fatal(err)
				}
			}
		}
		var want []byte
		for i := 0; i <= 10; i++ {
			want = appendLenBytes(want, []byte{byte('a' + i)})
		}
		if string(held) != string(want) {
			t.Fatalf("held payload changed: %x, want %x", held, want)
		}
		want1 := list(k1)
		want2 := list(k2)
		commit(t, b)
		begin(t, b, KeyRef{State: l, Key: k1}, KeyRef{State: l, Key: k2})
		if got := list(k1); got != want1 || len(want1) != 2+50*2-1 {
			t.Fatalf("k1 list = %s, want %s", got, want1)
		}
		if got := list(k2); got != want2 || got != fmt.Sprint([]string{"\x00", "", "\x07", "", "\x0e", "", "\x15", "", "\x1c", "", "#", "", "*", "", "1", ""}) {
			t.Fatalf("k2 list = %q", got)
		}
		commit(t, b)
	})
}

// TestWriteOnlyIntent declares blind writes in Begin: they are not read
// (Hydrated counts only the other keys), the writes and deletes land, and a
// key named both write-only and for reading is read.
func TestWriteOnlyIntent(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		v := mustState(t, op, "v")
		b := op.NewBundle()
		defer b.Close()
		k1 := v.Key(nil, 1, []byte("a"), nil)
		k2 := v.Key(nil, 2, []byte("b"), nil)
		k3 := v.Key(nil, 3, []byte("c"), nil)
		begin(t, b)
		for _, k := range [][]byte{k1, k2, k3} {
			if err := b.Put(v, k, []byte("old")); err != nil {
				t.Fatal(err)
			}
		}
		commit(t, b)
		begin(t, b, KeyRef{State: v, Key: k1, WriteOnly: true}, KeyRef{State: v, Key: k2, WriteOnly: true},
			KeyRef{State: v, Key: k3, WriteOnly: true}, KeyRef{State: v, Key: k3})
		if h := b.Stats().Hydrated; h != 1 {
			t.Fatalf("Begin hydrated %d keys, want 1 (the read of k3)", h)
		}
		if err := b.Put(v, k1, []byte("new")); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(v, k2); err != nil {
			t.Fatal(err)
		}
		if got, ok := getOne(t, b, v, k3); !ok || got != "old" {
			t.Fatalf("k3 = %q %v", got, ok)
		}
		if b.Stats().PointReads != 0 {
			t.Fatalf("%d point reads", b.Stats().PointReads)
		}
		commit(t, b)
		if w := b.Stats().Writes; w != 2 {
			t.Fatalf("%d writes, want 2", w)
		}
		begin(t, b, KeyRef{State: v, Key: k1}, KeyRef{State: v, Key: k2})
		if got, ok := getOne(t, b, v, k1); !ok || got != "new" {
			t.Fatalf("k1 = %q %v", got, ok)
		}
		if _, ok := getOne(t, b, v, k2); ok {
			t.Fatal("k2 survived its blind delete")
		}
		b.Abort()
	})
}

// TestSortDirty checks Commit's radix sort against a comparison sort: keys
// of many lengths sharing long prefixes (runs of zero bytes, prefixes of one
// another), several states, sizes around the insertion-sort cut-off.
func TestSortDirty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	b := &Bundle{}
	for round := 0; round < 300; round++ {
		n := rng.IntN(400)
		seen := map[bkey]bool{}
		var dirty []dirtyRef
		for len(dirty) < n {
			k := make([]byte, rng.IntN(14))
			for i := range k {
				if rng.IntN(3) > 0 {
					k[i] = byte(rng.IntN(4))
				} else {
					k[i] = byte(rng.IntN(256))
				}
			}
			bk := bkey{rng.IntN(1 + round%4), string(k)}
			if round%50 == 0 {
				bk.st = 300 + rng.IntN(3) // beyond the counting pass
			}
			if !seen[bk] {
				seen[bk] = true
				dirty = append(dirty, dirtyRef{k: bk})
			}
		}
		want := slices.Clone(dirty)
		slices.SortFunc(want, compareDirty)
		b.sortDirty(dirty)
		for i := range want {
			if want[i].k != dirty[i].k {
				t.Fatalf("round %d: position %d: got %v %x, want %v %x", round, i, dirty[i].k.st, dirty[i].k.k, want[i].k.st, want[i].k.k)
			}
		}
	}
}
