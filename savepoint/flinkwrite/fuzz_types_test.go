package flinkwrite

import (
	"fmt"
	"testing"

	"github.com/sfstate/sfstate/savepoint/serde"
)

// typeGen derives a logical type tree from fuzz bytes.
type typeGen struct {
	b     []byte
	nodes int
}

func (g *typeGen) next() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *typeGen) gen(depth int) LogicalType {
	g.nodes++
	c := g.next()
	nullable := c&0x80 != 0
	p := int32(g.next())
	kinds := 19
	if depth >= 3 || g.nodes > 40 {
		kinds = 15 // leaves only
	}
	switch int(c&0x7F) % kinds {
	case 0:
		return BooleanType{nullable}
	case 1:
		return TinyIntType{nullable}
	case 2:
		return SmallIntType{nullable}
	case 3:
		return IntType{nullable}
	case 4:
		return BigIntType{nullable}
	case 5:
		return FloatType{nullable}
	case 6:
		return DoubleType{nullable}
	case 7:
		return DateType{nullable}
	case 8:
		return CharType{nullable, p + 1}
	case 9:
		return VarCharType{nullable, p<<20 + 1}
	case 10:
		return VarBinaryType{nullable, p + 1}
	case 11:
		prec := p%38 + 1
		return DecimalType{nullable, prec, int32(g.next()) % (prec + 1)}
	case 12:
		return TimestampType{nullable, p % 10, []TimestampKind{"", TimestampRowtime, TimestampProctime}[int(p)%3]}
	case 13:
		return LocalZonedTimestampType{nullable, p % 10, ""}
	case 14:
		return TimeType{nullable, p % 10}
	case 15:
		return ArrayType{nullable, g.gen(depth + 1)}
	case 16:
		return MapType{nullable, g.gen(depth + 1), g.gen(depth + 1)}
	case 17:
		return MultisetType{nullable, g.gen(depth + 1)}
	default:
		n := int(p % 4)
		fs := make([]RowField, n)
		for i := range fs {
			fs[i] = RowField{Name: fmt.Sprintf("f%d_é", i), Type: g.gen(depth + 1)}
			if g.next()%2 == 0 {
				fs[i].Description = str("desc")
			}
		}
		return RowType{nullable, fs}
	}
}

var rootOf = map[string]string{
	"BooleanType": "BOOLEAN", "TinyIntType": "TINYINT", "SmallIntType": "SMALLINT", "IntType": "INTEGER",
	"BigIntType": "BIGINT", "FloatType": "FLOAT", "DoubleType": "DOUBLE", "DateType": "DATE",
	"CharType": "CHAR", "VarCharType": "VARCHAR", "VarBinaryType": "VARBINARY", "DecimalType": "DECIMAL",
	"TimestampType": "TIMESTAMP_WITHOUT_TIME_ZONE", "LocalZonedTimestampType": "TIMESTAMP_WITH_LOCAL_TIME_ZONE",
	"TimeType": "TIME_WITHOUT_TIME_ZONE", "ArrayType": "ARRAY", "MapType": "MAP", "MultisetType": "MULTISET", "RowType": "ROW",
}

