package savepoint

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// synthSavepoint writes a canonical savepoint with one keyed operator
// (Tuple1<Long> keys, one VALUE state of BIGINT, max parallelism 128)
// holding n entries in one file per subtask into dir, reusing the keyed
// header of a fixture file. It returns the total data size.
func synthSavepoint(t testing.TB, dir string, n, parallelism int) int64 {
	t.Helper()
	fx := fixtureDir(t, fixtureUDF)
	md, err := ParseMetadata(readFixtureMetadata(t, fixtureUDF), "fx")
	if err != nil {
		t.Fatal(err)
	}
	var hdr []byte
	for _, op := range md.Operators {
		if op.ID.String() == flatMap1 {
			h := op.Subtask(2).ManagedKeyed.(*KeyGroupsHandle)
			b, err := os.ReadFile(filepath.Join(fx, h.Delegate.Path))
			if err != nil {
				t.Fatal(err)
			}
			_, hl, err := keyed.ReadHeader(bytes.NewReader(b), "fx")
			if err != nil {
				t.Fatal(err)
			}
			hdr = b[:hl]
		}
	}
	const maxP = 128
	byKG := make([][]int64, maxP)
	for i := 0; i < n; i++ {
		kg := keygroups.Assign(keygroups.Tuple{keygroups.Long(int64(i))}, maxP)
		byKG[kg] = append(byKG[kg], int64(i))
	}
	var total int64
	op := &OperatorState{ID: OperatorIDFromUID("synthetic"), Parallelism: int32(parallelism), MaxParallelism: maxP}
	for sub := 0; sub < parallelism; sub++ {
		start := (sub*maxP + parallelism - 1) / parallelism
		end := ((sub+1)*maxP - 1) / parallelism
		name := fmt.Sprintf("data-%d", sub)
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		w := &countWriter{w: bw}
		w.Write(hdr)
		offsets := make([]int64, end-start+1)
		var e [4 + 10 + 4 + 8]byte // VoidNamespace writes one zero byte
		for kg := start; kg <= end; kg++ {
			keys := byKG[kg]
			if len(keys) == 0 {
				continue
			}
			offsets[kg-start] = w.n
			w.Write([]byte{0, 0})
			for i, k := range keys {
				binary.BigEndian.PutUint32(e[0:], 10)
				e[4] = byte(kg)
				binary.BigEndian.PutUint64(e[5:], uint64(k))
				e[13] = 0
				binary.BigEndian.PutUint32(e[14:], 8)
				binary.BigEndian.PutUint64(e[18:], uint64(k))
				if i == len(keys)-1 {
					e[4] |= 0x80
				}
				w.Write(e[:])
			}
			w.Write([]byte{0xFF, 0xFF})
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		total += w.n
		op.Subtasks = append(op.Subtasks, &SubtaskState{Index: sub, ManagedKeyed: &KeyGroupsHandle{Tag: TagSavepointKeyGroups, StartKeyGroup: int32(start), Offsets: offsets,
			Delegate: &StreamHandle{Tag: TagRelativeFile, Path: name, Size: w.n}}})
	}
	out := &Metadata{Version: 3, CheckpointID: 1, Operators: []*OperatorState{op}}
	b, err := EncodeMetadata(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return total
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func TestSyntheticSavepointIsClean(t *testing.T) {
	dir := t.TempDir()
	synthSavepoint(t, dir, 5000, 3)
	sp := openDir(t, dir)
	probs, stats := Check(context.Background(), sp, CheckOptions{})
	if len(probs) != 0 || stats.Entries != 5000 || stats.KeysVerified != 5000 || stats.KeyGroups != 128 || len(sp.Meta.Operators[0].Subtasks) != 3 {
		t.Fatalf("%d problems (first: %v), %+v", len(probs), probs[:min(1, len(probs))], stats)
	}
	sum := Summarize(sp)
	if err := ScanSummary(context.Background(), sp, sum, ScanOptions{KeyGroupTo: -1}); err != nil {
		t.Fatal(err)
	}
	st := sum.Operators[0].KeyedStates[0]
	if st.Entries != 5000 || st.KeyGroups.NonEmpty != 128 || st.KeyGroups.Min == 0 {
		t.Fatalf("%+v %+v", st, st.KeyGroups)
	}
}

// BenchmarkWalkKeyed measures decoding of keyed entries (range reads from a
// local store, full value decoding).
func BenchmarkWalkKeyed(b *testing.B) {
	const n = 200000
	dir := b.TempDir()
	size := synthSavepoint(b, dir, n, 1)
	sp, err := Open(context.Background(), mustLocal(b, dir), MetadataName)
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		m    keyed.Mode
	}{{"decode", keyed.ModeDecode}, {"raw", keyed.ModeRaw}} {
		b.Run(mode.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cnt := 0
				if err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Mode: mode.m}, func(*KeyedEntry) error { cnt++; return nil }); err != nil {
					b.Fatal(err)
				}
				if cnt != n {
					b.Fatalf("%d entries", cnt)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkCheck measures the full structural check including key-group
// recomputation for every key.
func BenchmarkCheck(b *testing.B) {
	const n = 200000
	dir := b.TempDir()
	size := synthSavepoint(b, dir, n, 1)
	sp, err := Open(context.Background(), mustLocal(b, dir), MetadataName)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		probs, stats := Check(context.Background(), sp, CheckOptions{})
		if len(probs) != 0 || stats.KeysVerified != n {
			b.Fatal(probs)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

func BenchmarkParseMetadata(b *testing.B) {
	raw := readFixtureMetadata(b, "sql-rocksdb-canonical-windowjoin-liststate-timers")
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := ParseMetadata(raw, "m"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckS3 runs the check against a local S3 gateway, serially and
// with 4 files in flight (ranged reads only).
func BenchmarkCheckS3(b *testing.B) {
	const n, parallelism = 200000, 8
	srv := testutil.StartVersitygw(b)
	ctx := context.Background()
	dir := b.TempDir()
	size := synthSavepoint(b, dir, n, parallelism)
	st, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		b.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Put(ctx, "sp/"+e.Name(), bytes.NewReader(data), int64(len(data))); err != nil {
			b.Fatal(err)
		}
	}
	sp, err := Open(ctx, st, "sp/_metadata")
	if err != nil {
		b.Fatal(err)
	}
	for _, conc := range []int{1, 4} {
		b.Run(fmt.Sprintf("concurrency-%d", conc), func(b *testing.B) {
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				probs, stats := Check(ctx, sp, CheckOptions{Concurrency: conc})
				if len(probs) != 0 || stats.KeysVerified != n {
					b.Fatal(probs)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
