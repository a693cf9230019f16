package engine

// Per-state schemas: engine state described in Flink's terms.
//
// The engine stores keys, namespaces and values as opaque bytes (see the
// package doc for the key layout). A Schema says what those bytes are, so
// that state can leave the engine as a Flink savepoint (canonical export,
// native checkpoint meta info) and come back (import):
//
//	part            Type            engine bytes                   Flink bytes
//	key             TypeRow         BinaryRowData                  i32 size + BinaryRowData (RowDataSerializer)
//	key             TypeLong/Int    8/4 B big-endian               same
//	key             TypeString      UTF-8                          StringValue (char varints)
//	namespace       TypeVoid        empty                          one 0x00 byte (VoidNamespace)
//	namespace       TypeLong        8 B big-endian (window end)    same
//	namespace       TypeTimeWindow  i64 start, i64 end, big-endian same
//	namespace       TypeGlobalWindow empty                         one 0x00 byte
//	value           TypeRow         rowcodec compact row           i32 size + BinaryRowData
//	list element    TypeRow         rowcodec row without the       i32 size + BinaryRowData
//	                                8-byte timestamp prefix
//	map user key    TypeRow         BinaryRowData                  i32 size + BinaryRowData
//	value, user key primitives      as for keys                    as for keys
//	queue element   TypeRaw         Flink's element bytes          same (e.g. TimerSerializer)
//	value, list     TypeRaw         Flink's bytes (serializer      same
//	element, map                    kept as a snapshot only)
//	user key
//	map user value  TypeRaw         NULL flag byte + Flink's bytes flag byte [+ TTL] + bytes
//
// Priority-queue (timer) entries are stored with an empty key and
// namespace, the element after them (Layout.Key(kg, nil, nil) followed by
// the element's Flink bytes, e.g. TimerSerializer's sign-flipped timestamp,
// key and namespace) and a zero 8-byte timestamp as value.
//
// Keys and map user keys that are rows keep Flink's BinaryRowData bytes
// unchanged (key groups hash exactly these bytes, and equality of user keys
// is byte equality); value rows use the compact row codec of package
// rowcodec, so that a stored value (8-byte last-access timestamp, then the
// payload) is exactly a rowcodec value.
//
// Multiset states (element → count) are exported as Flink's
// MapState<element, Integer>: the element is the user key, the 8-byte
// count the Integer value. This is how Flink's regular join keeps its
// records (state "left-records"/"right-records", user key = the input row,
// value = how often the row is present, with a per-entry TTL).
//
// A TTL state's last-access timestamp (the 8-byte prefix of every stored
// value) travels as the last-access field of Flink's TtlValue: Flink wraps
// the value serializer (for maps: the user-value serializer, for lists:
// the element serializer) in a TtlSerializer, whose snapshot FlinkMeta
// produces. Engine lists (uvarint-length-prefixed elements) carry one
// timestamp for the whole list; Flink's lists (elements separated by ',')
// one per element, all equal when written from the engine.

