// Package javaser parses Java Object Serialization streams (the bytes
// java.io.ObjectOutputStream writes) into a generic object model, without a
// JVM and without knowing the classes involved.
//
// Flink embeds such streams in a few places that a savepoint reader must get
// through: the CheckpointProperties trailer of V4+ _metadata files, the
// LogicalType of every field inside a RowDataSerializerSnapshot, the DataType
// of an ExternalSerializerSnapshot, and JavaSerializer operator state.
//
// # Grammar covered
//
// The stream magic AC ED 00 05 followed by contents: TC_OBJECT, TC_CLASS,
// TC_ARRAY, TC_STRING, TC_LONGSTRING, TC_ENUM, TC_CLASSDESC,
// TC_PROXYCLASSDESC, TC_REFERENCE, TC_NULL, TC_BLOCKDATA, TC_BLOCKDATALONG,
// TC_RESET and TC_EXCEPTION. Class data is read per class of the hierarchy
// (super-most first): declared field values for SC_SERIALIZABLE classes,
// followed by the raw annotation (block data and objects up to
// TC_ENDBLOCKDATA) when SC_WRITE_METHOD is set; SC_EXTERNALIZABLE classes
// written with SC_BLOCK_DATA keep their annotation. Externalizable data in
// the pre-1.2 protocol (no SC_BLOCK_DATA) cannot be delimited and is
// rejected.
//
// # Model
//
// A content value is one of: nil (TC_NULL), string (TC_STRING and
// TC_LONGSTRING), *Object, *Enum, *Array, *Class, *ClassDesc, BlockData,
// *Exception. Primitive field values are int8 (B), uint16 (C), float64 (D),
// float32 (F), int32 (I), int64 (J), int16 (S) and bool (Z). Back
// references resolve to the same Go pointer as the first occurrence, so an
// object graph may contain cycles; code that walks it must bound its depth.
//
// # Limits
//
// Nesting is bounded (Options.MaxDepth, default 256) and every length or
// count read from the stream is checked against the bytes that remain before
// anything is allocated, so hostile input yields an error, never a panic or
// a large allocation. Errors carry the absolute offset of the failing byte.
package javaser

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// Stream constants from java.io.ObjectStreamConstants. They are part of the
// wire format.
const (
	StreamMagic   = 0xACED
	StreamVersion = 5

	TCNull           = 0x70
	TCReference      = 0x71
	TCClassDesc      = 0x72
	TCObject         = 0x73
	TCString         = 0x74
	TCArray          = 0x75
	TCClass          = 0x76
	TCBlockData      = 0x77
	TCEndBlockData   = 0x78
	TCReset          = 0x79
	TCBlockDataLong  = 0x7A
	TCException      = 0x7B
	TCLongString     = 0x7C
	TCProxyClassDesc = 0x7D
	TCEnum           = 0x7E

	BaseWireHandle = 0x7E0000

	SCWriteMethod    = 0x01
	SCBlockData      = 0x08
	SCSerializable   = 0x02
	SCExternalizable = 0x04
	SCEnum           = 0x10
)

// ErrFormat marks a stream that violates the serialization grammar.
var ErrFormat = errclass.New(errclass.ErrCorrupt, "javaser: malformed stream")

// DefaultMaxDepth bounds object nesting when Options.MaxDepth is zero.
const DefaultMaxDepth = 256

// Options tunes parsing.
type Options struct {
	// MaxDepth bounds the nesting of objects, arrays and class descriptors.
	MaxDepth int
}

// FieldDesc is one serializable field of a class descriptor.
type FieldDesc struct {
	// Type is the typecode: one of B C D F I J S Z (primitives), L (object)
	// or [ (array).
	Type byte
	Name string
	// ClassName is the JVM type signature of object and array fields, e.g.
	// "Ljava/lang/String;" or "[I".
	ClassName string
}

// ClassDesc is a class descriptor (TC_CLASSDESC or TC_PROXYCLASSDESC).
type ClassDesc struct {
	Name        string
	SerialUID   int64
	Flags       byte
	Fields      []FieldDesc
	Annotations []any
	Super       *ClassDesc
	// Proxy is set for dynamic proxy descriptors; Interfaces then lists the
	// proxy's interface names and Name is empty.
	Proxy      bool
	Interfaces []string
}

