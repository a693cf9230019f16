package stateexport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"

	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// exportGeneric exports through the generic decoder only (every entry a
// boxed value), the reference the columnar path must match.
func exportGeneric(t *testing.T, sp *savepoint.Savepoint, dir string, o Options) *Manifest {
	t.Helper()
	out, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newExporter(context.Background(), sp, out, &o)
	if err != nil {
		t.Fatal(err)
	}
	e.noColumnar = true
	man, err := e.run()
	if err != nil {
		t.Fatal(err)
	}
	return man
}

// sameFiles checks that two exports wrote byte-identical table files.
func sameFiles(t *testing.T, a, b string, ma, mb *Manifest) {
	t.Helper()
	if len(ma.Tables) != len(mb.Tables) {
		t.Fatalf("%d tables vs %d", len(ma.Tables), len(mb.Tables))
	}
	for i, ta := range ma.Tables {
		tb := mb.Tables[i]
		if ta.Name != tb.Name || ta.Rows != tb.Rows || len(ta.Files) != len(tb.Files) {
			t.Fatalf("table %d: %s %d rows vs %s %d rows", i, ta.Name, ta.Rows, tb.Name, tb.Rows)
		}
		for j := range ta.Files {
			x, err := os.ReadFile(filepath.Join(a, ta.Files[j].Key))
			if err != nil {
				t.Fatal(err)
			}
			y, err := os.ReadFile(filepath.Join(b, tb.Files[j].Key))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(x, y) {
				t.Errorf("%s: columnar export (%d bytes) differs from the generic one (%d bytes)", ta.Files[j].Key, len(x), len(y))
			}
		}
	}
}

// TestExportColumnarMatchesGeneric exports a generated savepoint of SQL
// rows (nulls in a string field, TTL) with row groups that cut through the
// decoder's batches: the columnar path writes the same Parquet bytes as
// the generic path, twice over (deterministic), and the rows read back
// with parquet-go are the decoded entries.
func TestExportColumnarMatchesGeneric(t *testing.T) {
	g, err := scanbench.Generate(t.TempDir(), 12000)
	if err != nil {
		t.Fatal(err)
	}
	sp := openFixture(t, g.Dir)
	for _, rg := range []int{1000, 4096, 7777} {
		o := Options{RowGroupRows: rg, Workers: 2}
		col, col2, gen := t.TempDir(), t.TempDir(), t.TempDir()
		mc := export(t, sp, col, o)
		mc2 := export(t, sp, col2, o)
		mg := exportGeneric(t, sp, gen, o)
		sameFiles(t, col, gen, mc, mg)
		sameFiles(t, col, col2, mc, mc2)
		if rg != 7777 {
			continue
		}
		want := expectedRows(t, sp, verify.Shard{})
		for k, tb := range tableByState(mc) {
			got, _ := parquetRows(t, filepath.Join(col, tb.Files[0].Key))
			rows := want[k]
			if len(got) != len(rows) || int64(len(rows)) != g.Entries {
				t.Fatalf("%s: %d rows, want %d", k, len(got), len(rows))
			}
			for i := range rows {
				for j := range rows[i] {
					if !sameLeaf(rows[i][j], got[i][j]) {
						t.Fatalf("%s row %d column %d: got %#v, want %#v", k, i, j, got[i][j], rows[i][j])
					}
				}
			}
		}
	}
}

// TestExportFixturesColumnarMatchesGeneric: on every fixture the two paths
// write the same Parquet and Arrow bytes.
func TestExportFixturesColumnarMatchesGeneric(t *testing.T) {
	for _, fx := range fixtures.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			sp := openFixture(t, fx.Dir)
			for _, o := range []Options{{RowGroupRows: 2}, {Format: CSV}, {Format: JSONL}} {
				col, gen := t.TempDir(), t.TempDir()
				sameFiles(t, col, gen, export(t, sp, col, o), exportGeneric(t, sp, gen, o))
			}
		})
	}
}

// failingStore fails the Put of the n-th object after reading some of it.
type failingStore struct {
	s3.Storage
	n, puts int
}

var errInjected = errors.New("injected upload failure")

func (f *failingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	f.puts++
	if f.puts == f.n {
		_, _ = io.CopyN(io.Discard, r, 100)
		return errInjected
	}
	return f.Storage.Put(ctx, key, r, size)
}

// TestExportUploadFailure fails the upload of each table in turn (the
// generated savepoint's state table, with several row groups in flight,
// and the metadata tables): Export returns the failure, writes no
// manifest and does not hang.
func TestExportUploadFailure(t *testing.T) {
	g, err := scanbench.Generate(t.TempDir(), 30000)
	if err != nil {
		t.Fatal(err)
	}
	sp := openFixture(t, g.Dir)
	for _, f := range []Format{Parquet, CSV} {
		for n := 1; n <= 3; n++ {
			dir := t.TempDir()
			st, err := s3.NewLocal(dir)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Export(context.Background(), sp, &failingStore{Storage: st, n: n}, Options{Format: f, RowGroupRows: 1000})
			if !errors.Is(err, errInjected) {
				t.Fatalf("%s, upload %d failing: %v", f, n, err)
			}
			if _, err := os.Stat(filepath.Join(dir, ManifestKey(verify.Shard{}))); !os.IsNotExist(err) {
				t.Fatalf("%s, upload %d failing: manifest written (%v)", f, n, err)
			}
		}
	}
}

