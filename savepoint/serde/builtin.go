package serde

// Snapshots and data formats of further serializers that ship with Flink:
// CEP (NFA state, shared buffer), the async operator's queue
// (StreamElementSerializer), enums, Java Either, NullableSerializer, the
// Java Row serializer, Scala case classes / Option / Either, generic and
// primitive arrays, the *Value types, Avro (values decoded from the writer
// schema, see avro.go), and GenericTypeSerializerSnapshot bodies (the type
// class; the data of user Value types stays raw).
//
// Snapshot bodies (after class name and i32 version):
//
//	composite (CompositeTypeSerializerSnapshot, version 3):
//	  i32 911108, i32 outerVersion, outer snapshot, nested serializers
//	  outer snapshot per class:
//	    NullableSerializer          i32 null padding length
//	    RowSerializer (Java Row)    outerVersion 1-2: nothing (no row kind);
//	                                3: nothing (row kind); 4+: bool row kind
//	    NFAStateSerializer          outerVersion 2+: bool previous timestamp
//	    GenericArraySerializer      UTF component class
//	    Scala case class / Tuple2   UTF case class
//	    all others listed here      nothing
//	EnumSerializerSnapshot (v3): UTF enum class, i32 n, n × UTF constant
//	GenericTypeSerializerSnapshot (ValueSerializer, CopyableValueSerializer;
//	  v2): UTF type class
//	AvroSerializerSnapshot: v1 UTF schema; v2 UTF runtime class, UTF schema
//	simple (SimpleTypeSerializerSnapshot): empty (v3)
//
// Data formats (DataOutput, big-endian):
//
//	EventId            i32 id, i64 timestamp
//	DeweyNumber        i32 n, n × i32 digit
//	NodeId             u8 present; if 1: EventId, StringValue page name
//	SharedBufferEdge   NodeId target, DeweyNumber version
//	SharedBufferNode   i32 n, n × (i32 ref count, SharedBufferEdge)  (V2)
//	Lockable<T>        i32 ref count, T
//	NFAState           partial then completed matches, each i32 n and n ×
//	                   (StringValue state name, NodeId previous entry,
//	                   DeweyNumber version, i64 start timestamp,
//	                   [i64 previous timestamp: snapshot outer version 2+
//	                   with the flag set], u8 has-start-event [EventId])
//	StreamElement<T>   u8 tag: 0 i64 ts + T; 1 T; 2 i64 watermark;
//	                   3 latency marker (i64 time, i64+i64 operator id,
//	                   i32 subtask); 4 i32 watermark status;
//	                   5 bool backlog (record attributes);
//	                   6 i32 subpartition, i64 watermark (internal)
//	Enum               i32 ordinal into the snapshot's constants
//	Either (Java)      bool isLeft, then left or right value
//	Nullable<T>        bool isNull; null: padding bytes; else T
//	Row (Java)         null mask (MSB first; 2 row-kind bits first when the
//	                   serializer supports row kinds), then non-null fields
//	Scala case class   the fields back to back (no null markers)
//	Scala Option       bool defined, [value]
//	Scala Either       bool isLeft, then left or right value
//	GenericArray       i32 n, n × (bool non-null, [element])
//	primitive arrays   i32 n, n × element (StringArray: StringValue strings)
//	BooleanValue …     as the primitive; StringValue: varint length, chars

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"unicode/utf16"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// Snapshot classes of the serializers above.
const (
	ClassNFAState      = "org.apache.flink.cep.nfa.NFAStateSerializerSnapshot"
	ClassNodeID        = "org.apache.flink.cep.nfa.sharedbuffer.NodeId$NodeIdSerializer$NodeIdSerializerSnapshot"
	ClassEventID       = "org.apache.flink.cep.nfa.sharedbuffer.EventId$EventIdSerializer$EventIdSerializerSnapshot"
	ClassDewey         = "org.apache.flink.cep.nfa.DeweyNumber$DeweyNumberSerializer$DeweyNumberSerializerSnapshot"
	ClassSBEdge        = "org.apache.flink.cep.nfa.sharedbuffer.SharedBufferEdge$SharedBufferEdgeSerializer$SharedBufferEdgeSerializerSnapshot"
	ClassSBNode        = "org.apache.flink.cep.nfa.sharedbuffer.SharedBufferNodeSerializerSnapshotV2"
	ClassLockable      = "org.apache.flink.cep.nfa.sharedbuffer.LockableTypeSerializerSnapshot"
	ClassStreamElement = "org.apache.flink.streaming.runtime.streamrecord.StreamElementSerializer$StreamElementSerializerSnapshot"
	ClassEnum          = "org.apache.flink.api.common.typeutils.base.EnumSerializer$EnumSerializerSnapshot"
	ClassEither        = "org.apache.flink.api.java.typeutils.runtime.JavaEitherSerializerSnapshot"
	ClassNullable      = "org.apache.flink.api.java.typeutils.runtime.NullableSerializer$NullableSerializerSnapshot"
	ClassJavaRow       = "org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot"
	ClassScalaCase     = "org.apache.flink.api.scala.typeutils.ScalaCaseClassSerializerSnapshot"
	ClassScalaTuple2   = "org.apache.flink.api.scala.typeutils.Tuple2CaseClassSerializerSnapshot"
	ClassScalaOption   = "org.apache.flink.api.scala.typeutils.ScalaOptionSerializerSnapshot"
	ClassScalaEither   = "org.apache.flink.api.scala.typeutils.ScalaEitherSerializerSnapshot"
	ClassGenericArray  = "org.apache.flink.api.common.typeutils.base.GenericArraySerializerSnapshot"
	ClassValue         = "org.apache.flink.api.java.typeutils.runtime.ValueSerializer$ValueSerializerSnapshot"
	ClassCopyableValue = "org.apache.flink.api.java.typeutils.runtime.CopyableValueSerializer$CopyableValueSerializerSnapshot"
	ClassAvro          = "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot"

	basePkg  = "org.apache.flink.api.common.typeutils.base."
	arrayPkg = basePkg + "array."
)

