package keygroups

import (
	"bytes"
	"testing"
)

// TestRowWriterLayout writes a row field by field after a prefix and checks
// every byte against the BinaryRowData layout: offsets relative to the row
// start, inline and variable-part strings, a non-compact timestamp and
// decimal, and a NULL that reserves space.
func TestRowWriterLayout(t *testing.T) {
	prefix := []byte{0xee, 0xee, 0xee}
	var w RowWriter
	w.Begin(prefix, 6, UpdateBefore)
	w.PutInt32(0, -2)
	w.PutBytes(1, []byte("abc"))
	w.PutBytes(2, []byte("0123456789"))
	w.PutTimestamp(3, Timestamp{Millis: 5, NanoOfMilli: 7}, 9)
	w.PutDecimalBytes(4, []byte{0x01, 0x00})
	w.SetNullReserve(5, 8)
	got, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte{}, prefix...)
	want = append(want, 1, 0x80>>2, 0, 0, 0, 0, 0, 0) // -U, null bit of field 5 = bit 13
	want = append(want, 0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0)
	want = append(want, 'a', 'b', 'c', 0, 0, 0, 0, 0x83)
	want = append(want, 10, 0, 0, 0, 56, 0, 0, 0) // var part starts at 8+6*8 = 56
	want = append(want, 7, 0, 0, 0, 72, 0, 0, 0)  // 56 + 16 (10 bytes padded)
	want = append(want, 2, 0, 0, 0, 80, 0, 0, 0)  // 72 + 8 millis
	want = append(want, 0, 0, 0, 0, 96, 0, 0, 0)  // 80 + 16 reserved for the decimal
	want = append(want, "0123456789\x00\x00\x00\x00\x00\x00"...)
	want = append(want, 5, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, 0, 0, 0, 0, 0, 0, 0, 0)
	if !bytes.Equal(got, want) {
		t.Fatalf("row\n% x\nwant\n% x", got, want)
	}
	if w.Len() != len(want)-len(prefix) {
		t.Fatalf("Len %d, want %d", w.Len(), len(want)-len(prefix))
	}
}

// TestRowWriterAbort checks that Abort returns the slice Begin got, with
// the bytes the row had used cleared.
func TestRowWriterAbort(t *testing.T) {
	dst := make([]byte, 2, 64)
	dst[0], dst[1] = 9, 9
	var w RowWriter
	w.Begin(dst, 2, Delete)
	w.PutBytes(0, bytes.Repeat([]byte{0xaa}, 20))
	out := w.Abort()
	if len(out) != 2 || out[0] != 9 || out[1] != 9 {
		t.Fatalf("Abort returned % x", out)
	}
	if tail := out[:cap(out)][2:]; !bytes.Equal(tail, make([]byte, len(tail))) {
		t.Fatalf("Abort left bytes behind: % x", tail)
	}
}
