// Package serde reads Flink TypeSerializerSnapshots and decodes the bytes
// the corresponding serializers wrote.
//
// # Snapshots
//
// A serializer snapshot is framed as a "versioned snapshot": the snapshot
// class name (writeUTF), an i32 version, then a class-specific body that is
// NOT length-prefixed. Top-level snapshots (the key serializer and the
// entries of a state's serializer map) are preceded by an i32 proxy version
// 2. Because bodies cannot be skipped, ReadSnapshot knows the body grammar
// of every supported class (simple, composite, tuple, TTL, list, map, timer,
// RowData with Java-serialized LogicalTypes, BinaryRowData, Decimal,
// Timestamp, LinkedList, External, RawValueData, WindowKey, ArrayData,
// MapData, SortedMap, TtlAware, POJO, Kryo, and those of builtin.go: CEP,
// StreamElement, enum, Either, Nullable, Java Row, Scala, arrays, Value
// types, Avro) and fails on any other class with an error naming the class
// and its offset (ErrUnknownSnapshot; legacy forms: ErrUnsupported). Inside
// POJO snapshots the field snapshots are length-framed, so unknown field
// serializer classes are kept as opaque snapshots instead of failing; in
// state headers keyed.ParseHeaderWithin steps over unknown top-level
// snapshots using the header's end.
//
// Every Snapshot keeps Raw, the exact bytes it was read from, so a writer
// can re-emit it byte-identically.
//
// # Decoding data
//
// NewDecoder(s) builds a Decoder for the data written by the serializer the
// snapshot describes. Decoders read from a binfmt.Decbuf (sticky error,
// absolute offsets). Serializers whose data format is not implemented get a
// raw decoder: it never fails and returns a Raw value holding the bytes and
// the serializer class, so callers can always report an entry.
//
// Decoded values form a small model (see Value) that marshals to JSON in
// the shapes used by the project's reference decodings: rows as
// ["+I", [fields...]], TTL values as ["TtlValue", {...}], timers as
// ["Timer", {...}], TIMESTAMP(p<=3) as ["ts_millis", epochMillis].
package serde

import (
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/javaser"
)

// Framing constants of Flink's snapshot formats (wire format; do not change).
const (
	ProxyVersion         = 2          // TypeSerializerSnapshotSerializationProxy version
	CompositeMagic       = 911108     // CompositeTypeSerializerSnapshot outer magic
	NestedMagic          = 1333245    // NestedSerializersSnapshotDelegate magic
	AdapterVersion       = 0x7A53C4F0 // legacy TypeSerializerConfigSnapshot adapter
	maxNested            = 1 << 12
	maxSnapshotDepth     = 64
	maxRowFieldsSnapshot = 1 << 16
)

// ErrUnknownSnapshot is returned (wrapped, with class name and offset) for a
// snapshot class whose body grammar is not known.
var ErrUnknownSnapshot = errclass.New(errclass.ErrUnsupported, "serde: unknown serializer snapshot class")

// ErrUnsupported marks a known but unsupported snapshot form (legacy layouts).
var ErrUnsupported = errclass.New(errclass.ErrUnsupported, "serde: unsupported serializer snapshot form")