// builtinSimple are simple snapshots (no body) of built-in serializers,
// with the data kind they write.
var builtinSimple = map[string]kind{
	ClassEventID: kEventID,
	ClassDewey:   kDewey,
	basePkg + "BooleanValueSerializer$BooleanValueSerializerSnapshot":                    kBool,
	basePkg + "ByteValueSerializer$ByteValueSerializerSnapshot":                          kByte,
	basePkg + "CharValueSerializer$CharValueSerializerSnapshot":                          kChar,
	basePkg + "DoubleValueSerializer$DoubleValueSerializerSnapshot":                      kDouble,
	basePkg + "FloatValueSerializer$FloatValueSerializerSnapshot":                        kFloat,
	basePkg + "ShortValueSerializer$ShortValueSerializerSnapshot":                        kShort,
	basePkg + "IntValueSerializer$IntValueSerializerSnapshot":                            kInt,
	basePkg + "LongValueSerializer$LongValueSerializerSnapshot":                          kLong,
	basePkg + "StringValueSerializer$StringValueSerializerSnapshot":                      kStringValue,
	arrayPkg + "BooleanPrimitiveArraySerializer$BooleanPrimitiveArraySerializerSnapshot": kPrimArray,
	arrayPkg + "CharPrimitiveArraySerializer$CharPrimitiveArraySerializerSnapshot":       kPrimArray,
	arrayPkg + "ShortPrimitiveArraySerializer$ShortPrimitiveArraySerializerSnapshot":     kPrimArray,
	arrayPkg + "IntPrimitiveArraySerializer$IntPrimitiveArraySerializerSnapshot":         kPrimArray,
	arrayPkg + "LongPrimitiveArraySerializer$LongPrimitiveArraySerializerSnapshot":       kPrimArray,
	arrayPkg + "FloatPrimitiveArraySerializer$FloatPrimitiveArraySerializerSnapshot":     kPrimArray,
	arrayPkg + "DoublePrimitiveArraySerializer$DoublePrimitiveArraySerializerSnapshot":   kPrimArray,
	arrayPkg + "StringArraySerializer$StringArraySerializerSnapshot":                     kPrimArray,
}

// primElem is the element kind of each primitive array class.
var primElem = map[string]kind{
	arrayPkg + "BooleanPrimitiveArraySerializer$BooleanPrimitiveArraySerializerSnapshot": kBool,
	arrayPkg + "CharPrimitiveArraySerializer$CharPrimitiveArraySerializerSnapshot":       kChar,
	arrayPkg + "ShortPrimitiveArraySerializer$ShortPrimitiveArraySerializerSnapshot":     kShort,
	arrayPkg + "IntPrimitiveArraySerializer$IntPrimitiveArraySerializerSnapshot":         kInt,
	arrayPkg + "LongPrimitiveArraySerializer$LongPrimitiveArraySerializerSnapshot":       kLong,
	arrayPkg + "FloatPrimitiveArraySerializer$FloatPrimitiveArraySerializerSnapshot":     kFloat,
	arrayPkg + "DoublePrimitiveArraySerializer$DoublePrimitiveArraySerializerSnapshot":   kDouble,
	arrayPkg + "StringArraySerializer$StringArraySerializerSnapshot":                     kString,
}

