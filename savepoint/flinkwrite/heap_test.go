package flinkwrite

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
)

// TestHeapWriterLayout checks the bytes of a small heap-layout stream: the
// header, then every key group of the range with its id and one stream per
// state in the chosen order (count first, entries unframed).
func TestHeapWriterLayout(t *testing.T) {
	h := Header{KeySerializer: IntSnapshot, States: []StateMetaInfo{
		KeyedStateMeta("a", KindValue, VoidNamespaceSnapshot, LongSnapshot),
		TimerStateMeta("_timer_state/event_t", TimerSnapshot(IntSnapshot, VoidNamespaceSnapshot)),
	}}
	hdr, err := AppendHeader(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w, err := NewHeapWriter(&b, h, keygroups.Range{Start: 4, End: 6}, 128)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetStateOrder([]int{1, 0}); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(5, 0, []byte{0}, AppendInt(nil, 7), AppendLong(nil, 9)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddElement(5, 1, AppendTimerElement(nil, -1, AppendInt(nil, 7), []byte{0})); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(5, 0, []byte{0}, AppendInt(nil, 8), AppendLong(nil, 10)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	empty := func(kg byte) []byte { return []byte{0, 0, 0, kg, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} }
	want := append([]byte(nil), hdr...)
	want = append(want, empty(4)...)
	want = append(want, 0, 0, 0, 5)
	want = append(want, 0, 1, 0, 0, 0, 1, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 7, 0)
	want = append(want, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 10)
	want = append(want, empty(6)...)
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("stream\n got  %x\n want %x", b.Bytes(), want)
	}
	l := int64(len(hdr))
	if offs := w.Offsets(); len(offs) != 3 || offs[0] != l || offs[1] != l+16 || offs[2] != l+16+4+19+32 {
		t.Fatalf("offsets %v (header %d bytes)", offs, l)
	}
}

// TestHeapWriterCompressed: every state stream of a key group is its own
// Snappy framed stream after the uncompressed key-group id.
func TestHeapWriterCompressed(t *testing.T) {
	h := Header{Compressed: true, KeySerializer: IntSnapshot, States: []StateMetaInfo{
		KeyedStateMeta("a", KindValue, VoidNamespaceSnapshot, LongSnapshot),
		KeyedStateMeta("b", KindValue, VoidNamespaceSnapshot, LongSnapshot),
	}}
	var b bytes.Buffer
	w, err := NewHeapWriter(&b, h, keygroups.Range{Start: 0, End: 0}, 128)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(0, 1, []byte{0}, AppendInt(nil, 1), AppendLong(nil, 2)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := b.Bytes()[w.Offsets()[0]:]
	want := []byte{0, 0, 0, 0}
	want = AppendSnappyFramed(want, []byte{0, 0, 0, 0, 0, 0})
	want = AppendSnappyFramed(want, []byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2})
	if !bytes.Equal(got, want) {
		t.Fatalf("key group\n got  %x\n want %x", got, want)
	}
}

func TestHeapWriterMisuse(t *testing.T) {
	h := Header{KeySerializer: IntSnapshot, States: []StateMetaInfo{KeyedStateMeta("a", KindValue, VoidNamespaceSnapshot, LongSnapshot)}}
	if _, err := NewHeapWriter(&bytes.Buffer{}, Header{KeySerializer: IntSnapshot}, keygroups.Range{Start: 0, End: 1}, 128); !errors.Is(err, ErrValue) {
		t.Fatalf("no states: %v", err)
	}
	if _, err := NewHeapWriter(&bytes.Buffer{}, h, keygroups.Range{Start: 0, End: 128}, 128); !errors.Is(err, ErrValue) {
		t.Fatalf("range past max parallelism: %v", err)
	}
	for _, c := range []struct {
		name string
		do   func(w *HeapWriter) error
		want error
	}{
		{"outside range", func(w *HeapWriter) error { return w.Add(9, 0, nil, nil, nil) }, ErrOrder},
		{"bad state", func(w *HeapWriter) error { return w.Add(1, 1, nil, nil, nil) }, ErrValue},
		{"descending", func(w *HeapWriter) error {
			_ = w.Add(3, 0, nil, []byte{1}, nil)
			return w.Add(2, 0, nil, []byte{1}, nil)
		}, ErrOrder},
		{"order late", func(w *HeapWriter) error {
			_ = w.Add(3, 0, nil, []byte{1}, nil)
			return w.SetStateOrder([]int{0})
		}, ErrOrder},
		{"not a permutation", func(w *HeapWriter) error { return w.SetStateOrder([]int{1}) }, ErrValue},
	} {
		w, err := NewHeapWriter(&bytes.Buffer{}, h, keygroups.Range{Start: 1, End: 5}, 128)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.do(w); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		if err := w.Close(); !errors.Is(err, ErrBroken) {
			t.Fatalf("%s: close after failure: %v", c.name, err)
		}
	}
	w, _ := NewHeapWriter(&bytes.Buffer{}, h, keygroups.Range{Start: 1, End: 5}, 128)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(1, 0, nil, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}
