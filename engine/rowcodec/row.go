package rowcodec

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Go values used by EncodeRow and returned by DecodeRow, per Arrow type:
//
//	bool                 bool
//	int8 … int64         int8 … int64 (EncodeRow also takes int)
//	uint8 … uint64       uint8 … uint64 (EncodeRow also takes int)
//	float32, float64     float32, float64
//	date32, date64       arrow.Date32, arrow.Date64
//	time32, time64       arrow.Time32, arrow.Time64
//	timestamp, duration  arrow.Timestamp, arrow.Duration
//	decimal128           decimal128.Num
//	string, large_string string
//	binary, large_binary []byte
//	struct, list         []any
//	NULL                 nil

// EncodeRow appends the value (ttl prefix and row) for one row given as Go
// values to dst. It is the slow path; use EncodeBatch for batches.
func (c *Codec) EncodeRow(dst []byte, ttl int64, fields []any) ([]byte, error) {
	if len(fields) != len(c.fields) {
		return dst, fmt.Errorf("%w: %d values for %d fields", ErrSchemaMismatch, len(fields), len(c.fields))
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ttl))
	dst = append(dst, FormatV1)
	dst = binary.AppendUvarint(dst, uint64(len(c.fields)))
	dst, err := appendRowGo(dst, c.fields, fields, 0)
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

