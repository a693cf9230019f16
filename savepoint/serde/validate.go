package serde

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// Validate consumes one value of dec from d and applies every check Decode
// applies (same errors, same end position), without building the value.
// For the common serializers (primitives, strings, tuples, TTL, timers,
// lists, maps, windows, SQL rows of scalar, string and nested-row fields) it
// allocates nothing; for the others it decodes and drops the value.
// Errors are recorded in d like Decode's.
func Validate(dec Decoder, d *binfmt.Decbuf) {
	dc, ok := dec.(*decoder)
	if !ok {
		dec.Decode(d)
		return
	}
	dc.validate(d)
}

// IsTTL reports whether dec decodes TTL-wrapped values (an i64 last-access
// timestamp, then the value).
func IsTTL(dec Decoder) bool {
	dc, ok := dec.(*decoder)
	return ok && dc.k == kTTL
}

// ValidateAll is DecodeAll without the value: b must hold exactly one
// value of dec.
func ValidateAll(dec Decoder, b []byte, base int64) error {
	d := binfmt.New(b, base)
	Validate(dec, d)
	if d.Err() != nil {
		return d.Err()
	}
	if d.Len() != 0 {
		return &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after %s value", binfmt.ErrCorrupt, d.Len(), dec.Snapshot().Name())}
	}
	return nil
}

func (dc *decoder) validate(d *binfmt.Decbuf) {
	if d.Err() != nil {
		return
	}
	switch dc.k {
	case kInt, kFloat:
		d.Skip(4)
	case kLong, kDouble, kCountWindow:
		d.Skip(8)
	case kBool:
		d.Bool()
	case kByte, kGlobalWindow:
		d.Skip(1)
	case kShort, kChar:
		d.Skip(2)
	case kTimeWindow:
		d.Skip(16)
	case kVoid:
		at := d.Offset()
		if b := d.U8(); b != 0 && d.Err() == nil {
			d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: VoidNamespace byte 0x%02x", binfmt.ErrCorrupt, b)})
		}
	case kString:
		validateStringValue(d)
	case kStringData:
		d.Skip(d.Count("string byte length", math.MaxInt32, 1))
	case kBytes:
		d.Skip(d.Count("byte array length", math.MaxInt32, 1))
	case kRawValue:
		d.Skip(d.Count("raw value length", math.MaxInt32, 1))
	case kTuple:
		for _, k := range dc.kids {
			k.validate(d)
		}
	case kTTL:
		d.Skip(8)
		dc.kids[1].validate(d)
	case kTimer:
		d.Skip(8)
		dc.kids[0].validate(d)
		dc.kids[1].validate(d)
	case kList:
		n := d.Count("list size", maxCollection, 0)
		for i := 0; i < n && d.Err() == nil; i++ {
			before := d.Pos
			dc.kids[0].validate(d)
			if d.Pos == before && n > d.Len()+maxZeroWidth {
				d.Failf("list of %d zero-width elements", n)
				return
			}
		}
	case kMap:
		n := d.Count("map size", maxCollection, 1)
		for i := 0; i < n && d.Err() == nil; i++ {
			dc.kids[0].validate(d)
			if !d.Bool() {
				dc.kids[1].validate(d)
			}
		}
	case kRowData, kBinaryRow:
		at := d.Offset()
		n := d.Count("row size", math.MaxInt32, 1)
		b := d.Bytes(n)
		if d.Err() != nil {
			return
		}
		if err := dc.validateRow(b, at+4, 0); err != nil {
			d.Fail(err)
		}
	case kDecimal:
		if dc.prec <= 18 {
			d.Skip(8)
			return
		}
		d.Skip(d.Count("decimal byte length", 1<<16, 1))
	case kTimestamp:
		d.Skip(8)
		if dc.prec > 3 {
			d.Skip(4)
		}
	default:
		dc.Decode(d)
	}
}

