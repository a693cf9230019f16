package serde

import (
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/savepoint/javaser"
)

// LogicalType is a Flink SQL LogicalType recovered from its Java
// serialization.
type LogicalType struct {
	// Root is the LogicalTypeRoot constant, e.g. "BIGINT", "VARCHAR",
	// "TIMESTAMP_WITHOUT_TIME_ZONE", "ROW", "STRUCTURED_TYPE".
	Root string
	// Class is the simple Java class name, e.g. "BigIntType".
	Class    string
	Nullable bool
	// Length (CHAR/VARCHAR/BINARY/VARBINARY), Precision/Scale (DECIMAL,
	// TIME, TIMESTAMP*).
	Length, Precision, Scale int
	// Fields of ROW types; attributes of STRUCTURED types.
	Fields []RowField
	// Element of ARRAY/MULTISET; Key and Value of MAP.
	Element, Key, Value *LogicalType
	// ImplClass is the implementation class of STRUCTURED and RAW types.
	ImplClass string
	// Java is the object stream the type was read from (kept so writers can
	// re-emit it byte-identically). Nil for nested types.
	Java *javaser.Stream
}

// RowField is one field of a ROW type or attribute of a STRUCTURED type.
type RowField struct {
	Name string
	Type *LogicalType
}

const logicalPkg = "org.apache.flink.table.types.logical."

// LogicalTypeFromJava converts the single object of js into a LogicalType.
func LogicalTypeFromJava(js *javaser.Stream) (*LogicalType, error) {
	o, ok := js.First().(*javaser.Object)
	if !ok {
		return nil, fmt.Errorf("expected a LogicalType object, got %T", js.First())
	}
	lt, err := logicalFromObject(o, 0)
	if err != nil {
		return nil, err
	}
	lt.Java = js
	return lt, nil
}

func logicalFromObject(o *javaser.Object, depth int) (*LogicalType, error) {
	if depth > 32 {
		return nil, fmt.Errorf("logical type nested deeper than 32")
	}
	name := o.ClassName()
	if !strings.HasPrefix(name, logicalPkg) {
		return nil, fmt.Errorf("class %s is not a LogicalType", name)
	}
	lt := &LogicalType{Class: strings.TrimPrefix(name, logicalPkg)}
	lt.Nullable, _ = o.Bool("isNullable")
	if v, _ := o.Field("typeRoot"); v != nil {
		e, ok := v.(*javaser.Enum)
		if !ok {
			return nil, fmt.Errorf("%s.typeRoot is %T", lt.Class, v)
		}
		lt.Root = e.Constant
	}
	if n, ok := o.Int("length"); ok {
		lt.Length = int(n)
	}
	if n, ok := o.Int("precision"); ok {
		lt.Precision = int(n)
	}
	if n, ok := o.Int("scale"); ok {
		lt.Scale = int(n)
	}
	sub := func(field string) (*LogicalType, error) {
		x := o.Object(field)
		if x == nil {
			return nil, fmt.Errorf("%s.%s missing", lt.Class, field)
		}
		return logicalFromObject(x, depth+1)
	}
	var err error
	switch lt.Root {
	case "ARRAY", "MULTISET":
		lt.Element, err = sub("elementType")
	case "MAP":
		if lt.Key, err = sub("keyType"); err == nil {
			lt.Value, err = sub("valueType")
		}
	case "ROW":
		v, _ := o.Field("fields")
		elems, ok := ListElements(v)
		if !ok {
			return nil, fmt.Errorf("RowType.fields is %T", v)
		}
		for _, e := range elems {
			fo, ok := e.(*javaser.Object)
			if !ok {
				return nil, fmt.Errorf("RowType field is %T", e)
			}
			ft := fo.Object("type")
			if ft == nil {
				return nil, fmt.Errorf("RowField without type")
			}
			t, err := logicalFromObject(ft, depth+1)
			if err != nil {
				return nil, err
			}
			lt.Fields = append(lt.Fields, RowField{Name: fo.String("name"), Type: t})
		}
	case "STRUCTURED_TYPE":
		v, _ := o.Field("attributes")
		elems, _ := ListElements(v)
		for _, e := range elems {
			fo, ok := e.(*javaser.Object)
			if !ok {
				continue
			}
			var t *LogicalType
			if ft := fo.Object("type"); ft != nil {
				if t, err = logicalFromObject(ft, depth+1); err != nil {
					return nil, err
				}
			}
			lt.Fields = append(lt.Fields, RowField{Name: fo.String("name"), Type: t})
		}
		if c, ok := fieldClass(o, "implementationClass"); ok {
			lt.ImplClass = c
		}
	case "RAW":
		if c, ok := fieldClass(o, "clazz"); ok {
			lt.ImplClass = c
		}
	}
	if err != nil {
		return nil, err
	}
	return lt, nil
}

