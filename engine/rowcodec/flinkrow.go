package rowcodec

// Conversion between this package's rows and Flink's BinaryRowData, the
// logical row encoding inside canonical savepoints (RowDataSerializer writes
// a big-endian int32 size, then these bytes).
//
// BinaryRowData of arity n (all numbers little-endian):
//
//	+---------------------------+----------------------+--------------------+
//	| header + null bits        | fixed slots          | variable part      |
//	| W = ((n+63+8)/64)*8 bytes | n × 8 bytes          | 8-byte aligned     |
//	| byte 0 = RowKind          | slot i at W + 8i     | pieces, zero-padded|
//	| null bit of i = bit i+8   |                      |                    |
//	+---------------------------+----------------------+--------------------+
//
// Slots by type (Arrow type → Flink type):
//
//	bool → BOOLEAN, int8 → TINYINT      1 byte at the slot start
//	int16 → SMALLINT                    2 bytes
//	int32 → INT, date32 → DATE,         4 bytes
//	time32[ms] → TIME, float32 → FLOAT
//	int64 → BIGINT, float64 → DOUBLE    8 bytes
//	timestamp[s|ms] → TIMESTAMP(0|3)    epoch millis in the slot
//	timestamp[us|ns] → TIMESTAMP(6|9)   millis (8 bytes) in the variable part,
//	                                    slot = offset<<32 | nanoOfMillisecond
//	decimal128(p ≤ 18) → DECIMAL(p,s)   unscaled value as int64 in the slot
//	decimal128(p > 18)                  16 bytes reserved in the variable
//	                                    part holding the minimal big-endian
//	                                    two's-complement unscaled value,
//	                                    slot = offset<<32 | byteLength
//	string → STRING, binary → BYTES     ≤ 7 bytes inline: data in slot bytes
//	                                    0..len-1, slot byte 7 = 0x80|len;
//	                                    longer: slot = offset<<32 | len, data
//	                                    in the variable part
//
// Offsets are relative to the row start. A null field has its null bit set
// and a zero slot. Nested rows, arrays and maps are not converted.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/sfstate/sfstate/keygroups"
)

// fslot says how one field maps to a BinaryRowData slot.
type fslot uint8

const (
	fsByte       fslot = iota + 1 // bool, int8
	fsShort                       // int16
	fsInt                         // int32, date32, time32[ms], float32
	fsLong                        // int64, float64
	fsTsCompact                   // timestamp[s|ms] as millis
	fsTsWide                      // timestamp[us|ns] as millis + nanos
	fsDecCompact                  // decimal p ≤ 18
	fsDecWide                     // decimal p > 18
	fsBytes                       // string, binary
)

// FlinkRow converts rows of one Codec's schema to and from BinaryRowData.
// It is immutable and safe for concurrent use.
type FlinkRow struct {
	c     *Codec
	slots []fslot
	unit  []arrow.TimeUnit
	w     int // header + null-bit region size
}

// NewFlinkRow returns a converter for c's schema, or ErrUnsupportedType if
// a top-level field has no BinaryRowData mapping listed above.
func NewFlinkRow(c *Codec) (*FlinkRow, error) {
	f := &FlinkRow{c: c, w: keygroups.NullBitsWidth(len(c.fields))}
	for _, n := range c.fields {
		var s fslot
		var unit arrow.TimeUnit
		switch n.id {
		case arrow.BOOL, arrow.INT8:
			s = fsByte
		case arrow.INT16:
			s = fsShort
		case arrow.INT32, arrow.DATE32, arrow.FLOAT32:
			s = fsInt
		case arrow.TIME32:
			if n.dt.(*arrow.Time32Type).Unit != arrow.Millisecond {
				return nil, fmt.Errorf("%w: field %s: Flink TIME is milliseconds, got %s", ErrUnsupportedType, n.name, n.dt)
			}
			s = fsInt
		case arrow.INT64, arrow.FLOAT64:
			s = fsLong
		case arrow.TIMESTAMP:
			unit = n.dt.(*arrow.TimestampType).Unit
			if unit == arrow.Second || unit == arrow.Millisecond {
				s = fsTsCompact
			} else {
				s = fsTsWide
			}
		case arrow.DECIMAL128:
			if n.dt.(*arrow.Decimal128Type).Precision <= 18 {
				s = fsDecCompact
			} else {
				s = fsDecWide
			}
		case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
			s = fsBytes
		default:
			return nil, fmt.Errorf("%w: field %s (%s) has no BinaryRowData mapping", ErrUnsupportedType, n.name, n.dt)
		}
		f.slots = append(f.slots, s)
		f.unit = append(f.unit, unit)
	}
	return f, nil
}

// FixedSize is the size of the header and slots, the smallest valid row.
func (f *FlinkRow) FixedSize() int { return f.w + 8*len(f.slots) }

const (
	millisPerSec  = 1000
	microsPerMs   = 1000
	nanosPerMs    = 1000000
	inlineMaxSize = 7
)

