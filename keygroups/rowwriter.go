package keygroups

import (
	"encoding/binary"
	"fmt"
	"math"
)

// RowWriter writes one BinaryRowData field by field at the end of a byte
// slice (what Flink's BinaryRowWriter does). It is the module's one
// BinaryRowData writer: RowBuilder (rows from Go values) and the engine's
// row codec (rows from its own encoding) both write through it.
//
// BinaryRowData of arity n (all numbers little-endian, offsets relative to
// the row start):
//
//	header  NullBitsWidth(n) bytes: byte 0 = RowKind, null bit of field i
//	        = bit i+8 (byte (i+8)/8, bit (i+8)%8)
//	slots   n × 8 bytes, slot i at NullBitsWidth(n) + 8i
//	var     variable-length data, each piece zero-padded to 8 bytes
//
// A slot holds the value itself (BOOLEAN/TINYINT 1 byte, SMALLINT 2, INT,
// DATE, TIME, FLOAT 4, BIGINT, DOUBLE, compact TIMESTAMP millis, compact
// DECIMAL unscaled 8), or for data in the variable part offset<<32 | size
// (strings and binaries of more than 7 bytes; non-compact timestamps store
// offset<<32 | nanoOfMillisecond, non-compact decimals offset<<32 |
// byteLength). Strings and binaries of up to 7 bytes live in their slot:
// bytes 0..len-1, slot byte 7 = 0x80 | len.
//
// Begin starts a row; the Put and SetNull methods fill field i (each field
// once); Finish returns the slice with the row. The zero RowWriter is ready
// for Begin; reuse one per goroutine to avoid allocation.
type RowWriter struct {
	buf   []byte
	base  int // row start in buf
	slots int // offset of slot 0 in buf
}

// maxInlineBytes is BinaryFormat.MAX_FIX_PART_DATA_SIZE: strings and
// binaries up to this length live inside their slot.
const maxInlineBytes = 7

// maxRowSize bounds a row: Flink sizes are Java ints.
const maxRowSize = math.MaxInt32

// Begin starts a row of arity fields and row kind kind at the end of dst:
// header and slots are appended zeroed (every field non-null, zero).
func (w *RowWriter) Begin(dst []byte, arity int, kind RowKind) {
	w.base = len(dst)
	w.slots = w.base + NullBitsWidth(arity)
	w.buf = append(dst, make([]byte, NullBitsWidth(arity)+8*arity)...)
	w.buf[w.base] = byte(kind)
}

// Len is the size of the row written so far.
func (w *RowWriter) Len() int { return len(w.buf) - w.base }

// Finish returns dst with the row appended, or, for a row larger than
// Flink's 2 GiB limit, dst unchanged and an error.
func (w *RowWriter) Finish() ([]byte, error) {
	if w.Len() > maxRowSize {
		return w.Abort(), fmt.Errorf("keygroups: row of %d bytes larger than %d", w.Len(), maxRowSize)
	}
	return w.buf, nil
}

// Abort clears the row's bytes and returns dst as Begin got it (same
// length).
func (w *RowWriter) Abort() []byte {
	clear(w.buf[w.base:])
	return w.buf[:w.base]
}

func (w *RowWriter) slot(i int) []byte { o := w.slots + 8*i; return w.buf[o : o+8 : o+8] }

// SetNull marks field i NULL; its slot stays zero.
func (w *RowWriter) SetNull(i int) {
	bit := i + 8
	w.buf[w.base+bit>>3] |= 1 << (bit & 7)
}

// SetNullReserve marks field i NULL and, as Flink's generated code does for
// NULL non-compact decimals (n = 16) and timestamps (n = 8), reserves n
// zero bytes in the variable part with the slot pointing at them (size 0).
func (w *RowWriter) SetNullReserve(i, n int) {
	w.SetNull(i)
	off := w.appendVar(nil, n)
	binary.LittleEndian.PutUint64(w.slot(i), uint64(off)<<32)
}

