package flinkwrite

import (
	"fmt"
)

// LogicalType is a Flink SQL logical type (org.apache.flink.table.types.
// logical.*) that can be written as the Java-serialized object Flink keeps
// inside a RowDataSerializerSnapshot, and that knows which serializer Flink
// uses for its values inside a row (InternalSerializers.create).
type LogicalType interface {
	// JavaObject returns a fresh object graph for the type.
	JavaObject() (*JavaObject, error)
	// InternalSerializer returns the snapshot of the serializer Flink's
	// InternalSerializers picks for the type.
	InternalSerializer() (Snapshot, error)
}

const logicalPkg = "org.apache.flink.table.types.logical."

// Class descriptors of the logical types (all serialVersionUID 1).
var (
	classLogicalType = &JavaClass{Name: logicalPkg + "LogicalType", SUID: 1, Flags: SCSerializable, Fields: []JavaField{
		{Name: "isNullable", Type: 'Z'},
		{Name: "typeRoot", Type: 'L', Signature: "Lorg/apache/flink/table/types/logical/LogicalTypeRoot;"},
	}}
	classTypeRoot     = NewEnumClass(logicalPkg + "LogicalTypeRoot")
	classTimestampKnd = NewEnumClass(logicalPkg + "TimestampKind")
	classStructCmp    = NewEnumClass(logicalPkg + "StructuredType$StructuredComparison")

	classUserDefinedType = &JavaClass{Name: logicalPkg + "UserDefinedType", SUID: 1, Flags: SCSerializable, Super: classLogicalType, Fields: []JavaField{
		{Name: "isFinal", Type: 'Z'},
		{Name: "description", Type: 'L', Signature: sigString},
		{Name: "objectIdentifier", Type: 'L', Signature: "Lorg/apache/flink/table/catalog/ObjectIdentifier;"},
	}}
	classStructuredType = &JavaClass{Name: logicalPkg + "StructuredType", SUID: 1, Flags: SCSerializable, Super: classUserDefinedType, Fields: []JavaField{
		{Name: "isInstantiable", Type: 'Z'},
		{Name: "attributes", Type: 'L', Signature: sigList},
		{Name: "comparison", Type: 'L', Signature: "Lorg/apache/flink/table/types/logical/StructuredType$StructuredComparison;"},
		{Name: "implementationClass", Type: 'L', Signature: sigClass},
		{Name: "superType", Type: 'L', Signature: "Lorg/apache/flink/table/types/logical/StructuredType;"},
	}}
	classStructuredAttr = &JavaClass{Name: logicalPkg + "StructuredType$StructuredAttribute", SUID: 1, Flags: SCSerializable, Fields: []JavaField{
		{Name: "description", Type: 'L', Signature: sigString},
		{Name: "name", Type: 'L', Signature: sigString},
		{Name: "type", Type: 'L', Signature: sigLogicalType},
	}}
	classRowField = &JavaClass{Name: logicalPkg + "RowType$RowField", SUID: 1, Flags: SCSerializable, Fields: []JavaField{
		{Name: "description", Type: 'L', Signature: sigString},
		{Name: "name", Type: 'L', Signature: sigString},
		{Name: "type", Type: 'L', Signature: sigLogicalType},
	}}
	classRawType = &JavaClass{Name: logicalPkg + "RawType", SUID: 1, Flags: SCSerializable, Super: classLogicalType, Fields: []JavaField{
		{Name: "clazz", Type: 'L', Signature: sigClass},
		{Name: "serializer", Type: 'L', Signature: "Lorg/apache/flink/api/common/typeutils/TypeSerializer;"},
	}}
)

const (
	sigString      = "Ljava/lang/String;"
	sigList        = "Ljava/util/List;"
	sigClass       = "Ljava/lang/Class;"
	sigLogicalType = "Lorg/apache/flink/table/types/logical/LogicalType;"
)

