package serde

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// enc builds big-endian DataOutput bytes.
type enc struct{ binfmt.Encbuf }

func (e *enc) i32(v int32) *enc  { e.PutI32(v); return e }
func (e *enc) i64(v int64) *enc  { e.PutI64(v); return e }
func (e *enc) u8(v byte) *enc    { e.PutU8(v); return e }
func (e *enc) bool(v bool) *enc  { e.PutBool(v); return e }
func (e *enc) utf(s string) *enc { _ = e.PutUTF(s); return e }

// sv appends an ASCII string in StringValue.writeString form (length+1).
func (e *enc) sv(s string) *enc {
	e.PutU8(byte(len(s) + 1))
	e.PutBytes([]byte(s))
	return e
}

func simple(class string) flinkwrite.SimpleSnapshot { return flinkwrite.SimpleSnapshot{Class: class} }

func composite(class string, outerVersion int32, outer []byte, nested ...flinkwrite.Snapshot) flinkwrite.CompositeSnapshot {
	return flinkwrite.CompositeSnapshot{Class: class, OuterVersion: outerVersion, Outer: outer, Nested: nested}
}

// rawSnap is a snapshot given as its versioned bytes.
func rawSnap(class string, version int32, body []byte) flinkwrite.RawSnapshot {
	return flinkwrite.RawSnapshot{Versioned: versionedBytes(class, version, body...)}
}

// parseWritten writes s with the project's writer, parses it back and
// checks the round trip is byte-identical.
func parseWritten(t testing.TB, s flinkwrite.Snapshot) *Snapshot {
	t.Helper()
	b, err := flinkwrite.AppendTopLevel(nil, s)
	if err != nil {
		t.Fatal(err)
	}
	got, n, err := ParseSnapshot(b, 100)
	if err != nil {
		t.Fatalf("%s: %v", s.ClassName(), err)
	}
	if n != len(b) {
		t.Fatalf("%s: consumed %d of %d bytes", s.ClassName(), n, len(b))
	}
	again, err := flinkwrite.AppendTopLevel(nil, flinkwrite.RawSnapshot{Versioned: got.Raw})
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("%s: re-written snapshot differs (%v)", s.ClassName(), err)
	}
	return got
}

