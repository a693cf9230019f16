package savepoint

import (
	"fmt"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// ParseKeyType turns a key type as the keygroups command spells it
// (keygroups.ParseKeySpec) into the snapshot of the serializer Flink uses
// for such keys, for decoding keys whose serializer a savepoint does not
// record (changelog state-change logs): the Java primitive-wrapper
// serializers of DataStream keys, TupleSerializer of a TupleN of those
// (keyBy on field positions), RowDataSerializer of a SQL key row.
func ParseKeyType(spec string) (*serde.Snapshot, error) {
	ks, err := keygroups.ParseKeySpec(spec)
	if err != nil {
		return nil, err
	}
	switch {
	case ks.Row != nil:
		snap := &serde.Snapshot{Class: serde.ClassRowData, OuterVersion: -1}
		for i, t := range ks.Row {
			lt, err := logicalTypeOf(t)
			if err != nil {
				return nil, fmt.Errorf("field %d: %w", i, err)
			}
			snap.Types = append(snap.Types, lt)
		}
		return snap, nil
	case ks.Tuple != nil:
		snap := &serde.Snapshot{Class: serde.ClassTuple, OuterVersion: -1, TupleClass: fmt.Sprintf("org.apache.flink.api.java.tuple.Tuple%d", len(ks.Tuple))}
		for _, k := range ks.Tuple {
			snap.Nested = append(snap.Nested, &serde.Snapshot{Class: javaClass[k], OuterVersion: -1})
		}
		return snap, nil
	}
	return &serde.Snapshot{Class: javaClass[ks.Java], OuterVersion: -1}, nil
}

// javaClass is the serializer of each Java key class.
var javaClass = map[keygroups.JavaKind]string{
	keygroups.JavaInt:     serde.ClassInt,
	keygroups.JavaLong:    serde.ClassLong,
	keygroups.JavaShort:   serde.ClassShort,
	keygroups.JavaByte:    serde.ClassByte,
	keygroups.JavaBoolean: serde.ClassBoolean,
	keygroups.JavaFloat:   serde.ClassFloat,
	keygroups.JavaDouble:  serde.ClassDouble,
	keygroups.JavaString:  serde.ClassString,
}

// logicalTypeOf is the nullable SQL logical type of a key row field.
func logicalTypeOf(t keygroups.FieldType) (*serde.LogicalType, error) {
	lt := &serde.LogicalType{Nullable: true}
	switch t.Kind {
	case keygroups.KindBoolean:
		lt.Root = "BOOLEAN"
	case keygroups.KindTinyInt:
		lt.Root = "TINYINT"
	case keygroups.KindSmallInt:
		lt.Root = "SMALLINT"
	case keygroups.KindInt:
		lt.Root = "INTEGER"
	case keygroups.KindBigInt:
		lt.Root = "BIGINT"
	case keygroups.KindFloat:
		lt.Root = "FLOAT"
	case keygroups.KindDouble:
		lt.Root = "DOUBLE"
	case keygroups.KindString:
		lt.Root, lt.Length = "VARCHAR", 1<<31-1
	case keygroups.KindBytes:
		lt.Root, lt.Length = "VARBINARY", 1<<31-1
	case keygroups.KindDate:
		lt.Root = "DATE"
	case keygroups.KindTime:
		lt.Root, lt.Precision = "TIME_WITHOUT_TIME_ZONE", t.Precision
	case keygroups.KindTimestamp:
		lt.Root, lt.Precision = "TIMESTAMP_WITHOUT_TIME_ZONE", t.Precision
	case keygroups.KindTimestampLTZ:
		lt.Root, lt.Precision = "TIMESTAMP_WITH_LOCAL_TIME_ZONE", t.Precision
	case keygroups.KindDecimal:
		lt.Root, lt.Precision, lt.Scale = "DECIMAL", t.Precision, t.Scale
	case keygroups.KindIntervalYearMonth:
		lt.Root = "INTERVAL_YEAR_MONTH"
	case keygroups.KindIntervalDayTime:
		lt.Root = "INTERVAL_DAY_TIME"
	default:
		return nil, fmt.Errorf("unsupported key field type %v", t.Kind)
	}
	return lt, nil
}
