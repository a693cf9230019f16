package stateexport

import (
	"fmt"
	"math"
	"math/big"
	"unicode/utf16"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/sfstate/sfstate/savepoint/serde"
)

// Field metadata keys set on exported columns.
const (
	// MetaSerializer names the serializer (snapshot class) of a column
	// whose data could not be typed and is exported as bytes.
	MetaSerializer = "sfstate.serializer"
	// MetaLogical names the Flink type of a column whose Arrow type does
	// not say it all (intervals, timer timestamps, JAVA_OBJECT).
	MetaLogical = "sfstate.logical"
)

// maxTypeDepth bounds the nesting of exported types (the serde decoders
// have their own bound; this one keeps schemas finite).
const maxTypeDepth = 32

// node maps one serde type to an Arrow type and appends its decoded values
// (see serde.Value) to a builder of that type.
type node struct {
	typ  arrow.DataType
	meta map[string]string
	app  func(b array.Builder, v serde.Value) error
	// unit marks types that carry no information (VoidNamespace,
	// GlobalWindow): flattened columns leave them out.
	unit bool
}

func (n node) field(name string) arrow.Field {
	f := arrow.Field{Name: name, Type: n.typ, Nullable: true}
	if len(n.meta) > 0 {
		f.Metadata = arrow.MetadataFrom(n.meta)
	}
	return f
}

func typeErr(want string, v serde.Value) error {
	return fmt.Errorf("value of type %T where %s was expected", v, want)
}

// binaryNode exports bytes no decoder typed: serde.Raw values, byte
// slices and (for JAVA_OBJECT) Java strings as their UTF-8 bytes.
func binaryNode(serializer string) node {
	return node{typ: arrow.BinaryTypes.Binary, meta: map[string]string{MetaSerializer: serializer}, app: appendBinary}
}

func appendBinary(b array.Builder, v serde.Value) error {
	bb := b.(*array.BinaryBuilder)
	switch x := v.(type) {
	case nil:
		bb.AppendNull()
	case *serde.Raw:
		if x == nil {
			bb.AppendNull()
		} else {
			bb.Append(x.Bytes)
		}
	case []byte:
		bb.Append(x)
	case string:
		bb.AppendString(x)
	default:
		return typeErr("bytes", v)
	}
	return nil
}

func scalar[T any, B interface {
	AppendNull()
	Append(T)
}](typ arrow.DataType, want string) node {
	return node{typ: typ, app: func(b array.Builder, v serde.Value) error {
		bb := b.(B)
		if v == nil {
			bb.AppendNull()
			return nil
		}
		x, ok := v.(T)
		if !ok {
			return typeErr(want, v)
		}
		bb.Append(x)
		return nil
	}}
}

var (
	boolNode    = scalar[bool, *array.BooleanBuilder](arrow.FixedWidthTypes.Boolean, "BOOLEAN")
	int8Node    = scalar[int8, *array.Int8Builder](arrow.PrimitiveTypes.Int8, "TINYINT")
	int16Node   = scalar[int16, *array.Int16Builder](arrow.PrimitiveTypes.Int16, "SMALLINT")
	int32Node   = scalar[int32, *array.Int32Builder](arrow.PrimitiveTypes.Int32, "INT")
	int64Node   = scalar[int64, *array.Int64Builder](arrow.PrimitiveTypes.Int64, "BIGINT")
	float32Node = scalar[float32, *array.Float32Builder](arrow.PrimitiveTypes.Float32, "FLOAT")
	float64Node = scalar[float64, *array.Float64Builder](arrow.PrimitiveTypes.Float64, "DOUBLE")
	binNode     = scalar[[]byte, *array.BinaryBuilder](arrow.BinaryTypes.Binary, "BYTES")
	nullNode    = node{typ: arrow.Null, app: func(b array.Builder, v serde.Value) error {
		b.AppendNull()
		return nil
	}}
	unitNode = node{typ: arrow.Null, unit: true, app: func(b array.Builder, v serde.Value) error {
		b.AppendNull()
		return nil
	}}
)

var stringNode = node{typ: arrow.BinaryTypes.String, app: func(b array.Builder, v serde.Value) error {
	sb := b.(*array.StringBuilder)
	switch x := v.(type) {
	case nil:
		sb.AppendNull()
	case string:
		sb.Append(x)
	case serde.Char:
		sb.Append(string(utf16.Decode([]uint16{uint16(x)})))
	default:
		return typeErr("STRING", v)
	}
	return nil
}}