// Snapshot is one parsed TypeSerializerSnapshot.
type Snapshot struct {
	// Class is the snapshot class name as written.
	Class string
	// Version is the snapshot version written after the class name.
	Version int32
	// Offset is the absolute position of the class name's length prefix.
	Offset int64
	// Raw holds the exact bytes of the versioned snapshot (class name,
	// version and body; without the top-level i32 2).
	Raw []byte

	// Nested holds nested snapshots (composite snapshots, RowData field
	// serializers, the wrapped snapshot of TtlAware).
	Nested []*Snapshot
	// OuterVersion is the composite outer-snapshot version (-1 if none).
	OuterVersion int32

	// TupleClass is the tuple class of a TupleSerializerSnapshot.
	TupleClass string
	// Types are the field LogicalTypes of a RowDataSerializerSnapshot (or
	// the element/key/value types of ArrayData/MapData snapshots).
	Types []*LogicalType
	// JavaStreams are the embedded Java object streams, in stream order.
	JavaStreams []*javaser.Stream
	// Precision and Scale of Decimal/Timestamp snapshots.
	Precision, Scale int32
	// NumFields of a BinaryRowDataSerializerSnapshot.
	NumFields int32
	// HasNullMask of a LinkedListSerializerSnapshot.
	HasNullMask bool
	// IsInternalInput of an ExternalSerializerSnapshot.
	IsInternalInput bool
	// TTLEnabled of a TtlAwareSerializerSnapshot.
	TTLEnabled bool
	// LegacyClassName is the class name carried by version-2 simple snapshots.
	LegacyClassName string
	// TypeClass is the POJO class of a PojoSerializerSnapshot or the type
	// class of a KryoSerializerSnapshot.
	TypeClass string
	// FieldNames are the POJO field names, parallel to Nested.
	FieldNames []string
	// Subclasses counts the registered plus non-registered subclass
	// serializers of a POJO snapshot.
	Subclasses int
	// EnumConstants are the constant names of an EnumSerializerSnapshot,
	// by ordinal.
	EnumConstants []string
	// PaddingLen is the null padding of a NullableSerializerSnapshot.
	PaddingLen int32
	// SupportsRowKind is set for Java RowSerializer snapshots whose data
	// carries the row kind in the null mask.
	SupportsRowKind bool
	// PrevTimestamp is set for NFAStateSerializer snapshots (outer
	// version 2+) whose computation states carry a previous timestamp.
	PrevTimestamp bool
	// Schema is the writer schema of an AvroSerializerSnapshot.
	Schema string
	// LegacyOf is set for legacy composite config snapshots (adapter
	// version) that are read in full: the current snapshot class whose
	// serializer writes the same data (e.g. ClassMap for
	// MapSerializerConfigSnapshot). Nested then holds the nested
	// serializers' snapshots and TypeClass the Java-serialized serializer.
	LegacyOf string
	// Opaque marks a snapshot whose class (or form) is unknown, met inside
	// a length-framed container (POJO field serializers) or delimited by
	// resynchronising on what follows it: only Class, Version and Raw are
	// set, and its data decoder is raw.
	Opaque bool
}

// Well-known snapshot class names.
const (
	ClassInt         = "org.apache.flink.api.common.typeutils.base.IntSerializer$IntSerializerSnapshot"
	ClassLong        = "org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot"
	ClassString      = "org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot"
	ClassBoolean     = "org.apache.flink.api.common.typeutils.base.BooleanSerializer$BooleanSerializerSnapshot"
	ClassShort       = "org.apache.flink.api.common.typeutils.base.ShortSerializer$ShortSerializerSnapshot"
	ClassByte        = "org.apache.flink.api.common.typeutils.base.ByteSerializer$ByteSerializerSnapshot"
	ClassDouble      = "org.apache.flink.api.common.typeutils.base.DoubleSerializer$DoubleSerializerSnapshot"
	ClassFloat       = "org.apache.flink.api.common.typeutils.base.FloatSerializer$FloatSerializerSnapshot"
	ClassChar        = "org.apache.flink.api.common.typeutils.base.CharSerializer$CharSerializerSnapshot"
	ClassBytes       = "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot"
	ClassVoid        = "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot"
	ClassTimeWindow  = "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot"
	ClassGlobalWin   = "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot"
	ClassTableTW     = "org.apache.flink.table.runtime.operators.window.TimeWindow$Serializer$TimeWindowSerializerSnapshot"
	ClassCountWindow = "org.apache.flink.table.runtime.operators.window.CountWindow$Serializer$CountWindowSerializerSnapshot"
	ClassStringData  = "org.apache.flink.table.runtime.typeutils.StringDataSerializer$StringDataSerializerSnapshot"
	ClassNull        = "org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot"
	ClassJava        = "org.apache.flink.runtime.state.JavaSerializer$JavaSerializerSnapshot"
	ClassTuple       = "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot"
	ClassTTL         = "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
	ClassTTLAware    = "org.apache.flink.runtime.state.ttl.TtlAwareSerializerSnapshot"
	ClassList        = "org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot"
	ClassMap         = "org.apache.flink.api.common.typeutils.base.MapSerializerSnapshot"
	ClassTimer       = "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot"
	ClassRowData     = "org.apache.flink.table.runtime.typeutils.RowDataSerializer$RowDataSerializerSnapshot"
	ClassBinaryRow   = "org.apache.flink.table.runtime.typeutils.BinaryRowDataSerializer$BinaryRowDataSerializerSnapshot"
	ClassDecimal     = "org.apache.flink.table.runtime.typeutils.DecimalDataSerializer$DecimalSerializerSnapshot"
	ClassTimestamp   = "org.apache.flink.table.runtime.typeutils.TimestampDataSerializer$TimestampDataSerializerSnapshot"
	ClassLinkedList  = "org.apache.flink.table.runtime.typeutils.LinkedListSerializer$LinkedListSerializerSnapshot"
	ClassExternal    = "org.apache.flink.table.runtime.typeutils.ExternalSerializer$ExternalSerializerSnapshot"
	ClassRawValue    = "org.apache.flink.table.runtime.typeutils.RawValueDataSerializer$RawValueDataSerializerSnapshot"
	ClassWindowKey   = "org.apache.flink.table.runtime.typeutils.WindowKeySerializer$WindowKeySerializerSnapshot"
	ClassArrayData   = "org.apache.flink.table.runtime.typeutils.ArrayDataSerializer$ArrayDataSerializerSnapshot"
	ClassMapData     = "org.apache.flink.table.runtime.typeutils.MapDataSerializer$MapDataSerializerSnapshot"
	ClassSortedMap   = "org.apache.flink.table.runtime.typeutils.SortedMapSerializerSnapshot"
	ClassPojo        = "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot"
	ClassKryo        = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"
	ClassKryo5       = "org.apache.flink.api.java.typeutils.runtime.kryo5.KryoSerializerSnapshot"
)

