package serde

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// ColKind is the logical type of a Column.
type ColKind uint8

// Column kinds. Integers (and booleans as 0/1, timestamps as epoch
// milliseconds) are stored in Column.Ints, floating point in
// Column.Floats, strings as Column.Offsets into Column.Data.
const (
	ColBool ColKind = iota + 1
	ColTinyInt
	ColSmallInt
	ColInt
	ColBigInt
	ColFloat
	ColDouble
	ColString
	ColTimestamp // TIMESTAMP(p) with p <= 3; Column.Precision
)

// Column is one typed column of decoded values: no value is boxed. Row i
// is null when IsNull(i).
type Column struct {
	Kind      ColKind
	Precision int // ColTimestamp
	Ints      []int64
	Floats    []float64
	// Offsets has Len()+1 entries for ColString: row i is
	// Data[Offsets[i]:Offsets[i+1]].
	Offsets []uint32
	Data    []byte
	nulls   []uint64
	n       int
}

// Len returns the number of rows.
func (c *Column) Len() int { return c.n }

// IsNull reports whether row i is null.
func (c *Column) IsNull(i int) bool { return c.nulls[i>>6]&(1<<(i&63)) != 0 }

// Bytes returns the bytes of string row i (aliasing the column).
func (c *Column) Bytes(i int) []byte { return c.Data[c.Offsets[i]:c.Offsets[i+1]] }

func (c *Column) reset() {
	c.Ints, c.Floats, c.Data = c.Ints[:0], c.Floats[:0], c.Data[:0]
	c.Offsets = append(c.Offsets[:0], 0)
	c.nulls = c.nulls[:0]
	c.n = 0
}

// truncate drops the rows from n on (a row that failed to decode).
func (c *Column) truncate(n int) {
	if c.n <= n {
		return
	}
	switch c.Kind {
	case ColFloat, ColDouble:
		c.Floats = c.Floats[:n]
	case ColString:
		c.Offsets = c.Offsets[:n+1]
		c.Data = c.Data[:c.Offsets[n]]
	default:
		c.Ints = c.Ints[:n]
	}
	for i := n; i < c.n; i++ {
		c.nulls[i>>6] &^= 1 << (i & 63)
	}
	c.nulls = c.nulls[:(n+63)>>6]
	c.n = n
}

// next opens row c.n (not null) and returns its index.
func (c *Column) next() int {
	i := c.n
	if i&63 == 0 {
		c.nulls = append(c.nulls, 0)
	}
	c.n++
	return i
}

func (c *Column) appendNull() {
	i := c.next()
	c.nulls[i>>6] |= 1 << (i & 63)
	switch c.Kind {
	case ColFloat, ColDouble:
		c.Floats = append(c.Floats, 0)
	case ColString:
		c.Offsets = append(c.Offsets, uint32(len(c.Data)))
	default:
		c.Ints = append(c.Ints, 0)
	}
}

func (c *Column) appendString(b []byte) {
	c.next()
	c.Data = append(c.Data, b...)
	c.Offsets = append(c.Offsets, uint32(len(c.Data)))
}

// Value returns row i in the form the generic decoder builds (int64,
// int32, int16, int8, bool, float32, float64, string, Timestamp, or nil).
func (c *Column) Value(i int) Value {
	if c.IsNull(i) {
		return nil
	}
	switch c.Kind {
	case ColBool:
		return c.Ints[i] != 0
	case ColTinyInt:
		return int8(c.Ints[i])
	case ColSmallInt:
		return int16(c.Ints[i])
	case ColInt:
		return int32(c.Ints[i])
	case ColBigInt:
		return c.Ints[i]
	case ColFloat:
		return float32(c.Floats[i])
	case ColDouble:
		return c.Floats[i]
	case ColString:
		return string(c.Bytes(i))
	case ColTimestamp:
		return Timestamp{Millis: c.Ints[i], Precision: c.Precision}
	}
	return nil
}

