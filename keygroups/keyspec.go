package keygroups

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
)

// A key type as users spell it on the command line (`sfstate keygroups
// assign --key-type`, `inspect --key-type`):
//
//	int, bigint, smallint, tinyint, boolean, float, double, string
//	    (aliases integer, long, short, byte, bool): DataStream keys of the
//	    Java boxed classes, serialized by Flink's primitive serializers
//	    (big-endian fixed width; String as StringValue, see AppendStringValue)
//	tuple<T, ...>: a Flink TupleN (N <= 25) of those; the serializer writes
//	    the fields one after the other, the hash is Tuple.hashCode()
//	row<T, ...>: a SQL key, a BinaryRowData of the key columns (RowKind +I)
//	    with the field types ParseRowType knows; serialized as i32 length
//	    then the row
//
// ParseKeySpec reads one; KeySpec.Parse turns a key written in that type
// (tuple and row fields comma-separated, see SplitFields) into a Key and
// its serialized bytes.

// JavaKind is a Java key class of DataStream keys.
type JavaKind uint8

// The Java key classes ParseKeySpec knows.
const (
	JavaInt JavaKind = iota + 1
	JavaLong
	JavaShort
	JavaByte
	JavaBoolean
	JavaFloat
	JavaDouble
	JavaString
)

// ParseJavaKind parses a Java key class name (int, bigint, ... or an alias).
func ParseJavaKind(name string) (JavaKind, bool) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "int", "integer":
		return JavaInt, true
	case "bigint", "long":
		return JavaLong, true
	case "smallint", "short":
		return JavaShort, true
	case "tinyint", "byte":
		return JavaByte, true
	case "boolean", "bool":
		return JavaBoolean, true
	case "float":
		return JavaFloat, true
	case "double":
		return JavaDouble, true
	case "string":
		return JavaString, true
	}
	return 0, false
}

// parse reads one key of kind k from text.
func (k JavaKind) parse(text string) (Key, []byte, error) {
	be := binary.BigEndian
	t := strings.TrimSpace(text)
	switch k {
	case JavaInt:
		v, err := strconv.ParseInt(t, 10, 32)
		return Int(v), be.AppendUint32(nil, uint32(v)), err
	case JavaLong:
		v, err := strconv.ParseInt(t, 10, 64)
		return Long(v), be.AppendUint64(nil, uint64(v)), err
	case JavaShort:
		v, err := strconv.ParseInt(t, 10, 16)
		return Short(v), be.AppendUint16(nil, uint16(v)), err
	case JavaByte:
		v, err := strconv.ParseInt(t, 10, 8)
		return Byte(v), []byte{byte(v)}, err
	case JavaBoolean:
		v, err := strconv.ParseBool(t)
		b := byte(0)
		if v {
			b = 1
		}
		return Boolean(v), []byte{b}, err
	case JavaFloat:
		v, err := strconv.ParseFloat(t, 32)
		return Float(v), be.AppendUint32(nil, math.Float32bits(float32(v))), err
	case JavaDouble:
		v, err := strconv.ParseFloat(t, 64)
		return Double(v), be.AppendUint64(nil, math.Float64bits(v)), err
	case JavaString:
		// Not trimmed: blanks are part of a string key.
		return String(text), AppendStringValue(nil, text), nil
	}
	return nil, nil, fmt.Errorf("invalid Java key kind %d", k)
}

// AppendStringValue appends s as Flink's StringSerializer writes a Java
// String (StringValue.writeString): varint(number of UTF-16 code units + 1),
// then each code unit as a 7-bit varint. The one implementation of that
// encoding (flinkwrite's value writer uses it too).
func AppendStringValue(b []byte, s string) []byte {
	units := utf16.Encode([]rune(s))
	b = binary.AppendUvarint(b, uint64(len(units))+1)
	for _, u := range units {
		b = binary.AppendUvarint(b, uint64(u))
	}
	return b
}

// maxTupleArity is the largest Flink tuple (Tuple25).
const maxTupleArity = 25

