package stateexport

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/sfstate/sfstate/internal/bench/proc"
	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/savepoint"
)

func TestZZEncodings(t *testing.T) {
	g, err := scanbench.Generate(t.TempDir(), DefaultRowGroupRows)
	if err != nil {
		t.Fatal(err)
	}
	sp := openFixture(t, g.Dir)
	var tb *table
	err = sp.ScanColumns(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Workers: 1}, func(cb *savepoint.ColumnBatch) error {
		if tb == nil {
			l, err := newStateLayout(cb.Header.KeySerializer, cb.State)
			if err != nil {
				return err
			}
			tb = &table{layout: l, schema: l.schema, cplan: columnarPlanFor(l), cur: newColSet(l.schema)}
		}
		tb.cplan.appendBatch(tb.cur, "00000000000000000000000000000000", cb, 0, cb.Len())
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := tb.cur.record(tb.schema)
	dict := dictionaryColumns(tb.schema, rec)
	isDict := map[string]bool{}
	for _, d := range dict {
		isDict[d] = true
	}
	variant := func(name string, codec compress.Compression, lvl int, intEnc, strEnc parquet.Encoding, bss bool) {
		opts := []parquet.WriterProperty{
			parquet.WithCompression(codec), parquet.WithStats(true), parquet.WithDictionaryDefault(false),
			parquet.WithMaxRowGroupLength(1 << 40),
		}
		if codec == compress.Codecs.Zstd {
			opts = append(opts, parquet.WithCompressionLevel(lvl))
		}
		for _, p := range dict {
			opts = append(opts, parquet.WithDictionaryFor(p, true))
		}
		for _, f := range tb.schema.Fields() {
			if isDict[f.Name] {
				continue
			}
			switch f.Type.ID() {
			case arrow.INT32, arrow.INT64, arrow.TIMESTAMP:
				if intEnc != parquet.Encodings.Plain {
					opts = append(opts, parquet.WithEncodingFor(f.Name, intEnc))
				}
			case arrow.FLOAT64, arrow.FLOAT32:
				if bss {
					opts = append(opts, parquet.WithEncodingFor(f.Name, parquet.Encodings.ByteStreamSplit))
				}
			case arrow.STRING:
				if strEnc != parquet.Encodings.Plain {
					opts = append(opts, parquet.WithEncodingFor(f.Name, strEnc))
				}
			}
		}
		props := parquet.NewWriterProperties(opts...)
		var buf bytes.Buffer
		const N = 20
		c0 := proc.CPU()
		t0 := time.Now()
		for k := 0; k < N; k++ {
			buf.Reset()
			w, err := newFlatParquetWriter(tb.schema, &buf, props, dict)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		d := time.Since(t0) / N
		cpu := (proc.CPU() - c0) / N
		fmt.Printf("%-28s size %8d  wall %6.2f ms  cpu %6.2f ms  %.2f M rows/cpu-s\n", name, buf.Len(), d.Seconds()*1e3, cpu.Seconds()*1e3, float64(rec.NumRows())/cpu.Seconds()/1e6)
	}
	P, D, DL, DB := parquet.Encodings.Plain, parquet.Encodings.DeltaBinaryPacked, parquet.Encodings.DeltaLengthByteArray, parquet.Encodings.DeltaByteArray
	variant("none plain", compress.Codecs.Uncompressed, 0, P, P, false)
	variant("none delta", compress.Codecs.Uncompressed, 0, D, P, false)
	variant("zstd1 plain", compress.Codecs.Zstd, 1, P, P, false)
	variant("zstd1 delta", compress.Codecs.Zstd, 1, D, P, false)
	variant("zstd1 delta dlba", compress.Codecs.Zstd, 1, D, DL, false)
	variant("zstd1 delta dba", compress.Codecs.Zstd, 1, D, DB, false)
	variant("snappy plain", compress.Codecs.Snappy, 0, P, P, false)
	variant("snappy delta", compress.Codecs.Snappy, 0, D, P, false)
	variant("snappy delta dba", compress.Codecs.Snappy, 0, D, DB, false)
	variant("none delta dba", compress.Codecs.Uncompressed, 0, D, DB, false)
	variant("zstd1 delta dba bss", compress.Codecs.Zstd, 1, D, DB, true)
	variant("snappy delta dba bss", compress.Codecs.Snappy, 0, D, DB, true)
	variant("zstd3 delta dba bss", compress.Codecs.Zstd, 3, D, DB, true)
}
