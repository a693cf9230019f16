package flinkwrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// Serializer-snapshot framing constants. Wire format: never change.
const (
	// snapshotProxyVersion is TypeSerializerSnapshotSerializationProxy's
	// version, written before every top-level snapshot.
	snapshotProxyVersion = 2
	// compositeMagic opens the outer part of a CompositeTypeSerializerSnapshot.
	compositeMagic = 911108
	// nestedMagic opens NestedSerializersSnapshotDelegate's block.
	nestedMagic = 1333245
	// nestedVersion is the delegate's format version.
	nestedVersion = 1
	// maxSnapshotDepth bounds snapshot nesting.
	maxSnapshotDepth = 64
)

// ErrSnapshot marks a serializer snapshot that cannot be written.
var ErrSnapshot = errors.New("flinkwrite: invalid serializer snapshot")

// Snapshot is a TypeSerializerSnapshot as Flink writes it: a class name, a
// version and a class-specific body (not length-prefixed).
type Snapshot interface {
	// ClassName is the snapshot class (written with writeUTF).
	ClassName() string
	// Version is the snapshot's getCurrentVersion().
	Version() int32
	// AppendBody appends the class-specific body.
	AppendBody(b []byte) ([]byte, error)
}

// AppendVersioned appends the nested ("versioned") form of s: class name,
// version, body. Raw snapshots are copied verbatim.
func AppendVersioned(b []byte, s Snapshot) ([]byte, error) {
	return appendVersioned(b, s, 0)
}

func appendVersioned(b []byte, s Snapshot, depth int) ([]byte, error) {
	if s == nil {
		return b, fmt.Errorf("%w: nil snapshot", ErrSnapshot)
	}
	if depth > maxSnapshotDepth {
		return b, fmt.Errorf("%w: nested deeper than %d", ErrSnapshot, maxSnapshotDepth)
	}
	if r, ok := s.(RawSnapshot); ok {
		if len(r.Versioned) < 6 {
			return b, fmt.Errorf("%w: raw snapshot of %d bytes", ErrSnapshot, len(r.Versioned))
		}
		return append(b, r.Versioned...), nil
	}
	e := binfmt.Encbuf{B: b}
	if err := e.PutUTF(s.ClassName()); err != nil {
		return b, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	e.PutI32(s.Version())
	if n, ok := s.(nester); ok {
		return n.appendBodyDepth(e.B, depth+1)
	}
	return s.AppendBody(e.B)
}

// AppendTopLevel appends the top-level form used for key serializers and
// state meta-info serializers: i32 2 then the versioned snapshot.
func AppendTopLevel(b []byte, s Snapshot) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, snapshotProxyVersion)
	return AppendVersioned(b, s)
}

// nester is implemented by snapshots with nested snapshots, so depth is
// tracked across the recursion.
type nester interface {
	appendBodyDepth(b []byte, depth int) ([]byte, error)
}

func appendNested(b []byte, nested []Snapshot, depth int) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, nestedMagic)
	b = binary.BigEndian.AppendUint32(b, nestedVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(nested)))
	var err error
	for _, n := range nested {
		if b, err = appendVersioned(b, n, depth); err != nil {
			return b, err
		}
	}
	return b, nil
}

// RawSnapshot is a snapshot kept as bytes from a savepoint that was read:
// Versioned holds the versioned form (class name, version, body) and is
// re-emitted verbatim. Serializer snapshots contain no offsets, so this is
// always safe.
type RawSnapshot struct{ Versioned []byte }

func (r RawSnapshot) ClassName() string {
	d := binfmt.New(r.Versioned, 0)
	return d.UTF()
}
func (r RawSnapshot) Version() int32 {
	d := binfmt.New(r.Versioned, 0)
	d.UTF()
	return d.I32()
}
func (r RawSnapshot) AppendBody(b []byte) ([]byte, error) {
	d := binfmt.New(r.Versioned, 0)
	d.UTF()
	d.I32()
	if d.Err() != nil {
		return b, fmt.Errorf("%w: raw snapshot: %v", ErrSnapshot, d.Err())
	}
	return append(b, r.Versioned[d.Pos:]...), nil
}

// SimpleSnapshot is a SimpleTypeSerializerSnapshot (version 3, empty body).
type SimpleSnapshot struct{ Class string }

func (s SimpleSnapshot) ClassName() string                   { return s.Class }
func (s SimpleSnapshot) Version() int32                      { return 3 }
func (s SimpleSnapshot) AppendBody(b []byte) ([]byte, error) { return b, nil }

