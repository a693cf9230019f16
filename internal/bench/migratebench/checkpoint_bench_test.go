//go:build cgo

package migratebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/s3"
)

// BenchmarkCheckpoint: offline migration of a generated bucket-layout
// checkpoint (SFSTATE_MIGRATE_BENCH_MIB of bucket state, default 64) on
// local disk, one subtask at a time, uniform keys, payload 0 and 256.
// Reports rows per CPU-second (the per-core figure) and per wall-second.
//
//	go test -run '^$' -bench 'Checkpoint$' -benchtime 3x -cpuprofile cpu.out ./internal/bench/migratebench
func BenchmarkCheckpoint(b *testing.B) {
	mib := int64(64)
	if s := os.Getenv("SFSTATE_MIGRATE_BENCH_MIB"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			b.Fatalf("SFSTATE_MIGRATE_BENCH_MIB=%q", s)
		}
		mib = n
	}
	for _, skewed := range []bool{false, true} {
		for _, payload := range []int{0, 256} {
			shape := "uniform"
			if skewed {
				shape = "skewed"
			}
			b.Run(fmt.Sprintf("%s/payload=%d", shape, payload), func(b *testing.B) {
				ctx := context.Background()
				scratch := b.TempDir()
				src, err := s3.NewLocal(filepath.Join(scratch, "src"))
				if err != nil {
					b.Fatal(err)
				}
				rows := max(1000, mib<<20/int64(19+payload+2))
				if _, err := migrate.GenerateCheckpoint(ctx, src, migrate.GenConfig{Keys: int(max(1, rows/64)), Rows: int(rows), Skewed: skewed,
					Payload: payload, OtherEntries: 1000, Seed: 42, WorkDir: scratch}); err != nil {
					b.Fatal(err)
				}
				var totRows int64
				var cpu, wall float64
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					ddir := filepath.Join(scratch, fmt.Sprintf("dst-%d", i))
					dst, err := s3.NewLocal(ddir)
					if err != nil {
						b.Fatal(err)
					}
					row, err := measure(ctx, src, dst, migrate.Options{WorkDir: scratch, Parallel: 1})
					if err != nil {
						b.Fatal(err)
					}
					totRows += row.Rows
					cpu += row.CPUSeconds
					wall += row.Seconds
					b.StopTimer()
					os.RemoveAll(ddir)
					b.StartTimer()
				}
				b.ReportMetric(float64(totRows)/cpu, "rows/cpu-s")
				b.ReportMetric(float64(totRows)/wall, "rows/s")
			})
		}
	}
}
