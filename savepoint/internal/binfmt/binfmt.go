// Package binfmt is the one decode/encode helper pair for Flink's Java
// DataOutput-style formats: big-endian integers, bools, modified-UTF-8
// strings. Decbuf keeps a sticky error: read several values, then check Err
// once before using any of them. Every error carries the offset at which
// the read failed.
package binfmt

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf16"

	"github.com/sfstate/sfstate/errclass"
)

// ErrTruncated is returned when a read runs past the end of the buffer
// (class errclass.ErrCorrupt).
var ErrTruncated = errclass.New(errclass.ErrCorrupt, "binfmt: unexpected end of data")

// ErrCorrupt marks structurally invalid data (class errclass.ErrCorrupt, so
// that callers outside savepoint/ match it through the class).
var ErrCorrupt = errclass.New(errclass.ErrCorrupt, "binfmt: corrupt data")

// ErrUnsupported marks well-formed data in a form or version this module
// does not read (an old metadata version, a state backend's own layout):
// the input is not damaged, the reader lacks the feature it names (class
// errclass.ErrUnsupported).
var ErrUnsupported = errclass.New(errclass.ErrUnsupported, "unsupported")

// OffsetError says where in the buffer a decode failed: an
// errclass.CorruptionError whose File the decoder does not know (the
// layer that opened the file adds it with errclass.WithFile). Its message
// reads "at offset N: cause".
type OffsetError = errclass.CorruptionError

// Decbuf decodes from a byte slice. Base is added to reported offsets (the
// slice's position in its file).
type Decbuf struct {
	B    []byte
	Pos  int
	Base int64
	err  error
	// Scratch is an optional allocator a value decoder may use for the
	// values it builds (package serde's *Arena); nil means plain heap
	// allocation.
	Scratch any
}

// New returns a decoder over b whose first byte sits at file offset base.
func New(b []byte, base int64) *Decbuf { return &Decbuf{B: b, Base: base} }

// Reset points d at b (first byte at file offset base) and clears its
// error, keeping Scratch. It writes only what changes, which keeps reusing a
// heap-resident Decbuf cheap.
func (d *Decbuf) Reset(b []byte, base int64) {
	d.B, d.Pos, d.Base = b, 0, base
	if d.err != nil {
		d.err = nil
	}
}

// Err returns the first error encountered.
func (d *Decbuf) Err() error { return d.err }

// Offset returns the file offset of the next byte.
func (d *Decbuf) Offset() int64 { return d.Base + int64(d.Pos) }

// Len returns the number of unread bytes.
func (d *Decbuf) Len() int { return len(d.B) - d.Pos }

// Fail records err (wrapped with the current offset) unless an error is
// already recorded.
func (d *Decbuf) Fail(err error) {
	if d.err == nil {
		d.err = &OffsetError{Offset: d.Offset(), Err: err}
	}
}

// Failf records a formatted ErrCorrupt error at the current offset.
func (d *Decbuf) Failf(format string, args ...any) {
	d.Fail(fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...)))
}

func (d *Decbuf) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || d.Len() < n {
		d.Fail(fmt.Errorf("%w (need %d bytes, have %d)", ErrTruncated, n, d.Len()))
		return false
	}
	return true
}

// Bytes returns the next n bytes (aliasing the buffer).
func (d *Decbuf) Bytes(n int) []byte {
	if !d.need(n) {
		return nil
	}
	b := d.B[d.Pos : d.Pos+n]
	d.Pos += n
	return b
}

// Skip advances n bytes.
func (d *Decbuf) Skip(n int) { d.Bytes(n) }

func (d *Decbuf) U8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.B[d.Pos]
	d.Pos++
	return v
}

func (d *Decbuf) Bool() bool {
	v := d.U8()
	if v > 1 {
		d.Pos--
		d.Failf("invalid boolean byte 0x%02x", v)
		return false
	}
	return v == 1
}

func (d *Decbuf) U16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := binary.BigEndian.Uint16(d.B[d.Pos:])
	d.Pos += 2
	return v
}

func (d *Decbuf) I16() int16 { return int16(d.U16()) }

func (d *Decbuf) I32() int32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.B[d.Pos:])
	d.Pos += 4
	return int32(v)
}

func (d *Decbuf) I64() int64 {
	if !d.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.B[d.Pos:])
	d.Pos += 8
	return int64(v)
}

func (d *Decbuf) F32() float32 { return math.Float32frombits(uint32(d.I32())) }
func (d *Decbuf) F64() float64 { return math.Float64frombits(uint64(d.I64())) }