// LinkedOptionalMapHeader starts every optional map of a POJO snapshot.
const LinkedOptionalMapHeader = 0x4f2c69a3d70

type bodyKind int

const (
	bodySimple bodyKind = iota + 1
	bodyComposite
	bodyRowData
	bodyBinaryRow
	bodyDecimal
	bodyTimestamp
	bodyTTLAware
	bodyJavaStreams // n Java streams (n from javaStreamCount)
	bodySortedMap
	bodyPojo
	bodyKryo
	bodyEnum
	bodyAvro
	bodyTypeClass // GenericTypeSerializerSnapshot: UTF type class
)

var simpleClasses = []string{
	ClassInt, ClassLong, ClassString, ClassBoolean, ClassShort, ClassByte, ClassDouble,
	ClassFloat, ClassChar, ClassBytes, ClassVoid, ClassTimeWindow, ClassGlobalWin,
	ClassTableTW, ClassCountWindow, ClassStringData, ClassNull, ClassJava,
	"org.apache.flink.api.common.typeutils.base.BigIntSerializer$BigIntSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.BigDecSerializer$BigDecSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.InstantSerializer$InstantSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.LocalDateSerializer$LocalDateSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.LocalDateTimeSerializer$LocalDateTimeSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.LocalTimeSerializer$LocalTimeSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.SqlDateSerializer$SqlDateSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.SqlTimeSerializer$SqlTimeSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.SqlTimestampSerializer$SqlTimestampSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.DateSerializer$DateSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.StringValueSerializer$StringValueSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.IntValueSerializer$IntValueSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.LongValueSerializer$LongValueSerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.array.IntPrimitiveArraySerializer$IntPrimitiveArraySerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.array.LongPrimitiveArraySerializer$LongPrimitiveArraySerializerSnapshot",
	"org.apache.flink.api.common.typeutils.base.array.StringArraySerializer$StringArraySerializerSnapshot",
	"org.apache.flink.table.runtime.typeutils.StringSerializer$StringSerializerSnapshot",
}

// compositeOuter describes the outer snapshot body of composite snapshots.
type outerKind int

const (
	outerEmpty      outerKind = iota
	outerUTF                  // one UTF (tuple class)
	outerLinkedList           // bool hasNullMask when outerVersion >= 2
	outerExternal             // Java stream + bool
	outerI32                  // i32 (NullableSerializer padding)
	outerJavaRow              // bool row kind when outerVersion >= 4
	outerTypeClass            // one UTF (a class) into TypeClass
	outerNFA                  // bool previous timestamp when outerVersion >= 2
)

// outerOf returns the outer snapshot kind of a composite class.
func outerOf(class string) outerKind {
	if k, ok := compositeClasses[class]; ok {
		return k
	}
	return builtinComposite[class].outer
}

var compositeClasses = map[string]outerKind{
	ClassTuple:      outerUTF,
	ClassTTL:        outerEmpty,
	ClassList:       outerEmpty,
	ClassMap:        outerEmpty,
	ClassTimer:      outerEmpty,
	ClassRawValue:   outerEmpty,
	ClassWindowKey:  outerEmpty,
	ClassLinkedList: outerLinkedList,
	ClassExternal:   outerExternal,
	"org.apache.flink.table.runtime.typeutils.WindowKeySerializer$WindowKeySerializerSnapshotV2": outerEmpty,
}

var javaStreamCount = map[string]int{
	ClassArrayData: 2,
	ClassMapData:   4,
}