// Snapshots of Flink's singleton serializers.
var (
	IntSnapshot           = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.IntSerializer$IntSerializerSnapshot"}
	LongSnapshot          = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot"}
	StringSnapshot        = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot"}
	BooleanSnapshot       = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.BooleanSerializer$BooleanSerializerSnapshot"}
	DoubleSnapshot        = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.DoubleSerializer$DoubleSerializerSnapshot"}
	FloatSnapshot         = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.FloatSerializer$FloatSerializerSnapshot"}
	ShortSnapshot         = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.ShortSerializer$ShortSerializerSnapshot"}
	ByteSnapshot          = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.ByteSerializer$ByteSerializerSnapshot"}
	CharSnapshot          = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.CharSerializer$CharSerializerSnapshot"}
	BytesSnapshot         = SimpleSnapshot{"org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot"}
	VoidNamespaceSnapshot = SimpleSnapshot{"org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot"}
	TimeWindowSnapshot    = SimpleSnapshot{"org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot"}
	// TableTimeWindowSnapshot is table-runtime's TimeWindow serializer (SQL
	// group windows).
	TableTimeWindowSnapshot = SimpleSnapshot{"org.apache.flink.table.runtime.operators.window.TimeWindow$Serializer$TimeWindowSerializerSnapshot"}
	GlobalWindowSnapshot    = SimpleSnapshot{"org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot"}
	StringDataSnapshot      = SimpleSnapshot{"org.apache.flink.table.runtime.typeutils.StringDataSerializer$StringDataSerializerSnapshot"}
	TableNullSnapshot       = SimpleSnapshot{"org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot"}
)

// CompositeSnapshot is a CompositeTypeSerializerSnapshot (version 3): magic,
// outer version, outer body (Outer, raw), then the nested snapshots.
type CompositeSnapshot struct {
	Class        string
	OuterVersion int32
	Outer        []byte
	Nested       []Snapshot
}

func (c CompositeSnapshot) ClassName() string { return c.Class }
func (c CompositeSnapshot) Version() int32    { return 3 }
func (c CompositeSnapshot) AppendBody(b []byte) ([]byte, error) {
	return c.appendBodyDepth(b, 1)
}
func (c CompositeSnapshot) appendBodyDepth(b []byte, depth int) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, compositeMagic)
	b = binary.BigEndian.AppendUint32(b, uint32(c.OuterVersion))
	b = append(b, c.Outer...)
	return appendNested(b, c.Nested, depth)
}