// Hierarchy returns the descriptor chain from the super-most class down to d.
func (d *ClassDesc) Hierarchy() []*ClassDesc {
	var chain []*ClassDesc
	for c := d; c != nil && len(chain) < 1<<12; c = c.Super {
		chain = append(chain, c)
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain
}

// ClassData holds the serialized state one class of an object's hierarchy
// contributed.
type ClassData struct {
	Class *ClassDesc
	// Values holds one value per Class.Fields entry, in the same order.
	Values []any
	// Annotations holds what a writeObject/writeExternal method wrote after
	// the default fields: BlockData chunks and objects, in stream order.
	Annotations []any
}

// Object is a TC_OBJECT instance.
type Object struct {
	Class *ClassDesc
	// Data is ordered from the super-most serializable class to Class.
	Data []ClassData
}

// ClassName returns the object's class name ("" for nil).
func (o *Object) ClassName() string {
	if o == nil || o.Class == nil {
		return ""
	}
	return o.Class.Name
}

// Field returns the value of the named field, searching from the object's
// own class towards its super classes (so a subclass field shadows one of
// the same name in a super class).
func (o *Object) Field(name string) (any, bool) {
	if o == nil {
		return nil, false
	}
	for i := len(o.Data) - 1; i >= 0; i-- {
		cd := o.Data[i]
		for j, f := range cd.Class.Fields {
			if f.Name == name && j < len(cd.Values) {
				return cd.Values[j], true
			}
		}
	}
	return nil, false
}

// String returns the named field as a string ("" when missing or not a
// string).
func (o *Object) String(name string) string {
	v, _ := o.Field(name)
	s, _ := v.(string)
	return s
}

// Int returns the named int/short/byte/long/char field as an int64.
func (o *Object) Int(name string) (int64, bool) {
	v, ok := o.Field(name)
	if !ok {
		return 0, false
	}
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	}
	return 0, false
}

// Bool returns the named boolean field.
func (o *Object) Bool(name string) (bool, bool) {
	v, ok := o.Field(name)
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	return b, ok
}

// Object returns the named field as an *Object (nil when missing, null or of
// another kind).
func (o *Object) Object(name string) *Object {
	v, _ := o.Field(name)
	x, _ := v.(*Object)
	return x
}

// Annotations returns the annotation contents written by the named class of
// the hierarchy (nil when that class wrote none).
func (o *Object) Annotations(className string) []any {
	if o == nil {
		return nil
	}
	for _, cd := range o.Data {
		if cd.Class.Name == className {
			return cd.Annotations
		}
	}
	return nil
}

// Enum is a TC_ENUM constant.
type Enum struct {
	Class    *ClassDesc
	Constant string
}

// Array is a TC_ARRAY. Values holds a typed Go slice: []int8, []uint16,
// []float64, []float32, []int32, []int64, []int16, []bool for primitive
// component types, []any for object arrays.
type Array struct {
	Class  *ClassDesc
	Values any
}

// Class is a TC_CLASS value (a java.lang.Class instance).
type Class struct {
	Desc *ClassDesc
}

// BlockData is a chunk of raw bytes written with the DataOutput methods of
// an ObjectOutputStream (TC_BLOCKDATA / TC_BLOCKDATALONG).
type BlockData []byte

// Exception is a TC_EXCEPTION record: the Throwable that aborted the write.
type Exception struct {
	Throwable any
}

// Stream is one parsed object stream.
type Stream struct {
	// Raw is the exact bytes of the stream, magic included, so a writer can
	// re-emit it unchanged.
	Raw []byte
	// Contents are the top-level values in stream order.
	Contents []any
}

// First returns the first top-level value that is not block data.
func (s *Stream) First() any {
	for _, c := range s.Contents {
		if _, ok := c.(BlockData); !ok {
			return c
		}
	}
	return nil
}

