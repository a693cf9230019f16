package checkpoint_test

import (
	"context"
	"fmt"
	"github.com/sfstate/sfstate/checkpoint"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/fillstate"
	"github.com/sfstate/sfstate/s3"
)

// BenchmarkLazyAdopt: one new subtask (1→1, max parallelism 128) adopting
// a checkpoint of 8 KiB values from a local store: the adoption's own cost
// (scratch imports, rewrite into key-group SST files, ingestion), without
// any network.
func BenchmarkLazyAdopt(b *testing.B) {
	ctx := context.Background()
	root := b.TempDir()
	store, err := s3.NewLocal(filepath.Join(root, "store"))
	if err != nil {
		b.Fatal(err)
	}
	cfg := fillstate.Config{MaxParallelism: 128, Parallelism: 1, Keys: 8192, ValueSize: 8 << 10, KeyGroupFiles: true}
	if _, err := fillstate.Checkpointed(ctx, cfg, filepath.Join(root, "db"), store, nil); err != nil {
		b.Fatal(err)
	}
	plan := planFor(b, store, 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lz, err := checkpoint.RestoreLazy(ctx, store, plan, 0, filepath.Join(root, fmt.Sprint("r", i)), checkpoint.LazyOptions{KeyGroupFiles: true, Adopters: 2})
		if err != nil {
			b.Fatal(err)
		}
		if err := lz.WaitLocal(ctx); err != nil {
			b.Fatal(err)
		}
		s := lz.Stats()
		b.SetBytes(s.Bytes)
		b.ReportMetric(s.Rewrite.Seconds()/float64(s.Bytes)*1e9, "rewrite-ns/B")
		if i == b.N-1 {
			b.Logf("%+v", s)
		}
		lz.Close()
	}
}
