package rowcodec

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
)

// These constants are part of the wire format: never change them.
const (
	// TTLSize is the size of the big-endian last-access prefix.
	TTLSize = 8
	// FormatV1 is the version byte that follows the TTL prefix, in its
	// low four bits; bits 4-5 hold the row's Flink RowKind (0 = +I, so an
	// insert row's header byte is FormatV1 itself) and bits 6-7 are zero.
	FormatV1 byte = 0x01
	// kindShift is the position of the row kind in the header byte.
	kindShift = 4
	// NoTTL is the prefix written when a state has no TTL.
	NoTTL int64 = 0
)

// headerByte is the header byte of a FormatV1 row of kind k.
func headerByte(k keygroups.RowKind) byte { return FormatV1 | byte(k)<<kindShift }

// parseHeaderByte splits a header byte into format and row kind; false for
// another format or a kind outside +I..-D.
func parseHeaderByte(b byte) (keygroups.RowKind, bool) {
	k := keygroups.RowKind(b >> kindShift)
	return k, b&(1<<kindShift-1) == FormatV1 && k <= keygroups.Delete
}

// Kind returns the row kind recorded in value's header byte (+I for
// values written from Arrow, which carries no row kind). It reads one
// byte; a value too short for a header yields +I.
func Kind(value []byte) keygroups.RowKind {
	if len(value) <= TTLSize {
		return keygroups.Insert
	}
	k, _ := parseHeaderByte(value[TTLSize])
	return k
}

// SetKind records the row kind k in value's header byte, in place (not on
// memory owned by RocksDB). The row bytes are not parsed.
func SetKind(value []byte, k keygroups.RowKind) error {
	if len(value) <= TTLSize {
		return &DecodeError{Offset: len(value), Err: ErrTruncated}
	}
	if _, ok := parseHeaderByte(value[TTLSize]); !ok {
		return &DecodeError{Offset: TTLSize, Err: fmt.Errorf("%w: 0x%02x", ErrVersion, value[TTLSize])}
	}
	if k > keygroups.Delete {
		return fmt.Errorf("%w: row kind %d", ErrCorrupt, k)
	}
	value[TTLSize] = headerByte(k)
	return nil
}

// minValueSize is the smallest possible value: prefix, version, a one-byte
// field count (0) and an empty bitmap.
const minValueSize = TTLSize + 2

var (
	// ErrCorrupt marks bytes that are not a valid encoding (it and
	// ErrTruncated are of class errclass.ErrCorrupt, ErrVersion and
	// ErrUnsupportedType of class errclass.ErrUnsupported).
	ErrCorrupt = errclass.New(errclass.ErrCorrupt, "rowcodec: corrupt value")
	// ErrTruncated marks a value that ends early.
	ErrTruncated = errclass.New(errclass.ErrCorrupt, "rowcodec: truncated value")
	// ErrVersion marks an unknown format version byte.
	ErrVersion = errclass.New(errclass.ErrUnsupported, "rowcodec: unsupported format version")
	// ErrSchemaMismatch marks input whose shape does not fit the codec's
	// schema (field count, column types, Go value types).
	ErrSchemaMismatch = errors.New("rowcodec: schema mismatch")
	// ErrUnsupportedType marks an Arrow type the codec cannot encode.
	ErrUnsupportedType = errclass.New(errclass.ErrUnsupported, "rowcodec: unsupported type")
)

// DecodeError says which value failed to decode and where. Its class is
// its cause's (ErrCorrupt and ErrTruncated are errclass.ErrCorrupt,
// ErrVersion is errclass.ErrUnsupported). Offset counts bytes of the value,
// not of a file, so it is not an errclass.CorruptionError: the layer that
// knows where the value is stored names it.
type DecodeError struct {
	Index  int    // index of the value in its batch (0 for single values)
	Offset int    // byte offset within the value (TTL prefix included)
	Field  string // dotted field path, "" for the header
	Err    error
}

func (e *DecodeError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("rowcodec: value %d at byte %d: %v", e.Index, e.Offset, e.Err)
	}
	return fmt.Sprintf("rowcodec: value %d at byte %d (field %s): %v", e.Index, e.Offset, e.Field, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// TTL returns the last-access timestamp of value. It reads only the prefix;
// a value too short to hold one yields NoTTL (such a value fails to decode
// anyway, and a compaction filter must not drop it on a guess).
func TTL(value []byte) int64 {
	if len(value) < TTLSize {
		return NoTTL
	}
	return int64(binary.BigEndian.Uint64(value))
}

// SetTTL overwrites the prefix of value in place. Do not use it on memory
// owned by RocksDB (pinned slices); use WithTTL there.
func SetTTL(value []byte, ts int64) error {
	if len(value) < TTLSize {
		return &DecodeError{Offset: len(value), Err: ErrTruncated}
	}
	binary.BigEndian.PutUint64(value, uint64(ts))
	return nil
}

// WithTTL returns a copy of value with its prefix replaced by ts, appended to
// dst (which may be nil). The row bytes are copied unchanged and not parsed.
func WithTTL(dst, value []byte, ts int64) ([]byte, error) {
	if len(value) < TTLSize {
		return dst, &DecodeError{Offset: len(value), Err: ErrTruncated}
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return append(dst, value[TTLSize:]...), nil
}

// SplitValue returns the TTL prefix and the row bytes of value.
func SplitValue(value []byte) (ttl int64, row []byte, err error) {
	if len(value) < TTLSize {
		return NoTTL, nil, &DecodeError{Offset: len(value), Err: ErrTruncated}
	}
	return int64(binary.BigEndian.Uint64(value)), value[TTLSize:], nil
}

func bitmapLen(n int) int { return (n + 7) >> 3 }

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func isNullBit(bm []byte, i int) bool { return bm[i>>3]&(1<<(uint(i)&7)) != 0 }
