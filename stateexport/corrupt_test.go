package stateexport

import (
	"context"
	"errors"
	"testing"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestExportCorruptKeyedFile exports copies of generated savepoints (the
// canonical and the heap key-group layout) whose keyed file has one byte
// flipped, or is cut short, at offsets spread through it. Each export
// either succeeds (the damage fell inside a value that still decodes) or
// fails with a corrupt- or unsupported-classed error that names a file;
// none panics, and a failed export publishes no manifest.
func TestExportCorruptKeyedFile(t *testing.T) {
	ctx := context.Background()
	for _, heap := range []bool{false, true} {
		gen := t.TempDir()
		g, err := scanbench.GenerateLayout(gen, 2000, heap)
		if err != nil {
			t.Fatal(err)
		}
		copies := testutil.DamagedCopies(t, g.Dir, scanbench.DataFile, 48)
		failed, ok := 0, 0
		for _, d := range copies {
			st, err := s3.NewLocal(d.Dir)
			if err != nil {
				t.Fatal(err)
			}
			sp, err := savepoint.Open(ctx, st, savepoint.MetadataName)
			if err != nil {
				t.Fatalf("heap %v, %s: open: %v", heap, d.What, err)
			}
			out, err := s3.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			_, err = Export(ctx, sp, out, Options{RowGroupRows: 500})
			if err == nil {
				ok++
				continue
			}
			failed++
			if !errors.Is(err, errclass.ErrCorrupt) && !errors.Is(err, errclass.ErrUnsupported) {
				t.Errorf("heap %v, %s: unclassed error: %v", heap, d.What, err)
			}
			if file, _ := errclass.Position(err); file == "" {
				t.Errorf("heap %v, %s: error names no file: %v", heap, d.What, err)
			}
			if _, serr := out.Stat(ctx, ManifestKey(Options{}.Shard)); serr == nil {
				t.Errorf("heap %v, %s: failed export published its manifest", heap, d.What)
			}
		}
		t.Logf("heap %v: %d of %d damaged copies refused, %d exported", heap, failed, len(copies), ok)
		if failed == 0 {
			t.Errorf("heap %v: no damaged copy was refused", heap)
		}
	}
}