func TestBuiltinSnapshotsDecode(t *testing.T) {
	eventID := simple(ClassEventID)
	dewey := simple(ClassDewey)
	nodeID := composite(ClassNodeID, 1, nil, eventID)
	edge := composite(ClassSBEdge, 1, nil, nodeID, dewey)
	long := flinkwrite.LongSnapshot
	str := flinkwrite.StringSnapshot
	enumBody := (&enc{}).utf("com.example.Color").i32(3).utf("RED").utf("GREEN").utf("BLUE").B
	pad := (&enc{}).i32(8).B

	node := func(e *enc, ts int64, page string) *enc { return e.u8(1).i32(0).i64(ts).sv(page) }
	cases := []struct {
		name string
		snap flinkwrite.Snapshot
		typ  string
		data []byte
		want string // JSON of the value; "" when the decode must fail
	}{
		{"event id", eventID, "EVENT_ID", (&enc{}).i32(3).i64(1000).B, `["EventId",{"id":3,"ts":1000}]`},
		{"dewey", dewey, "DEWEY_NUMBER", (&enc{}).i32(3).i32(1).i32(0).i32(2).B, `"1.0.2"`},
		{"node id", nodeID, "NODE_ID", node(&enc{}, 5, "A").B, `["NodeId",{"eventId":["EventId",{"id":0,"ts":5}],"page":"A"}]`},
		{"node id null", nodeID, "NODE_ID", []byte{0}, `null`},
		{"node id bad flag", nodeID, "NODE_ID", []byte{7}, ""},
		{"edge", edge, "SHARED_BUFFER_EDGE", node(&enc{}, 5, "A").i32(1).i32(4).B,
			`["SharedBufferEdge",{"target":["NodeId",{"eventId":["EventId",{"id":0,"ts":5}],"page":"A"}],"version":"4"}]`},
		{"lockable node", composite(ClassLockable, 1, nil, composite(ClassSBNode, 1, nil, edge)), "LOCKABLE<SHARED_BUFFER_NODE>",
			(&enc{}).i32(2).i32(1).i32(1).u8(0).i32(1).i32(3).B,
			`["Lockable",{"refCount":2,"element":["SharedBufferNode",{"edges":[["Lockable",{"refCount":1,"element":["SharedBufferEdge",{"target":null,"version":"3"}]}]]}]}]`},
		{"nfa state v1", composite(ClassNFAState, 1, nil, dewey, nodeID, eventID), "NFA_STATE",
			(&enc{}).i32(1).sv("B").u8(0).i32(1).i32(1).i64(-1).u8(0).i32(0).B,
			`["NFAState",{"partialMatches":[["ComputationState",{"state":"B","previous":null,"version":"1","start":-1,"startEvent":null}]],"completedMatches":[]}]`},
		{"nfa state v2", composite(ClassNFAState, 2, []byte{1}, dewey, nodeID, eventID), "NFA_STATE",
			node((&enc{}).i32(0).i32(1).sv("C"), 7, "A").i32(2).i32(3).i32(0).i64(7).i64(8).u8(1).i32(0).i64(7).B,
			`["NFAState",{"partialMatches":[],"completedMatches":[["ComputationState",{"state":"C","previous":["NodeId",{"eventId":["EventId",{"id":0,"ts":7}],"page":"A"}],"version":"3.0","start":7,"previousTimestamp":8,"startEvent":["EventId",{"id":0,"ts":7}]}]]}]`},
		{"stream record ts", composite(ClassStreamElement, 2, nil, long), "STREAM_ELEMENT<BIGINT>", (&enc{}).u8(0).i64(99).i64(5).B, `["StreamRecord",{"ts":99,"value":5}]`},
		{"stream record", composite(ClassStreamElement, 2, nil, long), "STREAM_ELEMENT<BIGINT>", (&enc{}).u8(1).i64(5).B, `["StreamRecord",{"value":5}]`},
		{"watermark", composite(ClassStreamElement, 2, nil, long), "STREAM_ELEMENT<BIGINT>", (&enc{}).u8(2).i64(42).B, `["Watermark",42]`},
		{"latency marker", composite(ClassStreamElement, 2, nil, long), "STREAM_ELEMENT<BIGINT>", (&enc{}).u8(3).i64(1).i64(2).i64(3).i32(4).B,
			`["LatencyMarker",{"markedTime":1,"operatorId":"00000000000000030000000000000002","subtask":4}]`},
		{"watermark status", composite(ClassStreamElement, 2, nil, long), "STREAM_ELEMENT<BIGINT>", (&enc{}).u8(4).i32(1).B, `["WatermarkStatus",1]`},
		{"record attributes", composite(ClassStreamElement, 2, nil, long), "STREAM_ELEMENT<BIGINT>", (&enc{}).u8(5).bool(true).B, `["RecordAttributes",{"backlog":true}]`},
		{"internal watermark", composite(ClassStreamElement, 2, nil, long), "STREAM_ELEMENT<BIGINT>", (&enc{}).u8(6).i32(2).i64(9).B, `["InternalWatermark",{"subpartition":2,"ts":9}]`},
		{"stream element bad tag", composite(ClassStreamElement, 2, nil, long), "STREAM_ELEMENT<BIGINT>", []byte{9}, ""},
		{"enum", rawSnap(ClassEnum, 3, enumBody), "ENUM<com.example.Color>", (&enc{}).i32(1).B, `"GREEN"`},
		{"enum out of range", rawSnap(ClassEnum, 3, enumBody), "ENUM<com.example.Color>", (&enc{}).i32(3).B, ""},
		{"either left", composite(ClassEither, 1, nil, long, str), "EITHER<BIGINT, STRING>", (&enc{}).bool(true).i64(7).B, `["Left",7]`},
		{"either right", composite(ClassEither, 1, nil, long, str), "EITHER<BIGINT, STRING>", (&enc{}).bool(false).sv("x").B, `["Right","x"]`},
		{"nullable padded null", composite(ClassNullable, 2, pad, long), "NULLABLE<BIGINT>", (&enc{}).bool(true).i64(0).B, `null`},
		{"nullable value", composite(ClassNullable, 2, pad, long), "NULLABLE<BIGINT>", (&enc{}).bool(false).i64(3).B, `3`},
		{"nullable short padding", composite(ClassNullable, 2, pad, long), "NULLABLE<BIGINT>", (&enc{}).bool(true).i32(0).B, ""},
		// Row kind +U (2): mask bits RK0=0 RK1=1, field 1 null: 0b01010000.
		{"java row with kind", composite(ClassJavaRow, 4, []byte{1}, long, str, long), "ROW<BIGINT, STRING, BIGINT>",
			(&enc{}).u8(0x50).i64(1).i64(2).B, `["+U",[1,null,2]]`},
		{"java row v3", composite(ClassJavaRow, 3, nil, long), "ROW<BIGINT>", (&enc{}).u8(0x80).i64(1).B, `["-U",[1]]`},
		{"java row legacy", composite(ClassJavaRow, 2, nil, long, str), "ROW<BIGINT, STRING>", (&enc{}).u8(0x80).sv("s").B, `["+I",[null,"s"]]`},
		{"scala case class", composite(ClassScalaCase, 2, (&enc{}).utf("com.example.P").B, long, str), "CASE_CLASS<com.example.P{BIGINT, STRING}>",
			(&enc{}).i64(1).sv("a").B, `[1,"a"]`},
		{"scala tuple2", composite(ClassScalaTuple2, 2, (&enc{}).utf("scala.Tuple2").B, str, long), "CASE_CLASS<scala.Tuple2{STRING, BIGINT}>",
			(&enc{}).sv("k").i64(2).B, `["k",2]`},
		{"scala option some", composite(ClassScalaOption, 1, nil, long), "OPTION<BIGINT>", (&enc{}).bool(true).i64(4).B, `4`},
		{"scala option none", composite(ClassScalaOption, 1, nil, long), "OPTION<BIGINT>", (&enc{}).bool(false).B, `null`},
		{"scala either", composite(ClassScalaEither, 1, nil, long, str), "EITHER<BIGINT, STRING>", (&enc{}).bool(false).sv("r").B, `["Right","r"]`},
		{"generic array", composite(ClassGenericArray, 1, (&enc{}).utf("java.lang.String").B, str), "ARRAY<STRING>",
			(&enc{}).i32(2).bool(false).bool(true).sv("x").B, `[null,"x"]`},
		{"int array", simple(arrayPkg + "IntPrimitiveArraySerializer$IntPrimitiveArraySerializerSnapshot"), "INT[]", (&enc{}).i32(2).i32(7).i32(-1).B, `[7,-1]`},
		{"double array", simple(arrayPkg + "DoublePrimitiveArraySerializer$DoublePrimitiveArraySerializerSnapshot"), "DOUBLE[]", (&enc{}).i32(1).i64(0x3ff8000000000000).B, `[1.5]`},
		{"boolean array", simple(arrayPkg + "BooleanPrimitiveArraySerializer$BooleanPrimitiveArraySerializerSnapshot"), "BOOLEAN[]", (&enc{}).i32(2).bool(true).bool(false).B, `[true,false]`},
		{"string array", simple(arrayPkg + "StringArraySerializer$StringArraySerializerSnapshot"), "STRING[]", (&enc{}).i32(2).sv("a").u8(0).B, `["a",null]`},
		{"array count too large", simple(arrayPkg + "LongPrimitiveArraySerializer$LongPrimitiveArraySerializerSnapshot"), "BIGINT[]", (&enc{}).i32(1 << 30).i64(1).B, ""},
		{"string value", simple(basePkg + "StringValueSerializer$StringValueSerializerSnapshot"), "STRING", []byte{2, 'o', 'k'}, `"ok"`},
		{"boolean value", simple(basePkg + "BooleanValueSerializer$BooleanValueSerializerSnapshot"), "BOOLEAN", []byte{1}, `true`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := parseWritten(t, c.snap)
			if got := s.String(); got != c.typ {
				t.Errorf("type %q, want %q", got, c.typ)
			}
			dec := NewDecoder(s)
			if !dec.Supported() {
				t.Fatal("decoder not supported")
			}
			v, err := DecodeAll(dec, c.data, 0)
			if c.want == "" {
				if err == nil {
					t.Fatalf("decoded %s, want an error", jsonOf(t, v))
				}
				var oe *binfmt.OffsetError
				if !errors.As(err, &oe) {
					t.Fatalf("error without offset: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonOf(t, v); got != c.want {
				t.Errorf("value %s\nwant        %s", got, c.want)
			}
			// Skip consumes exactly what Decode does.
			d := binfmt.New(c.data, 0)
			dec.Skip(d)
			if d.Err() != nil || d.Len() != 0 {
				t.Errorf("skip: err %v, %d bytes left", d.Err(), d.Len())
			}
		})
	}
}

func TestBuiltinSnapshotFields(t *testing.T) {
	s := parseWritten(t, rawSnap(ClassEnum, 3, (&enc{}).utf("a.E").i32(2).utf("X").utf("Y").B))
	if s.TypeClass != "a.E" || strings.Join(s.EnumConstants, ",") != "X,Y" {
		t.Fatalf("enum snapshot %+v", s)
	}
	if _, _, err := ParseSnapshot(append([]byte{0, 0, 0, 2}, versionedBytes(ClassEnum, 2)...), 0); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("enum v2: %v", err)
	}
	s = parseWritten(t, composite(ClassNullable, 2, (&enc{}).i32(8).B, flinkwrite.LongSnapshot))
	if s.PaddingLen != 8 || NewDecoder(s).Len() != 9 {
		t.Fatalf("nullable padding %d, length %d", s.PaddingLen, NewDecoder(s).Len())
	}
	if _, _, err := ParseSnapshot(mustTop(t, composite(ClassNullable, 2, (&enc{}).i32(-1).B, flinkwrite.LongSnapshot)), 0); err == nil {
		t.Fatal("negative padding accepted")
	}
	s = parseWritten(t, composite(ClassJavaRow, 4, []byte{0}, flinkwrite.LongSnapshot))
	if s.SupportsRowKind {
		t.Fatal("row kind flag false read as true")
	}
	s = parseWritten(t, composite(ClassNFAState, 2, []byte{0}, simple(ClassDewey), composite(ClassNodeID, 1, nil, simple(ClassEventID)), simple(ClassEventID)))
	if s.PrevTimestamp {
		t.Fatal("previous-timestamp flag false read as true")
	}
	// A composite of the wrong arity is rejected (CEP snapshots fix it).
	if _, _, err := ParseSnapshot(mustTop(t, composite(ClassNodeID, 1, nil)), 0); err == nil {
		t.Fatal("NodeId snapshot without its EventId serializer accepted")
	}
	s = parseWritten(t, rawSnap(ClassAvro, 2, (&enc{}).utf("com.example.User").utf(`{"type":"record","name":"User","fields":[]}`).B))
	if s.String() != "AVRO<com.example.User>" || !strings.Contains(s.Schema, `"name":"User"`) || !NewDecoder(s).Supported() {
		t.Fatalf("avro snapshot %q %q", s.String(), s.Schema)
	}
	s = parseWritten(t, rawSnap(ClassAvro, 1, (&enc{}).utf(`"string"`).B))
	if s.Schema != `"string"` || s.String() != "AVRO<STRING>" {
		t.Fatalf("avro v1 %q %q", s.String(), s.Schema)
	}
	// A schema that does not parse leaves the values raw.
	s = parseWritten(t, rawSnap(ClassAvro, 1, (&enc{}).utf(`{"type":"record"`).B))
	if NewDecoder(s).Supported() || s.String() != "AVRO" {
		t.Fatalf("bad avro schema: %q", s.String())
	}
	s = parseWritten(t, rawSnap(ClassValue, 2, (&enc{}).utf("com.example.MyValue").B))
	if s.String() != "VALUE<com.example.MyValue>" || NewDecoder(s).Supported() {
		t.Fatalf("value snapshot %q", s.String())
	}
	s = parseWritten(t, rawSnap(ClassCopyableValue, 2, (&enc{}).utf("com.example.C").B))
	if s.TypeClass != "com.example.C" {
		t.Fatalf("copyable value snapshot %+v", s)
	}
}

