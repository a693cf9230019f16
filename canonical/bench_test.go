package canonical

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// Benchmarks of canonical savepoint write and read next to the raw write
// and read of the same bytes. The generated state has one SQL-row key per
// key with a TTL accumulator row, 0-3 map entries, 1-3 join records and
// window values (genFill). SFSTATE_CANONICAL_BENCH_KEYS sets the number of
// keys (default 100000; 1000000 for the full-size figure).
//
//	go test ./canonical -run '^$' -bench . -benchtime 3x

var benchState struct {
	once    sync.Once
	ops     map[string]Operator
	stream  []byte
	dir     string
	store   *s3.Local
	sp      *savepoint.Savepoint
	entries int64
}

func benchKeys() int {
	if v, err := strconv.Atoi(os.Getenv("SFSTATE_CANONICAL_BENCH_KEYS")); err == nil && v > 0 {
		return v
	}
	return 100000
}

// benchTB outlives a single benchmark: cleanups and temporary
// directories are released in TestMain.
type benchTB struct {
	testing.TB
}

var benchCleanups []func()

func (benchTB) Cleanup(f func()) { benchCleanups = append(benchCleanups, f) }
func (t benchTB) TempDir() string {
	d, err := os.MkdirTemp(benchState.dir, "t")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func setupBench(b *testing.B) {
	benchState.once.Do(func() {
		ctx := context.Background()
		n := benchKeys()
		dir, err := os.MkdirTemp("", "sfstate-canonical-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchState.dir = dir
		benchState.ops = map[string]Operator{}
		for _, kind := range []string{"heap", "rocksdb"} {
			op, counts := genOperator(benchTB{b}, kind, 128, 1, n)
			benchState.ops[kind] = op
			benchState.entries = 0
			for _, c := range counts {
				benchState.entries += c
			}
		}
		var buf bytes.Buffer
		if _, _, err := WriteStream(ctx, &buf, benchState.ops["heap"].Subtasks[0].Operator, benchState.ops["heap"].Subtasks[0].Schema, false); err != nil {
			b.Fatal(err)
		}
		benchState.stream = buf.Bytes()
		if benchState.store, err = s3.NewLocal(dir); err != nil {
			b.Fatal(err)
		}
		if _, _, err := Export(ctx, []Operator{benchState.ops["heap"]}, benchState.store, ExportOptions{Dir: "sp"}); err != nil {
			b.Fatal(err)
		}
		if benchState.sp, err = savepoint.Open(ctx, benchState.store, "sp/_metadata"); err != nil {
			b.Fatal(err)
		}
	})
	if benchState.stream == nil {
		b.Fatal("bench setup failed")
	}
}

func reportEntries(b *testing.B) {
	b.ReportMetric(float64(benchState.entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkCanonicalWrite: backend scan + conversion + keyed-stream
// encoding into a file (what Export does per subtask before the upload).
func BenchmarkCanonicalWrite(b *testing.B) {
	setupBench(b)
	for _, kind := range []string{"heap", "rocksdb"} {
		b.Run(kind, func(b *testing.B) {
			st := benchState.ops[kind].Subtasks[0]
			b.SetBytes(int64(len(benchState.stream)))
			for i := 0; i < b.N; i++ {
				f, err := os.CreateTemp(b.TempDir(), "w")
				if err != nil {
					b.Fatal(err)
				}
				w := bufio.NewWriterSize(f, 256<<10)
				if _, _, err := WriteStream(context.Background(), w, st.Operator, st.Schema, false); err != nil {
					b.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			reportEntries(b)
		})
	}
}

// BenchmarkCanonicalExport: the whole savepoint (stream upload to a local
// store, confirmation, `_metadata` last).
func BenchmarkCanonicalExport(b *testing.B) {
	setupBench(b)
	b.SetBytes(int64(len(benchState.stream)))
	for i := 0; i < b.N; i++ {
		dir := fmt.Sprintf("export-%d-%d", b.N, i)
		if _, _, err := Export(context.Background(), []Operator{benchState.ops["rocksdb"]}, benchState.store, ExportOptions{Dir: dir}); err != nil {
			b.Fatal(err)
		}
	}
	reportEntries(b)
}

// BenchmarkCanonicalRead: Import of the savepoint (range reads, decoding,
// conversion, write batches) into a new backend.
func BenchmarkCanonicalRead(b *testing.B) {
	setupBench(b)
	for _, kind := range []string{"heap", "rocksdb"} {
		b.Run(kind, func(b *testing.B) {
			b.SetBytes(int64(len(benchState.stream)))
			for i := 0; i < b.N; i++ {
				res, err := Import(context.Background(), benchState.sp, func(_ savepoint.OperatorID, _ int, l engine.Layout, d []engine.StateDesc) (engine.Backend, error) {
					if kind == "heap" {
						return engine.OpenHeap(l, d)
					}
					return engine.OpenRocksDB(b.TempDir(), l, d, engine.RocksOptions{})
				}, ImportOptions{})
				if err != nil {
					b.Fatal(err)
				}
				res.Close()
			}
			reportEntries(b)
		})
	}
}

// BenchmarkCanonicalReadParallel: Import at parallelism 4 into RocksDB
// with 1 and 2 workers.
func BenchmarkCanonicalReadParallel(b *testing.B) {
	setupBench(b)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(len(benchState.stream)))
			for i := 0; i < b.N; i++ {
				res, err := Import(context.Background(), benchState.sp, func(_ savepoint.OperatorID, _ int, l engine.Layout, d []engine.StateDesc) (engine.Backend, error) {
					return engine.OpenRocksDB(b.TempDir(), l, d, engine.RocksOptions{})
				}, ImportOptions{Parallelism: 4, Workers: workers})
				if err != nil {
					b.Fatal(err)
				}
				res.Close()
			}
			reportEntries(b)
		})
	}
}

// BenchmarkRawWrite: the same number of bytes written as one object.
func BenchmarkRawWrite(b *testing.B) {
	setupBench(b)
	b.SetBytes(int64(len(benchState.stream)))
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("raw/%d-%d", b.N, i)
		if err := benchState.store.Put(context.Background(), key, bytes.NewReader(benchState.stream), int64(len(benchState.stream))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawRead: the same bytes read back as one object.
func BenchmarkRawRead(b *testing.B) {
	setupBench(b)
	ctx := context.Background()
	if err := benchState.store.Put(ctx, "raw/read", bytes.NewReader(benchState.stream), int64(len(benchState.stream))); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(benchState.stream)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rc, err := benchState.store.Get(ctx, "raw/read")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			b.Fatal(err)
		}
		rc.Close()
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(benchCleanups) - 1; i >= 0; i-- {
		benchCleanups[i]()
	}
	if benchState.dir != "" {
		os.RemoveAll(benchState.dir)
	}
	os.Exit(code)
}
