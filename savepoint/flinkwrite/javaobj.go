package flinkwrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// Java Object Serialization stream constants (java.io.ObjectStreamConstants).
// Wire format: never change.
const (
	jsMagic   = 0xACED
	jsVersion = 5

	tcNull         = 0x70
	tcReference    = 0x71
	tcClassDesc    = 0x72
	tcObject       = 0x73
	tcString       = 0x74
	tcArray        = 0x75
	tcClass        = 0x76
	tcBlockData    = 0x77
	tcEndBlock     = 0x78
	tcLongString   = 0x7C
	tcEnum         = 0x7E
	baseWireHandle = 0x7E0000

	// Class descriptor flags.
	SCWriteMethod  = 0x01
	SCSerializable = 0x02
	SCEnum         = 0x10
)

// ErrJavaObject marks an object graph the stream writer cannot encode
// (a value that does not match its declared field type, a missing class).
var ErrJavaObject = errors.New("flinkwrite: invalid java object")

// JavaField is one serializable field of a Java class: a type code
// ('B','C','D','F','I','J','S','Z' for primitives, 'L' or '[' for
// references) and, for references, the JVM type signature
// ("Ljava/lang/String;").
type JavaField struct {
	Name      string
	Type      byte
	Signature string
}

func (f JavaField) primitive() bool { return f.Type != 'L' && f.Type != '[' }

// JavaClass describes a class as ObjectOutputStream writes it in a class
// descriptor. Fields may be given in any order: the writer sorts them as
// java.io.ObjectStreamClass does (primitives first, then by name).
type JavaClass struct {
	Name   string
	SUID   int64
	Flags  byte
	Fields []JavaField
	Super  *JavaClass // nil when the superclass is not serializable
}

// sortedFields returns the fields in stream order.
func (c *JavaClass) sortedFields() []JavaField {
	fs := append([]JavaField(nil), c.Fields...)
	sort.SliceStable(fs, func(i, j int) bool {
		pi, pj := fs[i].primitive(), fs[j].primitive()
		if pi != pj {
			return pi
		}
		return fs[i].Name < fs[j].Name
	})
	return fs
}

// hierarchy returns the serializable classes from the topmost superclass
// down to c.
func (c *JavaClass) hierarchy() []*JavaClass {
	var h []*JavaClass
	for k := c; k != nil; k = k.Super {
		h = append(h, k)
	}
	for i, j := 0, len(h)-1; i < j; i, j = i+1, j-1 {
		h[i], h[j] = h[j], h[i]
	}
	return h
}

// JavaObject is an instance of a serializable class. Fields maps field name
// to value per class of the hierarchy; a name shadowed in a subclass is
// addressed as "ClassName.field" (never needed for Flink's types). Values:
//
//	bool, int8, uint16 (char), int16, int32, int64, float32, float64 for primitives;
//	nil, string, *JavaObject, *JavaEnum, *JavaClassRef for references.
//
// Annotations holds the data a class's writeObject method appends after its
// default fields (SC_WRITE_METHOD): []byte items become block data, other
// items are written as objects; the writer closes with TC_ENDBLOCKDATA.
// The same *JavaObject written twice in one stream becomes a back
// reference, as Java's identity-based handle table does.
type JavaObject struct {
	Class       *JavaClass
	Fields      map[string]any
	Annotations map[string][]any // by class name
}

// JavaEnum is an enum constant. Its class descriptor has no fields and the
// SC_ENUM flag; Super is normally JavaLangEnum.
type JavaEnum struct {
	Class *JavaClass
	Name  string
}

// JavaClassRef is a java.lang.Class object (TC_CLASS).
type JavaClassRef struct {
	Class *JavaClass
}

// JavaLangEnum is java.lang.Enum's descriptor, the superclass of every enum.
var JavaLangEnum = &JavaClass{Name: "java.lang.Enum", Flags: SCSerializable | SCEnum}

// NewEnumClass returns the descriptor of an enum class.
func NewEnumClass(name string) *JavaClass {
	return &JavaClass{Name: name, Flags: SCSerializable | SCEnum, Super: JavaLangEnum}
}

// NonSerializableClass returns the descriptor Java writes for a Class
// object of a class that is not Serializable (serialVersionUID 0, no flags).
func NonSerializableClass(name string) *JavaClass {
	return &JavaClass{Name: name}
}

// javaEncoder writes one Java object stream. Handles are keyed by identity
// where Java uses identity (objects) and by name where the JVM guarantees
// one instance (class descriptors, Class objects, enum constants, interned
// field signatures).
type javaEncoder struct {
	b       []byte
	handles map[any]int32
	next    int32
	depth   int
}

