package serde

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSerializerSnapshotPairs(t *testing.T) {
	cases := []struct {
		dir, class, typ, value string
	}{
		{"int-serializer-1.20", ClassInt, "INT", `123456`},
		{"long-serializer-1.20", ClassLong, "BIGINT", `1234567890`},
		{"string-serializer-1.20", ClassString, "STRING", `"123456789012345678901234567890123456"`},
		{"list-serializer-1.20", ClassList, "LIST<STRING>", `["Apache","Flink"]`},
		{"map-serializer-1.20", ClassMap, "MAP<INT, STRING>", `[{"key":0,"value":"0"},{"key":1,"value":"1"},{"key":2,"value":"2"}]`},
		{"tuple-serializer-1.20", ClassTuple, "TUPLE<STRING, STRING, INT>", `["hello Gordon","ciao",14]`},
		{"void-namespace-serializer-1.20", ClassVoid, "VOID_NAMESPACE", `["void",0]`},
		{"ttl-serializer-1.20", ClassTTL, "TTL<STRING>", `["TtlValue",{"lastAccess":13,"value":"hello Gordon"}]`},
		{"ttl-aware-serializer-ttl-value-1.20", ClassTTLAware, "TTL_AWARE<TTL<STRING>>", `["TtlValue",{"lastAccess":13,"value":"hello Gordon"}]`},
		{"timer-serializer-1.20", ClassTimer, "TIMER<STRING, INT>", `["Timer",{"key":"key","ns":678,"ts":12345}]`},
		{"time-window-serializer-1.20", ClassTimeWindow, "TIME_WINDOW", `["TimeWindow",{"end":67890,"start":12345}]`},
	}
	for _, c := range cases {
		t.Run(c.dir, func(t *testing.T) {
			snapBytes, err := os.ReadFile(fixtures.Path(t, "serializer-snapshots-1.20", c.dir, "serializer-snapshot"))
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(fixtures.Path(t, "serializer-snapshots-1.20", c.dir, "test-data"))
			if err != nil {
				t.Fatal(err)
			}
			s, n, err := ParseSnapshot(snapBytes, 0)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(snapBytes) {
				t.Fatalf("consumed %d of %d bytes", n, len(snapBytes))
			}
			if !bytes.Equal(s.Raw, snapBytes[4:]) {
				t.Fatal("Raw is not the versioned snapshot bytes")
			}
			if s.Class != c.class || s.String() != c.typ {
				t.Fatalf("class %s type %s", s.Class, s.String())
			}
			dec := NewDecoder(s)
			if !dec.Supported() {
				t.Fatal("decoder unsupported")
			}
			v, err := DecodeAll(dec, data, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonOf(t, v); got != c.value {
				t.Fatalf("value %s, want %s", got, c.value)
			}
			// Skip must consume exactly what Decode consumes.
			d := binfmt.New(data, 0)
			dec.Skip(d)
			if d.Err() != nil || d.Len() != 0 {
				t.Fatalf("skip: err %v, %d left", d.Err(), d.Len())
			}
			// Every truncation is an error, never a panic.
			for i := 0; i < len(snapBytes); i++ {
				if _, _, err := ParseSnapshot(snapBytes[:i], 0); err == nil {
					t.Fatalf("snapshot prefix %d parsed", i)
				}
			}
			for i := 0; i < len(data); i++ {
				if _, err := DecodeAll(dec, data[:i], 0); err == nil && c.dir != "list-serializer-1.20" {
					t.Fatalf("data prefix %d decoded", i)
				}
			}
		})
	}
}

func TestUnknownSnapshotClass(t *testing.T) {
	var e binfmt.Encbuf
	e.PutI32(2)
	_ = e.PutUTF("com.example.MySerializerSnapshot")
	e.PutI32(1)
	e.PutI32(42)
	_, _, err := ParseSnapshot(e.B, 1000)
	var oe *binfmt.OffsetError
	if !errors.Is(err, ErrUnknownSnapshot) || !errors.As(err, &oe) || oe.Offset != 1004 || !strings.Contains(err.Error(), "com.example.MySerializerSnapshot") {
		t.Fatalf("err = %v", err)
	}
}

func TestStringValueNonASCII(t *testing.T) {
	// "é€" = U+00E9 (2-byte varint) and U+20AC (2-byte varint); length 2+1.
	s := "é€𝄞"
	var e []byte
	put := func(v uint32) {
		for v >= 0x80 {
			e = append(e, byte(v)|0x80)
			v >>= 7
		}
		e = append(e, byte(v))
	}
	units := []uint16{0xE9, 0x20AC, 0xD834, 0xDD1E}
	put(uint32(len(units) + 1))
	for _, u := range units {
		put(uint32(u))
	}
	v, err := DecodeAll(NewDecoder(&Snapshot{Class: ClassString}), e, 0)
	if err != nil || v != s {
		t.Fatalf("got %q %v", v, err)
	}
	v, err = DecodeAll(NewDecoder(&Snapshot{Class: ClassString}), []byte{0}, 0)
	if err != nil || v != nil {
		t.Fatalf("null string: %v %v", v, err)
	}
}

// buildRow lays out a BinaryRowData the way Flink's BinaryRowWriter does.
type rowBuilder struct {
	fixed, vari []byte
	w           int
}

func newRowBuilder(arity int, kind keygroups.RowKind) *rowBuilder {
	w := keygroups.NullBitsWidth(arity)
	r := &rowBuilder{fixed: make([]byte, w+8*arity), w: w}
	r.fixed[0] = byte(kind)
	return r
}

func (r *rowBuilder) slot(i int) []byte { return r.fixed[r.w+8*i : r.w+8*i+8] }
func (r *rowBuilder) null(i int)        { r.fixed[(i+8)>>3] |= 1 << ((i + 8) & 7) }
func (r *rowBuilder) long(i int, v int64) {
	binary.LittleEndian.PutUint64(r.slot(i), uint64(v))
}
func (r *rowBuilder) bytes(i int, b []byte) {
	if len(b) <= 7 {
		s := r.slot(i)
		copy(s, b)
		s[7] = 0x80 | byte(len(b))
		return
	}
	off := len(r.fixed) + len(r.vari)
	r.vari = append(r.vari, b...)
	for len(r.vari)%8 != 0 {
		r.vari = append(r.vari, 0)
	}
	binary.LittleEndian.PutUint64(r.slot(i), uint64(off)<<32|uint64(len(b)))
}
func (r *rowBuilder) done() []byte { return append(append([]byte{}, r.fixed...), r.vari...) }

func TestBinaryRowAllTypes(t *testing.T) {
	types := []*LogicalType{
		{Root: "BOOLEAN"}, {Root: "TINYINT"}, {Root: "SMALLINT"}, {Root: "INTEGER"}, {Root: "BIGINT"},
		{Root: "FLOAT"}, {Root: "DOUBLE"}, {Root: "VARCHAR", Length: 1<<31 - 1}, {Root: "VARCHAR", Length: 1<<31 - 1},
		{Root: "VARBINARY", Length: 10}, {Root: "DECIMAL", Precision: 10, Scale: 2}, {Root: "DECIMAL", Precision: 30, Scale: 3},
		{Root: "TIMESTAMP_WITHOUT_TIME_ZONE", Precision: 3}, {Root: "TIMESTAMP_WITHOUT_TIME_ZONE", Precision: 9},
		{Root: "DATE"}, {Root: "INTEGER"},
	}
	r := newRowBuilder(len(types), keygroups.UpdateAfter)
	r.slot(0)[0] = 1
	r.slot(1)[0] = 0xFE
	binary.LittleEndian.PutUint16(r.slot(2), 0xFFFD)
	binary.LittleEndian.PutUint32(r.slot(3), 123456)
	r.long(4, -5)
	binary.LittleEndian.PutUint32(r.slot(5), 0x3FC00000) // 1.5
	binary.LittleEndian.PutUint64(r.slot(6), 0x4004000000000000)
	r.bytes(7, []byte("Hello"))
	r.bytes(8, []byte("a longer string"))
	r.bytes(9, []byte{1, 2, 3})
	r.long(10, 12345)
	// DECIMAL(30,3) -1234.567 → unscaled -1234567 big-endian in 16 bytes region.
	unscaled := big.NewInt(-1234567)
	be := []byte{0xED, 0x29, 0x79} // two's complement of -1234567
	if signedBig(be).Cmp(unscaled) != 0 {
		t.Fatal("test vector wrong")
	}
	off := len(r.fixed) + len(r.vari)
	r.vari = append(r.vari, append(be, make([]byte, 13)...)...)
	binary.LittleEndian.PutUint64(r.slot(11), uint64(off)<<32|uint64(len(be)))
	r.long(12, 1602288030000)
	off = len(r.fixed) + len(r.vari)
	r.vari = binary.LittleEndian.AppendUint64(r.vari, 1602288030001)
	binary.LittleEndian.PutUint64(r.slot(13), uint64(off)<<32|999999)
	binary.LittleEndian.PutUint32(r.slot(14), 18000)
	r.null(15)
	row := r.done()
	data := binary.BigEndian.AppendUint32(nil, uint32(len(row)))
	data = append(data, row...)

	dec := NewDecoder(&Snapshot{Class: ClassRowData, Types: types, Nested: make([]*Snapshot, len(types))})
	v, err := DecodeAll(dec, data, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := `["+U",[true,-2,-3,123456,-5,1.5,2.5,"Hello","a longer string","AQID",["decimal","123.45"],["decimal","-1234.567"],["ts_millis",1602288030000],["ts",1602288030001,999999],18000,null]]`
	if got := jsonOf(t, v); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// Corrupt a variable-length slot so that it points outside the row.
	bad := append([]byte{}, data...)
	binary.LittleEndian.PutUint64(bad[4+r.w+8*8:], uint64(4096)<<32|16)
	if _, err := DecodeAll(dec, bad, 100); err == nil || !strings.Contains(err.Error(), "outside row") {
		t.Fatalf("corrupt slot: %v", err)
	}
	// Bad row kind.
	bad = append([]byte{}, data...)
	bad[4] = 9
	if _, err := DecodeAll(dec, bad, 0); err == nil {
		t.Fatal("bad row kind accepted")
	}
	// Row too short for its arity.
	if _, err := DecodeAll(dec, []byte{0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0}, 0); err == nil {
		t.Fatal("short row accepted")
	}
}

func TestRawDecoderNeverFails(t *testing.T) {
	s := &Snapshot{Class: ClassArrayData}
	dec := NewDecoder(s)
	if dec.Supported() {
		t.Fatal("ArrayData decoder claims support")
	}
	v, err := DecodeAll(dec, []byte{1, 2, 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := jsonOf(t, v); got != `{"decoded":false,"raw":"AQID","serializer":"`+ClassArrayData+`"}` {
		t.Fatal(got)
	}
}

func TestBinaryRowArraysAndMaps(t *testing.T) {
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	// ARRAY<INT> [1, NULL, 3]
	intArr := append(le32(3), 0x02, 0, 0, 0)
	intArr = append(intArr, le32(1)...)
	intArr = append(intArr, le32(0)...)
	intArr = append(intArr, le32(3)...)
	// ARRAY<STRING> ["a", "a longer string"]
	strArr := append(le32(2), 0, 0, 0, 0)
	strArr = append(strArr, 'a', 0, 0, 0, 0, 0, 0, 0x81)
	strArr = append(strArr, le64(24<<32|15)...)
	strArr = append(strArr, "a longer string\x00"...)
	// MAP<STRING, BIGINT> {"k": 5}
	keys := append(le32(1), 0, 0, 0, 0)
	keys = append(keys, 'k', 0, 0, 0, 0, 0, 0, 0x81)
	vals := append(le32(1), 0, 0, 0, 0)
	vals = append(vals, le64(5)...)
	m := append(le32(uint32(len(keys))), keys...)
	m = append(m, vals...)

	types := []*LogicalType{
		{Root: "ARRAY", Element: &LogicalType{Root: "INTEGER"}},
		{Root: "ARRAY", Element: &LogicalType{Root: "VARCHAR", Length: 1<<31 - 1}},
		{Root: "MAP", Key: &LogicalType{Root: "VARCHAR", Length: 1<<31 - 1}, Value: &LogicalType{Root: "BIGINT"}},
	}
	r := newRowBuilder(len(types), keygroups.Insert)
	r.bytes(0, intArr)
	r.bytes(1, strArr)
	r.bytes(2, m)
	row := r.done()
	data := append(binary.BigEndian.AppendUint32(nil, uint32(len(row))), row...)
	dec := NewDecoder(&Snapshot{Class: ClassRowData, Types: types, Nested: make([]*Snapshot, len(types))})
	v, err := DecodeAll(dec, data, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := `["+I",[[1,null,3],["a","a longer string"],[{"key":"k","value":5}]]]`
	if got := jsonOf(t, v); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	// An element count that does not fit is corruption.
	bad := append([]byte{}, data...)
	i := bytes.Index(bad, intArr)
	bad[i] = 0xFF
	if _, err := DecodeAll(dec, bad, 0); err == nil || !strings.Contains(err.Error(), "array") {
		t.Fatalf("bad array: %v", err)
	}
}

func TestZeroWidthListBounded(t *testing.T) {
	// LIST<TUPLE<>> claiming 2^27 elements in 4 bytes.
	s := &Snapshot{Class: ClassList, Nested: []*Snapshot{{Class: ClassTuple}}}
	_, err := DecodeAll(NewDecoder(s), []byte{0x08, 0, 0, 0}, 0)
	if err == nil || !strings.Contains(err.Error(), "zero-width") {
		t.Fatalf("err = %v", err)
	}
}

func pojoSnapshotBytes(t testing.TB, fieldSnaps map[string][]byte, order []string) []byte {
	var body binfmt.Encbuf
	_ = body.PutUTF("com.example.Event")
	optMap := func(names []string, vals map[string][]byte) {
		body.PutI64(LinkedOptionalMapHeader)
		body.PutI32(int32(len(names)))
		for _, n := range names {
			_ = body.PutUTF(n)
			body.PutBool(true) // key frame: field name + declaring class
			var k binfmt.Encbuf
			_ = k.PutUTF(n)
			_ = k.PutUTF("com.example.Event")
			body.PutI32(int32(len(k.B)))
			body.PutBytes(k.B)
			v, ok := vals[n]
			body.PutBool(ok)
			if ok {
				body.PutI32(int32(len(v)))
				body.PutBytes(v)
			}
		}
	}
	optMap(order, fieldSnaps)
	optMap(nil, nil)
	optMap(nil, nil)
	var e binfmt.Encbuf
	e.PutI32(2)
	_ = e.PutUTF(ClassPojo)
	e.PutI32(2)
	e.PutBytes(body.B)
	return e.B
}

func versionedBytes(class string, version int32, body ...byte) []byte {
	var e binfmt.Encbuf
	_ = e.PutUTF(class)
	e.PutI32(version)
	e.PutBytes(body)
	return e.B
}

func TestPojoAndKryoSnapshots(t *testing.T) {
	snap := pojoSnapshotBytes(t, map[string][]byte{
		"id":   versionedBytes(ClassLong, 3),
		"name": versionedBytes(ClassString, 3),
	}, []string{"id", "name"})
	s, n, err := ParseSnapshot(snap, 0)
	if err != nil || n != len(snap) {
		t.Fatalf("parse: %v (%d of %d)", err, n, len(snap))
	}
	if got := s.String(); got != "POJO<com.example.Event{id BIGINT, name STRING}>" {
		t.Fatal(got)
	}
	dec := NewDecoder(s)
	if !dec.Supported() {
		t.Fatal("pojo decoder unsupported")
	}
	data := []byte{pojoNoSubclass, 0, 0, 0, 0, 0, 0, 0, 0, 42, 0, 4, 'a', 'b', 'c'}
	v, err := DecodeAll(dec, data, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := jsonOf(t, v); got != `{"@class":"com.example.Event","id":42,"name":"abc"}` {
		t.Fatal(got)
	}
	v, err = DecodeAll(dec, []byte{pojoNoSubclass, 1, 0, 4, 'a', 'b', 'c'}, 0)
	if err != nil || jsonOf(t, v) != `{"@class":"com.example.Event","id":null,"name":"abc"}` {
		t.Fatalf("null field: %v %v", jsonOf(t, v), err)
	}
	if v, err := DecodeAll(dec, []byte{pojoIsNull}, 0); err != nil || v != nil {
		t.Fatalf("null pojo: %v %v", v, err)
	}
	if v, err := DecodeAll(dec, []byte{pojoIsSubclass, 0, 1, 'X'}, 0); err != nil || v.(*Raw) == nil {
		t.Fatalf("subclass: %v %v", v, err)
	}

	// A field with an unknown serializer snapshot stays parseable (the
	// frame delimits it) but makes the POJO data opaque.
	snap = pojoSnapshotBytes(t, map[string][]byte{
		"id":    versionedBytes(ClassLong, 3),
		"other": versionedBytes("com.example.CustomSnapshot", 1, 1, 2, 3),
	}, []string{"id", "other"})
	s, _, err = ParseSnapshot(snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Nested[1].Opaque || s.Nested[1].Class != "com.example.CustomSnapshot" || NewDecoder(s).Supported() {
		t.Fatalf("opaque field: %+v", s.Nested[1])
	}

	// Kryo: type class and three optional maps (one CLASS registration,
	// no default serializers, one default serializer class).
	var kb binfmt.Encbuf
	kb.PutI32(2)
	_ = kb.PutUTF(ClassKryo)
	kb.PutI32(2)
	_ = kb.PutUTF("com.example.Thing")
	frame := func(parts ...string) {
		var f binfmt.Encbuf
		for _, p := range parts {
			_ = f.PutUTF(p)
		}
		kb.PutI32(int32(len(f.B)))
		kb.PutBytes(f.B)
	}
	kb.PutI64(LinkedOptionalMapHeader)
	kb.PutI32(1)
	_ = kb.PutUTF("com.example.Reg")
	kb.PutBool(true)
	frame("com.example.Reg")
	kb.PutBool(true)
	var reg binfmt.Encbuf
	_ = reg.PutUTF("com.example.Reg")
	reg.PutI32(1)
	_ = reg.PutUTF("com.example.RegSerializer")
	kb.PutI32(int32(len(reg.B)))
	kb.PutBytes(reg.B)
	kb.PutI64(LinkedOptionalMapHeader)
	kb.PutI32(0)
	kb.PutI64(LinkedOptionalMapHeader)
	kb.PutI32(1)
	_ = kb.PutUTF("com.example.Other")
	kb.PutBool(true)
	frame("com.example.Other")
	kb.PutBool(false)
	s, n, err = ParseSnapshot(kb.B, 0)
	if err != nil || n != len(kb.B) || s.String() != "KRYO<com.example.Thing>" || NewDecoder(s).Supported() {
		t.Fatalf("kryo: %v %d %s", err, n, s)
	}
}

func TestLinkedListNullMask(t *testing.T) {
	snap := func(outerVersion int32, outer []byte) []byte {
		var e binfmt.Encbuf
		e.PutI32(2)
		_ = e.PutUTF(ClassLinkedList)
		e.PutI32(3)
		e.PutI32(CompositeMagic)
		e.PutI32(outerVersion)
		e.PutBytes(outer)
		e.PutI32(NestedMagic)
		e.PutI32(1)
		e.PutI32(1)
		_ = e.PutUTF(ClassInt)
		e.PutI32(3)
		return e.B
	}
	// [7, null, 9]: size 3, mask 0b010_00000, then the two non-null ints.
	masked := []byte{0, 0, 0, 3, 0x40, 0, 0, 0, 7, 0, 0, 0, 9}
	plain := []byte{0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 9}
	for _, c := range []struct {
		outerVersion int32
		outer        []byte
		data         []byte
		want         string
	}{
		{1, nil, plain, `[7,9]`},
		{2, nil, masked, `[7,null,9]`},
		{3, []byte{1}, masked, `[7,null,9]`},
		{3, []byte{0}, plain, `[7,9]`},
	} {
		s, n, err := ParseSnapshot(snap(c.outerVersion, c.outer), 0)
		if err != nil || n != len(snap(c.outerVersion, c.outer)) {
			t.Fatalf("outer %d: %v", c.outerVersion, err)
		}
		v, err := DecodeAll(NewDecoder(s), c.data, 0)
		if err != nil || jsonOf(t, v) != c.want {
			t.Fatalf("outer %d: %s %v", c.outerVersion, jsonOf(t, v), err)
		}
	}
}