func kindOf(class string) (bodyKind, bool) {
	for _, c := range simpleClasses {
		if c == class {
			return bodySimple, true
		}
	}
	if _, ok := compositeClasses[class]; ok {
		return bodyComposite, true
	}
	if _, ok := builtinSimple[class]; ok {
		return bodySimple, true
	}
	if _, ok := builtinComposite[class]; ok {
		return bodyComposite, true
	}
	if _, ok := javaStreamCount[class]; ok {
		return bodyJavaStreams, true
	}
	switch class {
	case ClassRowData:
		return bodyRowData, true
	case ClassBinaryRow:
		return bodyBinaryRow, true
	case ClassDecimal:
		return bodyDecimal, true
	case ClassTimestamp:
		return bodyTimestamp, true
	case ClassTTLAware:
		return bodyTTLAware, true
	case ClassSortedMap:
		return bodySortedMap, true
	case ClassPojo:
		return bodyPojo, true
	case ClassKryo, ClassKryo5:
		return bodyKryo, true
	case ClassEnum:
		return bodyEnum, true
	case ClassAvro:
		return bodyAvro, true
	case ClassValue, ClassCopyableValue:
		return bodyTypeClass, true
	}
	return 0, false
}

// Known reports whether ReadSnapshot understands the body of class.
func Known(class string) bool { _, ok := kindOf(class); return ok }

// ParseSnapshot reads one top-level snapshot (leading i32 2) from the start
// of b and returns it with the number of bytes consumed. base is b's offset
// in its file.
func ParseSnapshot(b []byte, base int64) (*Snapshot, int, error) {
	d := binfmt.New(b, base)
	s := ReadTop(d)
	if d.Err() != nil {
		return nil, 0, d.Err()
	}
	return s, d.Pos, nil
}

// ReadTop reads a top-level snapshot: i32 proxy version 2 and a versioned
// snapshot. Errors are recorded in d.
func ReadTop(d *binfmt.Decbuf) *Snapshot {
	at := d.Offset()
	v := d.I32()
	if d.Err() != nil {
		return nil
	}
	if v != ProxyVersion {
		d.Pos -= 4
		if v == 1 {
			d.Fail(fmt.Errorf("%w: serializer snapshot proxy version 1 (pre-1.7 legacy) at offset %d", ErrUnsupported, at))
		} else {
			d.Failf("serializer snapshot proxy version %d, want 2", v)
		}
		return nil
	}
	return ReadVersioned(d)
}

// ReadVersioned reads a versioned snapshot (class name, version, body).
func ReadVersioned(d *binfmt.Decbuf) *Snapshot { return readVersioned(d, 0) }

func readVersioned(d *binfmt.Decbuf, depth int) *Snapshot {
	if d.Err() != nil {
		return nil
	}
	start := d.Pos
	s := &Snapshot{Offset: d.Offset(), OuterVersion: -1}
	if depth > maxSnapshotDepth {
		d.Failf("serializer snapshots nested deeper than %d", maxSnapshotDepth)
		return nil
	}
	s.Class = d.UTF()
	s.Version = d.I32()
	if d.Err() != nil {
		return nil
	}
	if s.Version == AdapterVersion && legacyComposite[s.Class] != "" {
		readLegacyComposite(d, s, depth)
		if d.Err() != nil {
			return nil
		}
		s.Raw = d.B[start:d.Pos:d.Pos]
		return s
	}
	if s.Version == AdapterVersion {
		d.Pos = start
		what := ""
		if ser, cv, ok := LegacyAdapter(d.B[start:]); ok {
			what = fmt.Sprintf(" for serializer %s (config version %d)", ser, cv)
		}
		d.Fail(fmt.Errorf("%w: legacy TypeSerializerConfigSnapshot %s%s: its own body is not length-prefixed", ErrUnsupported, s.Class, what))
		return nil
	}
	kind, ok := kindOf(s.Class)
	if !ok {
		d.Pos = start
		d.Fail(fmt.Errorf("%w %q (snapshot bodies are not length-prefixed, so it cannot be skipped)", ErrUnknownSnapshot, s.Class))
		return nil
	}
	switch kind {
	case bodySimple:
		if s.Version < 3 {
			s.LegacyClassName = d.UTF()
		}
	case bodyComposite:
		readComposite(d, s, depth)
	case bodyRowData:
		n := d.Count("row field", maxRowFieldsSnapshot, 4)
		for i := 0; i < n && d.Err() == nil; i++ {
			js := readJava(d)
			if d.Err() != nil {
				break
			}
			lt, err := LogicalTypeFromJava(js)
			if err != nil {
				d.Fail(fmt.Errorf("row field %d logical type: %w", i, err))
				break
			}
			s.Types = append(s.Types, lt)
		}
		s.Nested = readNested(d, depth)
		if d.Err() == nil && len(s.Nested) != len(s.Types) {
			d.Failf("RowDataSerializer snapshot has %d types but %d field serializers", len(s.Types), len(s.Nested))
		}
	case bodyBinaryRow:
		s.NumFields = d.I32()
		if d.Err() == nil && s.NumFields < 0 {
			d.Failf("negative field count %d", s.NumFields)
		}
	case bodyDecimal:
		s.Precision = d.I32()
		s.Scale = d.I32()
	case bodyTimestamp:
		s.Precision = d.I32()
	case bodyTTLAware:
		s.TTLEnabled = d.Bool()
		if n := readVersioned(d, depth+1); n != nil {
			s.Nested = []*Snapshot{n}
		}
	case bodyJavaStreams:
		// ArrayData: element type, element serializer; MapData: key type,
		// value type, key serializer, value serializer — each its own
		// object stream.
		for i := 0; i < javaStreamCount[s.Class] && d.Err() == nil; i++ {
			if js := readJava(d); js != nil {
				s.JavaStreams = append(s.JavaStreams, js)
			}
		}
		if d.Err() == nil {
			nt := javaStreamCount[s.Class] / 2
			for _, js := range s.JavaStreams[:nt] {
				lt, err := LogicalTypeFromJava(js)
				if err != nil {
					s.Types = nil
					break
				}
				s.Types = append(s.Types, lt)
			}
		}
	case bodySortedMap:
		readJava(d) // comparator
		s.Nested = readNested(d, depth)
	case bodyPojo:
		readPojo(d, s, depth)
	case bodyKryo:
		readKryo(d, s)
	case bodyEnum:
		readEnum(d, s)
	case bodyAvro:
		readAvro(d, s)
	case bodyTypeClass:
		s.TypeClass = d.UTF()
	}
	if d.Err() != nil {
		return nil
	}
	for _, js := range s.JavaStreams {
		_ = js
	}
	s.Raw = d.B[start:d.Pos:d.Pos]
	return s
}