// Parse parses b as one complete stream whose contents run to the end of b.
// base is b's offset in its file, used in error messages.
func Parse(b []byte, base int64) (*Stream, error) {
	return ParseOptions(b, base, Options{})
}

// ParseOptions is Parse with explicit limits.
func ParseOptions(b []byte, base int64, opt Options) (*Stream, error) {
	p := newParser(b, base, opt)
	p.magic()
	var out []any
	for p.err == nil && p.d.Len() > 0 {
		v := p.content(0, true)
		if p.err != nil {
			break
		}
		if v == resetMarker {
			continue
		}
		out = append(out, v)
	}
	if p.err != nil {
		return nil, p.err
	}
	return &Stream{Raw: b, Contents: out}, nil
}

// ParseOne parses a stream header followed by exactly one top-level object
// (as written by one ObjectOutputStream.writeObject on a fresh stream) from
// the start of b, and returns it with the number of bytes consumed. Bytes
// after the object are left alone: this is how Flink embeds objects inside
// its own binary formats.
func ParseOne(b []byte, base int64) (*Stream, int, error) {
	return ParseOneOptions(b, base, Options{})
}

// ParseOneOptions is ParseOne with explicit limits.
func ParseOneOptions(b []byte, base int64, opt Options) (*Stream, int, error) {
	p := newParser(b, base, opt)
	p.magic()
	var v any
	for p.err == nil {
		v = p.content(0, false)
		if v != resetMarker {
			break
		}
	}
	if p.err != nil {
		return nil, 0, p.err
	}
	n := p.d.Pos
	return &Stream{Raw: b[:n:n], Contents: []any{v}}, n, nil
}

type marker int

const (
	endBlockMarker marker = iota + 1
	resetMarker
)

type parser struct {
	d        *binfmt.Decbuf
	handles  []any
	maxDepth int
	err      error
}

func newParser(b []byte, base int64, opt Options) *parser {
	md := opt.MaxDepth
	if md <= 0 {
		md = DefaultMaxDepth
	}
	return &parser{d: binfmt.New(b, base), maxDepth: md}
}

func (p *parser) fail(at int64, format string, args ...any) {
	if p.err == nil {
		p.err = &binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))}
	}
}

// sync copies the decoder's sticky error into the parser.
func (p *parser) sync() bool {
	if p.err == nil && p.d.Err() != nil {
		p.err = p.d.Err()
	}
	return p.err == nil
}

// typeCode reads the type code that starts a content or classDesc element
// at nesting depth, with its offset; ok is false once the parse has failed
// (including for nesting deeper than the limit).
func (p *parser) typeCode(depth int) (tc byte, at int64, ok bool) {
	if p.err != nil {
		return 0, 0, false
	}
	at = p.d.Offset()
	if depth > p.maxDepth {
		p.fail(at, "nesting deeper than %d", p.maxDepth)
		return 0, at, false
	}
	tc = p.d.U8()
	return tc, at, p.sync()
}

func (p *parser) magic() {
	at := p.d.Offset()
	m := p.d.U16()
	v := p.d.U16()
	if !p.sync() {
		return
	}
	if m != StreamMagic || v != StreamVersion {
		p.fail(at, "bad stream header %04x %04x (want aced 0005)", m, v)
	}
}

func (p *parser) newHandle(v any) int {
	p.handles = append(p.handles, v)
	return len(p.handles) - 1
}

func (p *parser) reference(at int64) any {
	h := p.d.I32()
	if !p.sync() {
		return nil
	}
	idx := int64(h) - BaseWireHandle
	if idx < 0 || idx >= int64(len(p.handles)) {
		p.fail(at, "reference to unknown handle 0x%x (%d handles)", h, len(p.handles))
		return nil
	}
	v := p.handles[idx]
	if v == nil {
		// A handle reserved for an object still being read whose slot was
		// never filled (an exception object); treat as an error.
		p.fail(at, "reference to incomplete handle 0x%x", h)
	}
	return v
}

