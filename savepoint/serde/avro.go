package serde

// Avro values in Flink state. AvroSerializer writes a datum with Flink's
// own Avro Encoder (DataOutputEncoder), not Avro's binary encoding; the
// reader walks the writer schema kept in the AvroSerializerSnapshot:
//
//	null             nothing
//	boolean          u8
//	int, enum        i32 (big-endian)
//	long             i64
//	float, double    IEEE 754, big-endian
//	bytes, string    i32 length, bytes (UTF-8 for strings)
//	fixed            size bytes
//	union            i32 branch index, then the branch's value
//	record           the fields in schema order
//	array, map       blocks: a count as a var-length long (7-bit groups,
//	                 least significant first), that many items (map: a
//	                 string key then the value); a count of 0 ends them
//
// The schema is Avro's JSON form, parsed here (named types, namespaces,
// unions, logical types kept as their underlying type).

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// avroNode is one parsed Avro schema node.
type avroNode struct {
	typ      string // null, boolean, int, long, float, double, bytes, string, record, enum, array, map, union, fixed
	name     string // full name of named types
	fields   []avroField
	items    *avroNode // array items, map values
	branches []*avroNode
	symbols  []string
	size     int
}

type avroField struct {
	name string
	node *avroNode
}

const (
	maxAvroDepth  = 64
	maxAvroSchema = 1 << 16 // schema nodes
)

// parseAvroSchema parses an Avro schema in JSON form.
func parseAvroSchema(js string) (*avroNode, error) {
	var v any
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		return nil, fmt.Errorf("avro schema: %w", err)
	}
	p := &avroParser{named: map[string]*avroNode{}}
	return p.node(v, "", 0)
}

type avroParser struct {
	named map[string]*avroNode
	nodes int
}

func avroFullName(name, ns string) string {
	if strings.Contains(name, ".") || ns == "" {
		return name
	}
	return ns + "." + name
}

func (p *avroParser) node(v any, ns string, depth int) (*avroNode, error) {
	if depth > maxAvroDepth {
		return nil, fmt.Errorf("avro schema nested deeper than %d", maxAvroDepth)
	}
	if p.nodes++; p.nodes > maxAvroSchema {
		return nil, fmt.Errorf("avro schema of more than %d nodes", maxAvroSchema)
	}
	switch x := v.(type) {
	case string:
		switch x {
		case "null", "boolean", "int", "long", "float", "double", "bytes", "string":
			return &avroNode{typ: x}, nil
		}
		for _, n := range []string{avroFullName(x, ns), x} {
			if t, ok := p.named[n]; ok {
				return t, nil
			}
		}
		return nil, fmt.Errorf("avro schema: unknown type %q", x)
	case []any:
		u := &avroNode{typ: "union"}
		for _, b := range x {
			n, err := p.node(b, ns, depth+1)
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, n)
		}
		return u, nil
	case map[string]any:
		t, _ := x["type"].(string)
		name, _ := x["name"].(string)
		if sns, ok := x["namespace"].(string); ok {
			ns = sns
		}
		switch t {
		case "record", "error", "enum", "fixed":
			full := avroFullName(name, ns)
			if i := strings.LastIndexByte(full, '.'); i >= 0 {
				ns = full[:i]
			}
			n := &avroNode{typ: t, name: full}
			if t == "error" {
				n.typ = "record"
			}
			p.named[full] = n // before the fields: records may refer to themselves
			switch t {
			case "enum":
				syms, _ := x["symbols"].([]any)
				for _, s := range syms {
					str, ok := s.(string)
					if !ok {
						return nil, fmt.Errorf("avro schema: enum %s symbol %v", full, s)
					}
					n.symbols = append(n.symbols, str)
				}
			case "fixed":
				sz, ok := x["size"].(float64)
				if !ok || sz < 0 || sz > math.MaxInt32 {
					return nil, fmt.Errorf("avro schema: fixed %s size %v", full, x["size"])
				}
				n.size = int(sz)
			default:
				fs, ok := x["fields"].([]any)
				if !ok {
					return nil, fmt.Errorf("avro schema: record %s without fields", full)
				}
				for _, f := range fs {
					fm, ok := f.(map[string]any)
					if !ok {
						return nil, fmt.Errorf("avro schema: record %s field %v", full, f)
					}
					fn, _ := fm["name"].(string)
					ft, err := p.node(fm["type"], ns, depth+1)
					if err != nil {
						return nil, err
					}
					n.fields = append(n.fields, avroField{name: fn, node: ft})
				}
			}
			return n, nil
		case "array", "map":
			key := "items"
			if t == "map" {
				key = "values"
			}
			it, err := p.node(x[key], ns, depth+1)
			if err != nil {
				return nil, err
			}
			return &avroNode{typ: t, items: it}, nil
		case "":
			return nil, fmt.Errorf("avro schema: object without a type")
		default:
			// A primitive with attributes (logical types).
			return p.node(t, ns, depth+1)
		}
	}
	return nil, fmt.Errorf("avro schema: unexpected %T", v)
}

