package stateexport

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/proc"
	"github.com/sfstate/sfstate/internal/bench/scanbench"
)

// BenchmarkExport (`sfstate bench export` is the full comparison, with CPU
// time and every format) exports a generated savepoint of SQL rows (BIGINT and
// STRING key; BIGINT, DOUBLE, STRING, TIMESTAMP(3), INT, BOOLEAN value;
// SFSTATE_EXPORT_BENCH_ENTRIES entries, default 200000) with the page
// cache dropped before each round, next to a cold raw read of the same
// bytes. It reports entries/s and the peak RSS of the run
// (peak-RSS-MiB; Linux resets the mark per sub-benchmark).
//
//	go test ./stateexport -run - -bench Export -benchtime 3x
func BenchmarkExport(b *testing.B) {
	n := int64(200000)
	if s := os.Getenv("SFSTATE_EXPORT_BENCH_ENTRIES"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 1 {
			b.Fatalf("SFSTATE_EXPORT_BENCH_ENTRIES=%q", s)
		}
		n = v
	}
	g, err := scanbench.Generate(b.TempDir(), n)
	if err != nil {
		b.Fatal(err)
	}
	data := filepath.Join(g.Dir, scanbench.DataFile)
	sp := openFixture(b, g.Dir)
	resetPeak := func() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }
	report := func(b *testing.B) {
		b.SetBytes(g.DataBytes)
		b.ReportMetric(float64(g.Entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		b.ReportMetric(float64(proc.PeakRSS())/(1<<20), "peak-RSS-MiB")
	}
	b.Run("raw-read-cold", func(b *testing.B) {
		resetPeak()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			_ = scanbench.EvictFile(data)
			b.StartTimer()
			if err := scanbench.RawRead(data); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	for _, f := range []Format{Parquet, Arrow, CSV, JSONL} {
		b.Run(string(f)+"-cold", func(b *testing.B) {
			resetPeak()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				_ = scanbench.EvictFile(data)
				out := b.TempDir()
				b.StartTimer()
				export(b, sp, out, Options{Format: f})
			}
			report(b)
		})
	}
}
