package flinkwrite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

type testEntry struct {
	kg, state  int
	key, value []byte
}

func testHeader(compressed bool, states int) Header {
	h := Header{Compressed: compressed, KeySerializer: LongSnapshot}
	for i := range states {
		h.States = append(h.States, KeyedStateMeta(fmt.Sprintf("s%d", i), KindValue, VoidNamespaceSnapshot, LongSnapshot))
	}
	return h
}

// parseStream is a minimal independent re-parser of the block part of a
// keyed stream: for each non-zero offset it reads u16 state id and entries
// until the end mark (through the reader package's Snappy decoder when
// compressed) and returns the entries with the flag bit cleared.
func parseStream(t testing.TB, stream []byte, headerLen int, rng keygroups.Range, offsets []int64, compressed bool) []testEntry {
	t.Helper()
	var out []testEntry
	prev := int64(headerLen) - 1
	for i, off := range offsets {
		if off == 0 {
			continue
		}
		if off <= prev || off >= int64(len(stream)) {
			t.Fatalf("offset %d of key group %d out of order or range", off, rng.Start+i)
		}
		prev = off
		var r io.Reader = bytes.NewReader(stream[off:])
		if compressed {
			r = keyed.NewSnappyReader(r, off)
		}
		rd := func(n int) []byte {
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				t.Fatalf("key group %d: %v", rng.Start+i, err)
			}
			return b
		}
		state := int(binary.BigEndian.Uint16(rd(2)))
		for n := 0; ; n++ {
			if n > 1<<20 {
				t.Fatal("runaway block")
			}
			key := rd(int(binary.BigEndian.Uint32(rd(4))))
			value := rd(int(binary.BigEndian.Uint32(rd(4))))
			flag := key[0]&0x80 != 0
			key[0] &^= 0x80
			out = append(out, testEntry{rng.Start + i, state, key, value})
			if flag {
				next := binary.BigEndian.Uint16(rd(2))
				if next == 0xFFFF {
					break
				}
				state = int(next)
			}
		}
	}
	return out
}

func writeEntries(t testing.TB, h Header, rng keygroups.Range, maxP int, es []testEntry) ([]byte, []int64) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewKeyedWriter(&buf, h, rng, maxP)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if err := w.Add(e.kg, e.state, e.key, e.value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Size() != int64(buf.Len()) {
		t.Fatalf("Size %d, wrote %d", w.Size(), buf.Len())
	}
	return buf.Bytes(), w.Offsets()
}

func key(kg int, prefix int, body ...byte) []byte {
	b, _ := AppendKeyGroupPrefix(nil, kg, prefix)
	return append(b, body...)
}