// Columns holds the values of one serializer in column form: either a
// single scalar column (Fields[0]) or one column per row field plus the
// row kinds, and for TTL-wrapped values the last-access timestamps.
type Columns struct {
	plan *ColumnPlan
	// TTL holds the last-access timestamps (TTL-wrapped values only).
	TTL []int64
	// RowKinds holds each row's RowKind (row serializers only).
	RowKinds []keygroups.RowKind
	Fields   []Column
	n        int
}

// Len returns the number of values.
func (c *Columns) Len() int { return c.n }

// Plan returns the plan the columns were built for.
func (c *Columns) Plan() *ColumnPlan { return c.plan }

// Reset empties the columns, keeping their memory.
func (c *Columns) Reset() {
	c.TTL, c.RowKinds, c.n = c.TTL[:0], c.RowKinds[:0], 0
	for i := range c.Fields {
		c.Fields[i].reset()
	}
}

// Truncate drops the values from n on.
func (c *Columns) Truncate(n int) {
	if n > c.n {
		return
	}
	if len(c.TTL) > n {
		c.TTL = c.TTL[:n]
	}
	if len(c.RowKinds) > n {
		c.RowKinds = c.RowKinds[:n]
	}
	for i := range c.Fields {
		c.Fields[i].truncate(n)
	}
	c.n = n
}

// Value returns value i in the form the generic decoder builds (a *Row,
// a *TTLValue around it, or a scalar), freshly allocated.
func (c *Columns) Value(i int) Value {
	var v Value
	if c.plan.row {
		r := &Row{Kind: c.RowKinds[i], Fields: make([]Value, len(c.Fields))}
		for j := range c.Fields {
			r.Fields[j] = c.Fields[j].Value(i)
		}
		v = r
	} else {
		v = c.Fields[0].Value(i)
	}
	if c.plan.ttl {
		return &TTLValue{LastAccess: c.TTL[i], Value: v}
	}
	return v
}

// ColumnPlan decodes the values of one serializer straight into typed
// columns. Plans exist for serializers of a fixed, known layout: SQL rows
// (RowData) whose fields are all BOOLEAN, TINYINT, SMALLINT, INTEGER (and
// DATE/TIME/INTERVAL_YEAR_MONTH), BIGINT (and INTERVAL_DAY_TIME), FLOAT,
// DOUBLE, CHAR/VARCHAR or TIMESTAMP(p ≤ 3); the primitive serializers of
// those types, StringData and String (Flink's StringValue format); each
// optionally wrapped by the state-TTL serializer.
type ColumnPlan struct {
	dec   *decoder // the whole serializer (errors name it)
	inner *decoder // below the TTL wrapper
	ttl   bool
	row   bool
	kinds []ColKind
	prec  []int
	fast  []fieldKind
	w     int // row null bit-set width
}

// PlanColumns returns the column plan of dec, or nil when its values
// cannot be decoded into columns (the caller then uses the generic
// decoder).
func PlanColumns(dec Decoder) *ColumnPlan {
	dc, ok := dec.(*decoder)
	if !ok || !dc.sup {
		return nil
	}
	p := &ColumnPlan{dec: dc, inner: dc}
	if dc.k == kTTL {
		if len(dc.kids) != 2 {
			return nil
		}
		p.ttl, p.inner = true, dc.kids[1]
	}
	in := p.inner
	switch in.k {
	case kRowData:
		if len(in.fast) != len(in.types) {
			return nil
		}
		p.row, p.fast, p.w = true, in.fast, keygroups.NullBitsWidth(len(in.types))
		for _, k := range in.fast {
			var ck ColKind
			prec := 0
			switch k {
			case fkBool:
				ck = ColBool
			case fkTinyInt:
				ck = ColTinyInt
			case fkSmallInt:
				ck = ColSmallInt
			case fkInt:
				ck = ColInt
			case fkFloat:
				ck = ColFloat
			case fkBigInt:
				ck = ColBigInt
			case fkDouble:
				ck = ColDouble
			case fkString:
				ck = ColString
			case fkTimestamp0, fkTimestamp1, fkTimestamp2, fkTimestamp3:
				ck, prec = ColTimestamp, int(k-fkTimestamp0)
			default:
				return nil
			}
			p.kinds = append(p.kinds, ck)
			p.prec = append(p.prec, prec)
		}
	case kBool:
		p.kinds = []ColKind{ColBool}
	case kByte:
		p.kinds = []ColKind{ColTinyInt}
	case kShort:
		p.kinds = []ColKind{ColSmallInt}
	case kInt:
		p.kinds = []ColKind{ColInt}
	case kLong:
		p.kinds = []ColKind{ColBigInt}
	case kFloat:
		p.kinds = []ColKind{ColFloat}
	case kDouble:
		p.kinds = []ColKind{ColDouble}
	case kString, kStringData:
		p.kinds = []ColKind{ColString}
	default:
		return nil
	}
	if !p.row {
		p.prec = []int{0}
	}
	return p
}