// PutBool writes a BOOLEAN.
func (w *RowWriter) PutBool(i int, v bool) {
	if v {
		w.slot(i)[0] = 1
	}
}

// PutInt8 writes a TINYINT.
func (w *RowWriter) PutInt8(i int, v int8) { w.slot(i)[0] = byte(v) }

// PutInt16 writes a SMALLINT.
func (w *RowWriter) PutInt16(i int, v int16) { binary.LittleEndian.PutUint16(w.slot(i), uint16(v)) }

// PutInt32 writes an INT, DATE (days), TIME (millis of the day) or
// INTERVAL YEAR TO MONTH (months).
func (w *RowWriter) PutInt32(i int, v int32) { binary.LittleEndian.PutUint32(w.slot(i), uint32(v)) }

// PutInt64 writes a BIGINT or INTERVAL DAY TO SECOND (millis).
func (w *RowWriter) PutInt64(i int, v int64) { binary.LittleEndian.PutUint64(w.slot(i), uint64(v)) }

// PutFloat32 writes a FLOAT.
func (w *RowWriter) PutFloat32(i int, v float32) {
	binary.LittleEndian.PutUint32(w.slot(i), math.Float32bits(v))
}

// PutFloat64 writes a DOUBLE.
func (w *RowWriter) PutFloat64(i int, v float64) {
	binary.LittleEndian.PutUint64(w.slot(i), math.Float64bits(v))
}

// PutBytes writes a STRING (UTF-8) or BYTES value: inline up to 7 bytes,
// else in the variable part. The caller bounds len(data) to Flink's 2 GiB
// (Finish rejects a larger row).
func (w *RowWriter) PutBytes(i int, data []byte) {
	if len(data) <= maxInlineBytes {
		s := w.slot(i)
		copy(s, data)
		s[7] = 0x80 | byte(len(data))
		return
	}
	off := w.appendVar(data, 0)
	binary.LittleEndian.PutUint64(w.slot(i), uint64(off)<<32|uint64(len(data)))
}

// PutTimestamp writes a TIMESTAMP(precision) or TIMESTAMP_LTZ(precision):
// epoch millis in the slot when precision ≤ 3 (TimestampData.isCompact),
// else millis in the variable part and the nanos of the millisecond in the
// slot.
func (w *RowWriter) PutTimestamp(i int, ts Timestamp, precision int) {
	if precision <= 3 {
		w.PutInt64(i, ts.Millis)
		return
	}
	var ms [8]byte
	binary.LittleEndian.PutUint64(ms[:], uint64(ts.Millis))
	off := w.appendVar(ms[:], 0)
	binary.LittleEndian.PutUint64(w.slot(i), uint64(off)<<32|uint64(uint32(ts.NanoOfMilli)))
}

// PutDecimal64 writes a compact DECIMAL (precision ≤ 18,
// DecimalData.isCompact): the unscaled value in the slot.
func (w *RowWriter) PutDecimal64(i int, unscaled int64) { w.PutInt64(i, unscaled) }

// PutDecimalBytes writes a non-compact DECIMAL (precision > 18): the
// unscaled value as BigInteger.toByteArray gives it (minimal big-endian
// two's complement, at most 16 bytes for precision ≤ 38) in 16 reserved
// bytes of the variable part.
func (w *RowWriter) PutDecimalBytes(i int, unscaled []byte) {
	off := w.appendVar(unscaled, 16)
	binary.LittleEndian.PutUint64(w.slot(i), uint64(off)<<32|uint64(len(unscaled)))
}

// appendVar appends data to the variable part, zero-padded to
// max(len(data), reserve) rounded up to a word, and returns its offset
// from the row start.
func (w *RowWriter) appendVar(data []byte, reserve int) int {
	off := len(w.buf) - w.base
	n := (max(len(data), reserve) + 7) &^ 7
	w.buf = append(w.buf, data...)
	w.buf = append(w.buf, make([]byte, n-len(data))...)
	return off
}