// content reads one content element. top reports whether the caller is the
// top level (TC_RESET and block data are legal there).
func (p *parser) content(depth int, top bool) any {
	tc, at, ok := p.typeCode(depth)
	if !ok {
		return nil
	}
	switch tc {
	case TCNull:
		return nil
	case TCReference:
		return p.reference(at)
	case TCObject:
		return p.object(depth)
	case TCString:
		return p.str(int(p.d.U16()), at)
	case TCLongString:
		n := p.d.I64()
		if !p.sync() {
			return nil
		}
		if n < 0 || n > int64(p.d.Len()) {
			p.fail(at, "long string length %d exceeds remaining %d bytes", n, p.d.Len())
			return nil
		}
		return p.str(int(n), at)
	case TCArray:
		return p.array(depth)
	case TCClass:
		cd := p.classDesc(depth + 1)
		c := &Class{Desc: cd}
		p.newHandle(c)
		return c
	case TCEnum:
		return p.enum(depth)
	case TCClassDesc, TCProxyClassDesc:
		p.d.Pos--
		return p.classDesc(depth + 1)
	case TCBlockData:
		n := int(p.d.U8())
		return BlockData(p.d.Bytes(n))
	case TCBlockDataLong:
		n := p.d.I32()
		if !p.sync() {
			return nil
		}
		if n < 0 {
			p.fail(at, "negative block data length %d", n)
			return nil
		}
		b := p.d.Bytes(int(n))
		p.sync()
		return BlockData(b)
	case TCEndBlockData:
		return endBlockMarker
	case TCReset:
		p.handles = p.handles[:0]
		return resetMarker
	case TCException:
		// The stream's handle table is reset before and after the
		// exception object.
		p.handles = p.handles[:0]
		t := p.content(depth+1, false)
		p.handles = p.handles[:0]
		return &Exception{Throwable: t}
	default:
		p.fail(at, "unknown type code 0x%02x", tc)
		return nil
	}
}

func (p *parser) str(n int, at int64) any {
	b := p.d.Bytes(n)
	if !p.sync() {
		return nil
	}
	s, err := binfmt.DecodeModifiedUTF8(b)
	if err != nil {
		p.fail(at, "string: %v", err)
		return nil
	}
	p.newHandle(s)
	return s
}

// classDesc reads a classDesc production: TC_CLASSDESC, TC_PROXYCLASSDESC,
// TC_NULL or TC_REFERENCE (to a descriptor).
func (p *parser) classDesc(depth int) *ClassDesc {
	tc, at, ok := p.typeCode(depth)
	if !ok {
		return nil
	}
	switch tc {
	case TCNull:
		return nil
	case TCReference:
		v := p.reference(at)
		if p.err != nil {
			return nil
		}
		cd, ok := v.(*ClassDesc)
		if !ok {
			p.fail(at, "reference to %T where a class descriptor was expected", v)
			return nil
		}
		return cd
	case TCClassDesc:
		cd := &ClassDesc{}
		cd.Name = p.d.UTF()
		cd.SerialUID = p.d.I64()
		if !p.sync() {
			return nil
		}
		p.newHandle(cd)
		cd.Flags = p.d.U8()
		nf := int(p.d.U16())
		if !p.sync() {
			return nil
		}
		// Each field takes at least 3 bytes (typecode + empty name).
		if nf*3 > p.d.Len() {
			p.fail(p.d.Offset(), "%d fields exceed the remaining %d bytes", nf, p.d.Len())
			return nil
		}
		cd.Fields = make([]FieldDesc, 0, nf)
		for i := 0; i < nf && p.err == nil; i++ {
			fat := p.d.Offset()
			f := FieldDesc{Type: p.d.U8(), Name: p.d.UTF()}
			if !p.sync() {
				return nil
			}
			switch f.Type {
			case 'B', 'C', 'D', 'F', 'I', 'J', 'S', 'Z':
			case 'L', '[':
				v := p.content(depth+1, false)
				s, ok := v.(string)
				if p.err == nil && !ok {
					p.fail(fat, "field %q type name is %T, want string", f.Name, v)
				}
				f.ClassName = s
			default:
				p.fail(fat, "field %q has unknown type code %q", f.Name, f.Type)
			}
			cd.Fields = append(cd.Fields, f)
		}
		cd.Annotations = p.annotation(depth)
		cd.Super = p.classDesc(depth + 1)
		if p.err != nil {
			return nil
		}
		for c, i := cd.Super, 0; c != nil; c, i = c.Super, i+1 {
			if c == cd || i > p.maxDepth {
				p.fail(at, "class %s has a cyclic or too deep super-class chain", cd.Name)
				return nil
			}
		}
		if cd.Flags&SCSerializable != 0 && cd.Flags&SCExternalizable != 0 {
			p.fail(at, "class %s is both serializable and externalizable", cd.Name)
		}
		return cd
	case TCProxyClassDesc:
		cd := &ClassDesc{Proxy: true, Flags: SCSerializable}
		p.newHandle(cd)
		n := p.d.I32()
		if !p.sync() {
			return nil
		}
		if n < 0 || int64(n)*2 > int64(p.d.Len()) {
			p.fail(at, "proxy interface count %d out of range", n)
			return nil
		}
		for i := 0; i < int(n) && p.err == nil; i++ {
			cd.Interfaces = append(cd.Interfaces, p.d.UTF())
			p.sync()
		}
		cd.Annotations = p.annotation(depth)
		cd.Super = p.classDesc(depth + 1)
		if p.err != nil {
			return nil
		}
		for c, i := cd.Super, 0; c != nil; c, i = c.Super, i+1 {
			if c == cd || i > p.maxDepth {
				p.fail(at, "proxy class has a cyclic or too deep super-class chain")
				return nil
			}
		}
		return cd
	default:
		p.fail(at, "type code 0x%02x where a class descriptor was expected", tc)
		return nil
	}
}