// readJava reads one embedded Java object stream.
func readJava(d *binfmt.Decbuf) *javaser.Stream {
	if d.Err() != nil {
		return nil
	}
	js, n, err := javaser.ParseOne(d.B[d.Pos:], d.Offset())
	if err != nil {
		d.Fail(fmt.Errorf("embedded java object: %w", err))
		return nil
	}
	d.Pos += n
	return js
}

func readComposite(d *binfmt.Decbuf, s *Snapshot, depth int) {
	if s.Version <= 2 {
		d.Fail(fmt.Errorf("%w: legacy composite snapshot version %d of %s", ErrUnsupported, s.Version, s.Class))
		return
	}
	if m := d.I32(); d.Err() == nil && m != CompositeMagic {
		d.Pos -= 4
		d.Failf("composite snapshot magic %d, want %d", m, CompositeMagic)
		return
	}
	s.OuterVersion = d.I32()
	switch outerOf(s.Class) {
	case outerI32:
		s.PaddingLen = d.I32()
		if d.Err() == nil && s.PaddingLen < 0 {
			d.Failf("negative null padding %d", s.PaddingLen)
		}
	case outerJavaRow:
		switch {
		case s.OuterVersion == 3:
			s.SupportsRowKind = true
		case s.OuterVersion > 3:
			s.SupportsRowKind = d.Bool()
		}
	case outerTypeClass:
		s.TypeClass = d.UTF()
	case outerNFA:
		if s.OuterVersion >= 2 {
			s.PrevTimestamp = d.Bool()
		}
	case outerUTF:
		s.TupleClass = d.UTF()
	case outerLinkedList:
		// Outer version 1: no null mask; 2: always a mask (not recorded);
		// 3+: a recorded flag.
		switch {
		case s.OuterVersion == 2:
			s.HasNullMask = true
		case s.OuterVersion > 2:
			s.HasNullMask = d.Bool()
		}
	case outerExternal:
		if js := readJava(d); js != nil {
			s.JavaStreams = append(s.JavaStreams, js)
			// The DataType's logical type, when it can be recovered.
			if o, ok := js.First().(*javaser.Object); ok {
				if lo := o.Object("logicalType"); lo != nil {
					if lt, err := logicalFromObject(lo, 0); err == nil {
						lt.Java = js
						s.Types = []*LogicalType{lt}
					}
				}
			}
		}
		s.IsInternalInput = d.Bool()
	}
	s.Nested = readNested(d, depth)
	if d.Err() != nil {
		return
	}
	want := -1
	switch s.Class {
	case ClassTTL, ClassMap, ClassTimer:
		want = 2
	case ClassList, ClassExternal, ClassLinkedList:
		want = 1
	}
	if c, ok := builtinComposite[s.Class]; ok {
		want = c.nested
	}
	if want >= 0 && len(s.Nested) != want {
		d.Failf("%s has %d nested serializers, want %d", s.Class, len(s.Nested), want)
	}
}

