package statediff

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/internal/testutil"
)

// TestDiffCorruptKeyedFile diffs a generated savepoint (canonical and heap
// layout) against copies whose keyed file has a byte flipped or is cut
// short at offsets spread through it, on both sides of the comparison and
// with a spill budget small enough to sort on disk. Each diff ends with a
// result (a damaged value that still decodes is a changed entry) or a
// corrupt- or unsupported-classed error naming a file; none panics, and
// no equal verdict is given for a copy that lost bytes.
func TestDiffCorruptKeyedFile(t *testing.T) {
	ctx := context.Background()
	for _, heap := range []bool{false, true} {
		g, err := scanbench.GenerateLayout(t.TempDir(), 2000, heap)
		if err != nil {
			t.Fatal(err)
		}
		orig := open(t, g.Dir)
		refused, differ := 0, 0
		for i, d := range testutil.DamagedCopies(t, g.Dir, scanbench.DataFile, 24) {
			a, b := orig, open(t, d.Dir)
			if i%2 == 1 {
				a, b = b, a
			}
			r, err := Diff(ctx, a, b, Options{Limit: 2, MemoryBytes: 64 << 10, TempDir: t.TempDir()})
			if err != nil {
				refused++
				if !errors.Is(err, errclass.ErrCorrupt) && !errors.Is(err, errclass.ErrUnsupported) {
					t.Errorf("heap %v, %s: unclassed error: %v", heap, d.What, err)
				}
				if file, _ := errclass.Position(err); file == "" {
					t.Errorf("heap %v, %s: error names no file: %v", heap, d.What, err)
				}
				continue
			}
			if !r.Equal {
				differ++
			} else if strings.Contains(d.What, "cut") {
				t.Errorf("heap %v, %s: equal", heap, d.What)
			} else {
				t.Logf("heap %v, %s: equal (the flipped byte changes no decoded entry)", heap, d.What)
			}
		}
		t.Logf("heap %v: %d refused, %d found different", heap, refused, differ)
		if refused == 0 {
			t.Errorf("heap %v: no damaged copy was refused", heap)
		}
	}
}