// annotation reads contents up to and including TC_ENDBLOCKDATA.
func (p *parser) annotation(depth int) []any {
	var out []any
	for p.err == nil {
		v := p.content(depth+1, false)
		if p.err != nil {
			return nil
		}
		if v == endBlockMarker {
			return out
		}
		if v == resetMarker {
			continue
		}
		out = append(out, v)
	}
	return nil
}

func (p *parser) object(depth int) any {
	at := p.d.Offset()
	cd := p.classDesc(depth + 1)
	if p.err != nil {
		return nil
	}
	if cd == nil {
		p.fail(at, "object with null class descriptor")
		return nil
	}
	o := &Object{Class: cd}
	p.newHandle(o)
	for _, c := range cd.Hierarchy() {
		if p.err != nil {
			return nil
		}
		cdata := ClassData{Class: c}
		switch {
		case c.Flags&SCExternalizable != 0:
			if c.Flags&SCBlockData == 0 {
				p.fail(p.d.Offset(), "externalizable class %s written without block data (protocol 1) cannot be parsed", c.Name)
				return nil
			}
			cdata.Annotations = p.annotation(depth)
		case c.Flags&SCSerializable != 0:
			cdata.Values = p.fieldValues(c, depth)
			if c.Flags&SCWriteMethod != 0 {
				cdata.Annotations = p.annotation(depth)
			}
		default:
			// Not serializable: contributes no data.
		}
		o.Data = append(o.Data, cdata)
	}
	if p.err != nil {
		return nil
	}
	return o
}

func (p *parser) fieldValues(c *ClassDesc, depth int) []any {
	vals := make([]any, 0, len(c.Fields))
	for _, f := range c.Fields {
		var v any
		switch f.Type {
		case 'B':
			v = int8(p.d.U8())
		case 'C':
			v = p.d.U16()
		case 'D':
			v = p.d.F64()
		case 'F':
			v = p.d.F32()
		case 'I':
			v = p.d.I32()
		case 'J':
			v = p.d.I64()
		case 'S':
			v = p.d.I16()
		case 'Z':
			at := p.d.Offset()
			b := p.d.U8()
			if b > 1 && p.err == nil {
				p.fail(at, "boolean field %s.%s has byte 0x%02x", c.Name, f.Name, b)
			}
			v = b == 1
		default:
			v = p.content(depth+1, false)
			if v == endBlockMarker || v == resetMarker {
				p.fail(p.d.Offset()-1, "unexpected block marker in field %s.%s", c.Name, f.Name)
			}
		}
		if !p.sync() {
			return nil
		}
		vals = append(vals, v)
	}
	return vals
}