// builtinComposite are the composite snapshots above: outer body and the
// number of nested serializers (-1: any) with the data kind.
var builtinComposite = map[string]struct {
	outer  outerKind
	nested int
	k      kind
}{
	ClassNFAState:      {outerNFA, 3, kNFAState},
	ClassNodeID:        {outerEmpty, 1, kNodeID},
	ClassSBEdge:        {outerEmpty, 2, kSBEdge},
	ClassSBNode:        {outerEmpty, 1, kSBNode},
	ClassLockable:      {outerEmpty, 1, kLockable},
	ClassStreamElement: {outerEmpty, 1, kStreamElement},
	ClassEither:        {outerEmpty, 2, kEither},
	ClassNullable:      {outerI32, 1, kNullable},
	ClassJavaRow:       {outerJavaRow, -1, kJavaRow},
	ClassScalaCase:     {outerTypeClass, -1, kCaseClass},
	ClassScalaTuple2:   {outerTypeClass, 2, kCaseClass},
	ClassScalaOption:   {outerEmpty, 1, kOption},
	ClassScalaEither:   {outerEmpty, 2, kEither},
	ClassGenericArray:  {outerTypeClass, 1, kGenericArray},
}

// readEnum reads an EnumSerializerSnapshot body (version 3; versions 1-2
// were Java-serialized and are not supported).
func readEnum(d *binfmt.Decbuf, s *Snapshot) {
	if s.Version < 3 {
		d.Fail(fmt.Errorf("%w: EnumSerializerSnapshot version %d", ErrUnsupported, s.Version))
		return
	}
	s.TypeClass = d.UTF()
	n := d.Count("enum constant", 1<<16, 2)
	for i := 0; i < n && d.Err() == nil; i++ {
		s.EnumConstants = append(s.EnumConstants, d.UTF())
	}
}

// readAvro reads an AvroSerializerSnapshot body.
func readAvro(d *binfmt.Decbuf, s *Snapshot) {
	switch s.Version {
	case 1:
		s.Schema = d.UTF()
	case 2:
		s.TypeClass = d.UTF()
		s.Schema = d.UTF()
	default:
		d.Fail(fmt.Errorf("%w: AvroSerializerSnapshot version %d", ErrUnsupported, s.Version))
	}
}

// builtinString renders the type of the snapshots above.
func builtinString(s *Snapshot) (string, bool) {
	nested := func() string {
		parts := make([]string, len(s.Nested))
		for i, n := range s.Nested {
			parts[i] = n.String()
		}
		return strings.Join(parts, ", ")
	}
	switch s.Class {
	case ClassNFAState:
		return "NFA_STATE", true
	case ClassNodeID:
		return "NODE_ID", true
	case ClassEventID:
		return "EVENT_ID", true
	case ClassDewey:
		return "DEWEY_NUMBER", true
	case ClassSBEdge:
		return "SHARED_BUFFER_EDGE", true
	case ClassSBNode:
		return "SHARED_BUFFER_NODE", true
	case ClassLockable:
		return "LOCKABLE<" + nested() + ">", true
	case ClassStreamElement:
		return "STREAM_ELEMENT<" + nested() + ">", true
	case ClassEnum:
		return "ENUM<" + s.TypeClass + ">", true
	case ClassEither, ClassScalaEither:
		return "EITHER<" + nested() + ">", true
	case ClassNullable:
		return "NULLABLE<" + nested() + ">", true
	case ClassJavaRow:
		return "ROW<" + nested() + ">", true
	case ClassScalaCase, ClassScalaTuple2:
		return "CASE_CLASS<" + s.TypeClass + "{" + nested() + "}>", true
	case ClassScalaOption:
		return "OPTION<" + nested() + ">", true
	case ClassGenericArray:
		return "ARRAY<" + nested() + ">", true
	case ClassValue, ClassCopyableValue:
		return "VALUE<" + s.TypeClass + ">", true
	case ClassAvro:
		if s.TypeClass != "" {
			return "AVRO<" + s.TypeClass + ">", true
		}
		if n, err := parseAvroSchema(s.Schema); err == nil {
			return "AVRO<" + n.String() + ">", true
		}
		return "AVRO", true
	}
	if ek, ok := primElem[s.Class]; ok {
		return map[kind]string{kBool: "BOOLEAN", kChar: "CHAR", kShort: "SMALLINT", kInt: "INT",
			kLong: "BIGINT", kFloat: "FLOAT", kDouble: "DOUBLE", kString: "STRING"}[ek] + "[]", true
	}
	if k, ok := builtinSimple[s.Class]; ok {
		switch k {
		case kStringValue:
			return "STRING", true
		case kBool:
			return "BOOLEAN", true
		case kByte:
			return "TINYINT", true
		case kChar:
			return "CHAR", true
		case kDouble:
			return "DOUBLE", true
		case kFloat:
			return "FLOAT", true
		case kShort:
			return "SMALLINT", true
		case kInt:
			return "INT", true
		case kLong:
			return "BIGINT", true
		}
	}
	return "", false
}

