package rowcodec

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Arena holds encoded values back to back in one buffer. Value i is
// Buf[Offs[i]:Offs[i+1]]. EncodeBatch appends to it; Reset empties it and
// keeps the memory, so a steady-state bundle loop allocates nothing.
type Arena struct {
	Buf  []byte
	Offs []int
	cur  []int // per-row write cursors, scratch
}

// Len returns the number of values in the arena.
func (a *Arena) Len() int {
	if len(a.Offs) == 0 {
		return 0
	}
	return len(a.Offs) - 1
}

// Value returns value i. The slice aliases the arena (capacity clipped) and
// is valid until the next Reset.
func (a *Arena) Value(i int) []byte {
	s, e := a.Offs[i], a.Offs[i+1]
	return a.Buf[s:e:e]
}

// Values appends every value to dst and returns it.
func (a *Arena) Values(dst [][]byte) [][]byte {
	for i := 0; i < a.Len(); i++ {
		dst = append(dst, a.Value(i))
	}
	return dst
}

// Reset empties the arena, keeping its memory.
func (a *Arena) Reset() {
	a.Buf = a.Buf[:0]
	a.Offs = a.Offs[:0]
}

// checkRecordSchema reports whether columns of types match the codec.
func (c *Codec) checkTypes(n int, typ func(int) arrow.DataType) error {
	if n != len(c.fields) {
		return fmt.Errorf("%w: %d columns, schema has %d fields", ErrSchemaMismatch, n, len(c.fields))
	}
	for j, f := range c.fields {
		if t := typ(j); !arrow.TypeEqual(t, f.dt) {
			return fmt.Errorf("%w: column %d (%s) is %s, schema says %s", ErrSchemaMismatch, j, f.name, t, f.dt)
		}
	}
	return nil
}

// EncodeBatch appends one value per row of rec to a, in row order. ttl is
// nil (every value gets NoTTL), one timestamp for all rows, or one per row.
// The batch is encoded column by column into one buffer sized up front: no
// allocation per row, and none at all once the arena has grown to size.
func (c *Codec) EncodeBatch(rec arrow.RecordBatch, ttl []int64, a *Arena) error {
	rows := int(rec.NumRows())
	if err := c.checkTypes(int(rec.NumCols()), func(j int) arrow.DataType { return rec.Column(j).DataType() }); err != nil {
		return err
	}
	if len(ttl) > 1 && len(ttl) != rows {
		return fmt.Errorf("%w: %d TTL timestamps for %d rows", ErrSchemaMismatch, len(ttl), rows)
	}
	if len(a.Offs) == 0 {
		a.Offs = append(a.Offs, len(a.Buf))
	}
	base := len(a.Offs) - 1
	start := a.Offs[base]

	// Pass 1: the size of every row.
	a.cur = slices.Grow(a.cur[:0], rows)[:rows]
	sz := a.cur
	fixed := TTLSize + c.hdr
	for i := range sz {
		sz[i] = fixed
	}
	for j, f := range c.fields {
		sizeCol(f, rec.Column(j), sz)
	}
	a.Offs = slices.Grow(a.Offs, rows)
	end := start
	for _, s := range sz {
		end += s
		a.Offs = append(a.Offs, end)
	}
	a.Buf = slices.Grow(a.Buf[:start], end-start)[:end]
	offs := a.Offs[base:]

	// Pass 2: headers, then every column into every row.
	buf := a.Buf
	var hdr [binary.MaxVarintLen64 + 1]byte
	hdr[0] = FormatV1
	hl := 1 + binary.PutUvarint(hdr[1:], uint64(len(c.fields)))
	bmOff := TTLSize + hl
	bml := bitmapLen(len(c.fields))
	cur := a.cur
	for i := 0; i < rows; i++ {
		p := offs[i]
		ts := NoTTL
		if len(ttl) == 1 {
			ts = ttl[0]
		} else if len(ttl) > 1 {
			ts = ttl[i]
		}
		binary.BigEndian.PutUint64(buf[p:], uint64(ts))
		copy(buf[p+TTLSize:], hdr[:hl])
		clear(buf[p+bmOff : p+bmOff+bml])
		cur[i] = p + bmOff + bml
	}
	for j, f := range c.fields {
		if err := writeCol(f, rec.Column(j), buf, cur, offs, bmOff+j>>3, byte(1)<<(uint(j)&7)); err != nil {
			return err
		}
	}
	for i := 0; i < rows; i++ {
		if cur[i] != offs[i+1] {
			return fmt.Errorf("rowcodec: internal error: row %d encoded to %d bytes, sized %d", i, cur[i]-offs[i], offs[i+1]-offs[i])
		}
	}
	return nil
}

