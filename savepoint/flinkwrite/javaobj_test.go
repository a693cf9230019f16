package flinkwrite

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/savepoint/javaser"
)

func TestJavaStreamPrimitivesAndReferences(t *testing.T) {
	cls := &JavaClass{Name: "test.AllTypes", SUID: 42, Flags: SCSerializable | SCWriteMethod, Fields: []JavaField{
		{Name: "z", Type: 'Z'}, {Name: "b", Type: 'B'}, {Name: "c", Type: 'C'}, {Name: "s", Type: 'S'},
		{Name: "i", Type: 'I'}, {Name: "j", Type: 'J'}, {Name: "f", Type: 'F'}, {Name: "d", Type: 'D'},
		{Name: "self", Type: 'L', Signature: "Ltest/AllTypes;"},
		{Name: "str", Type: 'L', Signature: "Ljava/lang/String;"},
		{Name: "long", Type: 'L', Signature: "Ljava/lang/String;"},
	}}
	shared := &JavaObject{Class: cls, Fields: map[string]any{
		"z": true, "b": int8(-3), "c": uint16('x'), "s": int16(-300), "i": int32(70000), "j": int64(-1 << 40),
		"f": float32(1.5), "d": float64(-2.25), "str": "hi",
	}}
	big := bytes.Repeat([]byte{0xAB}, 3000) // more than one 1 KiB block
	top := &JavaObject{Class: cls, Fields: map[string]any{
		"z": false, "b": int8(1), "c": uint16(2), "s": int16(3), "i": int32(4), "j": int64(5),
		"f": float32(6), "d": float64(7), "self": shared, "str": "é\x00€", "long": strings.Repeat("L", 70000),
	}, Annotations: map[string][]any{cls.Name: {big, shared}}}
	gen, err := EncodeJavaStream(top)
	if err != nil {
		t.Fatal(err)
	}
	s, n, err := javaser.ParseOne(gen, 0)
	if err != nil || n != len(gen) {
		t.Fatalf("parse: n=%d of %d: %v", n, len(gen), err)
	}
	o := s.First().(*javaser.Object)
	if o.Class.SerialUID != 42 || o.ClassName() != "test.AllTypes" {
		t.Fatalf("class %s %d", o.ClassName(), o.Class.SerialUID)
	}
	// Field order in the descriptor: primitives by name, then objects by name.
	var names []string
	for _, f := range o.Class.Fields {
		names = append(names, f.Name)
	}
	if got := strings.Join(names, ","); got != "b,c,d,f,i,j,s,z,long,self,str" {
		t.Fatalf("field order %s", got)
	}
	if v, _ := o.Int("j"); v != 5 {
		t.Fatalf("j = %d", v)
	}
	if o.String("str") != "é\x00€" || len(o.String("long")) != 70000 {
		t.Fatalf("strings %q / %d", o.String("str"), len(o.String("long")))
	}
	self := o.Object("self")
	if self == nil || self.String("str") != "hi" {
		t.Fatal("nested object lost")
	}
	if v, _ := self.Int("s"); v != -300 {
		t.Fatalf("s = %d", v)
	}
	ann := o.Annotations("test.AllTypes")
	var data []byte
	var refs int
	for _, a := range ann {
		switch x := a.(type) {
		case javaser.BlockData:
			data = append(data, x...)
		case *javaser.Object:
			if x != self {
				t.Fatal("second write of the shared object is not a back reference")
			}
			refs++
		}
	}
	if !bytes.Equal(data, big) || refs != 1 {
		t.Fatalf("annotations: %d data bytes, %d refs", len(data), refs)
	}
	// The class descriptor is written once: later uses are references.
	if c := bytes.Count(gen, []byte("test.AllTypes")); c != 1 {
		t.Fatalf("class name written %d times", c)
	}
}

func TestJavaStreamErrors(t *testing.T) {
	cls := &JavaClass{Name: "test.X", Flags: SCSerializable, Fields: []JavaField{{Name: "i", Type: 'I'}, {Name: "o", Type: 'L', Signature: "Ljava/lang/Object;"}}}
	cases := []any{
		&JavaObject{Class: cls, Fields: map[string]any{"i": int64(1)}},                         // wrong primitive type
		&JavaObject{Class: cls, Fields: map[string]any{}},                                      // missing primitive
		&JavaObject{Class: cls, Fields: map[string]any{"i": int32(1), "o": 3.5}},               // not an object
		&JavaObject{Class: &JavaClass{Name: "y", Fields: []JavaField{{Name: "q", Type: 'Q'}}}}, // bad type code
		&JavaObject{Class: &JavaClass{Name: "y", Fields: []JavaField{{Name: "q", Type: 'L'}}}}, // no signature
		&JavaObject{},
		&JavaEnum{},
		&JavaClassRef{},
		struct{}{},
	}
	for i, c := range cases {
		if _, err := EncodeJavaStream(c); !errors.Is(err, ErrJavaObject) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	// A cycle becomes a back reference, as in Java.
	cyc := &JavaObject{Class: cls, Fields: map[string]any{"i": int32(1)}}
	cyc.Fields["o"] = cyc
	gen, err := EncodeJavaStream(cyc)
	if err != nil {
		t.Fatal(err)
	}
	if _, n, err := javaser.ParseOne(gen, 0); err != nil || n != len(gen) {
		t.Fatalf("cyclic graph: %v", err)
	}
	// Deep non-shared nesting hits the limit.
	var deep any
	for range maxJavaDepth + 5 {
		deep = &JavaObject{Class: cls, Fields: map[string]any{"i": int32(0), "o": deep}}
	}
	if _, err := EncodeJavaStream(deep); !errors.Is(err, ErrJavaObject) {
		t.Fatalf("deep graph: %v", err)
	}
}