// buildBuiltin fills dc for the serializers above; false if s is not one.
func buildBuiltin(dc *decoder, s *Snapshot, depth int) bool {
	if k, ok := builtinSimple[s.Class]; ok {
		dc.k = k
		switch k {
		case kInt, kFloat:
			dc.n = 4
		case kLong, kDouble:
			dc.n = 8
		case kBool, kByte:
			dc.n = 1
		case kShort, kChar:
			dc.n = 2
		case kEventID:
			dc.n = 12
		case kPrimArray:
			dc.elem = primElem[s.Class]
		}
		return true
	}
	if s.Class == ClassEnum {
		dc.k, dc.n = kEnum, 4
		return true
	}
	if s.Class == ClassAvro {
		// Values decode when the writer schema parses; else they stay raw.
		if n, err := parseAvroSchema(s.Schema); err == nil {
			dc.k, dc.avro = kAvro, n
		}
		return true
	}
	c, ok := builtinComposite[s.Class]
	if !ok {
		return false
	}
	dc.kids = make([]*decoder, len(s.Nested))
	for i, n := range s.Nested {
		dc.kids[i] = build(n, depth+1)
	}
	if c.nested >= 0 && len(dc.kids) != c.nested {
		return true // stays raw
	}
	dc.k = c.k
	dc.mask = s.SupportsRowKind
	dc.n = int(s.PaddingLen)
	if dc.k != kNullable {
		dc.n = -1
	}
	if dc.k == kNullable {
		if dc.n > 0 {
			dc.n++ // padded nulls: fixed length 1 + padding
		} else {
			dc.n = -1
		}
	}
	return true
}

// Object is an ordered record of named values. JSON: an object whose keys
// keep their order.
type Object []PojoField

// MarshalJSON implements json.Marshaler.
func (o Object) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, f := range o {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(f.Name)
		v, err := json.Marshal(f.Value)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}

// Tagged is a value of a Flink-internal type, named by Tag. JSON:
// [tag, value], e.g. ["EventId", {"id": 3, "ts": 1000}] or ["Left", 7].
type Tagged struct {
	Tag   string
	Value Value
}

// MarshalJSON implements json.Marshaler.
func (t *Tagged) MarshalJSON() ([]byte, error) { return json.Marshal([]any{t.Tag, t.Value}) }

const maxBuiltinCount = 1 << 24

