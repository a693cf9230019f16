package savepoint

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// synthSavepoint writes a canonical savepoint with one keyed operator
// (Tuple1<Long> keys, one VALUE state of BIGINT, max parallelism 128,
// parallelism 1) holding n entries into dir, reusing the keyed header of a
// fixture file. It returns the data file size.
func synthSavepoint(t testing.TB, dir string, n int) int64 {
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
	f, err := os.Create(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := &countWriter{w: bw}
	w.Write(hdr)
	offsets := make([]int64, maxP)
	var e [4 + 10 + 4 + 8]byte // VoidNamespace writes one zero byte
	for kg, keys := range byKG {
		if len(keys) == 0 {
			continue
		}
		offsets[kg] = w.n
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
	out := &Metadata{Version: 3, CheckpointID: 1, Operators: []*OperatorState{{
		ID: OperatorIDFromUID("synthetic"), Parallelism: 1, MaxParallelism: maxP,
		Subtasks: []*SubtaskState{{Index: 0, ManagedKeyed: &KeyGroupsHandle{Tag: TagSavepointKeyGroups, Offsets: offsets,
			Delegate: &StreamHandle{Tag: TagRelativeFile, Path: "data", Size: w.n}}}},
	}}}
	b, err := EncodeMetadata(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return w.n
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
	synthSavepoint(t, dir, 5000)
	sp := openDir(t, dir)
	probs, stats := Check(context.Background(), sp, CheckOptions{})
	if len(probs) != 0 || stats.Entries != 5000 || stats.KeysVerified != 5000 || stats.KeyGroups != 128 {
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
	size := synthSavepoint(b, dir, n)
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
	size := synthSavepoint(b, dir, n)
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