// date32Node and time32Node take the int32 days / millis of day that the
// SQL decoders return for DATE and TIME.
var date32Node = node{typ: arrow.FixedWidthTypes.Date32, app: func(b array.Builder, v serde.Value) error {
	db := b.(*array.Date32Builder)
	if v == nil {
		db.AppendNull()
		return nil
	}
	x, ok := v.(int32)
	if !ok {
		return typeErr("DATE", v)
	}
	db.Append(arrow.Date32(x))
	return nil
}}

var time32Node = node{typ: arrow.FixedWidthTypes.Time32ms, app: func(b array.Builder, v serde.Value) error {
	tb := b.(*array.Time32Builder)
	if v == nil {
		tb.AppendNull()
		return nil
	}
	x, ok := v.(int32)
	if !ok {
		return typeErr("TIME", v)
	}
	tb.Append(arrow.Time32(x))
	return nil
}}

// epochMillisNode exports epoch milliseconds (int64) as TIMESTAMP(ms, UTC).
var epochMillisNode = timestampMillis(func(v serde.Value) (int64, bool) {
	x, ok := v.(int64)
	return x, ok
})

func timestampMillis(get func(serde.Value) (int64, bool)) node {
	return node{typ: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, app: func(b array.Builder, v serde.Value) error {
		tb := b.(*array.TimestampBuilder)
		if v == nil {
			tb.AppendNull()
			return nil
		}
		x, ok := get(v)
		if !ok {
			return typeErr("epoch milliseconds", v)
		}
		tb.Append(arrow.Timestamp(x))
		return nil
	}}
}

// timestampNode exports serde.Timestamp values of precision p in the
// smallest unit that keeps them: ms up to 3, µs up to 6, ns beyond. ltz
// marks TIMESTAMP_LTZ (instants, stored as UTC).
func timestampNode(p int, ltz bool) node {
	unit := arrow.Millisecond
	switch {
	case p > 6:
		unit = arrow.Nanosecond
	case p > 3:
		unit = arrow.Microsecond
	}
	tz := ""
	if ltz {
		tz = "UTC"
	}
	return node{typ: &arrow.TimestampType{Unit: unit, TimeZone: tz}, app: func(b array.Builder, v serde.Value) error {
		tb := b.(*array.TimestampBuilder)
		if v == nil {
			tb.AppendNull()
			return nil
		}
		t, ok := v.(serde.Timestamp)
		if !ok {
			return typeErr("TIMESTAMP", v)
		}
		x, err := timestampIn(t, unit)
		if err != nil {
			return err
		}
		tb.Append(arrow.Timestamp(x))
		return nil
	}}
}

// timestampIn converts epoch millis plus nanos of the millisecond to unit.
func timestampIn(t serde.Timestamp, unit arrow.TimeUnit) (int64, error) {
	var mul, add int64
	switch unit {
	case arrow.Millisecond:
		return t.Millis, nil
	case arrow.Microsecond:
		mul, add = 1000, int64(t.NanoOfMill)/1000
	default:
		mul, add = 1_000_000, int64(t.NanoOfMill)
	}
	if t.Millis > (math.MaxInt64-add)/mul || t.Millis < math.MinInt64/mul+1 {
		return 0, fmt.Errorf("timestamp %d ms does not fit a 64-bit count of %s", t.Millis, unit)
	}
	return t.Millis*mul + add, nil
}

func decimalNode(p, s int) node {
	if p < 1 || p > 38 || s < 0 || s > p {
		return binaryNode(fmt.Sprintf("DECIMAL(%d, %d)", p, s))
	}
	typ := &arrow.Decimal128Type{Precision: int32(p), Scale: int32(s)}
	return node{typ: typ, app: func(b array.Builder, v serde.Value) error {
		db := b.(*array.Decimal128Builder)
		if v == nil {
			db.AppendNull()
			return nil
		}
		d, ok := v.(serde.Decimal)
		if !ok {
			return typeErr("DECIMAL", v)
		}
		u := d.Unscaled
		if u == nil {
			u = new(big.Int)
		}
		if d.Scale != s {
			return fmt.Errorf("decimal of scale %d in a DECIMAL(%d, %d) column", d.Scale, p, s)
		}
		n := decimal128.FromBigInt(u)
		if u.BitLen() > 127 || !n.FitsInPrecision(int32(p)) {
			return fmt.Errorf("decimal %s exceeds DECIMAL(%d, %d)", d.String(), p, s)
		}
		db.Append(n)
		return nil
	}}
}