// simpleLogicalClass returns the descriptor of a LogicalType subclass.
func logicalClass(name string, fields ...JavaField) *JavaClass {
	return &JavaClass{Name: logicalPkg + name, SUID: 1, Flags: SCSerializable, Super: classLogicalType, Fields: fields}
}

var (
	fLength    = JavaField{Name: "length", Type: 'I'}
	fPrecision = JavaField{Name: "precision", Type: 'I'}
	fKind      = JavaField{Name: "kind", Type: 'L', Signature: "Lorg/apache/flink/table/types/logical/TimestampKind;"}

	classBoolean   = logicalClass("BooleanType")
	classTinyInt   = logicalClass("TinyIntType")
	classSmallInt  = logicalClass("SmallIntType")
	classInt       = logicalClass("IntType")
	classBigInt    = logicalClass("BigIntType")
	classFloat     = logicalClass("FloatType")
	classDouble    = logicalClass("DoubleType")
	classDate      = logicalClass("DateType")
	classChar      = logicalClass("CharType", fLength)
	classVarChar   = logicalClass("VarCharType", fLength)
	classBinary    = logicalClass("BinaryType", fLength)
	classVarBinary = logicalClass("VarBinaryType", fLength)
	classDecimal   = logicalClass("DecimalType", fPrecision, JavaField{Name: "scale", Type: 'I'})
	classTime      = logicalClass("TimeType", fPrecision)
	classTimestamp = logicalClass("TimestampType", fPrecision, fKind)
	classLTZ       = logicalClass("LocalZonedTimestampType", fPrecision, fKind)
	classArray     = logicalClass("ArrayType", JavaField{Name: "elementType", Type: 'L', Signature: sigLogicalType})
	classMultiset  = logicalClass("MultisetType", JavaField{Name: "elementType", Type: 'L', Signature: sigLogicalType})
	classMap       = logicalClass("MapType",
		JavaField{Name: "keyType", Type: 'L', Signature: sigLogicalType},
		JavaField{Name: "valueType", Type: 'L', Signature: sigLogicalType})
	classRow = logicalClass("RowType", JavaField{Name: "fields", Type: 'L', Signature: sigList})
)

// Java collection classes as the JDK writes them.
var (
	classUnmodifiableCollection = &JavaClass{Name: "java.util.Collections$UnmodifiableCollection", SUID: suid(0x19420080cb5ef71e), Flags: SCSerializable,
		Fields: []JavaField{{Name: "c", Type: 'L', Signature: "Ljava/util/Collection;"}}}
	// Collections.unmodifiableList(ArrayList) is an UnmodifiableRandomAccessList
	// whose writeReplace turns it into a plain UnmodifiableList.
	classUnmodifiableList = &JavaClass{Name: "java.util.Collections$UnmodifiableList", SUID: suid(0xfc0f2531b5ec8e10), Flags: SCSerializable,
		Super: classUnmodifiableCollection, Fields: []JavaField{{Name: "list", Type: 'L', Signature: sigList}}}
	classArrayList = &JavaClass{Name: "java.util.ArrayList", SUID: suid(0x7881d21d99c7619d), Flags: SCSerializable | SCWriteMethod,
		Fields: []JavaField{{Name: "size", Type: 'I'}}}
)

// Well-known java.lang classes (for Class objects such as a DataType's
// conversion class).
var (
	JavaLangNumber  = &JavaClass{Name: "java.lang.Number", SUID: suid(0x86ac951d0b94e08b), Flags: SCSerializable}
	JavaLangString  = &JavaClass{Name: "java.lang.String", SUID: suid(0xa0f0a4387a3bb342), Flags: SCSerializable}
	JavaLangLong    = &JavaClass{Name: "java.lang.Long", SUID: suid(0x3b8be490cc8f23df), Flags: SCSerializable, Super: JavaLangNumber, Fields: []JavaField{{Name: "value", Type: 'J'}}}
	JavaLangInteger = &JavaClass{Name: "java.lang.Integer", SUID: suid(0x12e2a0a4f7818738), Flags: SCSerializable, Super: JavaLangNumber, Fields: []JavaField{{Name: "value", Type: 'I'}}}
	JavaLangDouble  = &JavaClass{Name: "java.lang.Double", SUID: suid(0x80b3c24a296bfb04), Flags: SCSerializable, Super: JavaLangNumber, Fields: []JavaField{{Name: "value", Type: 'D'}}}
	JavaLangBoolean = &JavaClass{Name: "java.lang.Boolean", SUID: suid(0xcd207280d59cfaee), Flags: SCSerializable, Fields: []JavaField{{Name: "value", Type: 'Z'}}}
)