// fixedRaw returns the little-endian value bytes of a fixed-width array,
// starting at its first element.
func fixedRaw(arr arrow.Array, width int) []byte {
	d := arr.Data()
	bufs := d.Buffers()
	if len(bufs) < 2 || bufs[1] == nil {
		return nil
	}
	return bufs[1].Bytes()[d.Offset()*width:]
}

// varData returns the offsets (32- or 64-bit) and data of a string/binary
// array; value i is data[off[i]:off[i+1]].
func varData(arr arrow.Array) (o32 []int32, o64 []int64, data []byte) {
	switch a := arr.(type) {
	case *array.String:
		o32 = a.ValueOffsets()
	case *array.Binary:
		o32 = a.ValueOffsets()
	case *array.LargeString:
		o64 = a.ValueOffsets()
	case *array.LargeBinary:
		o64 = a.ValueOffsets()
	}
	if bufs := arr.Data().Buffers(); len(bufs) > 2 && bufs[2] != nil {
		data = bufs[2].Bytes()
	}
	return
}

func varBytes(arr arrow.Array, i int) []byte {
	o32, o64, data := varData(arr)
	if o32 != nil {
		return data[o32[i]:o32[i+1]]
	}
	return data[o64[i]:o64[i+1]]
}

func sizeCol(n *node, arr arrow.Array, sz []int) {
	nulls := arr.NullN() > 0
	switch n.kind {
	case kBool, kFixed:
		w := n.width
		if n.kind == kBool {
			w = 1
		}
		for i := range sz {
			if !nulls || arr.IsValid(i) {
				sz[i] += w
			}
		}
	case kVarLen:
		o32, o64, _ := varData(arr)
		for i := range sz {
			if nulls && arr.IsNull(i) {
				continue
			}
			var l int
			if o32 != nil {
				l = int(o32[i+1] - o32[i])
			} else {
				l = int(o64[i+1] - o64[i])
			}
			sz[i] += l + uvarintLen(uint64(l))
		}
	default:
		for i := range sz {
			if !nulls || arr.IsValid(i) {
				sz[i] += sizeValue(n, arr, i)
			}
		}
	}
}

// writeCol writes column arr into every row: its value at cur[i], or its
// null bit at offs[i]+bmByte.
func writeCol(n *node, arr arrow.Array, buf []byte, cur, offs []int, bmByte int, bit byte) error {
	nulls := arr.NullN() > 0
	rows := len(cur)
	switch n.kind {
	case kBool:
		b := arr.(*array.Boolean)
		for i := 0; i < rows; i++ {
			if nulls && b.IsNull(i) {
				buf[offs[i]+bmByte] |= bit
				continue
			}
			var v byte
			if b.Value(i) {
				v = 1
			}
			buf[cur[i]] = v
			cur[i]++
		}
	case kFixed:
		raw := fixedRaw(arr, n.width)
		switch n.width {
		case 8:
			for i := 0; i < rows; i++ {
				if nulls && arr.IsNull(i) {
					buf[offs[i]+bmByte] |= bit
					continue
				}
				binary.LittleEndian.PutUint64(buf[cur[i]:], binary.LittleEndian.Uint64(raw[i*8:]))
				cur[i] += 8
			}
		case 4:
			for i := 0; i < rows; i++ {
				if nulls && arr.IsNull(i) {
					buf[offs[i]+bmByte] |= bit
					continue
				}
				binary.LittleEndian.PutUint32(buf[cur[i]:], binary.LittleEndian.Uint32(raw[i*4:]))
				cur[i] += 4
			}
		default:
			w := n.width
			for i := 0; i < rows; i++ {
				if nulls && arr.IsNull(i) {
					buf[offs[i]+bmByte] |= bit
					continue
				}
				copy(buf[cur[i]:cur[i]+w], raw[i*w:])
				cur[i] += w
			}
		}
	case kVarLen:
		o32, o64, data := varData(arr)
		for i := 0; i < rows; i++ {
			if nulls && arr.IsNull(i) {
				buf[offs[i]+bmByte] |= bit
				continue
			}
			var s []byte
			if o32 != nil {
				s = data[o32[i]:o32[i+1]]
			} else {
				s = data[o64[i]:o64[i+1]]
			}
			p := cur[i]
			p += binary.PutUvarint(buf[p:], uint64(len(s)))
			p += copy(buf[p:], s)
			cur[i] = p
		}
	default:
		for i := 0; i < rows; i++ {
			if nulls && arr.IsNull(i) {
				buf[offs[i]+bmByte] |= bit
				continue
			}
			p := cur[i]
			// The row's slot was sized exactly; capping the capacity at the
			// row end turns a sizing bug into an error instead of an overwrite.
			out := appendValue(buf[p:p:offs[i+1]], n, arr, i)
			if len(out) > offs[i+1]-p || (len(out) > 0 && &out[0] != &buf[p]) {
				return fmt.Errorf("rowcodec: internal error: field %s of row %d outgrew its size", n.name, i)
			}
			cur[i] = p + len(out)
		}
	}
	return nil
}