func (p *parser) enum(depth int) any {
	at := p.d.Offset()
	cd := p.classDesc(depth + 1)
	if p.err != nil {
		return nil
	}
	e := &Enum{Class: cd}
	p.newHandle(e)
	v := p.content(depth+1, false)
	if p.err != nil {
		return nil
	}
	s, ok := v.(string)
	if !ok {
		p.fail(at, "enum constant name is %T, want string", v)
		return nil
	}
	e.Constant = s
	return e
}

func (p *parser) array(depth int) any {
	at := p.d.Offset()
	cd := p.classDesc(depth + 1)
	if p.err != nil {
		return nil
	}
	if cd == nil || len(cd.Name) < 2 || cd.Name[0] != '[' {
		name := ""
		if cd != nil {
			name = cd.Name
		}
		p.fail(at, "array with class %q", name)
		return nil
	}
	a := &Array{Class: cd}
	p.newHandle(a)
	lat := p.d.Offset()
	n := p.d.I32()
	if !p.sync() {
		return nil
	}
	elem := cd.Name[1]
	size := 1
	switch elem {
	case 'C', 'S':
		size = 2
	case 'F', 'I':
		size = 4
	case 'D', 'J':
		size = 8
	}
	if n < 0 || int64(n)*int64(size) > int64(p.d.Len()) {
		p.fail(lat, "array length %d exceeds the remaining %d bytes", n, p.d.Len())
		return nil
	}
	cnt := int(n)
	switch elem {
	case 'B':
		b := p.d.Bytes(cnt)
		out := make([]int8, cnt)
		for i, x := range b {
			out[i] = int8(x)
		}
		a.Values = out
	case 'Z':
		b := p.d.Bytes(cnt)
		out := make([]bool, cnt)
		for i, x := range b {
			out[i] = x != 0
		}
		a.Values = out
	case 'C':
		b := p.d.Bytes(cnt * 2)
		out := make([]uint16, cnt)
		for i := range out {
			out[i] = binary.BigEndian.Uint16(b[2*i:])
		}
		a.Values = out
	case 'S':
		b := p.d.Bytes(cnt * 2)
		out := make([]int16, cnt)
		for i := range out {
			out[i] = int16(binary.BigEndian.Uint16(b[2*i:]))
		}
		a.Values = out
	case 'I':
		b := p.d.Bytes(cnt * 4)
		out := make([]int32, cnt)
		for i := range out {
			out[i] = int32(binary.BigEndian.Uint32(b[4*i:]))
		}
		a.Values = out
	case 'F':
		b := p.d.Bytes(cnt * 4)
		out := make([]float32, cnt)
		for i := range out {
			out[i] = math.Float32frombits(binary.BigEndian.Uint32(b[4*i:]))
		}
		a.Values = out
	case 'J':
		b := p.d.Bytes(cnt * 8)
		out := make([]int64, cnt)
		for i := range out {
			out[i] = int64(binary.BigEndian.Uint64(b[8*i:]))
		}
		a.Values = out
	case 'D':
		b := p.d.Bytes(cnt * 8)
		out := make([]float64, cnt)
		for i := range out {
			out[i] = math.Float64frombits(binary.BigEndian.Uint64(b[8*i:]))
		}
		a.Values = out
	case 'L', '[':
		out := make([]any, 0, cnt)
		for i := 0; i < cnt && p.err == nil; i++ {
			v := p.content(depth+1, false)
			if v == endBlockMarker || v == resetMarker {
				p.fail(p.d.Offset()-1, "unexpected block marker in array element %d", i)
			}
			out = append(out, v)
		}
		a.Values = out
	default:
		p.fail(at, "array class %q has unknown component type", cd.Name)
	}
	if !p.sync() {
		return nil
	}
	return a
}
