package rowcodec

import (
	"encoding/binary"
	"fmt"
)

// reader walks one value. It never reads past b and records the first
// failure as a *DecodeError.
type reader struct {
	b   []byte
	pos int
	idx int
	err *DecodeError
}

func (r *reader) fail(field string, err error) bool {
	if r.err == nil {
		r.err = &DecodeError{Index: r.idx, Offset: r.pos, Field: field, Err: err}
	}
	return false
}

func (r *reader) failf(field, format string, args ...any) bool {
	return r.fail(field, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...)))
}

func (r *reader) need(field string, n int) bool {
	if n < 0 || len(r.b)-r.pos < n {
		return r.fail(field, fmt.Errorf("%w: need %d bytes, %d left", ErrTruncated, n, len(r.b)-r.pos))
	}
	return true
}

// uvarint reads a length or count and bounds it by perByte times the bytes
// that remain after it.
func (r *reader) uvarint(field string, perByte int) (int, bool) {
	v, n := binary.Uvarint(r.b[r.pos:])
	if n == 0 {
		return 0, r.fail(field, fmt.Errorf("%w: varint runs past the end", ErrTruncated))
	}
	if n < 0 {
		return 0, r.failf(field, "varint overflows 64 bits")
	}
	if n > 1 && r.b[r.pos+n-1] == 0 {
		return 0, r.failf(field, "non-minimal varint")
	}
	if left := len(r.b) - r.pos - n; v > uint64(left)*uint64(perByte) {
		return 0, r.fail(field, fmt.Errorf("%w: length %d exceeds the %d bytes left", ErrCorrupt, v, left))
	}
	r.pos += n
	return int(v), true
}

// bitmap reads a null bitmap for n entries and checks its padding bits.
func (r *reader) bitmap(field string, n int) ([]byte, bool) {
	bl := bitmapLen(n)
	if !r.need(field, bl) {
		return nil, false
	}
	bm := r.b[r.pos : r.pos+bl]
	if rem := n & 7; rem != 0 && bm[bl-1]>>uint(rem) != 0 {
		return nil, r.failf(field, "null bitmap has bits set past entry %d", n)
	}
	r.pos += bl
	return bm, true
}

// header checks prefix, version and field count, and returns the top-level
// bitmap. r.pos is left at the first field.
func (c *Codec) header(r *reader) ([]byte, bool) {
	if !r.need("", minValueSize) {
		return nil, false
	}
	r.pos = TTLSize
	if _, ok := parseHeaderByte(r.b[r.pos]); !ok {
		v := r.b[r.pos]
		return nil, r.fail("", fmt.Errorf("%w: 0x%02x", ErrVersion, v))
	}
	r.pos++
	n, ok := r.uvarint("", 8)
	if !ok {
		return nil, false
	}
	if n != len(c.fields) {
		r.pos--
		return nil, r.fail("", fmt.Errorf("%w: value has %d fields, schema has %d", ErrSchemaMismatch, n, len(c.fields)))
	}
	return r.bitmap("", n)
}

// skip validates one non-null field and moves past it.
func skip(n *node, r *reader, depth int) bool {
	switch n.kind {
	case kBool:
		if !r.need(n.name, 1) {
			return false
		}
		if r.b[r.pos] > 1 {
			return r.failf(n.name, "bool byte 0x%02x", r.b[r.pos])
		}
		r.pos++
	case kFixed:
		if !r.need(n.name, n.width) {
			return false
		}
		r.pos += n.width
	case kVarLen:
		l, ok := r.uvarint(n.name, 1)
		if !ok {
			return false
		}
		r.pos += l
	case kStruct:
		bm, ok := r.bitmap(n.name, len(n.children))
		if !ok {
			return false
		}
		for i, ch := range n.children {
			if !isNullBit(bm, i) && !skip(ch, r, depth+1) {
				return false
			}
		}
	case kList:
		// Every element costs at least its bitmap bit.
		k, ok := r.uvarint(n.name, 8)
		if !ok {
			return false
		}
		bm, ok := r.bitmap(n.name, k)
		if !ok {
			return false
		}
		for i := 0; i < k; i++ {
			if !isNullBit(bm, i) && !skip(n.children[0], r, depth+1) {
				return false
			}
		}
	default:
		return r.failf(n.name, "internal: unknown kind %d", n.kind)
	}
	return true
}

// Validate checks that value is a well-formed value of the codec's schema
// without building anything.
func (c *Codec) Validate(value []byte) error {
	r := reader{b: value}
	if err := c.validate(&r); err != nil {
		return err
	}
	return nil
}

func (c *Codec) validate(r *reader) *DecodeError { return c.validateSized(r, nil, nil) }

// validateSized is validate that also adds the encoded size of every
// non-null top-level field j to sizes[j] and records the field's start in
// pos[j] (-1 for null), each when not nil.
func (c *Codec) validateSized(r *reader, sizes []int, pos []int) *DecodeError {
	bm, ok := c.header(r)
	if !ok {
		return r.err
	}
	for i, f := range c.fields {
		if isNullBit(bm, i) {
			if pos != nil {
				pos[i] = -1
			}
			continue
		}
		p := r.pos
		if pos != nil {
			pos[i] = p
		}
		if f.kind == kFixed && len(r.b)-p >= f.width {
			r.pos += f.width // the common case, without the call
		} else if !skip(f, r, 0) {
			return r.err
		}
		if sizes != nil {
			sizes[i] += r.pos - p
		}
	}
	if r.pos != len(r.b) {
		r.failf("", "%d trailing bytes after the last field", len(r.b)-r.pos)
		return r.err
	}
	return nil
}
