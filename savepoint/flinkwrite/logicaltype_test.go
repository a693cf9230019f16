package flinkwrite

import (
	"bytes"
	"encoding/hex"
	"math"
	"os"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/javaser"
)

func readFixture(t *testing.T, elem ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(fixtures.Path(t, elem...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sqlMetadata(t *testing.T, name string) []byte {
	return readFixture(t, name, "savepoint", "_metadata")
}

// requireStreamInFixture checks that gen occurs in file as one complete Java
// object stream: the parser, started at the match, consumes exactly
// len(gen) bytes.
func requireStreamInFixture(t *testing.T, file []byte, gen []byte) {
	t.Helper()
	at := bytes.Index(file, gen)
	if at < 0 {
		n := min(len(gen), 200)
		t.Fatalf("generated stream (%d bytes) not found in fixture; head %s", len(gen), hex.EncodeToString(gen[:n]))
	}
	_, n, err := javaser.ParseOne(file[at:], int64(at))
	if err != nil {
		t.Fatalf("fixture stream at %d does not parse: %v", at, err)
	}
	if n != len(gen) {
		t.Fatalf("fixture stream at %d is %d bytes, generated %d", at, n, len(gen))
	}
}

func str(s string) *string { return &s }

func TestLogicalTypesMatchFixtures(t *testing.T) {
	const maxLen = math.MaxInt32
	weightedAvg := StructuredType{
		Nullable: true, IsFinal: true, IsInstantiable: true,
		Attributes: []StructuredAttribute{
			{Name: "count", Type: IntType{Nullable: false}},
			{Name: "sum", Type: BigIntType{Nullable: false}},
		},
		ImplementationClass: NonSerializableClass("org.apache.flink.table.planner.plan.utils.JavaUserDefinedAggFunctions$WeightedAvgAccum"),
	}
	concatAcc := StructuredType{
		Nullable: true, IsFinal: true, IsInstantiable: true,
		Attributes: []StructuredAttribute{
			{Name: "list", Type: RawType{Nullable: true, Class: ListViewClass, Serializer: NullSerializerObject()}},
			{Name: "map", Type: RawType{Nullable: true, Class: MapViewClass, Serializer: NullSerializerObject()}},
		},
		ImplementationClass: NonSerializableClass("org.apache.flink.table.planner.plan.utils.JavaUserDefinedAggFunctions$ConcatAcc"),
	}
	cases := []struct {
		name    string
		fixture string
		typ     LogicalType
	}{
		{"bigint-null", "sql-rocksdb-canonical-groupagg-valuestate", BigIntType{Nullable: true}},
		{"bigint-notnull", "sql-rocksdb-canonical-groupagg-valuestate", BigIntType{Nullable: false}},
		{"double", "sql-rocksdb-canonical-groupagg-valuestate", DoubleType{Nullable: true}},
		{"string", "sql-rocksdb-canonical-groupagg-valuestate", VarCharType{Nullable: true, Length: maxLen}},
		{"int-null", "sql-rocksdb-canonical-join-mapstate", IntType{Nullable: true}},
		{"int-notnull", "sql-rocksdb-canonical-udagg-liststate-mapstate", IntType{Nullable: false}},
		{"timestamp-rowtime", "sql-rocksdb-canonical-deduplicate-valuestate", TimestampType{Nullable: true, Precision: 3, Kind: TimestampRowtime}},
		{"timestamp-notnull", "sql-rocksdb-canonical-windowjoin-liststate-timers", TimestampType{Nullable: false, Precision: 3}},
		{"raw-listview", "sql-rocksdb-canonical-udagg-liststate-mapstate", RawType{Nullable: true, Class: ListViewClass, Serializer: NullSerializerObject()}},
		{"raw-mapview", "sql-rocksdb-canonical-udagg-liststate-mapstate", RawType{Nullable: true, Class: MapViewClass, Serializer: NullSerializerObject()}},
		{"structured-weighted-avg", "sql-rocksdb-canonical-udagg-liststate-mapstate", weightedAvg},
		{"structured-concat", "sql-rocksdb-canonical-udagg-liststate-mapstate", concatAcc},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gen, err := EncodeLogicalType(c.typ)
			if err != nil {
				t.Fatal(err)
			}
			requireStreamInFixture(t, sqlMetadata(t, c.fixture), gen)
		})
	}
}

func TestAtomicDataTypeMatchesFixture(t *testing.T) {
	file := sqlMetadata(t, "sql-rocksdb-canonical-udagg-liststate-mapstate")
	for _, d := range []AtomicDataType{
		{Conversion: JavaLangString, Type: VarCharType{Nullable: true, Length: math.MaxInt32}},
		{Conversion: JavaLangBoolean, Type: BooleanType{Nullable: true}},
	} {
		o, err := d.JavaObject()
		if err != nil {
			t.Fatal(err)
		}
		gen, err := EncodeJavaStream(o)
		if err != nil {
			t.Fatal(err)
		}
		requireStreamInFixture(t, file, gen)
	}
}

// TestLogicalTypesParse checks the types absent from the fixtures against
// the independent stream parser: class names, serialVersionUID 1, fields.
func TestLogicalTypesParse(t *testing.T) {
	cases := []struct {
		typ    LogicalType
		class  string
		root   string
		fields map[string]int64
	}{
		{BooleanType{true}, "BooleanType", "BOOLEAN", nil},
		{TinyIntType{true}, "TinyIntType", "TINYINT", nil},
		{SmallIntType{false}, "SmallIntType", "SMALLINT", nil},
		{FloatType{true}, "FloatType", "FLOAT", nil},
		{DateType{true}, "DateType", "DATE", nil},
		{CharType{true, 5}, "CharType", "CHAR", map[string]int64{"length": 5}},
		{BinaryType{true, 7}, "BinaryType", "BINARY", map[string]int64{"length": 7}},
		{VarBinaryType{false, 100}, "VarBinaryType", "VARBINARY", map[string]int64{"length": 100}},
		{DecimalType{true, 20, 4}, "DecimalType", "DECIMAL", map[string]int64{"precision": 20, "scale": 4}},
		{TimeType{true, 0}, "TimeType", "TIME_WITHOUT_TIME_ZONE", map[string]int64{"precision": 0}},
		{LocalZonedTimestampType{true, 6, ""}, "LocalZonedTimestampType", "TIMESTAMP_WITH_LOCAL_TIME_ZONE", map[string]int64{"precision": 6}},
		{ArrayType{true, IntType{true}}, "ArrayType", "ARRAY", nil},
		{MapType{true, VarCharType{true, 10}, BigIntType{true}}, "MapType", "MAP", nil},
		{MultisetType{true, IntType{true}}, "MultisetType", "MULTISET", nil},
		{RowType{true, []RowField{{Name: "a", Type: IntType{true}}, {Name: "b", Type: IntType{false}, Description: str("d")}}}, "RowType", "ROW", nil},
	}
	for _, c := range cases {
		gen, err := EncodeLogicalType(c.typ)
		if err != nil {
			t.Fatalf("%s: %v", c.class, err)
		}
		s, n, err := javaser.ParseOne(gen, 0)
		if err != nil || n != len(gen) {
			t.Fatalf("%s: parse n=%d of %d: %v", c.class, n, len(gen), err)
		}
		o, ok := s.First().(*javaser.Object)
		if !ok {
			t.Fatalf("%s: top is %T", c.class, s.First())
		}
		if o.ClassName() != logicalPkg+c.class {
			t.Fatalf("class %q, want %q", o.ClassName(), c.class)
		}
		if o.Class.SerialUID != 1 || o.Class.Super == nil || o.Class.Super.SerialUID != 1 {
			t.Fatalf("%s: serialVersionUID %d", c.class, o.Class.SerialUID)
		}
		root, _ := o.Field("typeRoot")
		if e, ok := root.(*javaser.Enum); !ok || e.Constant != c.root {
			t.Fatalf("%s: typeRoot %v", c.class, root)
		}
		for k, want := range c.fields {
			if got, ok := o.Int(k); !ok || got != want {
				t.Fatalf("%s.%s = %d, want %d", c.class, k, got, want)
			}
		}
	}
}

func TestLogicalTypeErrors(t *testing.T) {
	for _, typ := range []LogicalType{
		VarCharType{true, 0}, DecimalType{true, 40, 2}, DecimalType{true, 5, 6},
		TimestampType{true, 10, ""}, ArrayType{true, nil}, MapType{true, IntType{true}, nil},
		RowType{true, []RowField{{Name: "x"}}}, RawType{Nullable: true},
	} {
		if _, err := EncodeLogicalType(typ); err == nil {
			t.Errorf("%#v: expected error", typ)
		}
	}
}

// TestRowTypeInsideDataTypeMatchesFixture rebuilds the FieldsDataType (a
// ROW data type holding a RowType, its conversion class and the field data
// types) that the SQL sink's operator state of a fixture carries, which
// exercises RowType, RowField, the unmodifiable field list, Class objects
// of serializable classes and back references byte for byte.
func TestRowTypeInsideDataTypeMatchesFixture(t *testing.T) {
	classFieldsDataType := &JavaClass{Name: "org.apache.flink.table.types.FieldsDataType", SUID: suid(0xf4b0ac1cad819f5f), Flags: SCSerializable,
		Super: classDataType, Fields: []JavaField{{Name: "fieldDataTypes", Type: 'L', Signature: sigList}}}
	classRow := &JavaClass{Name: "org.apache.flink.types.Row", SUID: 3, Flags: SCSerializable, Fields: []JavaField{
		{Name: "kind", Type: 'L', Signature: "Lorg/apache/flink/types/RowKind;"},
		{Name: "fieldByPosition", Type: '[', Signature: "[Ljava/lang/Object;"},
		{Name: "positionByName", Type: 'L', Signature: "Ljava/util/LinkedHashMap;"},
		{Name: "fieldByName", Type: 'L', Signature: "Ljava/util/Map;"},
	}}
	maxLen := int32(math.MaxInt32)
	row := RowType{Nullable: false, Fields: []RowField{
		{Name: "b", Type: BigIntType{false}},
		{Name: "cnt", Type: BigIntType{true}},
		{Name: "avg_a", Type: DoubleType{true}},
		{Name: "min_c", Type: VarCharType{true, maxLen}},
	}}
	rowObj, err := row.JavaObject()
	if err != nil {
		t.Fatal(err)
	}
	var dts []any
	for _, d := range []AtomicDataType{
		{JavaLangLong, BigIntType{false}}, {JavaLangLong, BigIntType{true}},
		{JavaLangDouble, DoubleType{true}}, {JavaLangString, VarCharType{true, maxLen}},
	} {
		o, err := d.JavaObject()
		if err != nil {
			t.Fatal(err)
		}
		dts = append(dts, o)
	}
	list := &JavaObject{Class: classArrayList, Fields: map[string]any{"size": int32(len(dts))},
		Annotations: map[string][]any{classArrayList.Name: append([]any{be32(int32(len(dts)))}, dts...)}}
	top := &JavaObject{Class: classFieldsDataType, Fields: map[string]any{
		"conversionClass": &JavaClassRef{Class: classRow}, "logicalType": rowObj, "fieldDataTypes": list,
	}}
	gen, err := EncodeJavaStream(top)
	if err != nil {
		t.Fatal(err)
	}
	file := sqlMetadata(t, "sql-rocksdb-canonical-groupagg-valuestate")
	if os.Getenv("FLINKWRITE_DEBUG") != "" {
		at := bytes.Index(file, gen[:40])
		d := firstDiff(file[at:], gen)
		t.Logf("diff at %d\n file %q\n gen  %q", d, file[at+d-40:at+d+60], gen[d-40:min(len(gen), d+60)])
	}
	requireStreamInFixture(t, file, gen)
}