func mustTop(t testing.TB, s flinkwrite.Snapshot) []byte {
	t.Helper()
	b, err := flinkwrite.AppendTopLevel(nil, s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// builtinSeeds are snapshot/data pairs of the serializers of builtin.go.
func builtinSeeds(t testing.TB) [][2][]byte {
	eventID := simple(ClassEventID)
	dewey := simple(ClassDewey)
	nodeID := composite(ClassNodeID, 1, nil, eventID)
	edge := composite(ClassSBEdge, 1, nil, nodeID, dewey)
	long := flinkwrite.LongSnapshot
	return [][2][]byte{
		{mustTop(t, composite(ClassNFAState, 2, []byte{1}, dewey, nodeID, eventID)), (&enc{}).i32(1).sv("A").u8(0).i32(1).i32(1).i64(1).i64(2).u8(0).i32(0).B},
		{mustTop(t, composite(ClassLockable, 1, nil, composite(ClassSBNode, 1, nil, edge))), (&enc{}).i32(1).i32(1).i32(1).u8(0).i32(1).i32(3).B},
		{mustTop(t, composite(ClassStreamElement, 2, nil, long)), (&enc{}).u8(0).i64(1).i64(2).B},
		{mustTop(t, rawSnap(ClassEnum, 3, (&enc{}).utf("a.E").i32(1).utf("X").B)), (&enc{}).i32(0).B},
		{mustTop(t, composite(ClassNullable, 2, (&enc{}).i32(8).B, long)), (&enc{}).bool(true).i64(0).B},
		{mustTop(t, composite(ClassJavaRow, 4, []byte{1}, long, long)), (&enc{}).u8(0x20).i64(1).B},
		{mustTop(t, composite(ClassGenericArray, 1, (&enc{}).utf("x").B, long)), (&enc{}).i32(1).bool(true).i64(1).B},
		{mustTop(t, simple(arrayPkg+"StringArraySerializer$StringArraySerializerSnapshot")), (&enc{}).i32(1).sv("a").B},
		{append([]byte{0, 0, 0, 2}, legacyCompositeBytes(t, "org.apache.flink.api.common.typeutils.base.MapSerializerConfigSnapshot", "x.M", flinkwrite.StringSnapshot, flinkwrite.LongSnapshot)...),
			(&enc{}).i32(1).sv("k").bool(false).i64(9).B},
		{mustTop(t, rawSnap(ClassAvro, 1, (&enc{}).utf(`{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":["null","R"]}},{"name":"m","type":{"type":"map","values":"long"}}]}`).B)),
			(&enc{}).u8(1).i32(1).u8(0).u8(0).u8(0).u8(0).B},
	}
}

// FuzzBuiltinDecoders decodes arbitrary data with the decoders of
// builtin.go (and arbitrary snapshots near theirs): never a panic, errors
// carry offsets.
func FuzzBuiltinDecoders(f *testing.F) {
	for _, s := range builtinSeeds(f) {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, snap, data []byte) {
		s, _, err := ParseSnapshot(snap, 0)
		if err != nil {
			return
		}
		_ = s.String()
		dec := NewDecoder(s)
		if _, err := DecodeAll(dec, data, 0); err != nil {
			var oe *binfmt.OffsetError
			if !errors.As(err, &oe) {
				t.Fatalf("error without offset: %v", err)
			}
		}
		d := binfmt.New(data, 0)
		dec.Skip(d)
	})
}

// avroStr appends a string as Flink's DataOutputEncoder writes it.
func (e *enc) avroStr(s string) *enc { e.PutI32(int32(len(s))); e.PutBytes([]byte(s)); return e }

func TestAvroValues(t *testing.T) {
	const schema = `{"type":"record","name":"User","namespace":"com.example","fields":[
		{"name":"id","type":"long"},
		{"name":"name","type":"string"},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"scores","type":{"type":"map","values":"int"}},
		{"name":"nick","type":["null","string"]},
		{"name":"color","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
		{"name":"hash","type":{"type":"fixed","name":"H","size":2}},
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"next","type":["null","User"]},
		{"name":"ok","type":"boolean"},
		{"name":"w","type":"double"}]}`
	s := parseWritten(t, rawSnap(ClassAvro, 2, (&enc{}).utf("com.example.User").utf(schema).B))
	dec := NewDecoder(s)
	if !dec.Supported() {
		t.Fatal("avro decoder not supported")
	}
	user := func(e *enc, id int64, next bool) *enc {
		e.i64(id).avroStr("ann")
		e.u8(2).avroStr("a").avroStr("b").u8(0) // one block of 2, then the end
		e.u8(1).avroStr("x").i32(7).u8(0)
		e.i32(1).avroStr("annie")
		e.i32(1)
		e.u8(0xAB).u8(0xCD)
		e.i64(1700000000000)
		if next {
			e.i32(1)
			return e
		}
		e.i32(0).bool(true).i64(0x4000000000000000)
		return e
	}
	data := user(user(&enc{}, 1, true), 2, false).bool(false).i64(0).B
	v, err := DecodeAll(dec, data, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":1,"name":"ann","tags":["a","b"],"scores":[{"key":"x","value":7}],"nick":"annie","color":"GREEN","hash":"q80=","ts":1700000000000,` +
		`"next":{"id":2,"name":"ann","tags":["a","b"],"scores":[{"key":"x","value":7}],"nick":"annie","color":"GREEN","hash":"q80=","ts":1700000000000,"next":null,"ok":true,"w":2},` +
		`"ok":false,"w":0}`
	if got := jsonOf(t, v); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// Corrupt data: a union branch out of range, a huge block count.
	for _, bad := range [][]byte{
		(&enc{}).i64(1).avroStr("a").u8(0).u8(0).i32(5).B,
		(&enc{}).i64(1).avroStr("a").u8(0xff).u8(0xff).u8(0xff).u8(0x7f).B,
	} {
		if _, err := DecodeAll(dec, bad, 0); err == nil {
			t.Fatalf("corrupt avro data %x decoded", bad)
		}
	}
	// Null items are bounded by count.
	s = parseWritten(t, rawSnap(ClassAvro, 1, (&enc{}).utf(`{"type":"array","items":"null"}`).B))
	if _, err := DecodeAll(NewDecoder(s), []byte{0xff, 0xff, 0xff, 0x7f, 0}, 0); err == nil {
		t.Fatal("2^28 nulls accepted")
	}
	if v, err := DecodeAll(NewDecoder(s), []byte{3, 0}, 0); err != nil || jsonOf(t, v) != "[null,null,null]" {
		t.Fatalf("three nulls: %v %v", v, err)
	}
}

// javaObject is a minimal Java serialization stream of an object of class
// with no fields.
func javaObject(class string) []byte {
	var e binfmt.Encbuf
	e.PutBytes([]byte{0xac, 0xed, 0x00, 0x05, 0x73, 0x72})
	_ = e.PutUTF(class)
	e.PutI64(1)
	e.PutBytes([]byte{0x02, 0x00, 0x00, 0x78, 0x70})
	return e.B
}

// legacyComposite writes a legacy CompositeTypeSerializerConfigSnapshot
// through Flink's adapter, nested pairs "with resilience".
func legacyCompositeBytes(t testing.TB, class, serializer string, nested ...flinkwrite.Snapshot) []byte {
	var buf, offs enc
	for i, n := range nested {
		offs.i32(int32(len(buf.B)))
		js := javaObject(fmt.Sprintf("com.example.NestedSerializer%d", i))
		buf.i32(1).i32(int32(len(js))).PutBytes(js)
		offs.i32(int32(len(buf.B)))
		buf.PutBytes(mustTop(t, n))
	}
	js := javaObject(serializer)
	e := (&enc{}).utf(class).i32(AdapterVersion).i32(1).i32(int32(len(js)))
	e.PutBytes(js)
	e.i32(1).i32(int32(len(nested)))
	e.PutBytes(offs.B)
	e.i32(int32(len(buf.B)))
	e.PutBytes(buf.B)
	return e.B
}

func TestLegacyCompositeConfigSnapshot(t *testing.T) {
	b := legacyCompositeBytes(t, "org.apache.flink.api.common.typeutils.base.MapSerializerConfigSnapshot",
		"org.apache.flink.api.common.typeutils.base.MapSerializer", flinkwrite.StringSnapshot, flinkwrite.LongSnapshot)
	s, n, err := ParseSnapshot(append([]byte{0, 0, 0, 2}, b...), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(b)+4 || !s.Is(ClassMap) || s.TypeClass != "org.apache.flink.api.common.typeutils.base.MapSerializer" || s.String() != "MAP<STRING, BIGINT>" {
		t.Fatalf("n %d/%d, %q, %s", n, len(b)+4, s.TypeClass, s)
	}
	v, err := DecodeAll(NewDecoder(s), (&enc{}).i32(1).sv("k").bool(false).i64(9).B, 0)
	if err != nil || jsonOf(t, v) != `[{"key":"k","value":9}]` {
		t.Fatalf("%v %v", jsonOf(t, v), err)
	}
	// An offset outside the nested bytes is an error, not a panic.
	m := len(mustTop(t, flinkwrite.StringSnapshot)) + len(mustTop(t, flinkwrite.LongSnapshot)) + 2*(8+len(javaObject("com.example.NestedSerializer0")))
	bad := append([]byte{}, b...)
	binary.BigEndian.PutUint32(bad[len(bad)-m-8:], 0x7fffffff) // the last offset
	if _, _, err := ParseSnapshot(append([]byte{0, 0, 0, 2}, bad...), 0); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("offset outside the nested bytes: %v", err)
	}
	// A legacy Row snapshot: no row kind in the mask.
	b = legacyCompositeBytes(t, "org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerConfigSnapshot",
		"org.apache.flink.api.java.typeutils.runtime.RowSerializer", flinkwrite.LongSnapshot)
	s, _, err = ParseSnapshot(append([]byte{0, 0, 0, 2}, b...), 0)
	if err != nil || s.String() != "ROW<BIGINT>" {
		t.Fatalf("row: %v %v", s, err)
	}
	if v, err := DecodeAll(NewDecoder(s), (&enc{}).u8(0).i64(5).B, 0); err != nil || jsonOf(t, v) != `["+I",[5]]` {
		t.Fatalf("row value %v %v", v, err)
	}
}