func annotate(n node, logical string) node {
	m := map[string]string{MetaLogical: logical}
	for k, v := range n.meta {
		m[k] = v
	}
	n.meta = m
	return n
}

// structNode exports a value whose fields get(v) returns (nil = null).
func structNode(names []string, kids []node, fields func(v serde.Value) ([]serde.Value, bool)) node {
	fs := make([]arrow.Field, len(kids))
	for i, k := range kids {
		fs[i] = k.field(names[i])
	}
	return node{typ: arrow.StructOf(fs...), app: func(b array.Builder, v serde.Value) error {
		sb := b.(*array.StructBuilder)
		if v == nil {
			sb.AppendNull()
			return nil
		}
		vals, ok := fields(v)
		if !ok {
			return typeErr(fmt.Sprintf("a value of %d fields", len(kids)), v)
		}
		sb.Append(true)
		for i, k := range kids {
			var fv serde.Value
			if i < len(vals) {
				fv = vals[i]
			}
			if err := k.app(sb.FieldBuilder(i), fv); err != nil {
				return fmt.Errorf("field %s: %w", names[i], err)
			}
		}
		return nil
	}}
}

func listNode(elem node) node {
	return node{typ: arrow.ListOfField(elem.field("element")), app: func(b array.Builder, v serde.Value) error {
		lb := b.(*array.ListBuilder)
		var elems []serde.Value
		switch x := v.(type) {
		case nil:
			lb.AppendNull()
			return nil
		case serde.List:
			elems = x
		case []serde.Value:
			elems = x
		default:
			return typeErr("a list", v)
		}
		lb.Append(true)
		vb := lb.ValueBuilder()
		for i, e := range elems {
			if err := elem.app(vb, e); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	}}
}

func mapNode(key, val node) node {
	typ := arrow.MapOfWithMetadata(key.typ, metaOf(key.meta), val.typ, metaOf(val.meta))
	return node{typ: typ, app: func(b array.Builder, v serde.Value) error {
		mb := b.(*array.MapBuilder)
		if v == nil {
			mb.AppendNull()
			return nil
		}
		m, ok := v.(serde.Map)
		if !ok {
			return typeErr("a map", v)
		}
		mb.Append(true)
		kb, ib := mb.KeyBuilder(), mb.ItemBuilder()
		for i, e := range m {
			if e.Key == nil {
				return fmt.Errorf("map entry %d has a null key, which an Arrow map cannot hold", i)
			}
			if err := key.app(kb, e.Key); err != nil {
				return fmt.Errorf("map key %d: %w", i, err)
			}
			if err := val.app(ib, e.Value); err != nil {
				return fmt.Errorf("map value %d: %w", i, err)
			}
		}
		return nil
	}}
}

func metaOf(m map[string]string) arrow.Metadata {
	if len(m) == 0 {
		return arrow.Metadata{}
	}
	return arrow.MetadataFrom(m)
}

func fieldNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func tupleFields(v serde.Value) ([]serde.Value, bool) {
	t, ok := v.(serde.Tuple)
	return t, ok
}

func rowFields(v serde.Value) ([]serde.Value, bool) {
	r, ok := v.(*serde.Row)
	if !ok || r == nil {
		return nil, false
	}
	return r.Fields, true
}

func windowFields(v serde.Value) ([]serde.Value, bool) {
	w, ok := v.(serde.TimeWindow)
	if !ok {
		return nil, false
	}
	return []serde.Value{w.Start, w.End}, true
}

// rawField is the extra child of POJO structs that holds the bytes of a
// subclass instance (written by a serializer the snapshot does not
// describe).
const rawField = "_raw"

func pojoFields(v serde.Value) ([]serde.Value, bool) {
	switch p := v.(type) {
	case *serde.Pojo:
		out := make([]serde.Value, len(p.Fields)+1)
		for i, f := range p.Fields {
			out[i] = f.Value
		}
		return out, true
	case *serde.Raw:
		out := make([]serde.Value, 0, 1)
		return append(out, nil), false
	}
	return nil, false
}

// unwrapSnapshot strips the wrappers whose decoders decode the nested
// serializer's data as it is (External, TtlAware).
func unwrapSnapshot(s *serde.Snapshot) *serde.Snapshot {
	for i := 0; s != nil && i < maxTypeDepth; i++ {
		if (s.Class == serde.ClassExternal || s.Class == serde.ClassTTLAware) && len(s.Nested) == 1 {
			s = s.Nested[0]
			continue
		}
		break
	}
	return s
}

// ttlInner returns the value snapshot of a state-TTL snapshot, or nil.
func ttlInner(s *serde.Snapshot) *serde.Snapshot {
	s = unwrapSnapshot(s)
	if s != nil && s.Class == serde.ClassTTL && len(s.Nested) == 2 {
		return s.Nested[1]
	}
	return nil
}

// snapshotNode maps the data type of a serializer snapshot. Callers check
// that the snapshot's decoder is supported (serde.Decoder.Supported);
// parts that decode to raw bytes at run time (Java objects, RAW SQL
// types, POJO subclasses) become binary columns.
func snapshotNode(s *serde.Snapshot, depth int) node {
	s = unwrapSnapshot(s)
	if s == nil {
		return binaryNode("<none>")
	}
	if depth > maxTypeDepth {
		return binaryNode(s.Class)
	}
	kids := func() []node {
		out := make([]node, len(s.Nested))
		for i, n := range s.Nested {
			out[i] = snapshotNode(n, depth+1)
		}
		return out
	}
	switch s.Class {
	case serde.ClassInt:
		return int32Node
	case serde.ClassLong:
		return int64Node
	case serde.ClassBoolean:
		return boolNode
	case serde.ClassShort:
		return int16Node
	case serde.ClassByte:
		return int8Node
	case serde.ClassDouble:
		return float64Node
	case serde.ClassFloat:
		return float32Node
	case serde.ClassChar, serde.ClassString, serde.ClassStringData:
		return stringNode
	case serde.ClassBytes:
		return binNode
	case serde.ClassVoid, serde.ClassGlobalWin:
		return unitNode
	case serde.ClassNull:
		return nullNode
	case serde.ClassTimeWindow, serde.ClassTableTW:
		return structNode([]string{"start", "end"}, []node{epochMillisNode, epochMillisNode}, windowFields)
	case serde.ClassCountWindow:
		return node{typ: arrow.PrimitiveTypes.Int64, app: func(b array.Builder, v serde.Value) error {
			w, ok := v.(serde.CountWindow)
			if v == nil {
				b.AppendNull()
				return nil
			}
			if !ok {
				return typeErr("COUNT_WINDOW", v)
			}
			b.(*array.Int64Builder).Append(w.ID)
			return nil
		}}
	case serde.ClassJava:
		return annotate(binaryNode(s.Class), "JAVA_OBJECT")
	case serde.ClassTuple:
		ks := kids()
		return structNode(fieldNames("f", len(ks)), ks, tupleFields)
	case serde.ClassTTL:
		if len(s.Nested) == 2 {
			inner := snapshotNode(s.Nested[1], depth+1)
			fs := []arrow.Field{{Name: "last_access", Type: epochMillisNode.typ, Nullable: true}, inner.field("value")}
			return node{typ: arrow.StructOf(fs...), app: func(b array.Builder, v serde.Value) error {
				sb := b.(*array.StructBuilder)
				if v == nil {
					sb.AppendNull()
					return nil
				}
				t, ok := v.(*serde.TTLValue)
				if !ok {
					return typeErr("a TTL value", v)
				}
				sb.Append(true)
				if err := epochMillisNode.app(sb.FieldBuilder(0), t.LastAccess); err != nil {
					return err
				}
				return inner.app(sb.FieldBuilder(1), t.Value)
			}}
		}
	case serde.ClassList, serde.ClassLinkedList:
		if len(s.Nested) == 1 {
			return listNode(snapshotNode(s.Nested[0], depth+1))
		}
	case serde.ClassMap, serde.ClassSortedMap:
		if len(s.Nested) == 2 {
			return mapNode(snapshotNode(s.Nested[0], depth+1), snapshotNode(s.Nested[1], depth+1))
		}
	case serde.ClassTimer:
		if len(s.Nested) == 2 {
			ks := []node{annotate(int64Node, "TIMER_TIMESTAMP_MILLIS"), snapshotNode(s.Nested[0], depth+1), snapshotNode(s.Nested[1], depth+1)}
			return structNode([]string{"timestamp", "key", "namespace"}, ks, func(v serde.Value) ([]serde.Value, bool) {
				t, ok := v.(*serde.Timer)
				if !ok || t == nil {
					return nil, false
				}
				return []serde.Value{t.Timestamp, t.Key, t.Namespace}, true
			})
		}
	case serde.ClassRowData:
		names, ks := rowTypeNodes(s.Types, nil, depth)
		return structNode(names, ks, rowFields)
	case serde.ClassBinaryRow:
		n := int(s.NumFields)
		ks := make([]node, n)
		for i := range ks {
			ks[i] = binaryNode("BinaryRowData slot")
		}
		return structNode(fieldNames("f", n), ks, rowFields)
	case serde.ClassDecimal:
		return decimalNode(int(s.Precision), int(s.Scale))
	case serde.ClassTimestamp:
		return timestampNode(int(s.Precision), false)
	case serde.ClassPojo:
		ks := kids()
		names := append([]string(nil), s.FieldNames...)
		ks = append(ks, binaryNode(s.Class))
		names = append(names, rawField)
		n := structNode(names, ks, pojoFields)
		app := n.app
		n.app = func(b array.Builder, v serde.Value) error {
			if r, ok := v.(*serde.Raw); ok && r != nil {
				// A subclass instance: only its bytes, in the raw child.
				sb := b.(*array.StructBuilder)
				sb.Append(true)
				for i := 0; i < len(ks)-1; i++ {
					sb.FieldBuilder(i).AppendNull()
				}
				return appendBinary(sb.FieldBuilder(len(ks)-1), r)
			}
			return app(b, v)
		}
		return n
	case serde.ClassArrayData:
		if len(s.Types) == 1 {
			return listNode(logicalNode(s.Types[0], depth+1))
		}
	case serde.ClassMapData:
		if len(s.Types) == 2 {
			return mapNode(logicalNode(s.Types[0], depth+1), logicalNode(s.Types[1], depth+1))
		}
	}
	return binaryNode(s.Class)
}

// rowTypeNodes maps the field types of a SQL row. Names come from the
// type where it has them (nested ROW types), f0..fn otherwise.
func rowTypeNodes(types []*serde.LogicalType, names []string, depth int) ([]string, []node) {
	out := make([]node, len(types))
	ns := make([]string, len(types))
	seen := map[string]bool{}
	for i, t := range types {
		out[i] = logicalNode(t, depth+1)
		n := ""
		if i < len(names) {
			n = names[i]
		}
		if n == "" || seen[n] {
			n = fmt.Sprintf("f%d", i)
		}
		seen[n] = true
		ns[i] = n
	}
	return ns, out
}

// logicalNode maps a Flink SQL logical type.
func logicalNode(t *serde.LogicalType, depth int) node {
	if t == nil {
		return binaryNode("<untyped>")
	}
	if depth > maxTypeDepth {
		return binaryNode(t.String())
	}
	switch t.Root {
	case "BOOLEAN":
		return boolNode
	case "TINYINT":
		return int8Node
	case "SMALLINT":
		return int16Node
	case "INTEGER":
		return int32Node
	case "BIGINT":
		return int64Node
	case "FLOAT":
		return float32Node
	case "DOUBLE":
		return float64Node
	case "CHAR", "VARCHAR":
		return stringNode
	case "BINARY", "VARBINARY":
		return binNode
	case "DECIMAL":
		return decimalNode(t.Precision, t.Scale)
	case "DATE":
		return date32Node
	case "TIME_WITHOUT_TIME_ZONE":
		return time32Node
	case "TIMESTAMP_WITHOUT_TIME_ZONE":
		return timestampNode(t.Precision, false)
	case "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
		return timestampNode(t.Precision, true)
	case "INTERVAL_YEAR_MONTH":
		return annotate(int32Node, "INTERVAL_YEAR_MONTH (months)")
	case "INTERVAL_DAY_TIME":
		return annotate(int64Node, "INTERVAL_DAY_TIME (milliseconds)")
	case "NULL":
		return nullNode
	case "ROW", "STRUCTURED_TYPE":
		if len(t.Fields) > 0 {
			types := make([]*serde.LogicalType, len(t.Fields))
			names := make([]string, len(t.Fields))
			for i, f := range t.Fields {
				types[i], names[i] = f.Type, f.Name
			}
			ns, ks := rowTypeNodes(types, names, depth)
			return structNode(ns, ks, rowFields)
		}
	case "ARRAY":
		return listNode(logicalNode(t.Element, depth+1))
	case "MAP":
		return mapNode(logicalNode(t.Key, depth+1), logicalNode(t.Value, depth+1))
	case "MULTISET":
		return mapNode(logicalNode(t.Element, depth+1), int32Node)
	}
	return binaryNode(t.String())
}