// TupleSnapshot is TupleSerializerSnapshot for tupleClass (e.g.
// "org.apache.flink.api.java.tuple.Tuple1") with the field serializers.
func TupleSnapshot(tupleClass string, fields ...Snapshot) (CompositeSnapshot, error) {
	e := binfmt.Encbuf{}
	if err := e.PutUTF(tupleClass); err != nil {
		return CompositeSnapshot{}, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	return CompositeSnapshot{Class: "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot", OuterVersion: 2, Outer: e.B, Nested: fields}, nil
}

// TtlSnapshot is TtlStateFactory's TtlSerializerSnapshot: the value
// serializer wrapped with a Long last-access timestamp.
func TtlSnapshot(value Snapshot) CompositeSnapshot {
	return CompositeSnapshot{Class: "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot", OuterVersion: 2, Nested: []Snapshot{LongSnapshot, value}}
}

// ListSnapshot is ListSerializerSnapshot (the value serializer of LIST state).
func ListSnapshot(elem Snapshot) CompositeSnapshot {
	return CompositeSnapshot{Class: "org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot", OuterVersion: 1, Nested: []Snapshot{elem}}
}

// MapSnapshot is MapSerializerSnapshot (the value serializer of MAP state).
func MapSnapshot(key, value Snapshot) CompositeSnapshot {
	return CompositeSnapshot{Class: "org.apache.flink.api.common.typeutils.base.MapSerializerSnapshot", OuterVersion: 1, Nested: []Snapshot{key, value}}
}

// TimerSnapshot is TimerSerializerSnapshot (timer priority-queue elements).
func TimerSnapshot(key, namespace Snapshot) CompositeSnapshot {
	return CompositeSnapshot{Class: "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot", OuterVersion: 2, Nested: []Snapshot{key, namespace}}
}

// RawValueDataSnapshot is RawValueDataSerializer's snapshot (RAW fields).
func RawValueDataSnapshot(inner Snapshot) CompositeSnapshot {
	return CompositeSnapshot{Class: "org.apache.flink.table.runtime.typeutils.RawValueDataSerializer$RawValueDataSerializerSnapshot", OuterVersion: 0, Nested: []Snapshot{inner}}
}

// ExternalSnapshot is ExternalSerializer's snapshot: the Java-serialized
// data type and isInternalInput, wrapping the internal serializer.
func ExternalSnapshot(dataType AtomicDataType, isInternalInput bool, inner Snapshot) (CompositeSnapshot, error) {
	o, err := dataType.JavaObject()
	if err != nil {
		return CompositeSnapshot{}, err
	}
	outer, err := EncodeJavaStream(o)
	if err != nil {
		return CompositeSnapshot{}, err
	}
	if isInternalInput {
		outer = append(outer, 1)
	} else {
		outer = append(outer, 0)
	}
	return CompositeSnapshot{Class: "org.apache.flink.table.runtime.typeutils.ExternalSerializer$ExternalSerializerSnapshot", OuterVersion: 1, Outer: outer, Nested: []Snapshot{inner}}, nil
}

// RowDataSnapshot is RowDataSerializerSnapshot: n Java-serialized logical
// types, then the field serializers. Nested nil derives them from the types
// as Flink's InternalSerializers does.
type RowDataSnapshot struct {
	Types  []LogicalType
	Nested []Snapshot
}

func (r RowDataSnapshot) ClassName() string {
	return "org.apache.flink.table.runtime.typeutils.RowDataSerializer$RowDataSerializerSnapshot"
}
func (r RowDataSnapshot) Version() int32 { return 3 }
func (r RowDataSnapshot) AppendBody(b []byte) ([]byte, error) {
	return r.appendBodyDepth(b, 1)
}
func (r RowDataSnapshot) appendBodyDepth(b []byte, depth int) ([]byte, error) {
	if len(r.Types) > math.MaxInt32 {
		return b, fmt.Errorf("%w: %d row fields", ErrSnapshot, len(r.Types))
	}
	nested := r.Nested
	if nested == nil {
		nested = make([]Snapshot, len(r.Types))
		for i, t := range r.Types {
			if t == nil {
				return b, fmt.Errorf("%w: row field %d has no type", ErrSnapshot, i)
			}
			s, err := t.InternalSerializer()
			if err != nil {
				return b, fmt.Errorf("row field %d: %w", i, err)
			}
			nested[i] = s
		}
	}
	if len(nested) != len(r.Types) {
		return b, fmt.Errorf("%w: %d row types but %d field serializers", ErrSnapshot, len(r.Types), len(nested))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Types)))
	for i, t := range r.Types {
		js, err := EncodeLogicalType(t)
		if err != nil {
			return b, fmt.Errorf("row field %d: %w", i, err)
		}
		b = append(b, js...)
	}
	return appendNested(b, nested, depth)
}

// BinaryRowDataSnapshot is BinaryRowDataSerializerSnapshot.
type BinaryRowDataSnapshot struct{ NumFields int32 }

func (s BinaryRowDataSnapshot) ClassName() string {
	return "org.apache.flink.table.runtime.typeutils.BinaryRowDataSerializer$BinaryRowDataSerializerSnapshot"
}
func (s BinaryRowDataSnapshot) Version() int32 { return 3 }
func (s BinaryRowDataSnapshot) AppendBody(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, uint32(s.NumFields)), nil
}

// DecimalDataSnapshot is DecimalDataSerializer's snapshot.
type DecimalDataSnapshot struct{ Precision, Scale int32 }

func (s DecimalDataSnapshot) ClassName() string {
	return "org.apache.flink.table.runtime.typeutils.DecimalDataSerializer$DecimalSerializerSnapshot"
}
func (s DecimalDataSnapshot) Version() int32 { return 3 }
func (s DecimalDataSnapshot) AppendBody(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, uint32(s.Precision))
	return binary.BigEndian.AppendUint32(b, uint32(s.Scale)), nil
}

// TimestampDataSnapshot is TimestampDataSerializer's snapshot (version 1).
type TimestampDataSnapshot struct{ Precision int32 }

func (s TimestampDataSnapshot) ClassName() string {
	return "org.apache.flink.table.runtime.typeutils.TimestampDataSerializer$TimestampDataSerializerSnapshot"
}
func (s TimestampDataSnapshot) Version() int32 { return 1 }
func (s TimestampDataSnapshot) AppendBody(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, uint32(s.Precision)), nil
}

// InternalSerializer implementations (Flink's InternalSerializers.create).