func TestKeyedWriterLayout(t *testing.T) {
	h := testHeader(false, 2)
	hdr, err := AppendHeader(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	es := []testEntry{
		{1, 0, key(1, 1, 0xA), []byte{1}},
		{1, 0, key(1, 1, 0xB), []byte{2}},
		{1, 1, key(1, 1, 0xC), nil},
		{3, 1, key(3, 1, 0xD), []byte{3}},
	}
	stream, offs := writeEntries(t, h, keygroups.Range{Start: 0, End: 3}, 4, es)
	want := slices.Clone(hdr)
	want = append(want, 0, 0) // state 0
	want = append(want, 0, 0, 0, 2, 1, 0xA, 0, 0, 0, 1, 1)
	want = append(want, 0, 0, 0, 2, 0x81, 0xB, 0, 0, 0, 1, 2, 0, 1) // flagged, switch to 1
	want = append(want, 0, 0, 0, 2, 0x81, 0xC, 0, 0, 0, 0, 0xFF, 0xFF)
	kg3 := len(want)
	want = append(want, 0, 1, 0, 0, 0, 2, 0x83, 0xD, 0, 0, 0, 1, 3, 0xFF, 0xFF)
	if !bytes.Equal(stream, want) {
		t.Fatalf("stream\n got %x\nwant %x", stream[len(hdr):], want[len(hdr):])
	}
	if !slices.Equal(offs, []int64{0, int64(len(hdr)), 0, int64(kg3)}) {
		t.Fatalf("offsets %v", offs)
	}
	got := parseStream(t, stream, len(hdr), keygroups.Range{Start: 0, End: 3}, offs, false)
	if !entriesEqual(got, es) {
		t.Fatalf("re-parse: %v", got)
	}
}

func entriesEqual(a, b []testEntry) bool {
	return slices.EqualFunc(a, b, func(x, y testEntry) bool {
		return x.kg == y.kg && x.state == y.state && bytes.Equal(x.key, y.key) && bytes.Equal(x.value, y.value)
	})
}

func TestKeyedWriterEmpty(t *testing.T) {
	h := testHeader(true, 1)
	hdr, _ := AppendHeader(nil, h)
	stream, offs := writeEntries(t, h, keygroups.Range{Start: 5, End: 9}, 128, nil)
	if !bytes.Equal(stream, hdr) {
		t.Fatalf("empty stream is not just the header")
	}
	if !slices.Equal(offs, make([]int64, 5)) {
		t.Fatalf("offsets %v", offs)
	}
}

func TestKeyedWriterMisuse(t *testing.T) {
	h := testHeader(false, 2)
	newW := func() *KeyedWriter {
		w, err := NewKeyedWriter(io.Discard, h, keygroups.Range{Start: 0, End: 127}, 128)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	cases := []struct {
		name string
		run  func(w *KeyedWriter) error
		want error
	}{
		{"key group backwards", func(w *KeyedWriter) error {
			_ = w.Add(5, 0, key(5, 1, 1), nil)
			return w.Add(4, 0, key(4, 1, 1), nil)
		}, ErrOrder},
		{"state resumed", func(w *KeyedWriter) error {
			_ = w.Add(5, 0, key(5, 1, 1), nil)
			_ = w.Add(5, 1, key(5, 1, 2), nil)
			return w.Add(5, 0, key(5, 1, 3), nil)
		}, ErrOrder},
		{"outside range", func(w *KeyedWriter) error { return w.Add(128, 0, key(127, 1, 1), nil) }, ErrOrder},
		{"unknown state", func(w *KeyedWriter) error { return w.Add(1, 2, key(1, 1, 1), nil) }, ErrValue},
		{"prefix mismatch", func(w *KeyedWriter) error { return w.Add(1, 0, key(2, 1, 1), nil) }, ErrValue},
		{"no prefix", func(w *KeyedWriter) error { return w.Add(1, 0, nil, nil) }, ErrValue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newW()
			if err := c.run(w); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			// Broken: every later call is refused, Close included.
			if err := w.Add(100, 0, key(100, 1, 1), nil); !errors.Is(err, ErrBroken) || !errors.Is(err, c.want) {
				t.Fatalf("after failure Add: %v", err)
			}
			if err := w.Close(); !errors.Is(err, ErrBroken) {
				t.Fatalf("after failure Close: %v", err)
			}
		})
	}
	w := newW()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(1, 0, key(1, 1, 1), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	for _, bad := range []struct {
		rng  keygroups.Range
		maxP int
	}{{keygroups.Range{Start: 0, End: 4}, 4}, {keygroups.Range{Start: 3, End: 2}, 4}, {keygroups.Range{Start: -1, End: 2}, 4}, {keygroups.Range{Start: 0, End: 1}, 0}, {keygroups.Range{Start: 0, End: 1}, 40000}} {
		if _, err := NewKeyedWriter(io.Discard, h, bad.rng, bad.maxP); err == nil {
			t.Errorf("range %v maxP %d accepted", bad.rng, bad.maxP)
		}
	}
	if _, err := NewKeyedWriter(io.Discard, Header{}, keygroups.Range{Start: 0, End: 1}, 4); err == nil {
		t.Error("header without key serializer accepted")
	}
}

type failWriter struct{ after int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.after < len(p) {
		n := max(f.after, 0)
		f.after = 0
		return n, errors.New("disk full")
	}
	f.after -= len(p)
	return len(p), nil
}

func TestKeyedWriterWriteFailure(t *testing.T) {
	h := testHeader(false, 1)
	hdr, _ := AppendHeader(nil, h)
	w, err := NewKeyedWriter(&failWriter{after: len(hdr) + 10}, h, keygroups.Range{Start: 0, End: 127}, 128)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 200<<10) // exceeds the internal buffer
	var werr error
	for i := 0; i < 4 && werr == nil; i++ {
		werr = w.Add(i, 0, key(i, 1, 1), big)
	}
	if werr == nil {
		werr = w.Close()
	}
	if werr == nil || errors.Is(werr, ErrBroken) {
		t.Fatalf("first failure: %v", werr)
	}
	if err := w.Close(); !errors.Is(err, ErrBroken) {
		t.Fatalf("Close after failure: %v", err)
	}
}

// TestKeyedWriterCompressedLarge spans several 64 KiB chunks, compressible
// and incompressible, and checks every chunk's CRC via the reader package.
func TestKeyedWriterCompressedLarge(t *testing.T) {
	h := testHeader(true, 2)
	hdr, _ := AppendHeader(nil, h)
	rng := rand.New(rand.NewPCG(1, 2))
	var es []testEntry
	for kg := range 3 {
		for st := range 2 {
			for i := range 50 {
				v := make([]byte, 3000)
				if st == 1 {
					for j := range v {
						v[j] = byte(rng.Uint32())
					}
				}
				es = append(es, testEntry{kg, st, key(kg, 2, byte(i), byte(st)), v})
			}
		}
	}
	stream, offs := writeEntries(t, h, keygroups.Range{Start: 0, End: 200}, 1000, es)
	got := parseStream(t, stream, len(hdr), keygroups.Range{Start: 0, End: 200}, offs, true)
	if !entriesEqual(got, es) {
		t.Fatal("compressed round trip differs")
	}
	// Both chunk kinds appear.
	var kinds [2]int
	for _, off := range offs[:3] {
		p := int(off) + len(binfmt.SnappyStreamHeader)
		for p < len(stream) && stream[p] != 0xFF {
			kinds[stream[p]]++
			p += 4 + int(stream[p+1]) | int(stream[p+2])<<8 | int(stream[p+3])<<16
		}
	}
	if kinds[0] == 0 || kinds[1] == 0 {
		t.Fatalf("chunk kinds %v: want compressed and uncompressed chunks", kinds)
	}
}

func TestAppendSnappyFramed(t *testing.T) {
	for _, n := range []int{0, 1, 100, binfmt.SnappyBlockSize, binfmt.SnappyBlockSize + 1, 3*binfmt.SnappyBlockSize + 7} {
		data := bytes.Repeat([]byte("flink state "), n/12+1)[:n]
		framed := AppendSnappyFramed([]byte("prefix"), data)
		if !bytes.HasPrefix(framed, []byte("prefix")) {
			t.Fatal("prefix lost")
		}
		got, err := io.ReadAll(keyed.NewSnappyReader(bytes.NewReader(framed[6:]), 6))
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("n=%d: round trip differs", n)
		}
	}
	// A flipped CRC byte must fail the check.
	framed := AppendSnappyFramed(nil, bytes.Repeat([]byte{7}, 1000))
	framed[len(binfmt.SnappyStreamHeader)+4] ^= 1
	if _, err := io.ReadAll(keyed.NewSnappyReader(bytes.NewReader(framed), 0)); err == nil {
		t.Fatal("corrupted frame accepted")
	}
}