import (
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// TypeKind is the Flink type of one part (key, namespace, value, user key)
// of a state.
type TypeKind uint8

// Type kinds. The table in the file comment gives their byte forms.
const (
	TypeVoid         TypeKind = iota + 1 // VoidNamespace (namespaces only)
	TypeLong                             // java.lang.Long (LongSerializer)
	TypeInt                              // java.lang.Integer (IntSerializer)
	TypeString                           // java.lang.String (StringSerializer)
	TypeTimeWindow                       // TimeWindow (namespaces only)
	TypeRow                              // SQL row (RowDataSerializer)
	TypeRaw                              // bytes of a Flink serializer kept as they are; needs Snapshot
	TypeGlobalWindow                     // GlobalWindow (namespaces only)
)

func (k TypeKind) String() string {
	switch k {
	case TypeVoid:
		return "void"
	case TypeLong:
		return "long"
	case TypeInt:
		return "int"
	case TypeString:
		return "string"
	case TypeTimeWindow:
		return "time-window"
	case TypeRow:
		return "row"
	case TypeRaw:
		return "raw"
	case TypeGlobalWindow:
		return "global-window"
	}
	return fmt.Sprintf("type(%d)", uint8(k))
}

// Tuple1Class is the Java class of DataStream Tuple1 keys (keyBy(0) on a
// Tuple1 stream, or an explicit Tuple1 key selector).
const Tuple1Class = "org.apache.flink.api.java.tuple.Tuple1"

// Type describes one part of a state.
type Type struct {
	Kind TypeKind
	// Fields are the SQL field types of a TypeRow. Nullable lists per field
	// whether it may be NULL (nil: every field nullable); it only affects
	// the logical types written into serializer snapshots.
	Fields   []keygroups.FieldType
	Nullable []bool
	// Names optionally names the row's fields (Arrow schema field names;
	// default f0, f1, ...).
	Names []string
	// Tuple, when set (e.g. Tuple1Class), wraps a primitive key in that
	// one-field Java tuple: same bytes and hash, different serializer
	// snapshot.
	Tuple string
	// Snapshot, when non-nil, is written instead of the snapshot derived
	// from the fields above, e.g. the exact snapshot kept from a savepoint
	// that was imported. Required for TypeRaw.
	Snapshot flinkwrite.Snapshot
}

// Convenience constructors.
var (
	VoidType       = Type{Kind: TypeVoid}
	LongType       = Type{Kind: TypeLong}
	IntType        = Type{Kind: TypeInt}
	StringType     = Type{Kind: TypeString}
	TimeWindowType = Type{Kind: TypeTimeWindow}
)

// RowType is a nullable SQL row of the given field types.
func RowType(fields ...keygroups.FieldType) Type {
	return Type{Kind: TypeRow, Fields: fields}
}

// RowTypeFromArrow maps a flat Arrow schema (the row codec's value schema)
// to a SQL row type. Supported: bool, int8/16/32/64, float32/64, string,
// binary, date32, time32[ms], timestamp (tz "" = TIMESTAMP, else
// TIMESTAMP_LTZ; unit s/ms → precision 3, us → 6, ns → 9), decimal128.
func RowTypeFromArrow(s *arrow.Schema) (Type, error) {
	t := Type{Kind: TypeRow}
	for i, f := range s.Fields() {
		ft, err := fieldTypeOfArrow(f.Type)
		if err != nil {
			return Type{}, fmt.Errorf("engine: schema field %d (%s): %w", i, f.Name, err)
		}
		t.Fields = append(t.Fields, ft)
		t.Nullable = append(t.Nullable, f.Nullable)
		t.Names = append(t.Names, f.Name)
	}
	return t, nil
}

func fieldTypeOfArrow(dt arrow.DataType) (keygroups.FieldType, error) {
	switch x := dt.(type) {
	case *arrow.BooleanType:
		return keygroups.TypeBoolean, nil
	case *arrow.Int8Type:
		return keygroups.TypeTinyInt, nil
	case *arrow.Int16Type:
		return keygroups.TypeSmallInt, nil
	case *arrow.Int32Type:
		return keygroups.TypeInt, nil
	case *arrow.Int64Type:
		return keygroups.TypeBigInt, nil
	case *arrow.Float32Type:
		return keygroups.TypeFloat, nil
	case *arrow.Float64Type:
		return keygroups.TypeDouble, nil
	case *arrow.StringType:
		return keygroups.TypeString, nil
	case *arrow.BinaryType:
		return keygroups.TypeBytes, nil
	case *arrow.Date32Type:
		return keygroups.TypeDate, nil
	case *arrow.Time32Type:
		if x.Unit == arrow.Millisecond {
			return keygroups.TypeTime, nil
		}
	case *arrow.TimestampType:
		p := 3
		switch x.Unit {
		case arrow.Microsecond:
			p = 6
		case arrow.Nanosecond:
			p = 9
		}
		if x.TimeZone != "" {
			return keygroups.TypeTimestampLTZ(p), nil
		}
		return keygroups.TypeTimestamp(p), nil
	case *arrow.Decimal128Type:
		return keygroups.TypeDecimal(int(x.Precision), int(x.Scale)), nil
	}
	return keygroups.FieldType{}, fmt.Errorf("arrow type %s has no SQL row mapping", dt)
}

// arrowOf maps a SQL field type to the Arrow type the row codec stores.
func arrowOf(ft keygroups.FieldType) (arrow.DataType, error) {
	tsUnit := func(p int) arrow.TimeUnit {
		switch {
		case p <= 3:
			return arrow.Millisecond
		case p <= 6:
			return arrow.Microsecond
		}
		return arrow.Nanosecond
	}
	switch ft.Kind {
	case keygroups.KindBoolean:
		return arrow.FixedWidthTypes.Boolean, nil
	case keygroups.KindTinyInt:
		return arrow.PrimitiveTypes.Int8, nil
	case keygroups.KindSmallInt:
		return arrow.PrimitiveTypes.Int16, nil
	case keygroups.KindInt, keygroups.KindIntervalYearMonth:
		return arrow.PrimitiveTypes.Int32, nil
	case keygroups.KindBigInt, keygroups.KindIntervalDayTime:
		return arrow.PrimitiveTypes.Int64, nil
	case keygroups.KindFloat:
		return arrow.PrimitiveTypes.Float32, nil
	case keygroups.KindDouble:
		return arrow.PrimitiveTypes.Float64, nil
	case keygroups.KindString:
		return arrow.BinaryTypes.String, nil
	case keygroups.KindBytes:
		return arrow.BinaryTypes.Binary, nil
	case keygroups.KindDate:
		return arrow.FixedWidthTypes.Date32, nil
	case keygroups.KindTime:
		return arrow.FixedWidthTypes.Time32ms, nil
	case keygroups.KindTimestamp:
		return &arrow.TimestampType{Unit: tsUnit(ft.Precision)}, nil
	case keygroups.KindTimestampLTZ:
		return &arrow.TimestampType{Unit: tsUnit(ft.Precision), TimeZone: "UTC"}, nil
	case keygroups.KindDecimal:
		return &arrow.Decimal128Type{Precision: int32(ft.Precision), Scale: int32(ft.Scale)}, nil
	}
	return nil, fmt.Errorf("SQL type %s has no row-codec mapping", ft)
}

// ArrowSchema is the row codec schema of a TypeRow (the layout of value
// rows in the engine).
func (t Type) ArrowSchema() (*arrow.Schema, error) {
	if t.Kind != TypeRow {
		return nil, fmt.Errorf("engine: %s type has no Arrow schema", t.Kind)
	}
	fs := make([]arrow.Field, len(t.Fields))
	for i, ft := range t.Fields {
		dt, err := arrowOf(ft)
		if err != nil {
			return nil, fmt.Errorf("engine: row field %d: %w", i, err)
		}
		name := fmt.Sprintf("f%d", i)
		if i < len(t.Names) && t.Names[i] != "" {
			name = t.Names[i]
		}
		fs[i] = arrow.Field{Name: name, Type: dt, Nullable: t.nullable(i)}
	}
	return arrow.NewSchema(fs, nil), nil
}

func (t Type) nullable(i int) bool {
	return t.Nullable == nil || (i < len(t.Nullable) && t.Nullable[i])
}

// FlinkSnapshot returns the serializer snapshot Flink writes for the type
// (t.Snapshot when set).
func (t Type) FlinkSnapshot() (flinkwrite.Snapshot, error) {
	if t.Snapshot != nil {
		return t.Snapshot, nil
	}
	var s flinkwrite.Snapshot
	switch t.Kind {
	case TypeVoid:
		s = flinkwrite.VoidNamespaceSnapshot
	case TypeLong:
		s = flinkwrite.LongSnapshot
	case TypeInt:
		s = flinkwrite.IntSnapshot
	case TypeString:
		s = flinkwrite.StringSnapshot
	case TypeTimeWindow:
		s = flinkwrite.TimeWindowSnapshot
	case TypeGlobalWindow:
		s = flinkwrite.GlobalWindowSnapshot
	case TypeRow:
		types := make([]flinkwrite.LogicalType, len(t.Fields))
		for i, ft := range t.Fields {
			lt, err := flinkwrite.LogicalTypeOf(ft, t.nullable(i))
			if err != nil {
				return nil, fmt.Errorf("engine: row field %d: %w", i, err)
			}
			types[i] = lt
		}
		s = flinkwrite.RowDataSnapshot{Types: types}
	case TypeRaw:
		return nil, errors.New("engine: a raw type needs the snapshot of its Flink serializer")
	default:
		return nil, fmt.Errorf("engine: invalid type kind %d", t.Kind)
	}
	if t.Tuple != "" {
		if t.Kind == TypeRow || t.Kind == TypeVoid || t.Kind == TypeTimeWindow || t.Kind == TypeGlobalWindow {
			return nil, fmt.Errorf("engine: a %s cannot be wrapped in %s", t.Kind, t.Tuple)
		}
		ts, err := flinkwrite.TupleSnapshot(t.Tuple, s)
		if err != nil {
			return nil, err
		}
		return ts, nil
	}
	return s, nil
}

// Validate checks that the type is complete.
func (t Type) Validate() error {
	switch t.Kind {
	case TypeVoid, TypeLong, TypeInt, TypeString, TypeTimeWindow, TypeGlobalWindow:
	case TypeRow:
		for i, ft := range t.Fields {
			if err := ft.Validate(); err != nil {
				return fmt.Errorf("row field %d: %w", i, err)
			}
		}
		if t.Nullable != nil && len(t.Nullable) != len(t.Fields) {
			return fmt.Errorf("row has %d fields but %d nullability flags", len(t.Fields), len(t.Nullable))
		}
	case TypeRaw:
		if t.Snapshot == nil {
			return errors.New("raw type without serializer snapshot")
		}
	default:
		return fmt.Errorf("invalid type kind %d", t.Kind)
	}
	return nil
}

// StateSchema describes one declared state in Flink's terms.
type StateSchema struct {
	Name string
	Kind Kind
	// Namespace is VoidType for plain keyed state, LongType for window-end
	// namespaces, TimeWindowType for windows.
	Namespace Type
	// Value is the value of a value state, the element of a list state,
	// the user value of a map state and the element of a priority queue
	// (TypeRaw). Multisets have no Value (their count is Flink's Integer).
	Value Type
	// UserKey is the user key of a map state and the element of a multiset.
	UserKey Type
	// TTL is the state's time-to-live (StateDesc.TTL). Values of a state
	// with TTL are written as Flink TtlValues carrying the last-access
	// timestamp.
	TTL time.Duration
	// FlinkKind overrides the KEYED_STATE_TYPE written for value states
	// (VALUE by default; AGGREGATING, REDUCING keep the same bytes).
	FlinkKind string
	// Meta, when non-nil, is written verbatim instead of the derived meta
	// info (kept from an imported savepoint, so serializer snapshots
	// survive byte for byte).
	Meta *flinkwrite.StateMetaInfo
	// Join, when set, marks the state as the join-record state of package
	// recordstore (its record layout, a map state, or its bucket layout, a
	// value state; Name is the layout's state name). Its content leaves the
	// engine as Flink's two join states, see JoinSides.
	Join *JoinSides
}

// JoinSides describes how a join-record state maps to Flink's regular
// join: per input side one MAP state (default names "left-records" and
// "right-records") keyed by the join key, void namespace, user key = the
// input row (RowDataSerializer), value = the row's count (Integer),
// TTL-wrapped per entry when the state has a TTL (the record's last-write
// time travels as the TtlValue timestamp).
type JoinSides struct {
	// Left and Right are the input row types (TypeRow); rows are stored in
	// the engine as compact rowcodec rows.
	Left, Right Type
	// LeftName and RightName are the Flink state names.
	LeftName, RightName string
	// LeftMeta and RightMeta, when set, are written verbatim (kept from an
	// imported savepoint).
	LeftMeta, RightMeta *flinkwrite.StateMetaInfo
	// LeftOuter and RightOuter mark the outer input(s) of an outer join
	// (LEFT: left, RIGHT: right, FULL: both). Flink keeps an outer side as
	// OuterJoinRecordStateViews does for inputs without unique key: MAP
	// state row → Tuple2<Integer, Integer> (f0 = count, f1 = number of
	// associated rows of the other side), TupleSerializer of two
	// IntSerializers; the association count is the recordstore row's.
	LeftOuter, RightOuter bool
}

// OuterTupleClass is the Java class of an outer join side's map values.
const OuterTupleClass = "org.apache.flink.api.java.tuple.Tuple2"

// Outer reports whether side 0 (left) or 1 (right) is an outer input.
func (j *JoinSides) Outer(side int) bool {
	if side == 0 {
		return j.LeftOuter
	}
	return j.RightOuter
}

// Names returns the Flink state names of the two sides.
func (j *JoinSides) Names() (left, right string) {
	left, right = j.LeftName, j.RightName
	if left == "" {
		left = "left-records"
	}
	if right == "" {
		right = "right-records"
	}
	return left, right
}

// Join descriptions in native checkpoints.
//
// A native checkpoint's meta-state stream has one meta info per column
// family, and a join-record state is one column family but two Flink
// states. Its meta info therefore describes the stored bytes (recordstore's
// layout, opaque to Flink: byte-array serializers) and carries the join
// description that turns the family into Flink's two join states, as extra
// option entries and named serializer snapshots of the same meta info.
// Flink's meta-info format keeps arbitrary options and serializer keys, and
// readers that do not know these keys step over them. Format version 1:
//
//	option      sfstate.join.version             "1"
//	option      sfstate.join.left.name           Flink state name of the left input (JoinSides.Names)
//	option      sfstate.join.right.name          Flink state name of the right input
//	option      sfstate.join.left.outer          "true" or "false" (JoinSides.LeftOuter)
//	option      sfstate.join.right.outer         "true" or "false" (JoinSides.RightOuter)
//	serializer  sfstate.join.LEFT_ROW_SERIALIZER  RowDataSerializer snapshot of the left input row
//	serializer  sfstate.join.RIGHT_ROW_SERIALIZER RowDataSerializer snapshot of the right input row
//
// The row snapshots carry the field types and nullability (not the field
// names, JoinSides.Left.Names); the meta infos of the two Flink states are
// derived from the description on export (StateSchema.FlinkMetas), so
// snapshots kept from an imported savepoint (LeftMeta, RightMeta) are not
// carried beyond the rows' own. A reader refuses a version it does not
// know (canonical.SchemaOfHeader reads this format); a meta info without
// sfstate.join.version has no join description.
const (
	JoinOptVersion    = "sfstate.join.version"
	JoinOptLeftName   = "sfstate.join.left.name"
	JoinOptRightName  = "sfstate.join.right.name"
	JoinOptLeftOuter  = "sfstate.join.left.outer"
	JoinOptRightOuter = "sfstate.join.right.outer"
	JoinSerLeftRow    = "sfstate.join.LEFT_ROW_SERIALIZER"
	JoinSerRightRow   = "sfstate.join.RIGHT_ROW_SERIALIZER"
	// JoinDescriptionVersion is the version written and the only one read.
	JoinDescriptionVersion = "1"
)

// Describe returns m, the meta info describing the join-record state's
// stored bytes, with the join description (format above) appended to its
// options and serializers.
func (j *JoinSides) Describe(m flinkwrite.StateMetaInfo) (flinkwrite.StateMetaInfo, error) {
	rows := [2]flinkwrite.Snapshot{}
	for i, t := range []Type{j.Left, j.Right} {
		if t.Kind != TypeRow {
			return m, fmt.Errorf("engine: join side %d: input rows must be rows, not %s", i, t.Kind)
		}
		s, err := t.FlinkSnapshot()
		if err != nil {
			return m, fmt.Errorf("engine: join side %d: %w", i, err)
		}
		rows[i] = s
	}
	ln, rn := j.Names()
	out := m
	out.Options = append(append([]flinkwrite.Option(nil), m.Options...),
		flinkwrite.Option{Key: JoinOptVersion, Value: JoinDescriptionVersion},
		flinkwrite.Option{Key: JoinOptLeftName, Value: ln},
		flinkwrite.Option{Key: JoinOptRightName, Value: rn},
		flinkwrite.Option{Key: JoinOptLeftOuter, Value: fmt.Sprint(j.LeftOuter)},
		flinkwrite.Option{Key: JoinOptRightOuter, Value: fmt.Sprint(j.RightOuter)})
	out.Serializers = append(append([]flinkwrite.NamedSnapshot(nil), m.Serializers...),
		flinkwrite.NamedSnapshot{Key: JoinSerLeftRow, Snapshot: rows[0]},
		flinkwrite.NamedSnapshot{Key: JoinSerRightRow, Snapshot: rows[1]})
	return out, nil
}

// Desc is the engine declaration of the state.
func (s StateSchema) Desc() StateDesc { return StateDesc{Name: s.Name, Kind: s.Kind, TTL: s.TTL} }

// Validate checks that the schema describes a state Flink can hold.
func (s StateSchema) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("engine: state %q: %s", s.Name, fmt.Sprintf(format, args...))
	}
	if s.Name == "" {
		return errors.New("engine: state without name")
	}
	if s.Join != nil {
		if s.Kind != KindMap && s.Kind != KindValue {
			return fail("join records are a map (record layout) or value (bucket layout) state, not %s", s.Kind)
		}
		for _, t := range []Type{s.Join.Left, s.Join.Right} {
			if t.Kind != TypeRow {
				return fail("join input rows must be rows, not %s", t.Kind)
			}
			if err := t.Validate(); err != nil {
				return fail("join row: %v", err)
			}
		}
		if l, r := s.Join.Names(); l == r {
			return fail("both join sides named %q", l)
		}
		return nil
	}
	if s.Kind == KindPriorityQueue {
		if s.Value.Kind != TypeRaw {
			return fail("priority-queue elements must be raw (Flink element bytes)")
		}
		return s.Value.Validate()
	}
	switch s.Namespace.Kind {
	case TypeVoid, TypeLong, TypeTimeWindow, TypeGlobalWindow:
	default:
		return fail("namespace type %s is not supported (void, long, time-window, global-window)", s.Namespace.Kind)
	}
	switch s.Kind {
	case KindValue:
		if err := s.Value.Validate(); err != nil {
			return fail("value: %v", err)
		}
	case KindMap:
		if err := s.Value.Validate(); err != nil {
			return fail("user value: %v", err)
		}
		if err := s.UserKey.Validate(); err != nil {
			return fail("user key: %v", err)
		}
	case KindMultiset:
		if err := s.UserKey.Validate(); err != nil {
			return fail("element: %v", err)
		}
	case KindList:
		if err := s.Value.Validate(); err != nil {
			return fail("element: %v", err)
		}
	default:
		return fail("invalid kind %s", s.Kind)
	}
	for _, t := range []Type{s.Value, s.UserKey, s.Namespace} {
		if t.Kind == TypeVoid && t.Tuple != "" {
			return fail("void cannot be a tuple")
		}
	}
	if s.Value.Kind == TypeRaw && s.Kind == KindMultiset {
		return fail("multisets have no raw values")
	}
	return nil
}

