package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// convertDir converts the snapshot in srcDir into a new local directory and
// opens the result.
func convertDir(t *testing.T, srcDir string) (*savepoint.Savepoint, *savepoint.Savepoint, *Result) {
	t.Helper()
	src := openDir(t, srcDir)
	dstDir := t.TempDir()
	dst, err := s3.NewLocal(dstDir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Request{Src: src, Dst: dst, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified || res.Entries == 0 {
		t.Fatalf("conversion not verified: %+v", res)
	}
	return src, openDir(t, dstDir), res
}

// TestHeapSourcesEqualCanonicalTwin converts the heap-layout snapshots of
// the valuestate-timers job (Flink 1.20 NATIVE savepoint, Flink 1.15
// retained checkpoint, Flink 1.9 V2 heap savepoint) and compares the result
// entry by entry with the canonical savepoint Flink 1.20 took of the same
// job with the same backend.
func TestHeapSourcesEqualCanonicalTwin(t *testing.T) {
	twin := openDir(t, fixtures.Path(t, "flink1.20-hashmap-canonical-valuestate-timers"))
	want := entries(t, twin)
	if len(want) != 32 {
		t.Fatalf("canonical twin has %d entries, the manifest says 32", len(want))
	}
	for _, dir := range []string{
		fixtures.Path(t, "flink1.20-hashmap-NATIVE-for-contrast"),
		fixtures.MorePath(t, "flink1.15-hashmap-checkpoint", "savepoint"),
		fixtures.MorePath(t, "flink1.9-heap-savepoint-metadata-v2", "savepoint"),
	} {
		t.Run(filepath.Base(strings.TrimSuffix(dir, "/savepoint")), func(t *testing.T) {
			src, out, res := convertDir(t, dir)
			if res.Entries != int64(len(want)) {
				t.Fatalf("verified %d entries, want %d", res.Entries, len(want))
			}
			checkConverted(t, src, out)
			sameLines(t, "converted vs canonical twin", want, entries(t, out))
			// The source reads the same as the output (the conversion
			// neither lost nor invented entries).
			sameLines(t, "source vs converted", entries(t, src), entries(t, out))
			// Same serializer snapshots and state order as the twin.
			sameHeaders(t, twin, out)
			// Same operators as the twin.
			for _, op := range out.Meta.Operators {
				top := twin.FindOperator(op.ID.String())
				if top == nil || top.Parallelism != op.Parallelism || top.MaxParallelism != op.MaxParallelism {
					t.Fatalf("operator %s is not in the twin alike", op.ID)
				}
			}
		})
	}
}

// TestCanonicalInputIsRewrittenAlike converts a canonical savepoint: the
// output is again canonical with the same entries.
func TestCanonicalInputIsRewrittenAlike(t *testing.T) {
	src, out, _ := convertDir(t, fixtures.Path(t, "flink1.20-hashmap-canonical-valuestate-timers"))
	checkConverted(t, src, out)
	sameLines(t, "canonical input", entries(t, src), entries(t, out))
}

// failingStore fails every data-file write after the first n.
type failingStore struct {
	s3.Storage
	n    int32
	puts atomic.Int32
}

func (f *failingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if key != savepoint.MetadataName && f.puts.Add(1) > f.n {
		return errors.New("injected write failure")
	}
	return f.Storage.Put(ctx, key, r, size)
}

// TestFailedConversionLeavesNoMetadata breaks writes at every point of a
// conversion and cancels one: no `_metadata` appears and the files written
// before the failure are removed; the source is untouched.
func TestFailedConversionLeavesNoMetadata(t *testing.T) {
	srcDir := fixtures.Path(t, "flink1.20-hashmap-NATIVE-for-contrast")
	before := dirDigest(t, srcDir)
	src := openDir(t, srcDir)
	failed, succeeded := 0, 0
	for n := int32(0); n < 40; n += 3 {
		dstDir := t.TempDir()
		local, _ := s3.NewLocal(dstDir)
		_, err := Run(context.Background(), Request{Src: src, Dst: &failingStore{Storage: local, n: n}})
		if err == nil {
			// Enough writes allowed for the whole run.
			if _, err := os.Stat(filepath.Join(dstDir, savepoint.MetadataName)); err != nil {
				t.Fatalf("n=%d: run succeeded without _metadata: %v", n, err)
			}
			succeeded++
			continue
		}
		if !strings.Contains(err.Error(), "injected") {
			t.Fatalf("n=%d: %v", n, err)
		}
		if ents, _ := os.ReadDir(dstDir); len(ents) != 0 {
			t.Fatalf("n=%d: failed run left %d files (first %s)", n, len(ents), ents[0].Name())
		}
		failed++
	}
	if failed == 0 || succeeded == 0 {
		t.Fatalf("%d runs failed, %d succeeded: the injected failures missed the run", failed, succeeded)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dstDir := t.TempDir()
	local, _ := s3.NewLocal(dstDir)
	if _, err := Run(ctx, Request{Src: src, Dst: local}); err == nil {
		t.Fatal("cancelled run succeeded")
	}
	if _, err := os.Stat(filepath.Join(dstDir, savepoint.MetadataName)); !os.IsNotExist(err) {
		t.Fatalf("cancelled run: _metadata %v", err)
	}
	// An existing _metadata is never replaced.
	okDir := t.TempDir()
	ok, _ := s3.NewLocal(okDir)
	if _, err := Run(context.Background(), Request{Src: src, Dst: ok}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Request{Src: src, Dst: ok}); !errors.Is(err, ErrExists) {
		t.Fatalf("second run into the same directory: %v, want ErrExists", err)
	}
	if after := dirDigest(t, srcDir); after != before {
		t.Fatal("the source directory changed")
	}
}

// dirDigest summarises a directory's names, sizes and modification times.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.ModTime().String() + " " + fmt.Sprint(fi.Size()) + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
