package engine

import (
	"bytes"
	"testing"
)

// FuzzDecodeStored feeds arbitrary bytes to the stored-key and list
// decoders: they must return an error or a consistent split, never panic.
func FuzzDecodeStored(f *testing.F) {
	op := NewOperator(mustHeapF(f), nil)
	s := op.States()[0]
	f.Add(s.Key(nil, 3, []byte("key"), []byte("ns")))
	f.Add(append(s.Key(nil, 127, nil, nil), "user"...))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		kg, key, ns, rest, err := op.DecodeKey(b)
		if err == nil {
			again := append(s.Key(nil, kg, key, ns), rest...)
			if !bytes.Equal(again, b) {
				t.Fatalf("decode/encode mismatch: %x vs %x", again, b)
			}
		}
		if kg, prio, elem, err := op.DecodePQKey(b); err == nil {
			if !bytes.Equal(s.PQKey(nil, kg, prio, elem), b) {
				t.Fatal("pq decode/encode mismatch")
			}
		}
		n := 0
		_ = decodeList(b, func(e []byte) bool { n += len(e); return true })
		if n > len(b) {
			t.Fatal("list elements longer than input")
		}
	})
}

func mustHeapF(f *testing.F) Backend {
	be, err := OpenHeap(smallLayout, testStates)
	if err != nil {
		f.Fatal(err)
	}
	return be
}
