package flinkwrite

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
)

// blocksOf splits a stream into its key-group blocks (nil for empty key
// groups): each runs to the next non-zero offset or the stream end.
func blocksOf(stream []byte, offs []int64) [][]byte {
	out := make([][]byte, len(offs))
	for i, o := range offs {
		if o == 0 {
			continue
		}
		end := int64(len(stream))
		for _, n := range offs[i+1:] {
			if n != 0 {
				end = n
				break
			}
		}
		out[i] = stream[o:end]
	}
	return out
}

// TestAddRawBlock: a stream rebuilt from raw blocks of another (some key
// groups raw, some re-added entry by entry, in any mix) is byte-identical
// to it, compressed or not.
func TestAddRawBlock(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		t.Run(fmt.Sprint("compressed=", compressed), func(t *testing.T) {
			h := testHeader(compressed, 3)
			rng := keygroups.Range{Start: 2, End: 9}
			var es []testEntry
			for kg := rng.Start; kg <= rng.End; kg++ {
				if kg%3 == 0 {
					continue // empty key group
				}
				for s := range 3 {
					if (kg+s)%2 == 0 {
						continue
					}
					for i := range 50 + kg*s {
						es = append(es, testEntry{kg, s, key(kg, 1, byte(s), byte(i), byte(i>>8)), bytes.Repeat([]byte{byte(i)}, i%7)})
					}
				}
			}
			stream, offs := writeEntries(t, h, rng, 16, es)
			blocks := blocksOf(stream, offs)
			for mask := range 4 {
				var buf bytes.Buffer
				w, err := NewKeyedWriter(&buf, h, rng, 16)
				if err != nil {
					t.Fatal(err)
				}
				for i, b := range blocks {
					kg := rng.Start + i
					if b == nil {
						continue
					}
					if (kg+mask)%2 == 0 || mask == 3 {
						if err := w.AddRawBlock(kg, b); err != nil {
							t.Fatalf("mask %d key group %d: %v", mask, kg, err)
						}
						continue
					}
					for _, e := range es {
						if e.kg == kg {
							if err := w.Add(e.kg, e.state, e.key, e.value); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf.Bytes(), stream) {
					t.Fatalf("mask %d: rebuilt stream differs (%d vs %d bytes)", mask, buf.Len(), len(stream))
				}
				if !slices.Equal(w.Offsets(), offs) || w.Size() != int64(len(stream)) {
					t.Fatalf("mask %d: offsets %v size %d, want %v %d", mask, w.Offsets(), w.Size(), offs, len(stream))
				}
			}
		})
	}
}

// TestAddRawBlockMisuse: ordering and shape errors, each breaking the
// writer.
func TestAddRawBlockMisuse(t *testing.T) {
	plainBlock := func(kg int) []byte {
		stream, offs := writeEntries(t, testHeader(false, 1), keygroups.Range{Start: 0, End: 7}, 8, []testEntry{{kg, 0, key(kg, 1, 1), []byte{9}}})
		return blocksOf(stream, offs)[kg]
	}
	snappyBlock := func(kg int) []byte {
		stream, offs := writeEntries(t, testHeader(true, 1), keygroups.Range{Start: 0, End: 7}, 8, []testEntry{{kg, 0, key(kg, 1, 1), []byte{9}}})
		return blocksOf(stream, offs)[kg]
	}
	cases := []struct {
		name       string
		compressed bool
		run        func(w *KeyedWriter) error
		want       error
	}{
		{"twice", false, func(w *KeyedWriter) error {
			if err := w.AddRawBlock(3, plainBlock(3)); err != nil {
				return nil
			}
			return w.AddRawBlock(3, plainBlock(3))
		}, ErrOrder},
		{"descending", false, func(w *KeyedWriter) error {
			if err := w.AddRawBlock(4, plainBlock(4)); err != nil {
				return nil
			}
			return w.AddRawBlock(3, plainBlock(3))
		}, ErrOrder},
		{"add after raw", false, func(w *KeyedWriter) error {
			if err := w.AddRawBlock(3, plainBlock(3)); err != nil {
				return nil
			}
			return w.Add(3, 0, key(3, 1, 2), nil)
		}, ErrOrder},
		{"raw after add", false, func(w *KeyedWriter) error {
			if err := w.Add(3, 0, key(3, 1, 2), nil); err != nil {
				return nil
			}
			return w.AddRawBlock(3, plainBlock(3))
		}, ErrOrder},
		{"outside range", false, func(w *KeyedWriter) error { return w.AddRawBlock(8, plainBlock(3)) }, ErrOrder},
		{"too short", false, func(w *KeyedWriter) error { return w.AddRawBlock(3, []byte{0, 0, 0xFF, 0xFF}) }, ErrValue},
		{"bad state id", false, func(w *KeyedWriter) error {
			b := slices.Clone(plainBlock(3))
			b[1] = 5
			return w.AddRawBlock(3, b)
		}, ErrValue},
		{"no end mark", false, func(w *KeyedWriter) error {
			b := slices.Clone(plainBlock(3))
			b[len(b)-1] = 0
			return w.AddRawBlock(3, b)
		}, ErrValue},
		{"plain block in compressed stream", true, func(w *KeyedWriter) error { return w.AddRawBlock(3, plainBlock(3)) }, ErrValue},
		{"short reader", true, func(w *KeyedWriter) error {
			b := snappyBlock(3)
			return w.AddRawBlockFrom(3, bytes.NewReader(b), int64(len(b))+1)
		}, nil},
	}
	for _, c := range cases {
		w, err := NewKeyedWriter(&bytes.Buffer{}, testHeader(c.compressed, 1), keygroups.Range{Start: 0, End: 7}, 8)
		if err != nil {
			t.Fatal(err)
		}
		err = c.run(w)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
			continue
		}
		if err := w.AddRawBlock(7, plainBlock(7)); !errors.Is(err, ErrBroken) {
			t.Errorf("%s: writer usable after error: %v", c.name, err)
		}
	}
	// A compressed raw block followed by entries of a later key group.
	w, _ := NewKeyedWriter(&bytes.Buffer{}, testHeader(true, 1), keygroups.Range{Start: 0, End: 7}, 8)
	if err := w.AddRawBlock(2, snappyBlock(2)); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(5, 0, key(5, 1, 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.AddRawBlock(6, snappyBlock(6)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