// Count reads an i32 element count and checks it is in [0, max] and that at
// least count*minElemSize bytes remain, so a hostile count cannot drive a
// large allocation.
func (d *Decbuf) Count(what string, max int, minElemSize int) int {
	at := d.Offset()
	n := d.I32()
	if d.err != nil {
		return 0
	}
	if n < 0 || int64(n) > int64(max) {
		d.err = &OffsetError{Offset: at, Err: fmt.Errorf("%w: %s count %d out of range [0,%d]", ErrCorrupt, what, n, max)}
		return 0
	}
	if minElemSize > 0 && int64(n)*int64(minElemSize) > int64(d.Len()) {
		d.err = &OffsetError{Offset: at, Err: fmt.Errorf("%w: %s count %d needs at least %d bytes, %d left", ErrTruncated, what, n, int64(n)*int64(minElemSize), d.Len())}
		return 0
	}
	return int(n)
}

// UTF reads a Java DataInput.readUTF string: u16 length + modified UTF-8.
func (d *Decbuf) UTF() string {
	n := int(d.U16())
	b := d.Bytes(n)
	if d.err != nil {
		return ""
	}
	s, err := DecodeModifiedUTF8(b)
	if err != nil {
		d.Pos -= n
		d.Fail(err)
		return ""
	}
	return s
}

// DecodeModifiedUTF8 decodes Java's modified UTF-8 (NUL as C0 80,
// supplementary characters as surrogate pairs of 3-byte sequences).
func DecodeModifiedUTF8(b []byte) (string, error) {
	ascii := true
	for _, c := range b {
		if c == 0 || c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return string(b), nil
	}
	units := make([]uint16, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c < 0x80 && c != 0:
			units = append(units, uint16(c))
			i++
		case c&0xE0 == 0xC0:
			if i+1 >= len(b) || b[i+1]&0xC0 != 0x80 {
				return "", fmt.Errorf("%w: bad modified UTF-8 at byte %d", ErrCorrupt, i)
			}
			units = append(units, uint16(c&0x1F)<<6|uint16(b[i+1]&0x3F))
			i += 2
		case c&0xF0 == 0xE0:
			if i+2 >= len(b) || b[i+1]&0xC0 != 0x80 || b[i+2]&0xC0 != 0x80 {
				return "", fmt.Errorf("%w: bad modified UTF-8 at byte %d", ErrCorrupt, i)
			}
			units = append(units, uint16(c&0x0F)<<12|uint16(b[i+1]&0x3F)<<6|uint16(b[i+2]&0x3F))
			i += 3
		default:
			return "", fmt.Errorf("%w: bad modified UTF-8 byte 0x%02x at %d", ErrCorrupt, c, i)
		}
	}
	return string(utf16.Decode(units)), nil
}

// EncodeModifiedUTF8 encodes s as Java's modified UTF-8.
func EncodeModifiedUTF8(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, u := range utf16.Encode([]rune(s)) {
		switch {
		case u != 0 && u < 0x80:
			out = append(out, byte(u))
		case u < 0x800:
			out = append(out, 0xC0|byte(u>>6), 0x80|byte(u&0x3F))
		default:
			out = append(out, 0xE0|byte(u>>12), 0x80|byte((u>>6)&0x3F), 0x80|byte(u&0x3F))
		}
	}
	return out
}

// Encbuf appends Java DataOutput-style values.
type Encbuf struct{ B []byte }

func (e *Encbuf) Len() int          { return len(e.B) }
func (e *Encbuf) PutBytes(b []byte) { e.B = append(e.B, b...) }
func (e *Encbuf) PutU8(v uint8)     { e.B = append(e.B, v) }
func (e *Encbuf) PutBool(v bool) {
	if v {
		e.B = append(e.B, 1)
	} else {
		e.B = append(e.B, 0)
	}
}
func (e *Encbuf) PutU16(v uint16)  { e.B = binary.BigEndian.AppendUint16(e.B, v) }
func (e *Encbuf) PutI16(v int16)   { e.PutU16(uint16(v)) }
func (e *Encbuf) PutI32(v int32)   { e.B = binary.BigEndian.AppendUint32(e.B, uint32(v)) }
func (e *Encbuf) PutI64(v int64)   { e.B = binary.BigEndian.AppendUint64(e.B, uint64(v)) }
func (e *Encbuf) PutF64(v float64) { e.PutI64(int64(math.Float64bits(v))) }
func (e *Encbuf) PutF32(v float32) { e.PutI32(int32(math.Float32bits(v))) }

// PutUTF writes a Java writeUTF string. Strings longer than 65535 encoded
// bytes cannot be represented; PutUTF returns an error for them.
func (e *Encbuf) PutUTF(s string) error {
	b := EncodeModifiedUTF8(s)
	if len(b) > math.MaxUint16 {
		return fmt.Errorf("binfmt: string of %d encoded bytes exceeds writeUTF limit", len(b))
	}
	e.PutU16(uint16(len(b)))
	e.B = append(e.B, b...)
	return nil
}
