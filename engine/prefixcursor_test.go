package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
)

// TestPrefixCursor compares PrefixCursor with Backend.Scan over bounded
// ranges: batches cut between entries, an entry larger than the buffer,
// early stops, absent prefixes, the empty prefix, memtable and SST data.
func TestPrefixCursor(t *testing.T) {
	layout := Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}
	be, err := OpenRocksDB(t.TempDir(), layout, []StateDesc{{Name: "s", Kind: KindValue}}, RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	b := be.NewBatch()
	for g := 0; g < 20; g++ {
		for i := 0; i < 300; i++ {
			v := bytes.Repeat([]byte{byte(i)}, 1+i%7*50)
			if g == 7 && i == 5 {
				v = bytes.Repeat([]byte{9}, 200<<10) // larger than the buffer
			}
			b.Put(0, []byte(fmt.Sprintf("g%02d/%04d", g, i)), v)
		}
		if g == 10 {
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := be.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	nat, ok := NativeOf(be)
	if !ok {
		t.Fatal("RocksDB backend without native access")
	}
	c, err := nat.NewPrefixCursor(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dump := func(scan func(fn func(k, v []byte) bool) error, stop int) string {
		var sb bytes.Buffer
		n := 0
		if err := scan(func(k, v []byte) bool {
			fmt.Fprintf(&sb, "%s=%d:%x;", k, len(v), v[:min(len(v), 4)])
			n++
			return n != stop
		}); err != nil {
			t.Fatal(err)
		}
		return sb.String()
	}
	for _, p := range []string{"g07/", "g03/", "g10/", "g11/", "g19/01", "g20/", "a", "", "g07/0005"} {
		for _, stop := range []int{0, 1, 250} {
			got := dump(func(fn func(k, v []byte) bool) error { return c.Scan([]byte(p), fn) }, stop)
			var upper []byte
			if p != "" {
				upper = append([]byte(p[:len(p)-1]), p[len(p)-1]+1)
			}
			want := dump(func(fn func(k, v []byte) bool) error { return be.Scan(0, []byte(p), upper, fn) }, stop)
			if got != want {
				t.Fatalf("prefix %q stop %d: cursor and scan differ (%d vs %d bytes)", p, stop, len(got), len(want))
			}
			if p == "g07/" && stop == 0 && len(got) < 300*10 {
				t.Fatalf("prefix %q: %d bytes of dump", p, len(got))
			}
		}
	}
	c.Close()
	if err := c.Scan([]byte("g"), func(k, v []byte) bool { return true }); err == nil {
		t.Fatal("a closed cursor scanned")
	}
}