type descKey string
type sigKey string
type enumKey struct{ class, name string }
type classObjKey string

// maxJavaDepth bounds object-graph recursion (a cycle through Fields would
// otherwise recurse forever).
const maxJavaDepth = 256

// EncodeJavaStream returns a complete Java object stream (AC ED 00 05 + the
// object) holding v, exactly as one ObjectOutputStream.writeObject call
// writes it.
func EncodeJavaStream(v any) ([]byte, error) {
	e := &javaEncoder{handles: map[any]int32{}}
	e.b = binary.BigEndian.AppendUint16(e.b, jsMagic)
	e.b = binary.BigEndian.AppendUint16(e.b, jsVersion)
	if err := e.value(v); err != nil {
		return nil, err
	}
	return e.b, nil
}

func (e *javaEncoder) assign(k any) {
	if k != nil {
		e.handles[k] = e.next
	}
	e.next++
}

func (e *javaEncoder) ref(k any) bool {
	h, ok := e.handles[k]
	if !ok {
		return false
	}
	e.b = append(e.b, tcReference)
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(baseWireHandle+h))
	return true
}

func (e *javaEncoder) utf(s string) error {
	m := binfmt.EncodeModifiedUTF8(s)
	if len(m) > math.MaxUint16 {
		return fmt.Errorf("%w: string of %d bytes too long for writeUTF", ErrJavaObject, len(m))
	}
	e.b = binary.BigEndian.AppendUint16(e.b, uint16(len(m)))
	e.b = append(e.b, m...)
	return nil
}

// str writes a new String object (a value string: never shared).
func (e *javaEncoder) str(s string, key any) {
	m := binfmt.EncodeModifiedUTF8(s)
	if len(m) > math.MaxUint16 {
		e.b = append(e.b, tcLongString)
		e.b = binary.BigEndian.AppendUint64(e.b, uint64(len(m)))
	} else {
		e.b = append(e.b, tcString)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(len(m)))
	}
	e.assign(key)
	e.b = append(e.b, m...)
}

func (e *javaEncoder) classDesc(c *JavaClass) error {
	if c == nil {
		e.b = append(e.b, tcNull)
		return nil
	}
	if e.ref(descKey(c.Name)) {
		return nil
	}
	e.depth++
	defer func() { e.depth-- }()
	if e.depth > maxJavaDepth {
		return fmt.Errorf("%w: class hierarchy deeper than %d", ErrJavaObject, maxJavaDepth)
	}
	e.b = append(e.b, tcClassDesc)
	if err := e.utf(c.Name); err != nil {
		return err
	}
	e.b = binary.BigEndian.AppendUint64(e.b, uint64(c.SUID))
	e.assign(descKey(c.Name))
	e.b = append(e.b, c.Flags)
	fs := c.sortedFields()
	if len(fs) > math.MaxUint16 {
		return fmt.Errorf("%w: class %s has %d fields", ErrJavaObject, c.Name, len(fs))
	}
	e.b = binary.BigEndian.AppendUint16(e.b, uint16(len(fs)))
	for _, f := range fs {
		switch f.Type {
		case 'B', 'C', 'D', 'F', 'I', 'J', 'S', 'Z', 'L', '[':
		default:
			return fmt.Errorf("%w: field %s.%s has type code %q", ErrJavaObject, c.Name, f.Name, f.Type)
		}
		e.b = append(e.b, f.Type)
		if err := e.utf(f.Name); err != nil {
			return err
		}
		if !f.primitive() {
			if f.Signature == "" {
				return fmt.Errorf("%w: field %s.%s has no type signature", ErrJavaObject, c.Name, f.Name)
			}
			if !e.ref(sigKey(f.Signature)) {
				e.str(f.Signature, sigKey(f.Signature))
			}
		}
	}
	e.b = append(e.b, tcEndBlock) // no class annotation
	return e.classDesc(c.Super)
}

