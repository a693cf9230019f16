package convert

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestGeneratedHeapTTLRows converts a generated hashmap checkpoint (SQL
// row keys, TTL-wrapped row values, max parallelism 128, every key group
// listed) and compares it with the canonical savepoint of the same state:
// same entries and TTL timestamps.
func TestGeneratedHeapTTLRows(t *testing.T) {
	const n = 3000
	heapDir, canonDir := t.TempDir(), t.TempDir()
	if _, err := scanbench.GenerateLayout(heapDir, n, true); err != nil {
		t.Fatal(err)
	}
	if _, err := scanbench.GenerateLayout(canonDir, n, false); err != nil {
		t.Fatal(err)
	}
	src, out, res := convertDir(t, heapDir)
	if res.Entries != n {
		t.Fatalf("verified %d entries, want %d", res.Entries, n)
	}
	checkConverted(t, src, out)
	want := entries(t, openDir(t, canonDir))
	got := entries(t, out)
	ttl := 0
	for _, l := range got {
		if !strings.HasSuffix(l, " -") {
			ttl++
		}
	}
	if ttl != n {
		t.Fatalf("%d of %d converted entries carry a TTL timestamp", ttl, n)
	}
	sameLines(t, "converted heap vs canonical", want, got)
}

// TestCorruptHeapSourceFails converts a NATIVE heap savepoint with one
// keyed file cut short: the run fails naming that file, and neither
// `_metadata` nor any data file is left at the destination.
func TestCorruptHeapSourceFails(t *testing.T) {
	srcDir := t.TempDir()
	orig := fixtures.Path(t, "flink1.20-hashmap-NATIVE-for-contrast")
	ents, err := os.ReadDir(orig)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(orig, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(srcDir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := openDir(t, srcDir)
	// The timely operator's subtask 2 file holds keys 0 and 1.
	var victim string
	for _, op := range src.Meta.Operators {
		if op.ID.String() != "4b818c7923a927796d24b727201ba34d" {
			continue
		}
		victim = op.Subtask(2).ManagedKeyed.(*savepoint.KeyGroupsHandle).Delegate.Path
	}
	p := filepath.Join(srcDir, victim)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, fi.Size()-7); err != nil {
		t.Fatal(err)
	}
	dstDir := t.TempDir()
	dst, _ := s3.NewLocal(dstDir)
	_, err = Run(context.Background(), Request{Src: src, Dst: dst})
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), victim) {
		t.Fatalf("truncated %s: err %v", victim, err)
	}
	if left, _ := os.ReadDir(dstDir); len(left) != 0 {
		t.Fatalf("failed run left %d files", len(left))
	}
}

// BenchmarkConvertGeneratedHeap converts a generated hashmap checkpoint of
// 100,000 TTL row entries (about 13 MB) per iteration, verification included.
func BenchmarkConvertGeneratedHeap(b *testing.B) {
	dir := b.TempDir()
	if _, err := scanbench.GenerateLayout(dir, 100000, true); err != nil {
		b.Fatal(err)
	}
	st, _ := s3.NewLocal(dir)
	src, err := savepoint.Open(context.Background(), st, savepoint.MetadataName)
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, o := range src.Meta.Operators {
		for _, s := range o.Subtasks {
			if h, ok := s.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok && h.Delegate != nil {
				size += h.Delegate.Size
			}
		}
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst, _ := s3.NewLocal(b.TempDir())
		if _, err := Run(context.Background(), Request{Src: src, Dst: dst}); err != nil {
			b.Fatal(err)
		}
	}
}