// sameType compares a generated type with what the serde reader recovered.
func sameType(t *testing.T, want LogicalType, got *serde.LogicalType, path string) {
	t.Helper()
	class := fmt.Sprintf("%T", want)[len("flinkwrite."):]
	if got == nil || got.Class != class || got.Root != rootOf[class] {
		t.Fatalf("%s: read %+v, wrote %s", path, got, class)
	}
	check := func(what string, a, b int) {
		if a != b {
			t.Fatalf("%s: %s read %d, wrote %d", path, what, a, b)
		}
	}
	var nullable bool
	switch x := want.(type) {
	case BooleanType:
		nullable = x.Nullable
	case TinyIntType:
		nullable = x.Nullable
	case SmallIntType:
		nullable = x.Nullable
	case IntType:
		nullable = x.Nullable
	case BigIntType:
		nullable = x.Nullable
	case FloatType:
		nullable = x.Nullable
	case DoubleType:
		nullable = x.Nullable
	case DateType:
		nullable = x.Nullable
	case CharType:
		nullable = x.Nullable
		check("length", got.Length, int(x.Length))
	case VarCharType:
		nullable = x.Nullable
		check("length", got.Length, int(x.Length))
	case VarBinaryType:
		nullable = x.Nullable
		check("length", got.Length, int(x.Length))
	case DecimalType:
		nullable = x.Nullable
		check("precision", got.Precision, int(x.Precision))
		check("scale", got.Scale, int(x.Scale))
	case TimestampType:
		nullable = x.Nullable
		check("precision", got.Precision, int(x.Precision))
	case LocalZonedTimestampType:
		nullable = x.Nullable
		check("precision", got.Precision, int(x.Precision))
	case TimeType:
		nullable = x.Nullable
		check("precision", got.Precision, int(x.Precision))
	case ArrayType:
		nullable = x.Nullable
		sameType(t, x.Element, got.Element, path+".elem")
	case MultisetType:
		nullable = x.Nullable
		sameType(t, x.Element, got.Element, path+".elem")
	case MapType:
		nullable = x.Nullable
		sameType(t, x.Key, got.Key, path+".key")
		sameType(t, x.Value, got.Value, path+".value")
	case RowType:
		nullable = x.Nullable
		check("fields", len(got.Fields), len(x.Fields))
		for i, f := range x.Fields {
			if got.Fields[i].Name != f.Name {
				t.Fatalf("%s: field %d named %q, wrote %q", path, i, got.Fields[i].Name, f.Name)
			}
			sameType(t, f.Type, got.Fields[i].Type, fmt.Sprintf("%s.%s", path, f.Name))
		}
	}
	if got.Nullable != nullable {
		t.Fatalf("%s: nullable read %v, wrote %v", path, got.Nullable, nullable)
	}
}

// placeholderSnapshot is the field serializer of t, with Long standing in
// for the ARRAY/MAP/MULTISET serializers the package does not derive.
func placeholderSnapshot(t LogicalType) Snapshot {
	if r, ok := t.(RowType); ok {
		types := make([]LogicalType, len(r.Fields))
		nested := make([]Snapshot, len(r.Fields))
		for i, f := range r.Fields {
			types[i] = f.Type
			nested[i] = placeholderSnapshot(f.Type)
		}
		return RowDataSnapshot{Types: types, Nested: nested}
	}
	s, err := t.InternalSerializer()
	if err != nil {
		return LongSnapshot
	}
	return s
}

func rowFields(types []LogicalType) []RowField {
	fs := make([]RowField, len(types))
	for i, t := range types {
		fs[i] = RowField{Type: t}
	}
	return fs
}

// FuzzLogicalTypes writes random type trees as RowDataSerializerSnapshot
// headers and reads them back with the serde package (and its javaser
// parser), which must consume exactly the written bytes and recover the
// same types.
func FuzzLogicalTypes(f *testing.F) {
	f.Add([]byte{0x83, 1, 0x12, 3, 0x04, 9, 0x90, 4, 5})
	f.Add([]byte{18, 3, 15, 2, 16, 0, 11, 40, 7, 9, 200, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &typeGen{b: data}
		var types []LogicalType
		for i := 0; i < 4 && (i == 0 || len(g.b) > 0); i++ {
			types = append(types, g.gen(0))
		}
		b, err := AppendTopLevel(nil, placeholderSnapshot(RowType{Fields: rowFields(types)}))
		if err != nil {
			t.Fatal(err)
		}
		s, n, err := serde.ParseSnapshot(b, 0)
		if err != nil {
			t.Fatalf("reader rejects written snapshot: %v", err)
		}
		if n != len(b) {
			t.Fatalf("reader consumed %d of %d bytes", n, len(b))
		}
		if len(s.Types) != len(types) {
			t.Fatalf("read %d types, wrote %d", len(s.Types), len(types))
		}
		for i := range types {
			sameType(t, types[i], s.Types[i], fmt.Sprintf("field%d", i))
		}
	})
}
