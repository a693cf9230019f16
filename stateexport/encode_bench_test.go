package stateexport

import (
	"context"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/sfstate/sfstate/internal/bench/proc"
	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/savepoint"
)

// BenchmarkEncode measures the encoders alone on one row group of the
// export benchmark's rows (64 Ki rows decoded once), per format.
//
//	go test ./stateexport -run - -bench Encode
func BenchmarkEncode(b *testing.B) {
	g, err := scanbench.Generate(b.TempDir(), DefaultRowGroupRows)
	if err != nil {
		b.Fatal(err)
	}
	sp := openFixture(b, g.Dir)
	var rec arrow.RecordBatch
	var tb *table
	err = sp.ScanColumns(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Workers: 1}, func(cb *savepoint.ColumnBatch) error {
		if tb == nil {
			l, err := newStateLayout(cb.Header.KeySerializer, cb.State, nil)
			if err != nil {
				return err
			}
			tb = &table{layout: l, schema: l.schema, cplan: columnarPlanFor(l), cur: newColSet(l.schema)}
		}
		tb.cplan.appendBatch(tb.cur, "00000000000000000000000000000000", cb, 0, cb.Len())
		return nil
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	rec = tb.cur.record(tb.schema)
	defer rec.Release()
	run := func(name string, f Format, c Compression, setup func()) {
		b.Run(name, func(b *testing.B) {
			if setup != nil {
				setup()
			}
			b.SetBytes(g.DataBytes)
			c0 := proc.CPU()
			for i := 0; i < b.N; i++ {
				rw, err := newRecordWriter(f, io.Discard, tb.schema, c, false, rec)
				if err != nil {
					b.Fatal(err)
				}
				if err := rw.Write(rec); err != nil {
					b.Fatal(err)
				}
				if err := rw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rec.NumRows())*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(rec.NumRows())*float64(b.N)/(proc.CPU()-c0).Seconds(), "rows/cpu-s")
		})
	}
	lvl := zstdLevel
	defer func() { zstdLevel = lvl }()
	run("parquet-zstd1", Parquet, Zstd, func() { zstdLevel = 1 })
	run("parquet-zstd3", Parquet, Zstd, func() { zstdLevel = compress.DefaultCompressionLevel })
	run("parquet-snappy", Parquet, Snappy, nil)
	run("parquet-none", Parquet, Uncompressed, nil)
	run("arrow", Arrow, Uncompressed, nil)
	run("csv", CSV, "", nil)
	run("jsonl", JSONL, "", nil)
}