// sizeValue is the encoded size of non-null element i of arr.
func sizeValue(n *node, arr arrow.Array, i int) int {
	switch n.kind {
	case kBool:
		return 1
	case kFixed:
		return n.width
	case kVarLen:
		l := len(varBytes(arr, i))
		return l + uvarintLen(uint64(l))
	case kStruct:
		st := arr.(*array.Struct)
		s := bitmapLen(len(n.children))
		for k, ch := range n.children {
			f := st.Field(k)
			if f.IsValid(i) {
				s += sizeValue(ch, f, i)
			}
		}
		return s
	case kList:
		l := arr.(*array.List)
		b, e := l.ValueOffsets(i)
		k := int(e - b)
		vals := l.ListValues()
		s := uvarintLen(uint64(k)) + bitmapLen(k)
		for x := int(b); x < int(e); x++ {
			if vals.IsValid(x) {
				s += sizeValue(n.children[0], vals, x)
			}
		}
		return s
	}
	return 0
}

// appendValue appends non-null element i of arr (row by row; used for
// struct and list columns).
func appendValue(dst []byte, n *node, arr arrow.Array, i int) []byte {
	switch n.kind {
	case kBool:
		if arr.(*array.Boolean).Value(i) {
			return append(dst, 1)
		}
		return append(dst, 0)
	case kFixed:
		w := n.width
		return append(dst, fixedRaw(arr, w)[i*w:i*w+w]...)
	case kVarLen:
		s := varBytes(arr, i)
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		return append(dst, s...)
	case kStruct:
		st := arr.(*array.Struct)
		bm := len(dst)
		for range bitmapLen(len(n.children)) {
			dst = append(dst, 0)
		}
		for k, ch := range n.children {
			f := st.Field(k)
			if f.IsNull(i) {
				dst[bm+k>>3] |= 1 << (uint(k) & 7)
				continue
			}
			dst = appendValue(dst, ch, f, i)
		}
		return dst
	case kList:
		l := arr.(*array.List)
		b, e := l.ValueOffsets(i)
		k := int(e - b)
		vals := l.ListValues()
		dst = binary.AppendUvarint(dst, uint64(k))
		bm := len(dst)
		for range bitmapLen(k) {
			dst = append(dst, 0)
		}
		for x := 0; x < k; x++ {
			if vals.IsNull(int(b) + x) {
				dst[bm+x>>3] |= 1 << (uint(x) & 7)
				continue
			}
			dst = appendValue(dst, n.children[0], vals, int(b)+x)
		}
		return dst
	}
	return dst
}

// DecodeBatch decodes values and appends one row per value to b, in order.
// It returns the TTL prefix of every value. Values are copied into the
// builders; the input may be released afterwards.
//
// The whole batch is validated before anything is appended, so on error b
// is left as it was and the *DecodeError names the failing value.
func (c *Codec) DecodeBatch(values [][]byte, b *array.RecordBuilder) ([]int64, error) {
	return c.AppendBatch(make([]int64, 0, len(values)), values, b)
}

