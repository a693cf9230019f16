package rowcodec

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// kind groups Arrow types by how their values are laid out in a row.
type kind uint8

const (
	kBool   kind = iota + 1
	kFixed       // width bytes, little-endian
	kVarLen      // uvarint length + bytes
	kStruct
	kList
)

// node is the compiled form of one field's type.
type node struct {
	name     string // dotted path for error messages
	kind     kind
	id       arrow.Type
	width    int // kFixed only
	dt       arrow.DataType
	children []*node // struct fields, or the single list element
}

// maxDepth bounds nesting so hostile schemas cannot blow the stack.
const maxDepth = 32

func compile(name string, dt arrow.DataType, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: field %s nests deeper than %d", ErrUnsupportedType, name, maxDepth)
	}
	n := &node{name: name, id: dt.ID(), dt: dt}
	switch dt.ID() {
	case arrow.BOOL:
		n.kind = kBool
	case arrow.INT8, arrow.UINT8:
		n.kind, n.width = kFixed, 1
	case arrow.INT16, arrow.UINT16:
		n.kind, n.width = kFixed, 2
	case arrow.INT32, arrow.UINT32, arrow.FLOAT32, arrow.DATE32, arrow.TIME32:
		n.kind, n.width = kFixed, 4
	case arrow.INT64, arrow.UINT64, arrow.FLOAT64, arrow.DATE64, arrow.TIME64,
		arrow.TIMESTAMP, arrow.DURATION:
		n.kind, n.width = kFixed, 8
	case arrow.DECIMAL128:
		n.kind, n.width = kFixed, 16
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
		n.kind = kVarLen
	case arrow.STRUCT:
		n.kind = kStruct
		st := dt.(*arrow.StructType)
		for i, f := range st.Fields() {
			c, err := compile(fieldPath(name, f.Name, i), f.Type, depth+1)
			if err != nil {
				return nil, err
			}
			n.children = append(n.children, c)
		}
	case arrow.LIST:
		n.kind = kList
		lt := dt.(*arrow.ListType)
		c, err := compile(name+"[]", lt.Elem(), depth+1)
		if err != nil {
			return nil, err
		}
		n.children = []*node{c}
	default:
		return nil, fmt.Errorf("%w: field %s has type %s", ErrUnsupportedType, name, dt)
	}
	return n, nil
}

func fieldPath(parent, name string, i int) string {
	if name == "" {
		name = fmt.Sprintf("#%d", i)
	}
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// Codec encodes and decodes the values of one Arrow schema. It is immutable
// and safe for concurrent use.
type Codec struct {
	schema *arrow.Schema
	fields []*node
	hdr    int // bytes of version + count + top-level bitmap
}

// NewCodec compiles a codec for schema. It fails with ErrUnsupportedType if a
// field (at any depth) has a type the format does not cover.
func NewCodec(schema *arrow.Schema) (*Codec, error) {
	if schema == nil {
		return nil, fmt.Errorf("%w: nil schema", ErrSchemaMismatch)
	}
	var probe = [2]byte{1, 0}
	if binary.NativeEndian.Uint16(probe[:]) != 1 {
		// EncodeBatch copies Arrow's native-endian value buffers verbatim.
		return nil, fmt.Errorf("%w: the codec needs a little-endian host", ErrUnsupportedType)
	}
	c := &Codec{schema: schema}
	for i, f := range schema.Fields() {
		n, err := compile(fieldPath("", f.Name, i), f.Type, 0)
		if err != nil {
			return nil, err
		}
		c.fields = append(c.fields, n)
	}
	nf := len(c.fields)
	c.hdr = 1 + uvarintLen(uint64(nf)) + bitmapLen(nf)
	return c, nil
}

// Schema returns the schema the codec was built for.
func (c *Codec) Schema() *arrow.Schema { return c.schema }

// NumFields returns the number of top-level fields.
func (c *Codec) NumFields() int { return len(c.fields) }