func TestStateKeyAmbiguous(t *testing.T) {
	k := StateKey{KeyGroup: 300, PrefixLen: 2, Key: AppendStringValue(nil, "k"), Namespace: AppendStringValue(nil, "ns"), Ambiguous: true}
	got, err := k.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x01, 0x2C, 0x02, 'k', 0x02, 0x03, 'n', 's', 0x03}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x want %x", got, want)
	}
	long := StateKey{KeyGroup: 1, PrefixLen: 1, Key: make([]byte, 300), Namespace: []byte{0}, Ambiguous: true}
	got, _ = long.Append(nil)
	if !bytes.Equal(got[301:303], []byte{0x2C, 0x01}) {
		t.Fatalf("300-byte marker %x", got[301:303])
	}
	if _, err := AppendKeyGroupPrefix(nil, 128, 1); err == nil {
		t.Fatal("key group 128 in one byte accepted")
	}
	if _, err := AppendListValue(nil); err == nil {
		t.Fatal("empty list accepted")
	}
	lv, _ := AppendListValue(nil, []byte{1}, []byte{2, 3})
	if !bytes.Equal(lv, []byte{1, ',', 2, 3}) {
		t.Fatalf("list value %x", lv)
	}
	if !bytes.Equal(AppendMapEntryValue(nil, []byte{9}, false), []byte{0, 9}) || !bytes.Equal(AppendMapEntryValue(nil, []byte{9}, true), []byte{1}) {
		t.Fatal("map entry value")
	}
}

