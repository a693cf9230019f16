package savepoint

import (
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// ParseKeyType turns a key type as the keygroups command spells it into the
// snapshot of the serializer Flink uses for such keys, for decoding keys
// whose serializer a savepoint does not record (changelog state-change
// logs):
//
//	int, bigint, smallint, tinyint, boolean, float, double, string
//	    (and the aliases integer, long, short, byte, bool): the Java
//	    primitive-wrapper serializers of DataStream keys
//	tuple<T, ...>: TupleSerializer of TupleN of those (DataStream keyBy
//	    on field positions)
//	row<T, ...>: RowDataSerializer of a SQL key row, with the field types
//	    keygroups.ParseRowType knows
func ParseKeyType(spec string) (*serde.Snapshot, error) {
	s := strings.TrimSpace(spec)
	low := strings.ToLower(s)
	switch {
	case strings.HasPrefix(low, "row"):
		types, err := keygroups.ParseRowType(s)
		if err != nil {
			return nil, err
		}
		snap := &serde.Snapshot{Class: serde.ClassRowData, OuterVersion: -1}
		for i, t := range types {
			lt, err := logicalTypeOf(t)
			if err != nil {
				return nil, fmt.Errorf("field %d: %w", i, err)
			}
			snap.Types = append(snap.Types, lt)
		}
		return snap, nil
	case strings.HasPrefix(low, "tuple"):
		rest := strings.TrimSpace(s[len("tuple"):])
		if !strings.HasPrefix(rest, "<") || !strings.HasSuffix(rest, ">") || strings.TrimSpace(rest[1:len(rest)-1]) == "" {
			return nil, fmt.Errorf("malformed tuple type %q (want tuple<type, ...>)", spec)
		}
		fields := keygroups.SplitTopLevel(rest[1 : len(rest)-1])
		if len(fields) > 25 {
			return nil, fmt.Errorf("tuple of %d fields: Flink tuples have at most 25", len(fields))
		}
		snap := &serde.Snapshot{Class: serde.ClassTuple, OuterVersion: -1, TupleClass: fmt.Sprintf("org.apache.flink.api.java.tuple.Tuple%d", len(fields))}
		for _, f := range fields {
			c, ok := javaScalarClass(f)
			if !ok {
				return nil, fmt.Errorf("tuple field type %q: want int, bigint, smallint, tinyint, boolean, float, double or string", f)
			}
			snap.Nested = append(snap.Nested, &serde.Snapshot{Class: c, OuterVersion: -1})
		}
		return snap, nil
	}
	if c, ok := javaScalarClass(s); ok {
		return &serde.Snapshot{Class: c, OuterVersion: -1}, nil
	}
	return nil, fmt.Errorf("unknown key type %q (want int, bigint, smallint, tinyint, boolean, float, double, string, tuple<...> or row<...>)", spec)
}

func javaScalarClass(name string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "int", "integer":
		return serde.ClassInt, true
	case "bigint", "long":
		return serde.ClassLong, true
	case "smallint", "short":
		return serde.ClassShort, true
	case "tinyint", "byte":
		return serde.ClassByte, true
	case "boolean", "bool":
		return serde.ClassBoolean, true
	case "float":
		return serde.ClassFloat, true
	case "double":
		return serde.ClassDouble, true
	case "string":
		return serde.ClassString, true
	}
	return "", false
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
