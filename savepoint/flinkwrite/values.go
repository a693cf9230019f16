package flinkwrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sfstate/sfstate/keygroups"
)

// ErrValue marks a value or key that cannot be encoded.
var ErrValue = errors.New("flinkwrite: invalid value")

// listDelimiter separates the elements of a LIST state value (RocksDB's
// merge operator and Flink's ListDelimitedSerializer). Wire format.
const listDelimiter = ','

// AppendStringValue appends s as Flink's StringSerializer writes a Java
// String (StringValue.writeString): varint(len+1), then each UTF-16 code
// unit as a varint. The string must be valid UTF-8.
func AppendStringValue(b []byte, s string) []byte { return keygroups.AppendStringValue(b, s) }

// AppendNullStringValue appends the null String (one 0x00 byte).
func AppendNullStringValue(b []byte) []byte { return append(b, 0) }

// AppendStringData appends s as StringDataSerializer writes it: i32 byte
// length then the UTF-8 bytes.
func AppendStringData(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// AppendLong, AppendInt, ... append the fixed-size primitive encodings
// (big-endian, as Flink's base serializers write them).
func AppendLong(b []byte, v int64) []byte  { return binary.BigEndian.AppendUint64(b, uint64(v)) }
func AppendInt(b []byte, v int32) []byte   { return binary.BigEndian.AppendUint32(b, uint32(v)) }
func AppendShort(b []byte, v int16) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
func AppendChar(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func AppendByte(b []byte, v int8) []byte   { return append(b, byte(v)) }
func AppendDouble(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
}
func AppendFloat(b []byte, v float32) []byte {
	return binary.BigEndian.AppendUint32(b, math.Float32bits(v))
}
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// AppendVoidNamespace appends VoidNamespace: one 0x00 byte (although the
// serializer declares length 0).
func AppendVoidNamespace(b []byte) []byte { return append(b, 0) }

// AppendTimeWindow appends a TimeWindow namespace: i64 start, i64 end.
func AppendTimeWindow(b []byte, start, end int64) []byte {
	return AppendLong(AppendLong(b, start), end)
}

// AppendRowData appends a serialized BinaryRowData as RowDataSerializer and
// BinaryRowDataSerializer write it: i32 size (big-endian) then the row
// bytes (built e.g. with keygroups.RowBuilder).
func AppendRowData(b []byte, row []byte) ([]byte, error) {
	if len(row)%8 != 0 || len(row) > math.MaxInt32 {
		return b, fmt.Errorf("%w: BinaryRowData of %d bytes", ErrValue, len(row))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(row)))
	return append(b, row...), nil
}

// AppendTtlValue appends a TtlValue as TtlSerializer writes it: the i64
// last-access timestamp (epoch millis) followed by the user value bytes.
func AppendTtlValue(b []byte, lastAccess int64, value []byte) []byte {
	return append(AppendLong(b, lastAccess), value...)
}

// AppendListValue appends a LIST state value: the serialized elements
// separated by ',' (no count, no trailing delimiter). Flink never writes an
// empty list; an empty elems is an error.
func AppendListValue(b []byte, elems ...[]byte) ([]byte, error) {
	if len(elems) == 0 {
		return b, fmt.Errorf("%w: empty LIST value (Flink stores no entry for an empty list)", ErrValue)
	}
	for i, e := range elems {
		if i > 0 {
			b = append(b, listDelimiter)
		}
		b = append(b, e...)
	}
	return b, nil
}

// AppendMapEntryValue appends the value of one MAP state entry: bool isNull,
// then the user value bytes unless null.
func AppendMapEntryValue(b []byte, value []byte, isNull bool) []byte {
	if isNull {
		return append(b, 1)
	}
	return append(append(b, 0), value...)
}

// AppendListSerializer appends a java.util.List as ListSerializer writes
// it when it is a value type (ValueState<List<T>>): i32 count + elements.
func AppendListSerializer(b []byte, elems ...[]byte) []byte {
	b = AppendInt(b, int32(len(elems)))
	for _, e := range elems {
		b = append(b, e...)
	}
	return b
}

// MapSerializerEntry is one entry for AppendMapSerializer; Value nil means a
// null value.
type MapSerializerEntry struct {
	Key, Value []byte
}

// AppendMapSerializer appends a java.util.Map as MapSerializer writes it
// when it is a value type: i32 count, then per entry key, bool isNull,
// [value].
func AppendMapSerializer(b []byte, entries ...MapSerializerEntry) []byte {
	b = AppendInt(b, int32(len(entries)))
	for _, e := range entries {
		b = append(b, e.Key...)
		if e.Value == nil {
			b = append(b, 1)
		} else {
			b = append(append(b, 0), e.Value...)
		}
	}
	return b
}

// AppendKeyGroupPrefix appends key group kg big-endian in width bytes.
func AppendKeyGroupPrefix(b []byte, kg, width int) ([]byte, error) {
	switch {
	case width == 1 && kg >= 0 && kg < 128:
		return append(b, byte(kg)), nil
	case width == 2 && kg >= 0 && kg < 32768:
		return append(b, byte(kg>>8), byte(kg)), nil
	}
	return b, fmt.Errorf("%w: key group %d does not fit a %d-byte prefix", ErrValue, kg, width)
}

// appendLenMarker appends the "variable int bytes" marker Flink puts after
// the key and namespace of ambiguous composite keys: the length, low byte
// first, at least one byte, no continuation bits.
func appendLenMarker(b []byte, n int) []byte {
	for {
		b = append(b, byte(n))
		n >>= 8
		if n == 0 {
			return b
		}
	}
}

// StateKey builds the key of a key/value state entry (§5.1 of the format
// notes): key-group prefix, serialized key, [length marker], serialized
// namespace, [length marker], [user key for MAP state]. Ambiguous must be
// true exactly when both the key and the namespace serializer are variable
// length (TypeSerializer.getLength() < 0), e.g. String key + String
// namespace; VoidNamespace, Long and TimeWindow namespaces are fixed.
type StateKey struct {
	KeyGroup  int
	PrefixLen int // keygroups.PrefixWidth(maxParallelism)
	Key       []byte
	Namespace []byte
	UserKey   []byte // MAP state only
	Ambiguous bool
}

// Append appends the composite key bytes.
func (k StateKey) Append(b []byte) ([]byte, error) {
	b, err := AppendKeyGroupPrefix(b, k.KeyGroup, k.PrefixLen)
	if err != nil {
		return b, err
	}
	b = append(b, k.Key...)
	if k.Ambiguous {
		b = appendLenMarker(b, len(k.Key))
	}
	b = append(b, k.Namespace...)
	if k.Ambiguous {
		b = appendLenMarker(b, len(k.Namespace))
	}
	return append(b, k.UserKey...), nil
}

// AppendTimerKey appends the key of a timer priority-queue entry: key-group
// prefix, i64 timestamp with the sign bit flipped (so unsigned byte order is
// numeric order), serialized key, serialized namespace. The entry's value is
// empty.
func AppendTimerKey(b []byte, kg, prefixLen int, timestamp int64, key, namespace []byte) ([]byte, error) {
	b, err := AppendKeyGroupPrefix(b, kg, prefixLen)
	if err != nil {
		return b, err
	}
	b = binary.BigEndian.AppendUint64(b, uint64(timestamp)^(1<<63))
	b = append(b, key...)
	return append(b, namespace...), nil
}

// RowFieldTypes maps the logical types of a RowDataSnapshot to the field
// types of keygroups.RowBuilder, so values are built with the same schema
// the header declares. Nested rows, structured, RAW, ARRAY, MAP and
// MULTISET fields have no builder support and return an error.
func RowFieldTypes(types []LogicalType) ([]keygroups.FieldType, error) {
	out := make([]keygroups.FieldType, len(types))
	for i, t := range types {
		var ft keygroups.FieldType
		switch x := t.(type) {
		case BooleanType:
			ft = keygroups.TypeBoolean
		case TinyIntType:
			ft = keygroups.TypeTinyInt
		case SmallIntType:
			ft = keygroups.TypeSmallInt
		case IntType:
			ft = keygroups.TypeInt
		case BigIntType:
			ft = keygroups.TypeBigInt
		case FloatType:
			ft = keygroups.TypeFloat
		case DoubleType:
			ft = keygroups.TypeDouble
		case CharType, VarCharType:
			ft = keygroups.TypeString
		case BinaryType, VarBinaryType:
			ft = keygroups.TypeBytes
		case DateType:
			ft = keygroups.TypeDate
		case TimeType:
			ft = keygroups.TypeTime
		case TimestampType:
			ft = keygroups.TypeTimestamp(int(x.Precision))
		case LocalZonedTimestampType:
			ft = keygroups.TypeTimestampLTZ(int(x.Precision))
		case DecimalType:
			ft = keygroups.TypeDecimal(int(x.Precision), int(x.Scale))
		default:
			return nil, fmt.Errorf("%w: row field %d: no row builder type for %T", ErrValue, i, t)
		}
		out[i] = ft
	}
	return out, nil
}

// LogicalTypeOf is the inverse of RowFieldTypes for one field: the logical
// type Flink's planner uses for a keygroups row field (STRING for strings,
// BYTES for binaries).
func LogicalTypeOf(ft keygroups.FieldType, nullable bool) (LogicalType, error) {
	switch ft.Kind {
	case keygroups.KindBoolean:
		return BooleanType{nullable}, nil
	case keygroups.KindTinyInt:
		return TinyIntType{nullable}, nil
	case keygroups.KindSmallInt:
		return SmallIntType{nullable}, nil
	case keygroups.KindInt:
		return IntType{nullable}, nil
	case keygroups.KindBigInt:
		return BigIntType{nullable}, nil
	case keygroups.KindFloat:
		return FloatType{nullable}, nil
	case keygroups.KindDouble:
		return DoubleType{nullable}, nil
	case keygroups.KindString:
		return VarCharType{nullable, math.MaxInt32}, nil
	case keygroups.KindBytes:
		return VarBinaryType{nullable, math.MaxInt32}, nil
	case keygroups.KindDate:
		return DateType{nullable}, nil
	case keygroups.KindTime:
		return TimeType{nullable, 0}, nil
	case keygroups.KindTimestamp:
		return TimestampType{nullable, int32(ft.Precision), TimestampRegular}, nil
	case keygroups.KindTimestampLTZ:
		return LocalZonedTimestampType{nullable, int32(ft.Precision), TimestampRegular}, nil
	case keygroups.KindDecimal:
		return DecimalType{nullable, int32(ft.Precision), int32(ft.Scale)}, nil
	}
	return nil, fmt.Errorf("%w: no logical type for row field kind %s", ErrValue, ft.Kind)
}
