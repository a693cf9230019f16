package flinkwrite

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
)

func mustTuple(t *testing.T, class string, fields ...Snapshot) Snapshot {
	t.Helper()
	s, err := TupleSnapshot(class, fields...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStandaloneSnapshotsMatchFixtures compares generated top-level
// snapshots with the serializer-snapshot files Flink 1.20's upgrade tests
// wrote.
func TestStandaloneSnapshotsMatchFixtures(t *testing.T) {
	cases := map[string]Snapshot{
		"int-serializer-1.20":                 IntSnapshot,
		"long-serializer-1.20":                LongSnapshot,
		"string-serializer-1.20":              StringSnapshot,
		"list-serializer-1.20":                ListSnapshot(StringSnapshot),
		"map-serializer-1.20":                 MapSnapshot(IntSnapshot, StringSnapshot),
		"tuple-serializer-1.20":               mustTuple(t, "org.apache.flink.api.java.tuple.Tuple3", StringSnapshot, StringSnapshot, IntSnapshot),
		"void-namespace-serializer-1.20":      VoidNamespaceSnapshot,
		"ttl-serializer-1.20":                 TtlSnapshot(StringSnapshot),
		"ttl-aware-serializer-ttl-value-1.20": TtlAwareSnapshot{TtlEnabled: true, Inner: TtlSnapshot(StringSnapshot)},
		"timer-serializer-1.20":               TimerSnapshot(StringSnapshot, IntSnapshot),
		"time-window-serializer-1.20":         TimeWindowSnapshot,
	}
	for dir, s := range cases {
		t.Run(dir, func(t *testing.T) {
			want := readFixture(t, "serializer-snapshots-1.20", dir, "serializer-snapshot")
			got, err := AppendTopLevel(nil, s)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("snapshot differs at byte %d:\n got %q\nwant %q", firstDiff(got, want), got, want)
			}
			// The same bytes kept raw are re-emitted verbatim.
			raw := RawSnapshot{Versioned: want[4:]}
			if raw.ClassName() != s.ClassName() || raw.Version() != s.Version() {
				t.Fatalf("raw snapshot reports %s v%d", raw.ClassName(), raw.Version())
			}
			again, err := AppendTopLevel(nil, raw)
			if err != nil || !bytes.Equal(again, want) {
				t.Fatalf("raw re-emit differs: %v", err)
			}
		})
	}
}

// TestTestDataMatchesFixtures encodes the test-data values of the
// standalone fixtures.
func TestTestDataMatchesFixtures(t *testing.T) {
	cases := map[string][]byte{
		"int-serializer-1.20":            AppendInt(nil, 123456),
		"long-serializer-1.20":           AppendLong(nil, 1234567890),
		"list-serializer-1.20":           AppendListSerializer(nil, AppendStringValue(nil, "Apache"), AppendStringValue(nil, "Flink")),
		"void-namespace-serializer-1.20": AppendVoidNamespace(nil),
		"time-window-serializer-1.20":    AppendTimeWindow(nil, 12345, 67890),
		"ttl-serializer-1.20":            AppendTtlValue(nil, 13, AppendStringValue(nil, "hello Gordon")),
		"tuple-serializer-1.20":          append(append(AppendStringValue(nil, "hello Gordon"), AppendStringValue(nil, "ciao")...), AppendInt(nil, 14)...),
		"map-serializer-1.20": AppendMapSerializer(nil,
			MapSerializerEntry{AppendInt(nil, 0), AppendStringValue(nil, "0")},
			MapSerializerEntry{AppendInt(nil, 1), AppendStringValue(nil, "1")},
			MapSerializerEntry{AppendInt(nil, 2), AppendStringValue(nil, "2")}),
	}
	for dir, got := range cases {
		want := readFixture(t, "serializer-snapshots-1.20", dir, "test-data")
		if !bytes.Equal(got, want) {
			t.Errorf("%s: got %x want %x", dir, got, want)
		}
	}
	// Timer element: sign-flipped timestamp, key, namespace (after the
	// key-group prefix, which the test data lacks).
	want := readFixture(t, "serializer-snapshots-1.20", "timer-serializer-1.20", "test-data")
	key, err := AppendTimerKey(nil, 0, 1, 12345, AppendStringValue(nil, "key"), AppendInt(nil, 678))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(key[1:], want) {
		t.Errorf("timer: got %x want %x", key[1:], want)
	}
	// StringValue of the 36-character string.
	want = readFixture(t, "serializer-snapshots-1.20", "string-serializer-1.20", "test-data")
	if got := AppendStringValue(nil, string(want[1:])); !bytes.Equal(got, want) {
		t.Errorf("string: got %x want %x", got, want)
	}
}

func TestStringValueEncoding(t *testing.T) {
	cases := []struct {
		s    string
		want []byte
	}{
		{"", []byte{0x01}},
		{"key", []byte{0x04, 'k', 'e', 'y'}},
		{"é", []byte{0x02, 0xE9, 0x01}},                                  // U+00E9 as a 2-byte varint
		{"€", []byte{0x02, 0xAC, 0x41}},                                  // U+20AC: two varint bytes
		{"\U0001F600", []byte{0x03, 0xBD, 0xB0, 0x03, 0x80, 0xBC, 0x03}}, // surrogate pair D83D DE00
	}
	for _, c := range cases {
		if got := AppendStringValue(nil, c.s); !bytes.Equal(got, c.want) {
			t.Errorf("%q: got %x want %x", c.s, got, c.want)
		}
	}
	long := strings.Repeat("a", 200)
	if got := AppendStringValue(nil, long); got[0] != 0xC9 || got[1] != 0x01 || len(got) != 202 {
		t.Errorf("length 200: prefix %x", got[:2])
	}
}

func TestSnapshotErrors(t *testing.T) {
	if _, err := AppendTopLevel(nil, nil); !errors.Is(err, ErrSnapshot) {
		t.Errorf("nil snapshot: %v", err)
	}
	if _, err := AppendTopLevel(nil, RawSnapshot{Versioned: []byte{0, 1}}); !errors.Is(err, ErrSnapshot) {
		t.Errorf("short raw snapshot: %v", err)
	}
	if _, err := AppendTopLevel(nil, RowDataSnapshot{Types: []LogicalType{IntType{true}}, Nested: []Snapshot{}}); !errors.Is(err, ErrSnapshot) {
		t.Errorf("mismatched nested: %v", err)
	}
	if _, err := AppendTopLevel(nil, RowDataSnapshot{Types: []LogicalType{ArrayType{true, IntType{true}}}}); !errors.Is(err, ErrSnapshot) {
		t.Errorf("array field: %v", err)
	}
	var deep Snapshot = IntSnapshot
	for range maxSnapshotDepth + 2 {
		deep = ListSnapshot(deep)
	}
	if _, err := AppendTopLevel(nil, deep); !errors.Is(err, ErrSnapshot) {
		t.Errorf("deep nesting: %v", err)
	}
	if _, err := TupleSnapshot(strings.Repeat("x", 70000)); !errors.Is(err, ErrSnapshot) {
		t.Errorf("long tuple class: %v", err)
	}
}

// TestRowDataDerivedSerializers checks InternalSerializers' choices.
func TestRowDataDerivedSerializers(t *testing.T) {
	cases := []struct {
		typ  LogicalType
		want Snapshot
	}{
		{BooleanType{true}, BooleanSnapshot}, {TinyIntType{true}, ByteSnapshot},
		{SmallIntType{true}, ShortSnapshot}, {IntType{true}, IntSnapshot},
		{DateType{true}, IntSnapshot}, {TimeType{true, 0}, IntSnapshot},
		{BigIntType{true}, LongSnapshot}, {FloatType{true}, FloatSnapshot},
		{DoubleType{true}, DoubleSnapshot}, {CharType{true, 3}, StringDataSnapshot},
		{VarCharType{true, 3}, StringDataSnapshot}, {BinaryType{true, 3}, BytesSnapshot},
		{VarBinaryType{true, 3}, BytesSnapshot},
		{DecimalType{true, 10, 2}, DecimalDataSnapshot{10, 2}},
		{TimestampType{true, 6, ""}, TimestampDataSnapshot{6}},
		{LocalZonedTimestampType{true, 3, ""}, TimestampDataSnapshot{3}},
	}
	for _, c := range cases {
		got, err := c.typ.InternalSerializer()
		if err != nil {
			t.Fatal(err)
		}
		a, _ := AppendVersioned(nil, got)
		b, _ := AppendVersioned(nil, c.want)
		if !bytes.Equal(a, b) {
			t.Errorf("%T: got %s", c.typ, got.ClassName())
		}
	}
	// A nested ROW field becomes a nested RowDataSerializer snapshot.
	row := RowType{true, []RowField{{Name: "x", Type: IntType{true}}}}
	s, err := row.InternalSerializer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AppendTopLevel(nil, RowDataSnapshot{Types: []LogicalType{row}}); err != nil {
		t.Fatal(err)
	}
	if s.ClassName() != (RowDataSnapshot{}).ClassName() {
		t.Errorf("row field serializer %s", s.ClassName())
	}
}

// TestRowFieldTypesBuildFixtureRow builds the groupagg fixture's
// accumulator row [2, 4, 2, "Hello"] from the header's logical types and
// finds its serialized bytes in the fixture.
func TestRowFieldTypesBuildFixtureRow(t *testing.T) {
	types := []LogicalType{BigIntType{true}, BigIntType{true}, BigIntType{true}, VarCharType{true, 1<<31 - 1}}
	fts, err := RowFieldTypes(types)
	if err != nil {
		t.Fatal(err)
	}
	row, err := keygroups.BuildRow(fts, []any{int64(2), int64(4), int64(2), "Hello"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := AppendRowData(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(sqlMetadata(t, "sql-rocksdb-canonical-groupagg-valuestate"), v) {
		t.Fatalf("row %x not in fixture", v)
	}
	all := []LogicalType{BooleanType{}, TinyIntType{}, SmallIntType{}, IntType{}, BigIntType{}, FloatType{}, DoubleType{},
		CharType{Length: 1}, VarCharType{Length: 1}, BinaryType{Length: 1}, VarBinaryType{Length: 1}, DateType{},
		TimeType{}, TimestampType{Precision: 6}, LocalZonedTimestampType{Precision: 3}, DecimalType{Precision: 20, Scale: 2}}
	if _, err := RowFieldTypes(all); err != nil {
		t.Fatal(err)
	}
	if _, err := RowFieldTypes([]LogicalType{RowType{}}); !errors.Is(err, ErrValue) {
		t.Fatalf("nested row: %v", err)
	}
	if _, err := AppendRowData(nil, make([]byte, 12)); !errors.Is(err, ErrValue) {
		t.Fatalf("unaligned row: %v", err)
	}
}

func TestLogicalTypeOfInvertsRowFieldTypes(t *testing.T) {
	fts := []keygroups.FieldType{keygroups.TypeBoolean, keygroups.TypeTinyInt, keygroups.TypeSmallInt, keygroups.TypeInt,
		keygroups.TypeBigInt, keygroups.TypeFloat, keygroups.TypeDouble, keygroups.TypeString, keygroups.TypeBytes,
		keygroups.TypeDate, keygroups.TypeTime, keygroups.TypeTimestamp(6), keygroups.TypeTimestampLTZ(3), keygroups.TypeDecimal(12, 3)}
	var lts []LogicalType
	for _, ft := range fts {
		lt, err := LogicalTypeOf(ft, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := EncodeLogicalType(lt); err != nil {
			t.Fatalf("%v: %v", ft, err)
		}
		lts = append(lts, lt)
	}
	back, err := RowFieldTypes(lts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fts {
		if back[i] != fts[i] {
			t.Errorf("%v came back as %v", fts[i], back[i])
		}
	}
	if _, err := LogicalTypeOf(keygroups.FieldType{}, true); !errors.Is(err, ErrValue) {
		t.Errorf("invalid kind: %v", err)
	}
}