// Row reports whether the plan decodes rows (one column per field).
func (p *ColumnPlan) Row() bool { return p.row }

// TTL reports whether values are TTL-wrapped.
func (p *ColumnPlan) TTL() bool { return p.ttl }

// Kinds returns the column kinds.
func (p *ColumnPlan) Kinds() []ColKind { return p.kinds }

// NewColumns returns empty columns for the plan.
func (p *ColumnPlan) NewColumns() *Columns {
	c := &Columns{plan: p, Fields: make([]Column, len(p.kinds))}
	for i, k := range p.kinds {
		c.Fields[i].Kind, c.Fields[i].Precision = k, p.prec[i]
		c.Fields[i].Offsets = []uint32{0}
	}
	return c
}

// DecodeExact decodes b (absolute offset base) as exactly one value into
// c, applying every check the generic decoder applies (same errors, same
// offsets); leftover bytes are an error as in DecodeAll. On error c is
// unchanged. d is scratch.
func (p *ColumnPlan) DecodeExact(d *binfmt.Decbuf, b []byte, base int64, c *Columns) error {
	d.Reset(b, base)
	n := c.n
	p.decode(d, c)
	if d.Err() != nil {
		c.Truncate(n)
		return d.Err()
	}
	if d.Len() != 0 {
		c.Truncate(n)
		return &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after the %s value", binfmt.ErrCorrupt, d.Len(), p.dec.Snapshot().Name())}
	}
	return nil
}

// decode appends one value read from d (errors recorded in d; a failed
// value may leave a partial row, which DecodeExact drops).
func (p *ColumnPlan) decode(d *binfmt.Decbuf, c *Columns) {
	if p.ttl {
		ts := d.I64()
		if d.Err() != nil {
			return
		}
		c.TTL = append(c.TTL, ts)
	}
	if p.row {
		at := d.Offset()
		n := d.Count("row size", math.MaxInt32, 1)
		b := d.Bytes(n)
		if d.Err() != nil {
			return
		}
		if err := p.decodeRow(b, at+4, c); err != nil {
			d.Fail(err)
			return
		}
		c.n++
		return
	}
	col := &c.Fields[0]
	switch p.inner.k {
	case kBool:
		v := d.Bool()
		if d.Err() != nil {
			return
		}
		col.next()
		col.Ints = append(col.Ints, b2i(v))
	case kByte:
		v := d.U8()
		if d.Err() != nil {
			return
		}
		col.next()
		col.Ints = append(col.Ints, int64(int8(v)))
	case kShort:
		v := d.I16()
		if d.Err() != nil {
			return
		}
		col.next()
		col.Ints = append(col.Ints, int64(v))
	case kInt:
		v := d.I32()
		if d.Err() != nil {
			return
		}
		col.next()
		col.Ints = append(col.Ints, int64(v))
	case kLong:
		v := d.I64()
		if d.Err() != nil {
			return
		}
		col.next()
		col.Ints = append(col.Ints, v)
	case kFloat:
		v := d.F32()
		if d.Err() != nil {
			return
		}
		col.next()
		col.Floats = append(col.Floats, float64(v))
	case kDouble:
		v := d.F64()
		if d.Err() != nil {
			return
		}
		col.next()
		col.Floats = append(col.Floats, v)
	case kStringData:
		n := d.Count("string byte length", math.MaxInt32, 1)
		b := d.Bytes(n)
		if d.Err() != nil {
			return
		}
		col.appendString(b)
	case kString:
		if !appendStringValue(d, col) {
			return
		}
	}
	c.n++
}