func readNested(d *binfmt.Decbuf, depth int) []*Snapshot {
	if m := d.I32(); d.Err() == nil && m != NestedMagic {
		d.Pos -= 4
		d.Failf("nested serializers magic %d, want %d", m, NestedMagic)
		return nil
	}
	if v := d.I32(); d.Err() == nil && v != 1 {
		d.Pos -= 4
		d.Failf("nested serializers version %d, want 1", v)
		return nil
	}
	n := d.Count("nested serializer", maxNested, 6)
	out := make([]*Snapshot, 0, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		if s := readVersioned(d, depth+1); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// readOptionalMap reads one LinkedOptionalMap (Flink's
// LinkedOptionalMapSerializer): i64 header, i32 size, then per entry a UTF
// name and optional length-framed key and value. fn receives each entry's
// name and value frame (nil when absent); it returns false to stop.
func readOptionalMap(d *binfmt.Decbuf, fn func(name string, value []byte, valueAt int64) bool) {
	at := d.Offset()
	if h := d.I64(); d.Err() == nil && h != LinkedOptionalMapHeader {
		d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: optional map header 0x%x, want 0x%x", binfmt.ErrCorrupt, h, LinkedOptionalMapHeader)})
		return
	}
	n := d.Count("optional map entry", maxNested, 4)
	for i := 0; i < n && d.Err() == nil; i++ {
		name := d.UTF()
		if d.Bool() { // key frame: not needed
			d.Skip(d.Count("frame", 1<<30, 1))
		}
		var frame []byte
		var fat int64
		if d.Bool() {
			fl := d.Count("frame", 1<<30, 1)
			fat = d.Offset()
			frame = d.Bytes(fl)
		}
		if d.Err() != nil || !fn(name, frame, fat) {
			return
		}
	}
}

// readPojo reads a PojoSerializerSnapshot (version 2) body: the POJO class
// and three optional maps (fields, registered subclasses, non-registered
// subclasses) whose values are framed serializer snapshots.
func readPojo(d *binfmt.Decbuf, s *Snapshot, depth int) {
	if s.Version != 2 {
		d.Fail(fmt.Errorf("%w: PojoSerializerSnapshot version %d", ErrUnsupported, s.Version))
		return
	}
	s.TypeClass = d.UTF()
	for m := 0; m < 3 && d.Err() == nil; m++ {
		readOptionalMap(d, func(name string, frame []byte, at int64) bool {
			var nested *Snapshot
			if frame != nil {
				nested = readFramedSnapshot(frame, at, depth)
				if nested == nil {
					d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: bad serializer snapshot frame", binfmt.ErrCorrupt)})
					return false
				}
			}
			if m == 0 {
				s.FieldNames = append(s.FieldNames, name)
				s.Nested = append(s.Nested, nested)
			} else {
				s.Subclasses++
			}
			return true
		})
	}
}

// readFramedSnapshot reads a versioned snapshot that fills frame exactly.
// Unknown classes become opaque snapshots (the frame delimits them).
func readFramedSnapshot(frame []byte, base int64, depth int) *Snapshot {
	fd := binfmt.New(frame, base)
	ns := readVersioned(fd, depth+1)
	if fd.Err() == nil && fd.Len() == 0 {
		return ns
	}
	fd = binfmt.New(frame, base)
	o := &Snapshot{Offset: base, OuterVersion: -1, Opaque: true, Raw: frame}
	o.Class = fd.UTF()
	o.Version = fd.I32()
	if fd.Err() != nil {
		return nil
	}
	return o
}

// readKryo reads a KryoSerializerSnapshot body: the type class and three
// optional maps (registrations, default serializers, default serializer
// classes) whose entries are framed and not needed to locate the data.
func readKryo(d *binfmt.Decbuf, s *Snapshot) {
	if s.Class == ClassKryo && s.Version != 2 {
		d.Fail(fmt.Errorf("%w: KryoSerializerSnapshot version %d", ErrUnsupported, s.Version))
		return
	}
	s.TypeClass = d.UTF()
	for m := 0; m < 3 && d.Err() == nil; m++ {
		readOptionalMap(d, func(string, []byte, int64) bool { return true })
	}
}

// Is reports whether s is a snapshot of class, or a legacy config snapshot
// read as one (LegacyOf).
func (s *Snapshot) Is(class string) bool {
	return s != nil && (s.Class == class || s.LegacyOf == class)
}

// Name returns the snapshot class's short serializer name, e.g.
// "LongSerializer" or "RowDataSerializer".
func (s *Snapshot) Name() string {
	if s == nil {
		return "<nil>"
	}
	c := s.Class
	if i := strings.LastIndexByte(c, '.'); i >= 0 {
		c = c[i+1:]
	}
	parts := strings.Split(c, "$")
	last := parts[len(parts)-1]
	last = strings.TrimSuffix(last, "Snapshot")
	if last == "" || last == "Serializer" || last == "SerializerSnapshot" {
		last = parts[0]
	}
	return last
}

// String renders the type the snapshot's serializer handles, in SQL-like
// notation: BIGINT, STRING, ROW<BIGINT, STRING>, TUPLE<BIGINT>,
// LIST<INT>, MAP<STRING, BOOLEAN>, TTL<ROW<...>>, TIMER<key, ns>.
func (s *Snapshot) String() string {
	if s == nil {
		return "<nil>"
	}
	if s.LegacyOf != "" {
		c := *s
		c.Class, c.LegacyOf = s.LegacyOf, ""
		return c.String()
	}
	if s.Opaque {
		if s.TypeClass != "" {
			return "LEGACY(" + s.TypeClass + ")"
		}
		return "UNKNOWN(" + s.Name() + ")"
	}
	nested := func() string {
		parts := make([]string, len(s.Nested))
		for i, n := range s.Nested {
			parts[i] = n.String()
		}
		return strings.Join(parts, ", ")
	}
	switch s.Class {
	case ClassInt:
		return "INT"
	case ClassLong:
		return "BIGINT"
	case ClassString:
		return "STRING"
	case ClassBoolean:
		return "BOOLEAN"
	case ClassShort:
		return "SMALLINT"
	case ClassByte:
		return "TINYINT"
	case ClassDouble:
		return "DOUBLE"
	case ClassFloat:
		return "FLOAT"
	case ClassChar:
		return "CHAR"
	case ClassBytes:
		return "BYTES"
	case ClassVoid:
		return "VOID_NAMESPACE"
	case ClassTimeWindow, ClassTableTW:
		return "TIME_WINDOW"
	case ClassGlobalWin:
		return "GLOBAL_WINDOW"
	case ClassCountWindow:
		return "COUNT_WINDOW"
	case ClassStringData:
		return "STRING"
	case ClassNull:
		return "NULL"
	case ClassJava:
		return "JAVA_OBJECT"
	case ClassTuple:
		return "TUPLE<" + nested() + ">"
	case ClassTTL:
		if len(s.Nested) == 2 {
			return "TTL<" + s.Nested[1].String() + ">"
		}
	case ClassTTLAware:
		return "TTL_AWARE<" + nested() + ">"
	case ClassList:
		return "LIST<" + nested() + ">"
	case ClassLinkedList:
		return "LINKED_LIST<" + nested() + ">"
	case ClassMap:
		return "MAP<" + nested() + ">"
	case ClassSortedMap:
		return "SORTED_MAP<" + nested() + ">"
	case ClassTimer:
		return "TIMER<" + nested() + ">"
	case ClassExternal:
		return nested()
	case ClassRawValue:
		return "RAW<" + nested() + ">"
	case ClassRowData:
		parts := make([]string, len(s.Types))
		for i, t := range s.Types {
			parts[i] = t.String()
		}
		return "ROW<" + strings.Join(parts, ", ") + ">"
	case ClassBinaryRow:
		return fmt.Sprintf("BINARY_ROW(%d)", s.NumFields)
	case ClassDecimal:
		return fmt.Sprintf("DECIMAL(%d, %d)", s.Precision, s.Scale)
	case ClassTimestamp:
		return fmt.Sprintf("TIMESTAMP(%d)", s.Precision)
	case ClassArrayData:
		if len(s.Types) == 1 {
			return "ARRAY<" + s.Types[0].String() + ">"
		}
	case ClassMapData:
		if len(s.Types) == 2 {
			return "MAP<" + s.Types[0].String() + ", " + s.Types[1].String() + ">"
		}
	case ClassPojo:
		parts := make([]string, len(s.Nested))
		for i, n := range s.Nested {
			parts[i] = s.FieldNames[i] + " " + n.String()
		}
		return "POJO<" + s.TypeClass + "{" + strings.Join(parts, ", ") + "}>"
	case ClassKryo, ClassKryo5:
		return "KRYO<" + s.TypeClass + ">"
	}
	if t, ok := builtinString(s); ok {
		return t
	}
	return s.Name()
}

// LegacyAdapter reads the start of a legacy TypeSerializerConfigSnapshot
// (Flink 1.7-1.x serializers not yet moved to TypeSerializerSnapshot),
// given as its versioned form in b. Flink wrote it through an adapter:
//
//	UTF config snapshot class, i32 0x7A53C4F0 (adapter version),
//	i32 1 (TypeSerializerSerializationProxy version), i32 n,
//	n bytes: the serializer, Java-serialized,
//	i32 config snapshot version, then the class's own body
//
// It returns the serializer's class and the config snapshot version. The
// class-specific rest is not framed; readers step over it with the header
// end (see keyed.ParseHeaderWithin).
func LegacyAdapter(b []byte) (serializer string, configVersion int32, ok bool) {
	d := binfmt.New(b, 0)
	d.UTF()
	if d.I32() != AdapterVersion || d.I32() != 1 {
		return "", 0, false
	}
	n := d.Count("serializer bytes", 1<<30, 1)
	js := d.Bytes(n)
	configVersion = d.I32()
	if d.Err() != nil {
		return "", 0, false
	}
	if st, _, err := javaser.ParseOne(js, 0); err == nil {
		if o, ok := st.First().(*javaser.Object); ok {
			return o.ClassName(), configVersion, true
		}
	}
	// The object did not parse: its class descriptor still names it
	// (magic, TC_OBJECT, TC_CLASSDESC, UTF name).
	if len(js) > 8 && js[0] == 0xac && js[1] == 0xed && js[4] == 0x73 && js[5] == 0x72 {
		cd := binfmt.New(js[6:], 0)
		if name := cd.UTF(); cd.Err() == nil && name != "" {
			return name, configVersion, true
		}
	}
	return "", configVersion, true
}

// legacyComposite maps legacy config snapshots that extend
// CompositeTypeSerializerConfigSnapshot without adding fields to the
// current snapshot class of the same serializer (same data format).
var legacyComposite = map[string]string{
	"org.apache.flink.api.common.typeutils.base.MapSerializerConfigSnapshot":                                        ClassMap,
	"org.apache.flink.api.common.typeutils.base.ListSerializerConfigSnapshot":                                       ClassList,
	"org.apache.flink.api.java.typeutils.runtime.EitherSerializerConfigSnapshot":                                    ClassEither,
	"org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerConfigSnapshot":                         ClassJavaRow,
	"org.apache.flink.streaming.runtime.streamrecord.StreamElementSerializer$StreamElementSerializerConfigSnapshot": ClassStreamElement,
}

// readLegacyComposite reads a legacy CompositeTypeSerializerConfigSnapshot
// written through the adapter (see LegacyAdapter), after class and
// version:
//
//	i32 1, i32 n, n bytes      the serializer, Java-serialized
//	i32 config version
//	i32 k                      nested serializer/snapshot pairs, written
//	k × (i32 serializer offset, i32 snapshot offset)   "with resilience":
//	i32 m, m bytes             offsets into these m bytes, where each
//	                           serializer is framed as above and each
//	                           snapshot is a top-level snapshot (i32 2, ...)
func readLegacyComposite(d *binfmt.Decbuf, s *Snapshot, depth int) {
	if v := d.I32(); d.Err() == nil && v != 1 {
		d.Failf("legacy serializer proxy version %d, want 1", v)
		return
	}
	js := d.Bytes(d.Count("serializer bytes", 1<<30, 1))
	if d.Err() != nil {
		return
	}
	if st, _, err := javaser.ParseOne(js, 0); err == nil {
		if o, ok := st.First().(*javaser.Object); ok {
			s.TypeClass = o.ClassName()
		}
	}
	s.OuterVersion = d.I32() // the config snapshot's own version
	k := d.Count("nested serializer", maxNested, 8)
	offs := make([]int, 0, 2*k)
	for i := 0; i < 2*k && d.Err() == nil; i++ {
		offs = append(offs, int(d.I32()))
	}
	m := d.Count("nested serializers bytes", 1<<30, 1)
	base := d.Offset()
	buf := d.Bytes(m)
	if d.Err() != nil {
		return
	}
	prev := 0
	for i, o := range offs {
		if o < prev || o > m {
			d.Failf("legacy nested offset %d (index %d) outside [%d, %d]", o, i, prev, m)
			return
		}
		prev = o
	}
	for i := 0; i < k; i++ {
		end := m
		if 2*i+2 < len(offs) {
			end = offs[2*i+2]
		}
		nd := binfmt.New(buf[:end], base)
		nd.Pos = offs[2*i+1]
		if v := nd.I32(); nd.Err() == nil && v != ProxyVersion {
			d.Fail(&binfmt.OffsetError{Offset: nd.Offset() - 4, Err: fmt.Errorf("%w: nested snapshot proxy version %d", ErrUnsupported, v)})
			return
		}
		n := readVersioned(nd, depth+1)
		if nd.Err() != nil {
			d.Fail(nd.Err())
			return
		}
		s.Nested = append(s.Nested, n)
	}
	s.LegacyOf = legacyComposite[s.Class]
	if want := map[string]int{ClassMap: 2, ClassList: 1, ClassEither: 2, ClassStreamElement: 1}[s.LegacyOf]; want > 0 && len(s.Nested) != want {
		d.Failf("%s has %d nested serializers, want %d", s.Class, len(s.Nested), want)
	}
}