// FlinkMetas returns the meta infos of the Flink states the state becomes:
// one (FlinkMeta), or two for join records (left side, then right side).
func (s StateSchema) FlinkMetas() ([]flinkwrite.StateMetaInfo, error) {
	if s.Join == nil {
		m, err := s.FlinkMeta()
		if err != nil {
			return nil, err
		}
		return []flinkwrite.StateMetaInfo{m}, nil
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	ln, rn := s.Join.Names()
	var out []flinkwrite.StateMetaInfo
	for i, side := range []struct {
		name string
		row  Type
		meta *flinkwrite.StateMetaInfo
	}{{ln, s.Join.Left, s.Join.LeftMeta}, {rn, s.Join.Right, s.Join.RightMeta}} {
		if side.meta != nil {
			out = append(out, *side.meta)
			continue
		}
		m, err := StateSchema{Name: side.name, Kind: KindMultiset, Namespace: VoidType, UserKey: side.row, TTL: s.TTL}.FlinkMeta()
		if err == nil && s.Join.Outer(i) {
			m, err = outerSideMeta(side.name, side.row, s.TTL > 0)
		}
		if err != nil {
			return nil, fmt.Errorf("engine: state %q side %d: %w", s.Name, i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// outerSideMeta is the meta info of an outer join side: MAP<row,
// Tuple2<Integer, Integer>>, the value TTL-wrapped when ttl.
func outerSideMeta(name string, row Type, ttl bool) (flinkwrite.StateMetaInfo, error) {
	uk, err := row.FlinkSnapshot()
	if err != nil {
		return flinkwrite.StateMetaInfo{}, err
	}
	var uv flinkwrite.Snapshot
	if uv, err = flinkwrite.TupleSnapshot(OuterTupleClass, flinkwrite.IntSnapshot, flinkwrite.IntSnapshot); err != nil {
		return flinkwrite.StateMetaInfo{}, err
	}
	if ttl {
		uv = flinkwrite.TtlSnapshot(uv)
	}
	return flinkwrite.KeyedStateMeta(name, flinkwrite.KindMap, flinkwrite.VoidNamespaceSnapshot, flinkwrite.MapSnapshot(uk, uv)), nil
}

// FlinkMeta returns the state's meta info as Flink writes it into a keyed
// stream header or a checkpoint's meta data: KEYED_STATE_TYPE, value and
// namespace serializer snapshots (TTL-wrapped when the state has a TTL;
// MapSerializer for maps and multisets), or the element serializer of a
// priority queue. Join-record states have two (FlinkMetas).
func (s StateSchema) FlinkMeta() (flinkwrite.StateMetaInfo, error) {
	if s.Join != nil {
		return flinkwrite.StateMetaInfo{}, fmt.Errorf("engine: state %q holds join records, which are two Flink states (FlinkMetas)", s.Name)
	}
	if s.Meta != nil {
		return *s.Meta, nil
	}
	if err := s.Validate(); err != nil {
		return flinkwrite.StateMetaInfo{}, err
	}
	wrap := func(v flinkwrite.Snapshot) flinkwrite.Snapshot {
		if s.TTL > 0 {
			return flinkwrite.TtlSnapshot(v)
		}
		return v
	}
	if s.Kind == KindPriorityQueue {
		el, err := s.Value.FlinkSnapshot()
		if err != nil {
			return flinkwrite.StateMetaInfo{}, err
		}
		return flinkwrite.TimerStateMeta(s.Name, el), nil
	}
	ns, err := s.Namespace.FlinkSnapshot()
	if err != nil {
		return flinkwrite.StateMetaInfo{}, fmt.Errorf("engine: state %q namespace: %w", s.Name, err)
	}
	switch s.Kind {
	case KindValue:
		v, err := s.Value.FlinkSnapshot()
		if err != nil {
			return flinkwrite.StateMetaInfo{}, fmt.Errorf("engine: state %q value: %w", s.Name, err)
		}
		kind := s.FlinkKind
		if kind == "" {
			kind = flinkwrite.KindValue
		}
		return flinkwrite.KeyedStateMeta(s.Name, kind, ns, wrap(v)), nil
	case KindList:
		v, err := s.Value.FlinkSnapshot()
		if err != nil {
			return flinkwrite.StateMetaInfo{}, fmt.Errorf("engine: state %q element: %w", s.Name, err)
		}
		return flinkwrite.KeyedStateMeta(s.Name, flinkwrite.KindList, ns, flinkwrite.ListSnapshot(wrap(v))), nil
	case KindMap, KindMultiset:
		uk, err := s.UserKey.FlinkSnapshot()
		if err != nil {
			return flinkwrite.StateMetaInfo{}, fmt.Errorf("engine: state %q user key: %w", s.Name, err)
		}
		var uv flinkwrite.Snapshot = flinkwrite.IntSnapshot
		if s.Kind == KindMap {
			if uv, err = s.Value.FlinkSnapshot(); err != nil {
				return flinkwrite.StateMetaInfo{}, fmt.Errorf("engine: state %q user value: %w", s.Name, err)
			}
		}
		return flinkwrite.KeyedStateMeta(s.Name, flinkwrite.KindMap, ns, flinkwrite.MapSnapshot(uk, wrap(uv))), nil
	}
	return flinkwrite.StateMetaInfo{}, fmt.Errorf("engine: state %q: kind %s has no Flink meta info", s.Name, s.Kind)
}

// Schema describes every state of an operator: the key type shared by all
// states and one StateSchema per declared state, in declaration order
// (state id i of the backend is States[i]).
type Schema struct {
	Key    Type
	States []StateSchema
}

// Descs returns the engine declarations, in order.
func (s *Schema) Descs() []StateDesc {
	out := make([]StateDesc, len(s.States))
	for i, st := range s.States {
		out[i] = st.Desc()
	}
	return out
}

// Validate checks the key type and every state.
func (s *Schema) Validate() error {
	switch s.Key.Kind {
	case TypeRow, TypeLong, TypeInt, TypeString:
	case TypeRaw:
		return errors.New("engine: raw keys are not supported")
	default:
		return fmt.Errorf("engine: key type %s is not supported (row, long, int, string)", s.Key.Kind)
	}
	if err := s.Key.Validate(); err != nil {
		return fmt.Errorf("engine: key: %w", err)
	}
	if len(s.States) == 0 {
		return errors.New("engine: schema without states")
	}
	seen := map[string]bool{}
	for _, st := range s.States {
		names := []string{st.Name}
		if st.Join != nil {
			l, r := st.Join.Names()
			names = []string{l, r}
			if s.Key.Kind != TypeRow {
				return fmt.Errorf("engine: join state %q needs a row key, not %s", st.Name, s.Key.Kind)
			}
		}
		for _, n := range names {
			if seen[n] {
				return fmt.Errorf("engine: state %q described twice", n)
			}
			seen[n] = true
		}
		if st.Meta == nil {
			if err := st.Validate(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Matches checks that the schema describes exactly the backend's declared
// states (same names, kinds and TTLs, same order).
func (s *Schema) Matches(states []StateDesc) error {
	if len(states) != len(s.States) {
		return fmt.Errorf("engine: schema describes %d states, backend declares %d", len(s.States), len(states))
	}
	for i, d := range states {
		if want := s.States[i].Desc(); want != d {
			return fmt.Errorf("engine: state %d: schema says %q %s ttl %s, backend declares %q %s ttl %s",
				i, want.Name, want.Kind, want.TTL, d.Name, d.Kind, d.TTL)
		}
	}
	return nil
}

// FlinkHeader returns the keyed-stream header (key serializer snapshot and
// meta info of every state, in order; join-record states contribute two)
// of the operator.
func (s *Schema) FlinkHeader(compressed bool) (flinkwrite.Header, error) {
	if err := s.Validate(); err != nil {
		return flinkwrite.Header{}, err
	}
	ks, err := s.Key.FlinkSnapshot()
	if err != nil {
		return flinkwrite.Header{}, fmt.Errorf("engine: key: %w", err)
	}
	h := flinkwrite.Header{Compressed: compressed, KeySerializer: ks}
	for _, st := range s.States {
		ms, err := st.FlinkMetas()
		if err != nil {
			return flinkwrite.Header{}, err
		}
		h.States = append(h.States, ms...)
	}
	return h, nil
}