// javaUnmodifiableList builds what Collections.unmodifiableList(new
// ArrayList<>(items)) serializes to.
func javaUnmodifiableList(items []any) *JavaObject {
	ann := make([]any, 0, len(items)+1)
	ann = append(ann, be32(int32(len(items))))
	ann = append(ann, items...)
	al := &JavaObject{
		Class:       classArrayList,
		Fields:      map[string]any{"size": int32(len(items))},
		Annotations: map[string][]any{classArrayList.Name: ann},
	}
	return &JavaObject{Class: classUnmodifiableList, Fields: map[string]any{"c": al, "list": al}}
}

// suid converts a serialVersionUID as printed in hex.
func suid(u uint64) int64 { return int64(u) }

func be32(v int32) []byte {
	return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

func baseType(c *JavaClass, nullable bool, root string) *JavaObject {
	return &JavaObject{Class: c, Fields: map[string]any{
		"isNullable": nullable,
		"typeRoot":   &JavaEnum{Class: classTypeRoot, Name: root},
	}}
}

func lt(c *JavaClass, nullable bool, root string, kv ...any) *JavaObject {
	o := baseType(c, nullable, root)
	for i := 0; i+1 < len(kv); i += 2 {
		o.Fields[kv[i].(string)] = kv[i+1]
	}
	return o
}

// TimestampKind is org.apache.flink.table.types.logical.TimestampKind.
type TimestampKind string

const (
	TimestampRegular  TimestampKind = "REGULAR"
	TimestampRowtime  TimestampKind = "ROWTIME"
	TimestampProctime TimestampKind = "PROCTIME"
)

func (k TimestampKind) enum() *JavaEnum {
	if k == "" {
		k = TimestampRegular
	}
	return &JavaEnum{Class: classTimestampKnd, Name: string(k)}
}

// The primitive logical types. Nullable mirrors LogicalType.isNullable().
type (
	BooleanType  struct{ Nullable bool }
	TinyIntType  struct{ Nullable bool }
	SmallIntType struct{ Nullable bool }
	IntType      struct{ Nullable bool }
	BigIntType   struct{ Nullable bool }
	FloatType    struct{ Nullable bool }
	DoubleType   struct{ Nullable bool }
	DateType     struct{ Nullable bool }
	// CharType is CHAR(Length).
	CharType struct {
		Nullable bool
		Length   int32
	}
	// VarCharType is VARCHAR(Length); STRING is Length 2147483647.
	VarCharType struct {
		Nullable bool
		Length   int32
	}
	BinaryType struct {
		Nullable bool
		Length   int32
	}
	VarBinaryType struct {
		Nullable bool
		Length   int32
	}
	DecimalType struct {
		Nullable         bool
		Precision, Scale int32
	}
	// TimeType is TIME(Precision); values are millis of day (Int).
	TimeType struct {
		Nullable  bool
		Precision int32
	}
	TimestampType struct {
		Nullable  bool
		Precision int32
		Kind      TimestampKind // "" = REGULAR
	}
	LocalZonedTimestampType struct {
		Nullable  bool
		Precision int32
		Kind      TimestampKind
	}
	ArrayType struct {
		Nullable bool
		Element  LogicalType
	}
	MultisetType struct {
		Nullable bool
		Element  LogicalType
	}
	MapType struct {
		Nullable   bool
		Key, Value LogicalType
	}
	// RowType is ROW<...>. Description nil = no description.
	RowType struct {
		Nullable bool
		Fields   []RowField
	}
	RowField struct {
		Name        string
		Type        LogicalType
		Description *string
	}
	// StructuredType is a structured (POJO-like) type, e.g. an aggregate
	// accumulator. ImplementationClass is the class descriptor Java writes
	// for the Class object (NonSerializableClass(name) for a plain POJO).
	StructuredType struct {
		Nullable            bool
		IsFinal             bool
		IsInstantiable      bool
		Description         *string
		ObjectIdentifier    *JavaObject // nil for anonymous types
		Attributes          []StructuredAttribute
		Comparison          string // StructuredComparison: EQUALS, FULL, NONE ("" = NONE)
		ImplementationClass *JavaClass
		SuperType           *StructuredType
	}
	StructuredAttribute struct {
		Name        string
		Type        LogicalType
		Description *string
	}
	// RawType is RAW(class, serializer): Class is the value class and
	// Serializer the Java-serialized TypeSerializer object (for example
	// NullSerializerObject()). Snapshot is the serializer's snapshot used by
	// RawValueDataSerializer (nested).
	RawType struct {
		Nullable   bool
		Class      *JavaClass
		Serializer *JavaObject
		Snapshot   Snapshot
	}
)

func optString(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

func (t BooleanType) JavaObject() (*JavaObject, error) {
	return baseType(classBoolean, t.Nullable, "BOOLEAN"), nil
}
func (t TinyIntType) JavaObject() (*JavaObject, error) {
	return baseType(classTinyInt, t.Nullable, "TINYINT"), nil
}
func (t SmallIntType) JavaObject() (*JavaObject, error) {
	return baseType(classSmallInt, t.Nullable, "SMALLINT"), nil
}
func (t IntType) JavaObject() (*JavaObject, error) {
	return baseType(classInt, t.Nullable, "INTEGER"), nil
}
func (t BigIntType) JavaObject() (*JavaObject, error) {
	return baseType(classBigInt, t.Nullable, "BIGINT"), nil
}
func (t FloatType) JavaObject() (*JavaObject, error) {
	return baseType(classFloat, t.Nullable, "FLOAT"), nil
}
func (t DoubleType) JavaObject() (*JavaObject, error) {
	return baseType(classDouble, t.Nullable, "DOUBLE"), nil
}
func (t DateType) JavaObject() (*JavaObject, error) {
	return baseType(classDate, t.Nullable, "DATE"), nil
}
func (t CharType) JavaObject() (*JavaObject, error) {
	if t.Length < 1 {
		return nil, fmt.Errorf("%w: CHAR length %d", ErrJavaObject, t.Length)
	}
	return lt(classChar, t.Nullable, "CHAR", "length", t.Length), nil
}
func (t VarCharType) JavaObject() (*JavaObject, error) {
	if t.Length < 1 {
		return nil, fmt.Errorf("%w: VARCHAR length %d", ErrJavaObject, t.Length)
	}
	return lt(classVarChar, t.Nullable, "VARCHAR", "length", t.Length), nil
}
func (t BinaryType) JavaObject() (*JavaObject, error) {
	if t.Length < 1 {
		return nil, fmt.Errorf("%w: BINARY length %d", ErrJavaObject, t.Length)
	}
	return lt(classBinary, t.Nullable, "BINARY", "length", t.Length), nil
}
func (t VarBinaryType) JavaObject() (*JavaObject, error) {
	if t.Length < 1 {
		return nil, fmt.Errorf("%w: VARBINARY length %d", ErrJavaObject, t.Length)
	}
	return lt(classVarBinary, t.Nullable, "VARBINARY", "length", t.Length), nil
}
func (t DecimalType) JavaObject() (*JavaObject, error) {
	if t.Precision < 1 || t.Precision > 38 || t.Scale < 0 || t.Scale > t.Precision {
		return nil, fmt.Errorf("%w: DECIMAL(%d, %d)", ErrJavaObject, t.Precision, t.Scale)
	}
	return lt(classDecimal, t.Nullable, "DECIMAL", "precision", t.Precision, "scale", t.Scale), nil
}
func (t TimeType) JavaObject() (*JavaObject, error) {
	if t.Precision < 0 || t.Precision > 9 {
		return nil, fmt.Errorf("%w: TIME(%d)", ErrJavaObject, t.Precision)
	}
	return lt(classTime, t.Nullable, "TIME_WITHOUT_TIME_ZONE", "precision", t.Precision), nil
}
func (t TimestampType) JavaObject() (*JavaObject, error) {
	if t.Precision < 0 || t.Precision > 9 {
		return nil, fmt.Errorf("%w: TIMESTAMP(%d)", ErrJavaObject, t.Precision)
	}
	return lt(classTimestamp, t.Nullable, "TIMESTAMP_WITHOUT_TIME_ZONE", "precision", t.Precision, "kind", t.Kind.enum()), nil
}
func (t LocalZonedTimestampType) JavaObject() (*JavaObject, error) {
	if t.Precision < 0 || t.Precision > 9 {
		return nil, fmt.Errorf("%w: TIMESTAMP_LTZ(%d)", ErrJavaObject, t.Precision)
	}
	return lt(classLTZ, t.Nullable, "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "precision", t.Precision, "kind", t.Kind.enum()), nil
}

func childObject(t LogicalType, what string) (*JavaObject, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: %s type missing", ErrJavaObject, what)
	}
	return t.JavaObject()
}

func (t ArrayType) JavaObject() (*JavaObject, error) {
	e, err := childObject(t.Element, "ARRAY element")
	if err != nil {
		return nil, err
	}
	return lt(classArray, t.Nullable, "ARRAY", "elementType", e), nil
}
func (t MultisetType) JavaObject() (*JavaObject, error) {
	e, err := childObject(t.Element, "MULTISET element")
	if err != nil {
		return nil, err
	}
	return lt(classMultiset, t.Nullable, "MULTISET", "elementType", e), nil
}
func (t MapType) JavaObject() (*JavaObject, error) {
	k, err := childObject(t.Key, "MAP key")
	if err != nil {
		return nil, err
	}
	v, err := childObject(t.Value, "MAP value")
	if err != nil {
		return nil, err
	}
	return lt(classMap, t.Nullable, "MAP", "keyType", k, "valueType", v), nil
}
func (t RowType) JavaObject() (*JavaObject, error) {
	items := make([]any, 0, len(t.Fields))
	for _, f := range t.Fields {
		ft, err := childObject(f.Type, "ROW field "+f.Name)
		if err != nil {
			return nil, err
		}
		items = append(items, &JavaObject{Class: classRowField, Fields: map[string]any{
			"description": optString(f.Description), "name": f.Name, "type": ft,
		}})
	}
	return lt(classRow, t.Nullable, "ROW", "fields", javaUnmodifiableList(items)), nil
}
func (t StructuredType) JavaObject() (*JavaObject, error) {
	items := make([]any, 0, len(t.Attributes))
	for _, a := range t.Attributes {
		at, err := childObject(a.Type, "attribute "+a.Name)
		if err != nil {
			return nil, err
		}
		items = append(items, &JavaObject{Class: classStructuredAttr, Fields: map[string]any{
			"description": optString(a.Description), "name": a.Name, "type": at,
		}})
	}
	cmp := t.Comparison
	if cmp == "" {
		cmp = "NONE"
	}
	var impl any
	if t.ImplementationClass != nil {
		impl = &JavaClassRef{Class: t.ImplementationClass}
	}
	var super any
	if t.SuperType != nil {
		s, err := t.SuperType.JavaObject()
		if err != nil {
			return nil, err
		}
		super = s
	}
	var oid any
	if t.ObjectIdentifier != nil {
		oid = t.ObjectIdentifier
	}
	return lt(classStructuredType, t.Nullable, "STRUCTURED_TYPE",
		"isFinal", t.IsFinal, "description", optString(t.Description), "objectIdentifier", oid,
		"isInstantiable", t.IsInstantiable, "attributes", javaUnmodifiableList(items),
		"comparison", &JavaEnum{Class: classStructCmp, Name: cmp},
		"implementationClass", impl, "superType", super), nil
}
func (t RawType) JavaObject() (*JavaObject, error) {
	if t.Class == nil || t.Serializer == nil {
		return nil, fmt.Errorf("%w: RAW type needs a class and a serializer object", ErrJavaObject)
	}
	return lt(classRawType, t.Nullable, "RAW", "clazz", &JavaClassRef{Class: t.Class}, "serializer", t.Serializer), nil
}

// nullSerializerObject is org.apache.flink.table.dataview.NullSerializer.INSTANCE
// (a TypeSerializerSingleton): one shared instance, so a second use in the
// same stream is a back reference.
var (
	classTypeSerializer          = &JavaClass{Name: "org.apache.flink.api.common.typeutils.TypeSerializer", SUID: 1, Flags: SCSerializable}
	classTypeSerializerSingleton = &JavaClass{Name: "org.apache.flink.api.common.typeutils.base.TypeSerializerSingleton", SUID: suid(0x79a987aac72e7745), Flags: SCSerializable, Super: classTypeSerializer}
	classNullSerializer          = &JavaClass{Name: "org.apache.flink.table.dataview.NullSerializer", SUID: suid(0xb550ba4ab363ac5f), Flags: SCSerializable, Super: classTypeSerializerSingleton}
	nullSerializerInstance       = &JavaObject{Class: classNullSerializer}
)

// NullSerializerObject returns the Java object of Flink's
// table.dataview.NullSerializer singleton (the serializer of RAW ListView /
// MapView placeholders in aggregate accumulators).
func NullSerializerObject() *JavaObject { return nullSerializerInstance }

// DataView classes used as RAW type classes in accumulators.
var (
	ListViewClass = NonSerializableClass("org.apache.flink.table.api.dataview.ListView")
	MapViewClass  = NonSerializableClass("org.apache.flink.table.api.dataview.MapView")
)

// EncodeLogicalType returns the Java object stream Flink writes for t
// (InstantiationUtil.serializeObject: one ObjectOutputStream per type).
func EncodeLogicalType(t LogicalType) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil logical type", ErrJavaObject)
	}
	o, err := t.JavaObject()
	if err != nil {
		return nil, err
	}
	return EncodeJavaStream(o)
}