// posPool recycles the per-batch table of field positions.
var posPool = sync.Pool{New: func() any { return new([]int) }}

// AppendBatch is DecodeBatch appending the TTLs to ttls (to reuse a slice).
func (c *Codec) AppendBatch(ttls []int64, values [][]byte, b *array.RecordBuilder) ([]int64, error) {
	bs := b.Schema()
	if err := c.checkTypes(bs.NumFields(), func(j int) arrow.DataType { return bs.Field(j).Type }); err != nil {
		return ttls, err
	}
	nf := len(c.fields)
	// Pass 1: validate everything, note where each top-level field starts
	// and total the variable-length bytes so string builders grow once.
	var stack [16]int
	sizes := stack[:0]
	if nf <= len(stack) {
		sizes = stack[:nf]
	} else {
		sizes = make([]int, nf)
	}
	pp := posPool.Get().(*[]int)
	defer posPool.Put(pp)
	pos := slices.Grow((*pp)[:0], len(values)*nf)[:len(values)*nf]
	*pp = pos
	for i, v := range values {
		r := reader{b: v, idx: i}
		if err := c.validateSized(&r, sizes, pos[i*nf:i*nf+nf]); err != nil {
			return ttls, err
		}
	}
	for _, v := range values {
		ttls = append(ttls, int64(binary.BigEndian.Uint64(v)))
	}
	if len(values) == 0 {
		return ttls, nil
	}
	// Pass 2: every value is known to be well formed; fill one column at a
	// time so the type dispatch happens once per column, not per value.
	for j, f := range c.fields {
		bld := b.Field(j)
		bld.Reserve(len(values))
		if f.kind == kVarLen {
			if x, ok := bld.(interface{ ReserveData(int) }); ok {
				x.ReserveData(sizes[j])
			}
		}
		decodeColumn(f, bld, values, pos[j:], nf)
	}
	return ttls, nil
}

// decodeColumn appends top-level field f of every value to bld; the field
// of value i starts at pos[i*stride] (-1: null). bld has room reserved for
// len(values) entries.
func decodeColumn(f *node, bld array.Builder, values [][]byte, pos []int, stride int) {
	le := binary.LittleEndian
	switch x := bld.(type) {
	case *array.Int64Builder:
		for i, v := range values {
			if p := pos[i*stride]; p >= 0 {
				x.UnsafeAppend(int64(le.Uint64(v[p:])))
			} else {
				x.UnsafeAppendBoolToBitmap(false)
			}
		}
	case *array.Float64Builder:
		for i, v := range values {
			if p := pos[i*stride]; p >= 0 {
				x.UnsafeAppend(math.Float64frombits(le.Uint64(v[p:])))
			} else {
				x.UnsafeAppendBoolToBitmap(false)
			}
		}
	case *array.Int32Builder:
		for i, v := range values {
			if p := pos[i*stride]; p >= 0 {
				x.UnsafeAppend(int32(le.Uint32(v[p:])))
			} else {
				x.UnsafeAppendBoolToBitmap(false)
			}
		}
	case *array.TimestampBuilder:
		for i, v := range values {
			if p := pos[i*stride]; p >= 0 {
				x.UnsafeAppend(arrow.Timestamp(le.Uint64(v[p:])))
			} else {
				x.UnsafeAppendBoolToBitmap(false)
			}
		}
	default:
		var bb *array.BinaryBuilder
		switch y := bld.(type) {
		case *array.StringBuilder:
			bb = y.BinaryBuilder
		case *array.LargeStringBuilder:
			bb = y.BinaryBuilder
		case *array.BinaryBuilder:
			bb = y
		}
		for i, v := range values {
			p := pos[i*stride]
			switch {
			case p < 0:
				bld.AppendNull()
			case bb != nil:
				l, k := binary.Uvarint(v[p:])
				bb.Append(v[p+k : p+k+int(l)])
			default:
				appendField(f, bld, v, p)
			}
		}
	}
}

