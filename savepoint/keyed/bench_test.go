package keyed

import (
	"bufio"
	"bytes"
	"io"
	"sync"
	"testing"
)

// A synthetic SQL-like keyed stream of about 10 MB: 128 key groups, each
// with many keys holding a ROW<BIGINT, INT, STRING> value, two MAP entries
// with row user keys and one LIST entry.
var benchData struct {
	once       sync.Once
	plain      []byte
	comp       []byte
	offsPlain  map[int]int64
	offsComp   map[int]int64
	entries    int
	headerLen  int64
	headerComp int64
}

func benchStream(b *testing.B) {
	benchData.once.Do(func() {
		benchData.plain, benchData.offsPlain, benchData.entries = sqlStream(false, 128, 128, 220)
		benchData.comp, benchData.offsComp, _ = sqlStream(true, 128, 128, 220)
		_, benchData.headerLen, _ = ReadHeader(bytes.NewReader(benchData.plain), "bench")
	})
}

func benchDecode(b *testing.B, data []byte, offs map[int]int64, mode Mode) {
	benchDecodeWith(b, data, offs, ReadOptions{MaxParallelism: 128, Mode: mode})
}

func benchDecodeWith(b *testing.B, data []byte, offs map[int]int64, o ReadOptions) {
	benchStream(b)
	h, _, err := ReadHeader(bytes.NewReader(data), "bench")
	if err != nil {
		b.Fatal(err)
	}
	kgs := sortedKGs(offs)
	src := bytes.NewReader(data)
	var br BlockReader
	n := 0
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, kg := range kgs {
			if err := br.Read(src, int64(len(data)), "bench", h, kg, offs[kg], o, func(*Entry) error {
				n++
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkDecodeRawRead is the baseline: just reading every byte of the
// stream through the same buffered section readers.
func BenchmarkDecodeRawRead(b *testing.B) {
	benchStream(b)
	data := benchData.plain
	src := bytes.NewReader(data)
	buf := make([]byte, 64<<10)
	br := bufio.NewReaderSize(nil, 64<<10)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		br.Reset(io.NewSectionReader(src, 0, int64(len(data))))
		if _, err := io.CopyBuffer(io.Discard, br, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeHeaderOnly parses just the header (what a listing of
// states needs).
func BenchmarkDecodeHeaderOnly(b *testing.B) {
	benchStream(b)
	data := benchData.plain
	b.SetBytes(benchData.headerLen)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := ReadHeader(bytes.NewReader(data), "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeFrame(b *testing.B) {
	benchStream(b)
	benchDecode(b, benchData.plain, benchData.offsPlain, ModeRaw)
}

func BenchmarkDecodeSplit(b *testing.B) {
	benchStream(b)
	benchDecode(b, benchData.plain, benchData.offsPlain, ModeSplit)
}

func BenchmarkDecodeFull(b *testing.B) {
	benchStream(b)
	benchDecode(b, benchData.plain, benchData.offsPlain, ModeDecode)
}

// BenchmarkDecodeFullReuse decodes into recycled memory (ReuseValues).
func BenchmarkDecodeFullReuse(b *testing.B) {
	benchStream(b)
	benchDecodeWith(b, benchData.plain, benchData.offsPlain, ReadOptions{MaxParallelism: 128, ReuseValues: true})
}

func BenchmarkDecodeFullSnappy(b *testing.B) {
	benchStream(b)
	benchDecode(b, benchData.comp, benchData.offsComp, ModeDecode)
}
