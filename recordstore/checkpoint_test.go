//go:build cgo

package recordstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	. "github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

// TestCheckpointRestoreAcrossPrefixBloom takes a native checkpoint of record
// state written without the prefix bloom, restores it and goes on with the
// bloom (the default), checkpoints again, and restores that at the same
// parallelism (with and without the bloom) and at parallelism 2 (clipped
// and copied key-group ranges over files that carry group-prefix filters).
// Output and logical content must equal the reference model's throughout.
func TestCheckpointRestoreAcrossPrefixBloom(t *testing.T) {
	ctx := context.Background()
	store := s3.NewMem()
	root := t.TempDir()
	full := keygroups.Range{Start: 0, End: 127}
	layout := engine.Layout{MaxParallelism: 128, Range: full}
	clock := engine.NewManualClock(1_000_000)
	ropts := engine.RocksOptions{Clock: clock, WriteBufferSize: 256 << 10}
	states := []engine.StateDesc{StateDesc(LayoutRecord, 0)}
	ref := NewTestModel(0)
	bundles, advance := VarKeyStream(33, 80, 30)

	run := func(be engine.Backend, noBloom bool, from, to int) {
		t.Helper()
		st, err := Open(LayoutRecord, be, Options{Clock: clock, NoPrefixBloom: noBloom, Pool: engine.NewPool(1 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		j := NewJoin(st, JoinOptions{})
		for b := from; b < to; b++ {
			clock.Advance(advance[b])
			want := ref.Process(clock.Now(), bundles[b])
			if got := Collect(t, j, bundles[b]); !slices.Equal(got, want) {
				t.Fatalf("bloom=%v bundle %d: output differs\n got %q\nwant %q", !noBloom, b, got, want)
			}
			if b%9 == 8 {
				if err := be.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := be.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	take := func(be engine.Backend, id int64) {
		t.Helper()
		if _, err := checkpoint.New(store, checkpoint.Options{}).TakeSync(ctx, []engine.Backend{be}, id); err != nil {
			t.Fatal(err)
		}
	}
	restore := func(id int64, rng keygroups.Range, name string) engine.Backend {
		t.Helper()
		be, _, err := checkpoint.Restore(ctx, store, id, rng, filepath.Join(root, name), checkpoint.RestoreOptions{Rocks: ropts, TidyBeforeReturn: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Close() })
		return be
	}
	logical := func(be engine.Backend, noBloom bool) []string {
		t.Helper()
		st, err := Open(LayoutRecord, be, Options{Clock: clock, NoPrefixBloom: noBloom})
		if err != nil {
			t.Fatal(err)
		}
		return DumpLogical(t, st)
	}

	a, err := engine.OpenRocksDB(filepath.Join(root, "a"), layout, states, ropts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	run(a, true, 0, 40)
	take(a, 1)

	b := restore(1, full, "b")
	run(b, false, 40, 80)
	take(b, 2)

	want := ref.Logical(clock.Now(), 128)
	if len(want) == 0 {
		t.Fatal("empty reference content")
	}
	for _, noBloom := range []bool{false, true} {
		c := restore(2, full, fmt.Sprintf("c-%v", noBloom))
		if got := logical(c, noBloom); !slices.Equal(got, want) {
			t.Fatalf("restored (bloom=%v): logical content differs\n got %q\nwant %q", !noBloom, got, want)
		}
	}
	var union []string
	for i, r := range keygroups.Ranges(128, 2) {
		be := restore(2, r, fmt.Sprintf("p2-%d", i))
		union = append(union, logical(be, false)...)
	}
	sort.Strings(union)
	if !slices.Equal(union, want) {
		t.Fatalf("restored at parallelism 2: logical content differs\n got %q\nwant %q", union, want)
	}
}