// TestExportParquetStatistics reads the column-chunk statistics of a
// generated export (parquet-go, from the footer): every column of every
// row group has its null count and, for the string columns, the minimum
// and maximum of the values read back.
func TestExportParquetStatistics(t *testing.T) {
	g, err := scanbench.Generate(t.TempDir(), 9000)
	if err != nil {
		t.Fatal(err)
	}
	sp := openFixture(t, g.Dir)
	dir := t.TempDir()
	man := export(t, sp, dir, Options{RowGroupRows: 4000})
	for _, tb := range tableByState(man) {
		path := filepath.Join(dir, tb.Files[0].Key)
		rows, names := parquetRows(t, path)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		pf, err := parquet.OpenFile(f, fi.Size())
		if err != nil {
			t.Fatal(err)
		}
		md := pf.Metadata()
		if len(md.RowGroups) != 3 {
			t.Fatalf("%d row groups, want 3", len(md.RowGroups))
		}
		start := 0
		for _, rg := range md.RowGroups {
			n := int(rg.NumRows)
			for c, cc := range rg.Columns {
				st := cc.MetaData.Statistics
				var nulls int64
				var lo, hi string
				for _, r := range rows[start : start+n] {
					if r[c] == nil {
						nulls++
						continue
					}
					if s, ok := r[c].(string); ok {
						if lo == "" || s < lo {
							lo = s
						}
						if s > hi {
							hi = s
						}
					}
				}
				if st.NullCount != nulls {
					t.Errorf("%s row group at %d: %d nulls, statistics say %d", names[c], start, nulls, st.NullCount)
				}
				if hi != "" && (string(st.MinValue) != lo || string(st.MaxValue) != hi) {
					t.Errorf("%s row group at %d: min/max %q %q, statistics say %q %q", names[c], start, lo, hi, st.MinValue, st.MaxValue)
				}
			}
			start += n
		}
		f.Close()
	}
}

// TestFlatParquetWriterMatchesPqarrow: the parallel writer of flat tables
// (columns encoded and pages compressed concurrently, dictionary string
// columns handed over as dictionary arrays) writes the bytes
// pqarrow.FileWriter writes for the same record batches and properties.
func TestFlatParquetWriterMatchesPqarrow(t *testing.T) {
	g, err := scanbench.Generate(t.TempDir(), 9000)
	if err != nil {
		t.Fatal(err)
	}
	sp := openFixture(t, g.Dir)
	dir := t.TempDir()
	man := export(t, sp, dir, Options{Format: Arrow, RowGroupRows: 4000})
	for _, tb := range tableByState(man) {
		f, err := os.Open(filepath.Join(dir, tb.Files[0].Key))
		if err != nil {
			t.Fatal(err)
		}
		r, err := ipc.NewFileReader(f)
		if err != nil {
			t.Fatal(err)
		}
		var recs []arrow.RecordBatch
		for i := 0; i < r.NumRecords(); i++ {
			rec, err := r.RecordBatch(i)
			if err != nil {
				t.Fatal(err)
			}
			rec.Retain()
			recs = append(recs, rec)
		}
		schema := r.Schema()
		if !flatSchema(schema) || len(recs) != 3 {
			t.Fatalf("%s: %d batches, flat %v", tb.Name, len(recs), flatSchema(schema))
		}
		for _, c := range []compress.Compression{compress.Codecs.Zstd, compress.Codecs.Snappy, compress.Codecs.Uncompressed} {
			for _, plain := range []bool{false, true} {
				dict := dictionaryColumns(schema, recs[0])
				props, err := parquetProperties(schema, c, dict, plain)
				if err != nil {
					t.Fatal(err)
				}
				var flat, ref bytes.Buffer
				fw, err := newFlatParquetWriter(schema, &flat, props, dict)
				if err != nil {
					t.Fatal(err)
				}
				pw, err := pqarrow.NewFileWriter(schema, &ref, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
				if err != nil {
					t.Fatal(err)
				}
				for _, rec := range recs {
					if err := fw.Write(rec); err != nil {
						t.Fatal(err)
					}
					if err := pw.Write(rec); err != nil {
						t.Fatal(err)
					}
				}
				if err := fw.Close(); err != nil {
					t.Fatal(err)
				}
				if err := pw.Close(); err != nil {
					t.Fatal(err)
				}
				if len(dict) == 0 || !bytes.Equal(flat.Bytes(), ref.Bytes()) {
					t.Errorf("%s %v plain=%v: flat writer %d bytes, pqarrow %d bytes (dictionary columns %v)", tb.Name, c, plain, flat.Len(), ref.Len(), dict)
				}
			}
		}
		for _, rec := range recs {
			rec.Release()
		}
		r.Close()
		f.Close()
	}
}
