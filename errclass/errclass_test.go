package errclass

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestSentinelClasses(t *testing.T) {
	errA := New(ErrCorrupt, "pkg: bad a")
	errB := New(ErrCorrupt, "pkg: bad b")
	errU := New(ErrUnsupported, "pkg: old version")
	wrapped := fmt.Errorf("%w: field 3", errA)
	cases := []struct {
		err                   error
		a, b, corrupt, unsupp bool
	}{
		{errA, true, false, true, false},
		{wrapped, true, false, true, false},
		{errB, false, true, true, false},
		{errU, false, false, false, true},
		{fmt.Errorf("x: %w", errU), false, false, false, true},
		{io.EOF, false, false, false, false},
	}
	for _, c := range cases {
		got := [4]bool{errors.Is(c.err, errA), errors.Is(c.err, errB), errors.Is(c.err, ErrCorrupt), errors.Is(c.err, ErrUnsupported)}
		if want := [4]bool{c.a, c.b, c.corrupt, c.unsupp}; got != want {
			t.Errorf("%v: Is(a, b, corrupt, unsupported) = %v, want %v", c.err, got, want)
		}
	}
	if errA.Error() != "pkg: bad a" || wrapped.Error() != "pkg: bad a: field 3" {
		t.Errorf("texts %q, %q", errA, wrapped)
	}
	// The class is not a member of its sentinels.
	if errors.Is(ErrCorrupt, errA) {
		t.Error("ErrCorrupt matches a sentinel of its class")
	}
}

func TestMark(t *testing.T) {
	base := errors.New("s3: permanent error")
	integrity := Mark(ErrCorrupt, fmt.Errorf("%w: integrity check failed", base))
	err := fmt.Errorf("%w: crc32c 1, expected 2", integrity)
	if !errors.Is(err, integrity) || !errors.Is(err, base) || !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported) {
		t.Errorf("marked error does not match its chain and class only: %v", err)
	}
	if err.Error() != "s3: permanent error: integrity check failed: crc32c 1, expected 2" {
		t.Errorf("text %q", err)
	}
}

func TestCorruptionErrorMessage(t *testing.T) {
	cause := errors.New("bad tag")
	cases := []struct {
		err  *CorruptionError
		want string
	}{
		{&CorruptionError{File: "f", Offset: 12, Err: cause}, "f at offset 12: bad tag"},
		{&CorruptionError{File: "", Offset: 12, Err: cause}, "at offset 12: bad tag"},
		{&CorruptionError{File: "f", Offset: -1, Err: cause}, "f: bad tag"},
		{&CorruptionError{Offset: -1, Err: cause}, "bad tag"},
		{&CorruptionError{File: "f", Offset: 0}, "f at offset 0: <nil>"},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestCorruptionErrorClass(t *testing.T) {
	if err := Corruptf("f", 3, "bad byte 0x%02x", 7); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported) || err.Error() != "f at offset 3: bad byte 0x07" {
		t.Errorf("Corruptf: %v", err)
	}
	// Plain cause: a decoder that states a position states corruption.
	if err := (&CorruptionError{Offset: 3, Err: errors.New("x")}); !errors.Is(err, ErrCorrupt) {
		t.Error("CorruptionError with an unclassed cause is not corrupt")
	}
	// A position inside valid input of an unsupported form keeps that class.
	unsupp := New(ErrUnsupported, "unsupported")
	err := fmt.Errorf("open: %w", &CorruptionError{File: "m", Offset: 4, Err: fmt.Errorf("%w metadata version 99", unsupp)})
	if errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrUnsupported) || !errors.Is(err, unsupp) {
		t.Errorf("unsupported cause: corrupt=%v unsupported=%v", errors.Is(err, ErrCorrupt), errors.Is(err, ErrUnsupported))
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != "m" || ce.Offset != 4 {
		t.Errorf("As: %+v", ce)
	}
}

func TestAtOffsetWithFile(t *testing.T) {
	bad := New(ErrCorrupt, "binfmt: corrupt data")
	if AtOffset(nil, 3) != nil || WithFile(nil, "f") != nil {
		t.Fatal("nil error gained a position")
	}

	// A decoder's error at an offset, then named by its file.
	err := WithFile(AtOffset(fmt.Errorf("%w: bad tag", bad), 11), "dir/_metadata")
	if got, want := err.Error(), "dir/_metadata at offset 11: binfmt: corrupt data: bad tag"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if f, off := Position(err); f != "dir/_metadata" || off != 11 {
		t.Errorf("Position = %q, %d", f, off)
	}
	if !errors.Is(err, bad) || !errors.Is(err, ErrCorrupt) {
		t.Error("chain lost")
	}

	// AtOffset keeps an inner position (the innermost decoder's).
	inner := AtOffset(bad, 40)
	if got := AtOffset(fmt.Errorf("state x: %w", inner), 8); Offset(got) != 40 {
		t.Errorf("AtOffset replaced the inner position: %v", got)
	}

	// A wrapped unnamed position: named once, offset not repeated.
	err = WithFile(fmt.Errorf("state %q: %w", "s", inner), "f")
	if got, want := err.Error(), `f: state "s": at offset 40: binfmt: corrupt data`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if f, off := Position(err); f != "f" || off != 40 {
		t.Errorf("Position = %q, %d", f, off)
	}

	// A position already naming a file stays as it is.
	named := Corruptf("a", 1, "x")
	if WithFile(fmt.Errorf("ctx: %w", named), "b") == nil || Offset(WithFile(named, "b")) != 1 {
		t.Fatal("lost")
	}
	if f, _ := Position(WithFile(fmt.Errorf("ctx: %w", named), "b")); f != "a" {
		t.Errorf("outer file name replaced the inner one: %q", f)
	}

	// No position: the file at an unknown offset.
	err = WithFile(io.ErrUnexpectedEOF, "f")
	if f, off := Position(err); f != "f" || off != -1 || err.Error() != "f: unexpected EOF" {
		t.Errorf("Position = %q, %d (%v)", f, off, err)
	}
	if f, off := Position(io.EOF); f != "" || off != -1 {
		t.Errorf("Position(io.EOF) = %q, %d", f, off)
	}
}

// Offset is Position's offset (test helper).
func Offset(err error) int64 {
	_, off := Position(err)
	return off
}