// appendField appends the non-null field at b[pos:] of a validated value to
// bld and returns the position after it.
func appendField(n *node, bld array.Builder, b []byte, pos int) int {
	switch n.id {
	case arrow.BOOL:
		bld.(*array.BooleanBuilder).Append(b[pos] == 1)
		return pos + 1
	case arrow.INT8:
		bld.(*array.Int8Builder).Append(int8(b[pos]))
	case arrow.UINT8:
		bld.(*array.Uint8Builder).Append(b[pos])
	case arrow.INT16:
		bld.(*array.Int16Builder).Append(int16(binary.LittleEndian.Uint16(b[pos:])))
	case arrow.UINT16:
		bld.(*array.Uint16Builder).Append(binary.LittleEndian.Uint16(b[pos:]))
	case arrow.INT32:
		bld.(*array.Int32Builder).Append(int32(binary.LittleEndian.Uint32(b[pos:])))
	case arrow.UINT32:
		bld.(*array.Uint32Builder).Append(binary.LittleEndian.Uint32(b[pos:]))
	case arrow.FLOAT32:
		bld.(*array.Float32Builder).Append(math.Float32frombits(binary.LittleEndian.Uint32(b[pos:])))
	case arrow.DATE32:
		bld.(*array.Date32Builder).Append(arrow.Date32(binary.LittleEndian.Uint32(b[pos:])))
	case arrow.TIME32:
		bld.(*array.Time32Builder).Append(arrow.Time32(binary.LittleEndian.Uint32(b[pos:])))
	case arrow.INT64:
		bld.(*array.Int64Builder).Append(int64(binary.LittleEndian.Uint64(b[pos:])))
	case arrow.UINT64:
		bld.(*array.Uint64Builder).Append(binary.LittleEndian.Uint64(b[pos:]))
	case arrow.FLOAT64:
		bld.(*array.Float64Builder).Append(math.Float64frombits(binary.LittleEndian.Uint64(b[pos:])))
	case arrow.DATE64:
		bld.(*array.Date64Builder).Append(arrow.Date64(binary.LittleEndian.Uint64(b[pos:])))
	case arrow.TIME64:
		bld.(*array.Time64Builder).Append(arrow.Time64(binary.LittleEndian.Uint64(b[pos:])))
	case arrow.TIMESTAMP:
		bld.(*array.TimestampBuilder).Append(arrow.Timestamp(binary.LittleEndian.Uint64(b[pos:])))
	case arrow.DURATION:
		bld.(*array.DurationBuilder).Append(arrow.Duration(binary.LittleEndian.Uint64(b[pos:])))
	case arrow.DECIMAL128:
		lo := binary.LittleEndian.Uint64(b[pos:])
		hi := int64(binary.LittleEndian.Uint64(b[pos+8:]))
		bld.(*array.Decimal128Builder).Append(decimal128.New(hi, lo))
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
		l, k := binary.Uvarint(b[pos:])
		pos += k
		s := b[pos : pos+int(l)]
		switch x := bld.(type) {
		case *array.StringBuilder:
			x.BinaryBuilder.Append(s)
		case *array.LargeStringBuilder:
			x.BinaryBuilder.Append(s)
		case *array.BinaryBuilder:
			x.Append(s)
		}
		return pos + int(l)
	case arrow.STRUCT:
		sb := bld.(*array.StructBuilder)
		sb.Append(true)
		bl := bitmapLen(len(n.children))
		bm := b[pos : pos+bl]
		pos += bl
		for k, ch := range n.children {
			if isNullBit(bm, k) {
				sb.FieldBuilder(k).AppendNull()
				continue
			}
			pos = appendField(ch, sb.FieldBuilder(k), b, pos)
		}
		return pos
	case arrow.LIST:
		lb := bld.(*array.ListBuilder)
		lb.Append(true)
		k, m := binary.Uvarint(b[pos:])
		pos += m
		bl := bitmapLen(int(k))
		bm := b[pos : pos+bl]
		pos += bl
		vb := lb.ValueBuilder()
		for x := 0; x < int(k); x++ {
			if isNullBit(bm, x) {
				vb.AppendNull()
				continue
			}
			pos = appendField(n.children[0], vb, b, pos)
		}
		return pos
	}
	return pos + n.width
}