func (BooleanType) InternalSerializer() (Snapshot, error)  { return BooleanSnapshot, nil }
func (TinyIntType) InternalSerializer() (Snapshot, error)  { return ByteSnapshot, nil }
func (SmallIntType) InternalSerializer() (Snapshot, error) { return ShortSnapshot, nil }
func (IntType) InternalSerializer() (Snapshot, error)      { return IntSnapshot, nil }
func (DateType) InternalSerializer() (Snapshot, error)     { return IntSnapshot, nil }
func (TimeType) InternalSerializer() (Snapshot, error)     { return IntSnapshot, nil }
func (BigIntType) InternalSerializer() (Snapshot, error)   { return LongSnapshot, nil }
func (FloatType) InternalSerializer() (Snapshot, error)    { return FloatSnapshot, nil }
func (DoubleType) InternalSerializer() (Snapshot, error)   { return DoubleSnapshot, nil }
func (CharType) InternalSerializer() (Snapshot, error)     { return StringDataSnapshot, nil }
func (VarCharType) InternalSerializer() (Snapshot, error)  { return StringDataSnapshot, nil }
func (BinaryType) InternalSerializer() (Snapshot, error)   { return BytesSnapshot, nil }
func (VarBinaryType) InternalSerializer() (Snapshot, error) {
	return BytesSnapshot, nil
}
func (t DecimalType) InternalSerializer() (Snapshot, error) {
	return DecimalDataSnapshot{t.Precision, t.Scale}, nil
}
func (t TimestampType) InternalSerializer() (Snapshot, error) {
	return TimestampDataSnapshot{t.Precision}, nil
}
func (t LocalZonedTimestampType) InternalSerializer() (Snapshot, error) {
	return TimestampDataSnapshot{t.Precision}, nil
}
func (t RowType) InternalSerializer() (Snapshot, error) {
	ts := make([]LogicalType, len(t.Fields))
	for i, f := range t.Fields {
		ts[i] = f.Type
	}
	return RowDataSnapshot{Types: ts}, nil
}
func (t StructuredType) InternalSerializer() (Snapshot, error) {
	var ts []LogicalType
	// getChildren(): the supertype's attributes first.
	var chain []StructuredType
	for s := &t; s != nil; s = s.SuperType {
		chain = append([]StructuredType{*s}, chain...)
		if len(chain) > maxSnapshotDepth {
			return nil, fmt.Errorf("%w: structured type hierarchy too deep", ErrSnapshot)
		}
	}
	for _, s := range chain {
		for _, a := range s.Attributes {
			ts = append(ts, a.Type)
		}
	}
	return RowDataSnapshot{Types: ts}, nil
}
func (t RawType) InternalSerializer() (Snapshot, error) {
	if t.Snapshot == nil {
		return nil, fmt.Errorf("%w: RAW type without serializer snapshot", ErrSnapshot)
	}
	return RawValueDataSnapshot(t.Snapshot), nil
}
func (ArrayType) InternalSerializer() (Snapshot, error) {
	return nil, fmt.Errorf("%w: ARRAY fields (ArrayDataSerializer) are not supported; pass the nested snapshots explicitly", ErrSnapshot)
}
func (MapType) InternalSerializer() (Snapshot, error) {
	return nil, fmt.Errorf("%w: MAP fields (MapDataSerializer) are not supported; pass the nested snapshots explicitly", ErrSnapshot)
}
func (MultisetType) InternalSerializer() (Snapshot, error) {
	return nil, fmt.Errorf("%w: MULTISET fields (MapDataSerializer) are not supported; pass the nested snapshots explicitly", ErrSnapshot)
}

// TtlAwareSnapshot is TtlAwareSerializerSnapshot (Flink 2.0+, version 1):
// bool isTtlEnabled, then the wrapped serializer's versioned snapshot.
type TtlAwareSnapshot struct {
	TtlEnabled bool
	Inner      Snapshot
}

func (s TtlAwareSnapshot) ClassName() string {
	return "org.apache.flink.runtime.state.ttl.TtlAwareSerializerSnapshot"
}
func (s TtlAwareSnapshot) Version() int32 { return 1 }
func (s TtlAwareSnapshot) AppendBody(b []byte) ([]byte, error) {
	return s.appendBodyDepth(b, 1)
}
func (s TtlAwareSnapshot) appendBodyDepth(b []byte, depth int) ([]byte, error) {
	return appendVersioned(AppendBool(b, s.TtlEnabled), s.Inner, depth)
}