// FuzzKeyedWriter writes random entries (sorted into a valid order) and
// re-parses the stream.
func FuzzKeyedWriter(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, false, uint8(3))
	f.Add([]byte{0xFF, 0, 0x80, 3, 3, 3, 3}, true, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, compressed bool, nStates uint8) {
		states := int(nStates%5) + 1
		maxP := 300
		rng := keygroups.Range{Start: 10, End: 40}
		var es []testEntry
		for len(data) >= 3 && len(es) < 200 {
			kg := rng.Start + int(data[0])%rng.Len()
			st := int(data[1]) % states
			n := int(data[2]) % 16
			data = data[3:]
			n = min(n, len(data))
			body := data[:n]
			data = data[n:]
			es = append(es, testEntry{kg, st, key(kg, 2, body...), slices.Clone(body)})
		}
		slices.SortStableFunc(es, func(a, b testEntry) int {
			if a.kg != b.kg {
				return a.kg - b.kg
			}
			return a.state - b.state
		})
		h := testHeader(compressed, states)
		hdr, _ := AppendHeader(nil, h)
		stream, offs := writeEntries(t, h, rng, maxP, es)
		got := parseStream(t, stream, len(hdr), rng, offs, compressed)
		if !entriesEqual(got, es) {
			t.Fatalf("round trip differs: %d entries in, %d out", len(es), len(got))
		}
		// The reader package frames the same entries.
		rh, _, err := keyed.ParseHeader(stream, "fuzz")
		if err != nil {
			t.Fatal(err)
		}
		var theirs []testEntry
		for i, off := range offs {
			if off == 0 {
				continue
			}
			err := keyed.ReadKeyGroupWith(bytes.NewReader(stream), int64(len(stream)), "fuzz", rh, rng.Start+i, off,
				keyed.ReadOptions{MaxParallelism: maxP, Mode: keyed.ModeRaw}, func(e *keyed.Entry) error {
					theirs = append(theirs, testEntry{e.KeyGroup, e.State.ID, slices.Clone(e.KeyBytes), slices.Clone(e.ValueBytes)})
					return nil
				})
			if err != nil {
				t.Fatal(err)
			}
		}
		if !entriesEqual(theirs, es) {
			t.Fatalf("reader package sees %d entries, wrote %d", len(theirs), len(es))
		}
	})
}

func TestRawHeader(t *testing.T) {
	h := testHeader(false, 3)
	hdr, _ := AppendHeader(nil, h)
	got, err := AppendHeader(nil, Header{Raw: hdr, RawNumStates: 3, Compressed: true})
	if err != nil {
		t.Fatal(err)
	}
	if got[4] != 1 || !bytes.Equal(got[5:], hdr[5:]) || hdr[4] != 0 {
		t.Fatal("raw header not copied with the compression flag set")
	}
	bad := slices.Clone(hdr)
	bad[3] = 5
	for _, rh := range []Header{{Raw: bad, RawNumStates: 3}, {Raw: hdr[:4], RawNumStates: 3}, {Raw: hdr, RawNumStates: -1}, {Raw: hdr, RawNumStates: 40000}} {
		if _, err := AppendHeader(nil, rh); !errors.Is(err, ErrSnapshot) {
			t.Errorf("bad raw header accepted: %v", err)
		}
	}
	// The state count of a raw header bounds the state ids.
	w, err := NewKeyedWriter(io.Discard, Header{Raw: hdr, RawNumStates: 3}, keygroups.Range{Start: 0, End: 3}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(0, 3, key(0, 1, 1), nil); !errors.Is(err, ErrValue) {
		t.Fatalf("state 3 of 3: %v", err)
	}
}