// ToBinaryRow appends the BinaryRowData form of value (a value of this
// package: TTL prefix and row) to dst, and returns the value's TTL. The TTL
// is not part of the row; Flink keeps it in a TtlValue around the row. The
// row kind (byte 0) is the one recorded in value's header byte (see Kind).
// The row is written through keygroups.RowWriter.
func (f *FlinkRow) ToBinaryRow(dst, value []byte) ([]byte, int64, error) {
	r := reader{b: value}
	if err := f.c.validate(&r); err != nil {
		return dst, 0, err
	}
	r.pos = 0
	bm, _ := f.c.header(&r)
	var w keygroups.RowWriter
	w.Begin(dst, len(f.slots), Kind(value))
	b := value
	for i, n := range f.c.fields {
		if isNullBit(bm, i) {
			w.SetNull(i)
			continue
		}
		p := r.pos
		switch f.slots[i] {
		case fsByte:
			w.PutInt8(i, int8(b[p]))
			r.pos++
		case fsShort:
			w.PutInt16(i, int16(binary.LittleEndian.Uint16(b[p:])))
			r.pos += 2
		case fsInt:
			w.PutInt32(i, int32(binary.LittleEndian.Uint32(b[p:])))
			r.pos += 4
		case fsLong:
			w.PutInt64(i, int64(binary.LittleEndian.Uint64(b[p:])))
			r.pos += 8
		case fsTsCompact:
			v := int64(binary.LittleEndian.Uint64(b[p:]))
			r.pos += 8
			if f.unit[i] == arrow.Second {
				hi, lo := bits.Mul64(uint64(absI64(v)), millisPerSec)
				if hi != 0 || lo > math.MaxInt64 {
					return w.Abort(), 0, &DecodeError{Offset: p, Field: n.name, Err: fmt.Errorf("%w: timestamp %ds overflows milliseconds", ErrCorrupt, v)}
				}
				v *= millisPerSec
			}
			w.PutTimestamp(i, keygroups.Timestamp{Millis: v}, 3)
		case fsTsWide:
			v := int64(binary.LittleEndian.Uint64(b[p:]))
			r.pos += 8
			var ts keygroups.Timestamp
			precision := 9
			if f.unit[i] == arrow.Microsecond {
				ts.Millis, ts.NanoOfMilli, precision = floorDiv(v, microsPerMs), int32(floorMod(v, microsPerMs)*1000), 6
			} else {
				ts.Millis, ts.NanoOfMilli = floorDiv(v, nanosPerMs), int32(floorMod(v, nanosPerMs))
			}
			w.PutTimestamp(i, ts, precision)
		case fsDecCompact:
			lo := binary.LittleEndian.Uint64(b[p:])
			hi := int64(binary.LittleEndian.Uint64(b[p+8:]))
			r.pos += 16
			if hi != int64(lo)>>63 {
				return w.Abort(), 0, &DecodeError{Offset: p, Field: n.name, Err: fmt.Errorf("%w: decimal does not fit its precision", ErrCorrupt)}
			}
			w.PutDecimal64(i, int64(lo))
		case fsDecWide:
			lo := binary.LittleEndian.Uint64(b[p:])
			hi := binary.LittleEndian.Uint64(b[p+8:])
			r.pos += 16
			var be [16]byte
			binary.BigEndian.PutUint64(be[:8], hi)
			binary.BigEndian.PutUint64(be[8:], lo)
			w.PutDecimalBytes(i, minimalTwosComplement(be[:]))
		case fsBytes:
			l, k := binary.Uvarint(b[p:])
			s := b[p+k : p+k+int(l)]
			r.pos = p + k + int(l)
			if uint64(len(s)) > math.MaxInt32 {
				return w.Abort(), 0, &DecodeError{Offset: p, Field: n.name, Err: fmt.Errorf("%w: %d-byte field too large for BinaryRowData", ErrCorrupt, len(s))}
			}
			w.PutBytes(i, s)
		}
	}
	if w.Len() > math.MaxInt32 {
		return w.Abort(), 0, fmt.Errorf("%w: row of %d bytes too large for BinaryRowData", ErrCorrupt, w.Len())
	}
	out, _ := w.Finish()
	return out, TTL(value), nil
}

// minimalTwosComplement strips redundant sign bytes, as Java's
// BigInteger.toByteArray does (zero is one 0x00 byte).
func minimalTwosComplement(be []byte) []byte {
	for len(be) > 1 && ((be[0] == 0x00 && be[1]&0x80 == 0) || (be[0] == 0xff && be[1]&0x80 != 0)) {
		be = be[1:]
	}
	return be
}

