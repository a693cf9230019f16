package binfmt

import (
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var e Encbuf
	e.PutI32(-7)
	e.PutI64(1 << 40)
	e.PutBool(true)
	if err := e.PutUTF("a\x00b€😀"); err != nil {
		t.Fatal(err)
	}
	e.PutI16(-2)
	d := New(e.B, 100)
	if d.I32() != -7 || d.I64() != 1<<40 || !d.Bool() || d.UTF() != "a\x00b€😀" || d.I16() != -2 {
		t.Fatalf("round trip mismatch: %v", d.Err())
	}
	if d.Err() != nil || d.Len() != 0 {
		t.Fatalf("err=%v left=%d", d.Err(), d.Len())
	}
}

func TestTruncatedReportsOffset(t *testing.T) {
	d := New([]byte{0, 0, 0, 1, 0, 0}, 10)
	d.I32()
	d.I64()
	var oe *OffsetError
	if !errors.As(d.Err(), &oe) || oe.Offset != 14 || !errors.Is(d.Err(), ErrTruncated) {
		t.Fatalf("got %v", d.Err())
	}
	// sticky: later reads do not replace the first error
	d.I32()
	if !errors.As(d.Err(), &oe) || oe.Offset != 14 {
		t.Fatalf("error not sticky: %v", d.Err())
	}
}

func TestCountBounds(t *testing.T) {
	var e Encbuf
	e.PutI32(1 << 30)
	d := New(e.B, 0)
	if n := d.Count("things", 1<<31-1, 8); n != 0 || d.Err() == nil {
		t.Fatalf("huge count accepted: %d", n)
	}
	e = Encbuf{}
	e.PutI32(-1)
	d = New(e.B, 0)
	if d.Count("things", 10, 0); d.Err() == nil {
		t.Fatal("negative count accepted")
	}
}
