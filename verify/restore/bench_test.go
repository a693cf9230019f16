//go:build cgo

package restore

import (
	"context"
	"testing"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// BenchmarkDigestGenerated digests a generated savepoint on one goroutine.
func BenchmarkDigestGenerated(b *testing.B) {
	store, _ := s3.NewLocal(b.TempDir())
	sp := generate(b, store, "sp", GenOptions{Keys: 20000, Backend: "rocksdb", Parallelism: 2, MaxParallelism: 128, InlineThreshold: -1})
	var bytes int64
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			if st.ManagedKeyed != nil {
				bytes += st.ManagedKeyed.(*savepoint.KeyGroupsHandle).Delegate.Size
			}
		}
	}
	b.SetBytes(bytes)
	b.ResetTimer()
	var n int64
	for i := 0; i < b.N; i++ {
		d, err := verify.ComputeDigest(context.Background(), sp, verify.DigestOptions{Concurrency: 1})
		if err != nil {
			b.Fatal(err)
		}
		n += d.Total("", "").Entries
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
}