// decodeBuiltin decodes the data of the kinds above.
func (dc *decoder) decodeBuiltin(d *binfmt.Decbuf) Value {
	switch dc.k {
	case kEventID:
		id, ts := d.I32(), d.I64()
		return &Tagged{Tag: "EventId", Value: Object{{"id", id}, {"ts", ts}}}
	case kDewey:
		return decodeDewey(d)
	case kNodeID:
		return dc.decodeNodeID(d, dc.kids[0])
	case kSBEdge:
		target := dc.kids[0].Decode(d)
		version := dc.kids[1].Decode(d)
		return &Tagged{Tag: "SharedBufferEdge", Value: Object{{"target", target}, {"version", version}}}
	case kSBNode:
		n := d.Count("shared buffer edge", maxBuiltinCount, 4)
		edges := make(List, 0, min(n, d.Len()))
		for i := 0; i < n && d.Err() == nil; i++ {
			rc := d.I32()
			e := dc.kids[0].Decode(d)
			edges = append(edges, &Tagged{Tag: "Lockable", Value: Object{{"refCount", rc}, {"element", e}}})
		}
		return &Tagged{Tag: "SharedBufferNode", Value: Object{{"edges", edges}}}
	case kLockable:
		rc := d.I32()
		v := dc.kids[0].Decode(d)
		return &Tagged{Tag: "Lockable", Value: Object{{"refCount", rc}, {"element", v}}}
	case kNFAState:
		partial := dc.decodeComputationStates(d)
		completed := dc.decodeComputationStates(d)
		return &Tagged{Tag: "NFAState", Value: Object{{"partialMatches", partial}, {"completedMatches", completed}}}
	case kStreamElement:
		return dc.decodeStreamElement(d)
	case kEnum:
		at := d.Offset()
		o := d.I32()
		if d.Err() != nil {
			return nil
		}
		c := dc.snap.EnumConstants
		if o < 0 || int(o) >= len(c) {
			d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: enum ordinal %d of %d constants", binfmt.ErrCorrupt, o, len(c))})
			return nil
		}
		return c[o]
	case kEither:
		if d.Bool() {
			return &Tagged{Tag: "Left", Value: dc.kids[0].Decode(d)}
		}
		if d.Err() != nil {
			return nil
		}
		return &Tagged{Tag: "Right", Value: dc.kids[1].Decode(d)}
	case kNullable:
		if d.Bool() {
			if p := int(dc.snap.PaddingLen); p > 0 {
				d.Skip(p)
			}
			return nil
		}
		return dc.kids[0].Decode(d)
	case kOption:
		if !d.Bool() {
			return nil
		}
		return dc.kids[0].Decode(d)
	case kCaseClass:
		out := make(Tuple, len(dc.kids))
		for i, k := range dc.kids {
			out[i] = k.Decode(d)
		}
		return out
	case kJavaRow:
		return dc.decodeJavaRow(d)
	case kGenericArray:
		n := d.Count("array length", maxCollection, 1)
		out := make(List, 0, min(n, d.Len()))
		for i := 0; i < n && d.Err() == nil; i++ {
			if !d.Bool() {
				out = append(out, nil)
				continue
			}
			out = append(out, dc.kids[0].Decode(d))
		}
		return out
	case kPrimArray:
		return dc.decodePrimArray(d)
	case kStringValue:
		return decodeStringValueType(d)
	case kAvro:
		return decodeAvro(d, dc.avro, 0)
	}
	return nil
}

func decodeDewey(d *binfmt.Decbuf) Value {
	n := d.Count("dewey number digit", maxBuiltinCount, 4)
	var b strings.Builder
	for i := 0; i < n && d.Err() == nil; i++ {
		if i > 0 {
			b.WriteByte('.')
		}
		fmt.Fprint(&b, d.I32())
	}
	if d.Err() != nil {
		return nil
	}
	return b.String()
}

// decodeNodeID reads a NodeId (u8 presence flag, EventId, page name).
func (dc *decoder) decodeNodeID(d *binfmt.Decbuf, eventID *decoder) Value {
	at := d.Offset()
	switch f := d.U8(); {
	case d.Err() != nil:
		return nil
	case f == 0:
		return nil
	case f != 1:
		d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: NodeId flag 0x%02x", binfmt.ErrCorrupt, f)})
		return nil
	}
	ev := eventID.Decode(d)
	page, ok := readStringValue(d)
	if !ok {
		return nil
	}
	return &Tagged{Tag: "NodeId", Value: Object{{"eventId", ev}, {"page", page}}}
}

// decodeComputationStates reads one queue of NFA computation states. The
// nested serializers are [DeweyNumber, NodeId, EventId].
func (dc *decoder) decodeComputationStates(d *binfmt.Decbuf) Value {
	n := d.Count("computation state", maxBuiltinCount, 14)
	out := make(List, 0, min(n, d.Len()))
	for i := 0; i < n && d.Err() == nil; i++ {
		name, ok := readStringValue(d)
		if !ok {
			return nil
		}
		prev := dc.kids[1].Decode(d)
		version := dc.kids[0].Decode(d)
		start := d.I64()
		var prevTS Value
		if dc.snap.PrevTimestamp {
			prevTS = d.I64()
		}
		var ev Value
		at := d.Offset()
		switch f := d.U8(); {
		case d.Err() != nil:
		case f == 1:
			ev = dc.kids[2].Decode(d)
		case f != 0:
			d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: start event flag 0x%02x", binfmt.ErrCorrupt, f)})
		}
		o := Object{{"state", name}, {"previous", prev}, {"version", version}, {"start", start}}
		if dc.snap.PrevTimestamp {
			o = append(o, PojoField{"previousTimestamp", prevTS})
		}
		out = append(out, &Tagged{Tag: "ComputationState", Value: append(o, PojoField{"startEvent", ev})})
	}
	return out
}