func fieldClass(o *javaser.Object, name string) (string, bool) {
	v, _ := o.Field(name)
	if c, ok := v.(*javaser.Class); ok && c.Desc != nil {
		return c.Desc.Name, true
	}
	return "", false
}

// ListElements returns the elements of a serialized java.util.List
// (ArrayList, LinkedList, Arrays$ArrayList, the Collections wrappers,
// singleton and empty lists, Guava ImmutableList forms).
func ListElements(v any) ([]any, bool) {
	return listElements(v, 0)
}

func listElements(v any, depth int) ([]any, bool) {
	if depth > 8 {
		return nil, false
	}
	switch x := v.(type) {
	case *javaser.Array:
		e, ok := x.Values.([]any)
		return e, ok
	case *javaser.Object:
		switch x.ClassName() {
		case "java.util.ArrayList", "java.util.LinkedList", "java.util.Vector":
			var out []any
			for _, a := range x.Annotations(x.ClassName()) {
				if _, ok := a.(javaser.BlockData); ok {
					continue
				}
				out = append(out, a)
			}
			return out, true
		case "java.util.Arrays$ArrayList":
			f, _ := x.Field("a")
			return listElements(f, depth+1)
		case "java.util.Collections$SingletonList":
			f, _ := x.Field("element")
			return []any{f}, true
		case "java.util.Collections$EmptyList":
			return nil, true
		case "java.util.ImmutableCollections$ListN", "java.util.ImmutableCollections$List12", "java.util.CollSer":
			// Java 9+ immutable lists serialize via CollSer: an int block then
			// the elements in the annotation.
			var out []any
			for _, a := range x.Annotations("java.util.CollSer") {
				if _, ok := a.(javaser.BlockData); ok {
					continue
				}
				out = append(out, a)
			}
			return out, true
		}
		for _, f := range []string{"list", "c", "elements", "array"} {
			if inner, ok := x.Field(f); ok {
				return listElements(inner, depth+1)
			}
		}
	}
	return nil, false
}

// String renders the type in Flink SQL notation, e.g. BIGINT, STRING,
// VARCHAR(10), DECIMAL(10, 2), TIMESTAMP(3), ROW<a INT, b STRING>, with
// " NOT NULL" for non-nullable types.
func (t *LogicalType) String() string {
	if t == nil {
		return "?"
	}
	var s string
	switch t.Root {
	case "CHAR":
		s = fmt.Sprintf("CHAR(%d)", t.Length)
	case "VARCHAR":
		if t.Length == 1<<31-1 {
			s = "STRING"
		} else {
			s = fmt.Sprintf("VARCHAR(%d)", t.Length)
		}
	case "BINARY":
		s = fmt.Sprintf("BINARY(%d)", t.Length)
	case "VARBINARY":
		if t.Length == 1<<31-1 {
			s = "BYTES"
		} else {
			s = fmt.Sprintf("VARBINARY(%d)", t.Length)
		}
	case "DECIMAL":
		s = fmt.Sprintf("DECIMAL(%d, %d)", t.Precision, t.Scale)
	case "INTEGER":
		s = "INT"
	case "TIME_WITHOUT_TIME_ZONE":
		s = fmt.Sprintf("TIME(%d)", t.Precision)
	case "TIMESTAMP_WITHOUT_TIME_ZONE":
		s = fmt.Sprintf("TIMESTAMP(%d)", t.Precision)
	case "TIMESTAMP_WITH_TIME_ZONE":
		s = fmt.Sprintf("TIMESTAMP(%d) WITH TIME ZONE", t.Precision)
	case "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
		s = fmt.Sprintf("TIMESTAMP_LTZ(%d)", t.Precision)
	case "ARRAY", "MULTISET":
		s = t.Root + "<" + t.Element.String() + ">"
	case "MAP":
		s = "MAP<" + t.Key.String() + ", " + t.Value.String() + ">"
	case "ROW", "STRUCTURED_TYPE":
		parts := make([]string, len(t.Fields))
		for i, f := range t.Fields {
			if f.Name != "" {
				parts[i] = f.Name + " " + f.Type.String()
			} else {
				parts[i] = f.Type.String()
			}
		}
		if t.Root == "ROW" {
			s = "ROW<" + strings.Join(parts, ", ") + ">"
		} else {
			s = "STRUCTURED<" + t.ImplClass
			if len(parts) > 0 {
				s += ", " + strings.Join(parts, ", ")
			}
			s += ">"
		}
	case "RAW":
		s = "RAW('" + t.ImplClass + "')"
	case "":
		s = t.Class
	default:
		s = t.Root
	}
	if !t.Nullable && t.Root != "" {
		s += " NOT NULL"
	}
	return s
}