func b2i(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// appendStringValue is readStringValue appending to col.
func appendStringValue(d *binfmt.Decbuf, col *Column) bool {
	at := d.Offset()
	l, ok := readCharVarint(d)
	if !ok {
		return false
	}
	if l == 0 {
		col.appendNull()
		return true
	}
	n := int(l - 1)
	if n > d.Len() {
		d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: string of %d chars, %d bytes left", binfmt.ErrTruncated, n, d.Len())})
		return false
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
		col.appendString(b)
		return true
	}
	units := make([]uint16, n)
	for i := range units {
		c, ok := readCharVarint(d)
		if !ok {
			return false
		}
		if c > 0xFFFF {
			d.Failf("string char 0x%x out of range", c)
			return false
		}
		units[i] = uint16(c)
	}
	col.next()
	for _, r := range utf16.Decode(units) {
		col.Data = utf8.AppendRune(col.Data, r)
	}
	col.Offsets = append(col.Offsets, uint32(len(col.Data)))
	return true
}

// decodeRow is decodeRow appending the fields to the columns. On error
// the columns may hold a partial row.
func (p *ColumnPlan) decodeRow(b []byte, base int64, c *Columns) error {
	arity := len(p.kinds)
	w := p.w
	if int64(len(b)) < int64(w)+8*int64(arity) {
		return &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: row of %d fields needs %d bytes, has %d", binfmt.ErrCorrupt, arity, w+8*arity, len(b))}
	}
	if b[0] > 3 {
		return &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: row kind byte 0x%02x", binfmt.ErrCorrupt, b[0])}
	}
	c.RowKinds = append(c.RowKinds, keygroups.RowKind(b[0]))
	fields := c.Fields[:arity]
	for i := range fields {
		col := &fields[i]
		bit := i + 8
		if b[bit>>3]&(1<<(bit&7)) != 0 {
			col.appendNull()
			continue
		}
		slotAt := w + 8*i
		slot := binary.LittleEndian.Uint64(b[slotAt:])
		switch col.Kind {
		case ColBigInt, ColTimestamp:
			col.next()
			col.Ints = append(col.Ints, int64(slot))
		case ColString:
			v, err := binaryField(b, slotAt, slot, base)
			if err != nil {
				return err
			}
			col.appendString(v)
		case ColInt:
			col.next()
			col.Ints = append(col.Ints, int64(int32(uint32(slot))))
		case ColDouble:
			col.next()
			col.Floats = append(col.Floats, math.Float64frombits(slot))
		case ColBool:
			col.next()
			col.Ints = append(col.Ints, b2i(slot&0xFF != 0))
		case ColTinyInt:
			col.next()
			col.Ints = append(col.Ints, int64(int8(slot)))
		case ColSmallInt:
			col.next()
			col.Ints = append(col.Ints, int64(int16(uint16(slot))))
		case ColFloat:
			col.next()
			col.Floats = append(col.Floats, float64(math.Float32frombits(uint32(slot))))
		}
	}
	return nil
}

// IsVoid reports whether dec decodes VoidNamespace (one zero byte).
func IsVoid(dec Decoder) bool {
	dc, ok := dec.(*decoder)
	return ok && dc.k == kVoid
}

// Skip advances d over one value of the plan's serializer without
// decoding it (as Decoder.Skip).
func (p *ColumnPlan) Skip(d *binfmt.Decbuf) { p.dec.Skip(d) }

// fastExact decodes b (absolute offset base) as exactly one value into c
// without a Decbuf. It returns false, leaving c unchanged, whenever
// anything does not fit (the caller then takes the checked path, which
// reports the error exactly as the generic decoder does).
func (p *ColumnPlan) fastExact(b []byte, base int64, c *Columns) bool {
	var ts int64
	if p.ttl {
		if len(b) < 8 {
			return false
		}
		ts = int64(binary.BigEndian.Uint64(b))
		b, base = b[8:], base+8
	}
	if p.row {
		if len(b) < 4 || int64(int32(binary.BigEndian.Uint32(b))) != int64(len(b)-4) {
			return false
		}
		n := c.n
		if p.decodeRow(b[4:], base+4, c) != nil {
			c.Truncate(n)
			return false
		}
	} else {
		col := &c.Fields[0]
		switch p.inner.k {
		case kBool:
			if len(b) != 1 || b[0] > 1 {
				return false
			}
			col.next()
			col.Ints = append(col.Ints, int64(b[0]))
		case kByte:
			if len(b) != 1 {
				return false
			}
			col.next()
			col.Ints = append(col.Ints, int64(int8(b[0])))
		case kShort:
			if len(b) != 2 {
				return false
			}
			col.next()
			col.Ints = append(col.Ints, int64(int16(binary.BigEndian.Uint16(b))))
		case kInt:
			if len(b) != 4 {
				return false
			}
			col.next()
			col.Ints = append(col.Ints, int64(int32(binary.BigEndian.Uint32(b))))
		case kLong:
			if len(b) != 8 {
				return false
			}
			col.next()
			col.Ints = append(col.Ints, int64(binary.BigEndian.Uint64(b)))
		case kFloat:
			if len(b) != 4 {
				return false
			}
			col.next()
			col.Floats = append(col.Floats, float64(math.Float32frombits(binary.BigEndian.Uint32(b))))
		case kDouble:
			if len(b) != 8 {
				return false
			}
			col.next()
			col.Floats = append(col.Floats, math.Float64frombits(binary.BigEndian.Uint64(b)))
		case kStringData:
			if len(b) < 4 || int64(int32(binary.BigEndian.Uint32(b))) != int64(len(b)-4) {
				return false
			}
			col.appendString(b[4:])
		default:
			return false
		}
	}
	if p.ttl {
		c.TTL = append(c.TTL, ts)
	}
	c.n++
	return true
}

// DecodeKeyVoid decodes a state key followed by a VoidNamespace (b is the
// key bytes after the key-group prefix; base their absolute offset) into
// c when everything is in order: the key exactly as DecodeExact decodes
// it, one zero byte, nothing else. It returns false, leaving c unchanged,
// otherwise; the caller then takes the checked path for the error.
func (p *ColumnPlan) DecodeKeyVoid(b []byte, base int64, c *Columns) bool {
	var n int
	switch {
	case p.ttl:
		return false
	case p.row || p.inner.k == kStringData:
		if len(b) < 4 {
			return false
		}
		l := int32(binary.BigEndian.Uint32(b))
		if l < 0 || int64(l) > int64(len(b)-5) {
			return false
		}
		n = 4 + int(l)
	case p.inner.n > 0:
		n = p.inner.n
	default:
		return false
	}
	if len(b) != n+1 || b[n] != 0 {
		return false
	}
	return p.fastExact(b[:n], base, c)
}

// DecodeFast is DecodeExact for well-formed input only: it returns false,
// leaving c unchanged, where DecodeExact would have to report an error
// (or where the fast path does not apply); call DecodeExact then.
func (p *ColumnPlan) DecodeFast(b []byte, base int64, c *Columns) bool {
	return p.fastExact(b, base, c)
}

// TimerParts returns the key and namespace decoders of a timer decoder
// (TimerSerializer: i64 timestamp, key, namespace), ok false for other
// decoders.
func TimerParts(dec Decoder) (key, namespace Decoder, ok bool) {
	dc, isDec := dec.(*decoder)
	if !isDec || dc.k != kTimer || len(dc.kids) != 2 {
		return nil, nil, false
	}
	return dc.kids[0], dc.kids[1], true
}

// Decode decodes one value from d into c with every check of the
// generic decoder (errors recorded in d, as Decoder.Decode records
// them); on error c is unchanged.
func (p *ColumnPlan) Decode(d *binfmt.Decbuf, c *Columns) {
	n := c.n
	p.decode(d, c)
	if d.Err() != nil {
		c.Truncate(n)
	}
}

// TimerTimestamp decodes the i64 timestamp a TimerSerializer writes
// (sign bit flipped so timers sort by time).
func TimerTimestamp(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) ^ tsSignFlip }