// validateStringValue is readStringValue without building the string.
func validateStringValue(d *binfmt.Decbuf) {
	at := d.Offset()
	l, ok := readCharVarint(d)
	if !ok || l == 0 {
		return
	}
	n := int(l - 1)
	if n > d.Len() {
		d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: string of %d chars, %d bytes left", binfmt.ErrTruncated, n, d.Len())})
		return
	}
	b := d.B[d.Pos : d.Pos+n]
	ascii := true
	for _, c := range b {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		d.Pos += n
		return
	}
	for range n {
		c, ok := readCharVarint(d)
		if !ok {
			return
		}
		if c > 0xFFFF {
			d.Failf("string char 0x%x out of range", c)
			return
		}
	}
}

// validateRow is decodeRow without building the row.
func (dc *decoder) validateRow(b []byte, base int64, depth int) error {
	if depth > maxSnapshotDepth {
		return &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: rows nested deeper than %d", binfmt.ErrCorrupt, maxSnapshotDepth)}
	}
	arity := len(dc.types)
	if dc.k == kBinaryRow {
		arity = int(dc.snap.NumFields)
	}
	w := keygroups.NullBitsWidth(arity)
	if int64(len(b)) < int64(w)+8*int64(arity) {
		return &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: row of %d fields needs %d bytes, has %d", binfmt.ErrCorrupt, arity, w+8*arity, len(b))}
	}
	if b[0] > 3 {
		return &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: row kind byte 0x%02x", binfmt.ErrCorrupt, b[0])}
	}
	if dc.k == kBinaryRow {
		return nil
	}
	for i := 0; i < arity; i++ {
		bit := i + 8
		if b[bit>>3]&(1<<(bit&7)) != 0 {
			continue // null
		}
		if i < len(dc.fast) && dc.fast[i] != fkOther {
			if dc.fast[i] == fkString {
				at := w + 8*i
				if _, err := binaryField(b, at, binary.LittleEndian.Uint64(b[at:]), base); err != nil {
					return err
				}
			}
			continue
		}
		var kid *decoder
		if i < len(dc.kids) {
			kid = dc.kids[i]
		}
		if err := validateAt(dc.types[i], kid, b, w+8*i, base, depth); err != nil {
			return err
		}
	}
	return nil
}

// validateAt is valueAt without building the value: fixed-width fields need
// no check; variable-length ones must lie inside the row.
func validateAt(t *LogicalType, kid *decoder, b []byte, at int, base int64, depth int) error {
	if t == nil {
		return &binfmt.OffsetError{Offset: base + int64(at), Err: fmt.Errorf("%w: field without a type", binfmt.ErrCorrupt)}
	}
	switch t.Root {
	case "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "DATE", "TIME_WITHOUT_TIME_ZONE", "INTERVAL_YEAR_MONTH",
		"FLOAT", "BIGINT", "INTERVAL_DAY_TIME", "DOUBLE", "NULL":
		return nil
	}
	slot := binary.LittleEndian.Uint64(b[at:])
	switch t.Root {
	case "CHAR", "VARCHAR", "BINARY", "VARBINARY":
		_, err := binaryField(b, at, slot, base)
		return err
	case "DECIMAL":
		if t.Precision <= 18 {
			return nil
		}
		_, err := varPart(b, slot, base, at)
		return err
	case "TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
		if t.Precision <= 3 {
			return nil
		}
		off := slot >> 32
		if off > uint64(len(b)) || uint64(len(b))-off < 8 {
			return &binfmt.OffsetError{Offset: base + int64(at), Err: fmt.Errorf("%w: timestamp offset %d outside row", binfmt.ErrCorrupt, off)}
		}
		return nil
	case "ROW", "STRUCTURED_TYPE":
		if kid != nil && kid.k == kRowData {
			v, err := varPart(b, slot, base, at)
			if err != nil {
				return err
			}
			return kid.validateRow(v, base+int64(slot>>32), depth+1)
		}
	}
	// Everything else (arrays, maps, rows without a nested decoder, raw
	// types): decode and drop.
	_, err := valueAt(t, kid, b, at, base, depth, nil)
	return err
}