// KeySpec is a parsed key type: exactly one of Java, Tuple or Row is set.
type KeySpec struct {
	Java  JavaKind
	Tuple []JavaKind
	Row   []FieldType

	row *RowBuilder
}

// ParseKeySpec parses a key type (see the grammar above).
func ParseKeySpec(spec string) (*KeySpec, error) {
	s := strings.TrimSpace(spec)
	low := strings.ToLower(s)
	switch {
	case strings.HasPrefix(low, "row"):
		types, err := ParseRowType(s)
		if err != nil {
			return nil, err
		}
		b, err := NewRowBuilder(types)
		if err != nil {
			return nil, err
		}
		return &KeySpec{Row: types, row: b}, nil
	case strings.HasPrefix(low, "tuple"):
		rest := strings.TrimSpace(s[len("tuple"):])
		if !strings.HasPrefix(rest, "<") || !strings.HasSuffix(rest, ">") || strings.TrimSpace(rest[1:len(rest)-1]) == "" {
			return nil, fmt.Errorf("malformed tuple type %q (want tuple<type, ...>)", spec)
		}
		names := SplitTopLevel(rest[1 : len(rest)-1])
		if len(names) > maxTupleArity {
			return nil, fmt.Errorf("tuple of %d fields: Flink tuples have at most %d", len(names), maxTupleArity)
		}
		ks := &KeySpec{}
		for _, name := range names {
			k, ok := ParseJavaKind(name)
			if !ok {
				return nil, fmt.Errorf("tuple field type %q: want int, bigint, smallint, tinyint, boolean, float, double or string", name)
			}
			ks.Tuple = append(ks.Tuple, k)
		}
		return ks, nil
	}
	if k, ok := ParseJavaKind(s); ok {
		return &KeySpec{Java: k}, nil
	}
	return nil, fmt.Errorf("unknown key type %q (want int, bigint, smallint, tinyint, boolean, float, double, string, tuple<...> or row<...>)", spec)
}

// Parse reads one key written in the spec's type: the Key (for its hash)
// and the key serializer's bytes (without a key-group prefix).
func (ks *KeySpec) Parse(text string) (Key, []byte, error) {
	switch {
	case ks.row != nil:
		fields, err := ks.fields(text, len(ks.Row))
		if err != nil {
			return nil, nil, err
		}
		vals := make([]any, len(ks.Row))
		for i, f := range fields {
			if f.IsNull() {
				continue
			}
			if vals[i], err = ParseValue(ks.Row[i], f.Text); err != nil {
				return nil, nil, fmt.Errorf("field %d: %w", i, err)
			}
		}
		row, err := ks.row.Build(vals)
		if err != nil {
			return nil, nil, err
		}
		ser := binary.BigEndian.AppendUint32(nil, uint32(len(row)))
		return Row(row), append(ser, row...), nil
	case ks.Tuple != nil:
		fields, err := ks.fields(text, len(ks.Tuple))
		if err != nil {
			return nil, nil, err
		}
		tup := make(Tuple, len(ks.Tuple))
		var ser []byte
		for i, f := range fields {
			if f.IsNull() {
				return nil, nil, fmt.Errorf("field %d: tuple fields cannot be null", i)
			}
			k, b, err := ks.Tuple[i].parse(f.Text)
			if err != nil {
				return nil, nil, fmt.Errorf("field %d: %w", i, err)
			}
			tup[i] = k
			ser = append(ser, b...)
		}
		return tup, ser, nil
	case ks.Java != 0:
		return ks.Java.parse(text)
	}
	return nil, nil, fmt.Errorf("empty key type")
}

func (ks *KeySpec) fields(text string, n int) ([]Field, error) {
	fields, err := SplitFields(text)
	if err != nil {
		return nil, err
	}
	if len(fields) != n {
		return nil, fmt.Errorf("%d fields, key type has %d (quote fields that contain commas)", len(fields), n)
	}
	return fields, nil
}