func appendRowGo(dst []byte, nodes []*node, vals []any, depth int) ([]byte, error) {
	bm := len(dst)
	dst = append(dst, make([]byte, bitmapLen(len(nodes)))...)
	for i, n := range nodes {
		if vals[i] == nil {
			dst[bm+i>>3] |= 1 << (uint(i) & 7)
			continue
		}
		var err error
		if dst, err = appendGo(dst, n, vals[i], depth); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

func mismatch(n *node, v any) error {
	return fmt.Errorf("%w: field %s (%s) cannot take a %T", ErrSchemaMismatch, n.name, n.dt, v)
}

func appendGo(dst []byte, n *node, v any, depth int) ([]byte, error) {
	switch n.kind {
	case kBool:
		b, ok := v.(bool)
		if !ok {
			return dst, mismatch(n, v)
		}
		if b {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case kFixed:
		if n.id == arrow.DECIMAL128 {
			d, ok := v.(decimal128.Num)
			if !ok {
				return dst, mismatch(n, v)
			}
			dst = binary.LittleEndian.AppendUint64(dst, d.LowBits())
			return binary.LittleEndian.AppendUint64(dst, uint64(d.HighBits())), nil
		}
		bits, ok := fixedBits(n, v)
		if !ok {
			return dst, mismatch(n, v)
		}
		switch n.width {
		case 1:
			return append(dst, byte(bits)), nil
		case 2:
			return binary.LittleEndian.AppendUint16(dst, uint16(bits)), nil
		case 4:
			return binary.LittleEndian.AppendUint32(dst, uint32(bits)), nil
		default:
			return binary.LittleEndian.AppendUint64(dst, bits), nil
		}
	case kVarLen:
		switch s := v.(type) {
		case string:
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			return append(dst, s...), nil
		case []byte:
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			return append(dst, s...), nil
		}
		return dst, mismatch(n, v)
	case kStruct:
		vals, ok := v.([]any)
		if !ok || len(vals) != len(n.children) {
			return dst, mismatch(n, v)
		}
		return appendRowGo(dst, n.children, vals, depth+1)
	case kList:
		vals, ok := v.([]any)
		if !ok {
			return dst, mismatch(n, v)
		}
		dst = binary.AppendUvarint(dst, uint64(len(vals)))
		bm := len(dst)
		dst = append(dst, make([]byte, bitmapLen(len(vals)))...)
		for i, e := range vals {
			if e == nil {
				dst[bm+i>>3] |= 1 << (uint(i) & 7)
				continue
			}
			var err error
			if dst, err = appendGo(dst, n.children[0], e, depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, mismatch(n, v)
}

// fixedBits converts a Go value for a fixed-width field (≤ 8 bytes) to its
// little-endian bit pattern.
func fixedBits(n *node, v any) (uint64, bool) {
	if i, ok := v.(int); ok {
		switch n.id {
		case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
			arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
			return uint64(i), true
		}
		return 0, false
	}
	switch n.id {
	case arrow.INT8:
		x, ok := v.(int8)
		return uint64(x), ok
	case arrow.UINT8:
		x, ok := v.(uint8)
		return uint64(x), ok
	case arrow.INT16:
		x, ok := v.(int16)
		return uint64(x), ok
	case arrow.UINT16:
		x, ok := v.(uint16)
		return uint64(x), ok
	case arrow.INT32:
		x, ok := v.(int32)
		return uint64(x), ok
	case arrow.UINT32:
		x, ok := v.(uint32)
		return uint64(x), ok
	case arrow.INT64:
		x, ok := v.(int64)
		return uint64(x), ok
	case arrow.UINT64:
		x, ok := v.(uint64)
		return x, ok
	case arrow.FLOAT32:
		x, ok := v.(float32)
		return uint64(math.Float32bits(x)), ok
	case arrow.FLOAT64:
		x, ok := v.(float64)
		return math.Float64bits(x), ok
	case arrow.DATE32:
		x, ok := v.(arrow.Date32)
		return uint64(x), ok
	case arrow.DATE64:
		x, ok := v.(arrow.Date64)
		return uint64(x), ok
	case arrow.TIME32:
		x, ok := v.(arrow.Time32)
		return uint64(x), ok
	case arrow.TIME64:
		x, ok := v.(arrow.Time64)
		return uint64(x), ok
	case arrow.TIMESTAMP:
		x, ok := v.(arrow.Timestamp)
		return uint64(x), ok
	case arrow.DURATION:
		x, ok := v.(arrow.Duration)
		return uint64(x), ok
	}
	return 0, false
}

// DecodeRow decodes one value into Go values (see EncodeRow for the types).
// Strings and byte slices are copies; the result does not alias value.
func (c *Codec) DecodeRow(value []byte) (ttl int64, fields []any, err error) {
	r := reader{b: value}
	if e := c.validate(&r); e != nil {
		return 0, nil, e
	}
	r.pos = 0
	bm, _ := c.header(&r)
	fields = make([]any, len(c.fields))
	for i, f := range c.fields {
		if !isNullBit(bm, i) {
			fields[i] = readGo(f, &r)
		}
	}
	return TTL(value), fields, nil
}

// readGo reads one non-null field of an already validated value.
func readGo(n *node, r *reader) any {
	b := r.b
	switch n.kind {
	case kBool:
		r.pos++
		return b[r.pos-1] == 1
	case kFixed:
		p := r.pos
		r.pos += n.width
		switch n.id {
		case arrow.INT8:
			return int8(b[p])
		case arrow.UINT8:
			return b[p]
		case arrow.INT16:
			return int16(binary.LittleEndian.Uint16(b[p:]))
		case arrow.UINT16:
			return binary.LittleEndian.Uint16(b[p:])
		case arrow.INT32:
			return int32(binary.LittleEndian.Uint32(b[p:]))
		case arrow.UINT32:
			return binary.LittleEndian.Uint32(b[p:])
		case arrow.FLOAT32:
			return math.Float32frombits(binary.LittleEndian.Uint32(b[p:]))
		case arrow.DATE32:
			return arrow.Date32(binary.LittleEndian.Uint32(b[p:]))
		case arrow.TIME32:
			return arrow.Time32(binary.LittleEndian.Uint32(b[p:]))
		case arrow.INT64:
			return int64(binary.LittleEndian.Uint64(b[p:]))
		case arrow.UINT64:
			return binary.LittleEndian.Uint64(b[p:])
		case arrow.FLOAT64:
			return math.Float64frombits(binary.LittleEndian.Uint64(b[p:]))
		case arrow.DATE64:
			return arrow.Date64(binary.LittleEndian.Uint64(b[p:]))
		case arrow.TIME64:
			return arrow.Time64(binary.LittleEndian.Uint64(b[p:]))
		case arrow.TIMESTAMP:
			return arrow.Timestamp(binary.LittleEndian.Uint64(b[p:]))
		case arrow.DURATION:
			return arrow.Duration(binary.LittleEndian.Uint64(b[p:]))
		case arrow.DECIMAL128:
			lo := binary.LittleEndian.Uint64(b[p:])
			hi := int64(binary.LittleEndian.Uint64(b[p+8:]))
			return decimal128.New(hi, lo)
		}
	case kVarLen:
		l, k := binary.Uvarint(b[r.pos:])
		r.pos += k
		s := b[r.pos : r.pos+int(l)]
		r.pos += int(l)
		if n.id == arrow.STRING || n.id == arrow.LARGE_STRING {
			return string(s)
		}
		return append([]byte{}, s...)
	case kStruct:
		bl := bitmapLen(len(n.children))
		bm := b[r.pos : r.pos+bl]
		r.pos += bl
		out := make([]any, len(n.children))
		for i, ch := range n.children {
			if !isNullBit(bm, i) {
				out[i] = readGo(ch, r)
			}
		}
		return out
	case kList:
		k, m := binary.Uvarint(b[r.pos:])
		r.pos += m
		bl := bitmapLen(int(k))
		bm := b[r.pos : r.pos+bl]
		r.pos += bl
		out := make([]any, int(k))
		for i := range out {
			if !isNullBit(bm, i) {
				out[i] = readGo(n.children[0], r)
			}
		}
		return out
	}
	return nil
}