// StreamElementSerializer tags (wire format).
const (
	seRecordTS = iota
	seRecord
	seWatermark
	seLatency
	seStatus
	seAttributes
	seInternalWM
)

func (dc *decoder) decodeStreamElement(d *binfmt.Decbuf) Value {
	at := d.Offset()
	tag := d.U8()
	if d.Err() != nil {
		return nil
	}
	switch tag {
	case seRecordTS:
		ts := d.I64()
		v := dc.kids[0].Decode(d)
		return &Tagged{Tag: "StreamRecord", Value: Object{{"ts", ts}, {"value", v}}}
	case seRecord:
		return &Tagged{Tag: "StreamRecord", Value: Object{{"value", dc.kids[0].Decode(d)}}}
	case seWatermark:
		return &Tagged{Tag: "Watermark", Value: d.I64()}
	case seLatency:
		t, lo, hi, st := d.I64(), d.I64(), d.I64(), d.I32()
		return &Tagged{Tag: "LatencyMarker", Value: Object{{"markedTime", t}, {"operatorId", fmt.Sprintf("%016x%016x", uint64(hi), uint64(lo))}, {"subtask", st}}}
	case seStatus:
		return &Tagged{Tag: "WatermarkStatus", Value: d.I32()}
	case seAttributes:
		return &Tagged{Tag: "RecordAttributes", Value: Object{{"backlog", d.Bool()}}}
	case seInternalWM:
		sp, ts := d.I32(), d.I64()
		return &Tagged{Tag: "InternalWatermark", Value: Object{{"subpartition", sp}, {"ts", ts}}}
	}
	d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: stream element tag %d", binfmt.ErrCorrupt, tag)})
	return nil
}

// decodeJavaRow reads RowSerializer data: the null mask (row kind bits
// first when supported), then the non-null fields.
func (dc *decoder) decodeJavaRow(d *binfmt.Decbuf) Value {
	off := 0
	if dc.mask {
		off = 2
	}
	bits := off + len(dc.kids)
	mb := d.Bytes((bits + 7) / 8)
	if d.Err() != nil {
		return nil
	}
	bit := func(i int) bool { return mb[i/8]&(0x80>>(i%8)) != 0 }
	r := &Row{Fields: make([]Value, len(dc.kids))}
	if dc.mask {
		if bit(0) {
			r.Kind |= 1
		}
		if bit(1) {
			r.Kind |= 2
		}
	}
	for i, k := range dc.kids {
		if bit(off + i) {
			continue
		}
		r.Fields[i] = k.Decode(d)
	}
	return r
}

func (dc *decoder) decodePrimArray(d *binfmt.Decbuf) Value {
	w := map[kind]int{kBool: 1, kChar: 2, kShort: 2, kInt: 4, kFloat: 4, kLong: 8, kDouble: 8, kString: 1}[dc.elem]
	n := d.Count("array length", maxCollection, w)
	out := make(List, 0, min(n, d.Len()))
	for i := 0; i < n && d.Err() == nil; i++ {
		switch dc.elem {
		case kBool:
			out = append(out, d.Bool())
		case kChar:
			out = append(out, Char(d.U16()))
		case kShort:
			out = append(out, d.I16())
		case kInt:
			out = append(out, d.I32())
		case kFloat:
			out = append(out, d.F32())
		case kLong:
			out = append(out, d.I64())
		case kDouble:
			out = append(out, d.F64())
		case kString:
			s, ok := readStringValue(d)
			if !ok {
				return nil
			}
			out = append(out, s)
		}
	}
	return out
}

// decodeStringValueType reads a StringValue written by StringValue.write:
// varint length (not +1: never null), then each char as a varint.
func decodeStringValueType(d *binfmt.Decbuf) Value {
	at := d.Offset()
	n, ok := readCharVarint(d)
	if !ok {
		return nil
	}
	if int64(n) > int64(d.Len()) || n > math.MaxInt32 {
		d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: string of %d chars, %d bytes left", binfmt.ErrTruncated, n, d.Len())})
		return nil
	}
	units := make([]uint16, n)
	for i := range units {
		c, ok := readCharVarint(d)
		if !ok {
			return nil
		}
		if c > 0xFFFF {
			d.Failf("string char 0x%x out of range", c)
			return nil
		}
		units[i] = uint16(c)
	}
	return string(utf16.Decode(units))
}