// DataType classes (org.apache.flink.table.types.*) for
// ExternalSerializerSnapshot.
var (
	classDataType = &JavaClass{Name: "org.apache.flink.table.types.DataType", SUID: suid(0xc68ff3149e02836d), Flags: SCSerializable, Fields: []JavaField{
		{Name: "conversionClass", Type: 'L', Signature: sigClass},
		{Name: "logicalType", Type: 'L', Signature: sigLogicalType},
	}}
	classAtomicDataType = &JavaClass{Name: "org.apache.flink.table.types.AtomicDataType", SUID: suid(0x1a885329fa7a2332), Flags: SCSerializable, Super: classDataType}
)

// AtomicDataType is org.apache.flink.table.types.AtomicDataType: a logical
// type plus the Java class values convert to (e.g. JavaLangString).
type AtomicDataType struct {
	Conversion *JavaClass
	Type       LogicalType
}

// JavaObject returns the object graph of the data type.
func (d AtomicDataType) JavaObject() (*JavaObject, error) {
	if d.Conversion == nil {
		return nil, fmt.Errorf("%w: data type without conversion class", ErrJavaObject)
	}
	t, err := childObject(d.Type, "data type")
	if err != nil {
		return nil, err
	}
	return &JavaObject{Class: classAtomicDataType, Fields: map[string]any{
		"conversionClass": &JavaClassRef{Class: d.Conversion}, "logicalType": t,
	}}, nil
}