// String renders the schema's type, e.g. RECORD<com.example.User>.
func (n *avroNode) String() string {
	switch n.typ {
	case "record", "enum", "fixed":
		return strings.ToUpper(n.typ) + "<" + n.name + ">"
	}
	return strings.ToUpper(n.typ)
}

// avroMinWidth is the fewest bytes a value of n takes.
func avroMinWidth(n *avroNode, depth int) int {
	switch n.typ {
	case "boolean":
		return 1
	case "int", "enum", "float", "bytes", "string", "union":
		return 4
	case "long", "double":
		return 8
	case "fixed":
		return n.size
	case "array", "map":
		return 1
	case "record":
		if depth > maxAvroDepth {
			return 0
		}
		w := 0
		for _, f := range n.fields {
			if w += avroMinWidth(f.node, depth+1); w > 1<<20 {
				return 1 << 20
			}
		}
		return w
	}
	return 0
}

// readVarLongCount reads a block count (DataOutputEncoder.writeVarLongCount).
func readVarLongCount(d *binfmt.Decbuf) (int64, bool) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c := d.U8()
		if d.Err() != nil {
			return 0, false
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if v > math.MaxInt64 {
				break
			}
			return int64(v), true
		}
	}
	d.Failf("avro block count longer than 10 bytes")
	return 0, false
}

func decodeAvro(d *binfmt.Decbuf, n *avroNode, depth int) Value {
	if d.Err() != nil {
		return nil
	}
	if depth > maxAvroDepth {
		d.Failf("avro value nested deeper than %d", maxAvroDepth)
		return nil
	}
	switch n.typ {
	case "null":
		return nil
	case "boolean":
		return d.Bool()
	case "int":
		return d.I32()
	case "long":
		return d.I64()
	case "float":
		return d.F32()
	case "double":
		return d.F64()
	case "bytes", "string":
		l := d.Count("avro "+n.typ+" length", math.MaxInt32, 1)
		b := d.Bytes(l)
		if d.Err() != nil {
			return nil
		}
		if n.typ == "string" {
			return string(b)
		}
		return append([]byte(nil), b...)
	case "fixed":
		b := d.Bytes(n.size)
		if d.Err() != nil {
			return nil
		}
		return append([]byte(nil), b...)
	case "enum":
		at := d.Offset()
		i := d.I32()
		if d.Err() != nil {
			return nil
		}
		if i < 0 || int(i) >= len(n.symbols) {
			d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: avro enum %s index %d of %d", binfmt.ErrCorrupt, n.name, i, len(n.symbols))})
			return nil
		}
		return n.symbols[i]
	case "union":
		at := d.Offset()
		i := d.I32()
		if d.Err() != nil {
			return nil
		}
		if i < 0 || int(i) >= len(n.branches) {
			d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: avro union branch %d of %d", binfmt.ErrCorrupt, i, len(n.branches))})
			return nil
		}
		return decodeAvro(d, n.branches[i], depth+1)
	case "record":
		o := make(Object, len(n.fields))
		for i, f := range n.fields {
			o[i] = PojoField{Name: f.name, Value: decodeAvro(d, f.node, depth+1)}
		}
		return o
	case "array", "map":
		var list List
		var m Map
		w := int64(avroMinWidth(n.items, 0))
		if n.typ == "map" {
			w += 4 // the key's length
		}
		var total int64
		for d.Err() == nil {
			at := d.Offset()
			c, ok := readVarLongCount(d)
			if !ok || c == 0 {
				break
			}
			// Items of zero width (nulls) are bounded by count, the others
			// by the bytes left.
			total += c
			if (w > 0 && c > int64(d.Len())/w) || (w == 0 && total > maxZeroWidth) {
				d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: avro block of %d items, %d bytes left", binfmt.ErrCorrupt, c, d.Len())})
				break
			}
			for j := int64(0); j < c && d.Err() == nil; j++ {
				if n.typ == "array" {
					list = append(list, decodeAvro(d, n.items, depth+1))
					continue
				}
				l := d.Count("avro map key length", math.MaxInt32, 1)
				k := string(d.Bytes(l))
				m = append(m, MapEntry{Key: k, Value: decodeAvro(d, n.items, depth+1)})
			}
		}
		if d.Err() != nil {
			return nil
		}
		if n.typ == "map" {
			if m == nil {
				m = Map{}
			}
			return m
		}
		if list == nil {
			list = List{}
		}
		return list
	}
	d.Failf("avro type %q", n.typ)
	return nil
}