func (e *javaEncoder) value(v any) error {
	e.depth++
	defer func() { e.depth-- }()
	if e.depth > maxJavaDepth {
		return fmt.Errorf("%w: object graph deeper than %d", ErrJavaObject, maxJavaDepth)
	}
	switch x := v.(type) {
	case nil:
		e.b = append(e.b, tcNull)
	case string:
		e.str(x, nil)
	case *JavaEnum:
		if x == nil || x.Class == nil {
			return fmt.Errorf("%w: enum without class", ErrJavaObject)
		}
		k := enumKey{x.Class.Name, x.Name}
		if e.ref(k) {
			return nil
		}
		e.b = append(e.b, tcEnum)
		if err := e.classDesc(x.Class); err != nil {
			return err
		}
		e.assign(k)
		// Enum.name() is an interned literal: shared with equal literals.
		if !e.ref(sigKey(x.Name)) {
			e.str(x.Name, sigKey(x.Name))
		}
	case *JavaClassRef:
		if x == nil || x.Class == nil {
			return fmt.Errorf("%w: class reference without class", ErrJavaObject)
		}
		k := classObjKey(x.Class.Name)
		if e.ref(k) {
			return nil
		}
		e.b = append(e.b, tcClass)
		if err := e.classDesc(x.Class); err != nil {
			return err
		}
		e.assign(k)
	case *JavaObject:
		if x == nil {
			e.b = append(e.b, tcNull)
			return nil
		}
		if e.ref(x) {
			return nil
		}
		if x.Class == nil {
			return fmt.Errorf("%w: object without class", ErrJavaObject)
		}
		e.b = append(e.b, tcObject)
		if err := e.classDesc(x.Class); err != nil {
			return err
		}
		e.assign(x)
		for _, c := range x.Class.hierarchy() {
			if err := e.classData(c, x); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%w: cannot write %T as an object", ErrJavaObject, v)
	}
	return nil
}

func (e *javaEncoder) fieldValue(c *JavaClass, o *JavaObject, name string) (any, bool) {
	if v, ok := o.Fields[c.Name+"."+name]; ok {
		return v, true
	}
	v, ok := o.Fields[name]
	return v, ok
}

func (e *javaEncoder) classData(c *JavaClass, o *JavaObject) error {
	fs := c.sortedFields()
	for _, f := range fs {
		if !f.primitive() {
			continue
		}
		v, ok := e.fieldValue(c, o, f.Name)
		if !ok {
			return fmt.Errorf("%w: %s.%s has no value", ErrJavaObject, c.Name, f.Name)
		}
		if err := e.primitive(f, v); err != nil {
			return fmt.Errorf("%s.%s: %w", c.Name, f.Name, err)
		}
	}
	for _, f := range fs {
		if f.primitive() {
			continue
		}
		v, _ := e.fieldValue(c, o, f.Name) // absent = null
		if err := e.value(v); err != nil {
			return err
		}
	}
	if c.Flags&SCWriteMethod != 0 {
		for _, a := range o.Annotations[c.Name] {
			if bd, ok := a.([]byte); ok {
				e.blockData(bd)
				continue
			}
			if err := e.value(a); err != nil {
				return err
			}
		}
		e.b = append(e.b, tcEndBlock)
	}
	return nil
}

func (e *javaEncoder) blockData(b []byte) {
	for len(b) > 0 {
		n := min(len(b), 1024) // ObjectOutputStream's block buffer size
		if n <= 255 {
			e.b = append(e.b, tcBlockData, byte(n))
		} else {
			e.b = append(e.b, 0x7A) // TC_BLOCKDATALONG
			e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
		}
		e.b = append(e.b, b[:n]...)
		b = b[n:]
	}
}

func (e *javaEncoder) primitive(f JavaField, v any) error {
	bad := func() error { return fmt.Errorf("%w: value %T for field type %q", ErrJavaObject, v, f.Type) }
	switch f.Type {
	case 'Z':
		x, ok := v.(bool)
		if !ok {
			return bad()
		}
		if x {
			e.b = append(e.b, 1)
		} else {
			e.b = append(e.b, 0)
		}
	case 'B':
		x, ok := v.(int8)
		if !ok {
			return bad()
		}
		e.b = append(e.b, byte(x))
	case 'C':
		x, ok := v.(uint16)
		if !ok {
			return bad()
		}
		e.b = binary.BigEndian.AppendUint16(e.b, x)
	case 'S':
		x, ok := v.(int16)
		if !ok {
			return bad()
		}
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(x))
	case 'I':
		x, ok := v.(int32)
		if !ok {
			return bad()
		}
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(x))
	case 'J':
		x, ok := v.(int64)
		if !ok {
			return bad()
		}
		e.b = binary.BigEndian.AppendUint64(e.b, uint64(x))
	case 'F':
		x, ok := v.(float32)
		if !ok {
			return bad()
		}
		e.b = binary.BigEndian.AppendUint32(e.b, math.Float32bits(x))
	case 'D':
		x, ok := v.(float64)
		if !ok {
			return bad()
		}
		e.b = binary.BigEndian.AppendUint64(e.b, math.Float64bits(x))
	default:
		return bad()
	}
	return nil
}