func absI64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// FromBinaryRow parses BinaryRowData bytes of this schema and appends the
// equivalent value of this package, with prefix ttl, to dst; the row kind
// is kept in the value's header byte (and returned). Every offset
// and length in brow is checked against its size; errors are *DecodeError
// with the byte offset inside brow.
func (f *FlinkRow) FromBinaryRow(dst []byte, ttl int64, brow []byte) ([]byte, keygroups.RowKind, error) {
	n := len(f.slots)
	fail := func(off int, field string, format string, args ...any) ([]byte, keygroups.RowKind, error) {
		return dst, 0, &DecodeError{Offset: off, Field: field, Err: fmt.Errorf("%w: BinaryRowData: %s", ErrCorrupt, fmt.Sprintf(format, args...))}
	}
	if len(brow) < f.FixedSize() {
		return dst, 0, &DecodeError{Offset: len(brow), Err: fmt.Errorf("%w: BinaryRowData of %d fields needs %d bytes, have %d", ErrTruncated, n, f.FixedSize(), len(brow))}
	}
	kind := keygroups.RowKind(brow[0])
	if kind > keygroups.Delete {
		return fail(0, "", "row kind byte %d", brow[0])
	}
	// Null bits past the arity must be clear.
	for bit := n + 8; bit < f.w*8; bit++ {
		if brow[bit>>3]&(1<<(uint(bit)&7)) != 0 {
			return fail(bit>>3, "", "null bit %d set past arity %d", bit-8, n)
		}
	}
	out := binary.BigEndian.AppendUint64(dst, uint64(ttl))
	out = append(out, headerByte(kind))
	out = binary.AppendUvarint(out, uint64(n))
	bmPos := len(out)
	out = append(out, make([]byte, bitmapLen(n))...)
	for i, nd := range f.c.fields {
		if brow[(i+8)>>3]&(1<<(uint(i+8)&7)) != 0 {
			out[bmPos+i>>3] |= 1 << (uint(i) & 7)
			continue
		}
		so := f.w + 8*i
		slot := binary.LittleEndian.Uint64(brow[so:])
		switch f.slots[i] {
		case fsByte:
			if nd.id == arrow.BOOL && brow[so] > 1 {
				return fail(so, nd.name, "boolean byte %d", brow[so])
			}
			out = append(out, brow[so])
		case fsShort:
			out = append(out, brow[so:so+2]...)
		case fsInt:
			out = append(out, brow[so:so+4]...)
		case fsLong:
			out = append(out, brow[so:so+8]...)
		case fsTsCompact:
			v := int64(slot)
			if f.unit[i] == arrow.Second {
				if v%millisPerSec != 0 {
					return fail(so, nd.name, "timestamp %dms is not whole seconds", v)
				}
				v /= millisPerSec
			}
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		case fsTsWide:
			off, nano := int(slot>>32), int64(uint32(slot))
			if off+8 > len(brow) {
				return fail(so, nd.name, "timestamp offset %d outside the %d-byte row", off, len(brow))
			}
			if nano >= nanosPerMs {
				return fail(so, nd.name, "nano-of-millisecond %d", nano)
			}
			ms := int64(binary.LittleEndian.Uint64(brow[off:]))
			per, sub := int64(nanosPerMs), nano
			if f.unit[i] == arrow.Microsecond {
				if nano%1000 != 0 {
					return fail(so, nd.name, "sub-microsecond timestamp for a microsecond column")
				}
				per, sub = microsPerMs, nano/1000
			}
			v, ok := mulAdd(ms, per, sub)
			if !ok {
				return fail(off, nd.name, "timestamp %dms overflows the column unit", ms)
			}
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		case fsDecCompact:
			v := int64(slot)
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
			out = binary.LittleEndian.AppendUint64(out, uint64(v>>63))
		case fsDecWide:
			off, l := int(slot>>32), int(uint32(slot))
			if l == 0 || l > 16 || off+l > len(brow) {
				return fail(so, nd.name, "decimal bytes at %d+%d outside the %d-byte row or longer than 16", off, l, len(brow))
			}
			var be [16]byte
			fill := byte(0)
			if brow[off]&0x80 != 0 {
				fill = 0xff
			}
			for k := range 16 - l {
				be[k] = fill
			}
			copy(be[16-l:], brow[off:off+l])
			num := decimal128.New(int64(binary.BigEndian.Uint64(be[:8])), binary.BigEndian.Uint64(be[8:]))
			out = binary.LittleEndian.AppendUint64(out, num.LowBits())
			out = binary.LittleEndian.AppendUint64(out, uint64(num.HighBits()))
		case fsBytes:
			var s []byte
			if brow[so+7]&0x80 != 0 {
				l := int(brow[so+7] & 0x7f)
				if l > inlineMaxSize {
					return fail(so, nd.name, "inline length %d", l)
				}
				s = brow[so : so+l]
			} else {
				off, l := int(slot>>32), int(uint32(slot))
				if off > len(brow) || l > len(brow)-off {
					return fail(so, nd.name, "bytes at %d+%d outside the %d-byte row", off, l, len(brow))
				}
				s = brow[off : off+l]
			}
			out = binary.AppendUvarint(out, uint64(len(s)))
			out = append(out, s...)
		}
	}
	return out, kind, nil
}

// mulAdd returns a*m + s (m > 0, 0 ≤ s < m) and false on int64 overflow.
func mulAdd(a, m, s int64) (int64, bool) {
	if a > (math.MaxInt64-s)/m || a < math.MinInt64/m {
		return 0, false
	}
	return a*m + s, true
}
