package keyed

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// unknownSnap is a snapshot of a class no reader knows, with body bytes.
func unknownSnap(class string, body ...byte) flinkwrite.RawSnapshot {
	var e binfmt.Encbuf
	_ = e.PutUTF(class)
	e.PutI32(1)
	e.PutBytes(body)
	return flinkwrite.RawSnapshot{Versioned: e.B}
}

func mustHeader(t testing.TB, h flinkwrite.Header) []byte {
	t.Helper()
	b, err := flinkwrite.AppendHeader(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decoyBody looks like the start of the next serializer record
// (NAMESPACE_SERIALIZER, proxy version 2, a snapshot class) but is part of
// the unknown snapshot's body: only a parse to the header end tells.
func decoyBody() []byte {
	var e binfmt.Encbuf
	_ = e.PutUTF("configPayload")
	_ = e.PutUTF("NAMESPACE_SERIALIZER")
	e.PutI32(2)
	_ = e.PutUTF(serde.ClassVoid)
	e.PutI32(3)
	e.PutI32(-1)
	return e.B
}

func resyncHeader(t testing.TB, key flinkwrite.Snapshot) ([]byte, []byte) {
	t.Helper()
	body := decoyBody()
	void := flinkwrite.VoidNamespaceSnapshot
	h := flinkwrite.Header{KeySerializer: key, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("custom", flinkwrite.KindValue, void, unknownSnap("com.example.Custom$Snapshot", body...)),
		flinkwrite.KeyedStateMeta("known", flinkwrite.KindMap, void, flinkwrite.MapSnapshot(flinkwrite.StringSnapshot, flinkwrite.LongSnapshot)),
		flinkwrite.KeyedStateMeta("tail", flinkwrite.KindList, unknownSnap("com.example.Ns$Snapshot", 1, 2, 3), flinkwrite.ListSnapshot(flinkwrite.LongSnapshot)),
	}}
	return mustHeader(t, h), body
}

func TestParseHeaderWithinResyncs(t *testing.T) {
	b, body := resyncHeader(t, flinkwrite.LongSnapshot)
	if _, _, err := ParseHeader(b, "f"); !errors.Is(err, serde.ErrUnknownSnapshot) {
		t.Fatalf("without the end: %v, want ErrUnknownSnapshot", err)
	}
	h, n, err := ParseHeaderWithin(b, "f", len(b))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(b) || len(h.States) != 3 || h.KeyPartial != "" {
		t.Fatalf("n %d of %d, %d states, key partial %q", n, len(b), len(h.States), h.KeyPartial)
	}
	custom, known, tail := h.States[0], h.States[1], h.States[2]
	if custom.Partial == "" || !strings.Contains(custom.Partial, "com.example.Custom$Snapshot") || !strings.Contains(custom.Partial, "VALUE_SERIALIZER") {
		t.Fatalf("custom partial %q", custom.Partial)
	}
	if !custom.Value.Opaque || custom.Value.Class != "com.example.Custom$Snapshot" || custom.Value.Version != 1 {
		t.Fatalf("custom value %+v", custom.Value)
	}
	if want := unknownSnap("com.example.Custom$Snapshot", body...).Versioned; !bytes.Equal(custom.Value.Raw, want) {
		t.Fatalf("opaque raw %x, want %x", custom.Value.Raw, want)
	}
	if custom.Namespace == nil || custom.Namespace.Class != serde.ClassVoid || custom.valDec.Supported() {
		t.Fatal("custom: namespace not read after the resync, or value decoder not raw")
	}
	if known.Partial != "" || known.UserKey.Class != serde.ClassString || !known.uvDec.Supported() {
		t.Fatalf("known state: partial %q", known.Partial)
	}
	if tail.Partial == "" || !strings.Contains(tail.Partial, "NAMESPACE_SERIALIZER") || tail.Element == nil || tail.Element.Class != serde.ClassLong {
		t.Fatalf("tail state: partial %q, element %v", tail.Partial, tail.Element)
	}
	if got := custom.Value.String(); got != "UNKNOWN(Custom)" {
		t.Fatalf("opaque type %q", got)
	}
	// The end must be exact: a header whose last record is known does not
	// resynchronise onto an end one byte short.
	void := flinkwrite.VoidNamespaceSnapshot
	short := mustHeader(t, flinkwrite.Header{KeySerializer: flinkwrite.LongSnapshot, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("custom", flinkwrite.KindValue, void, unknownSnap("com.example.Custom$Snapshot", decoyBody()...)),
		flinkwrite.KeyedStateMeta("known", flinkwrite.KindValue, void, flinkwrite.LongSnapshot),
	}})
	if _, _, err := ParseHeaderWithin(short, "f", len(short)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ParseHeaderWithin(short, "f", len(short)-1); err == nil {
		t.Fatal("a header parsed to an end one byte short")
	}
	// ReadHeaderWithin gives the same header.
	h2, n2, err := ReadHeaderWithin(bytes.NewReader(append(append([]byte{}, b...), 9, 9, 9)), "f", int64(len(b)))
	if err != nil || n2 != int64(n) || len(h2.States) != 3 || h2.States[0].Partial != custom.Partial {
		t.Fatalf("ReadHeaderWithin: %v", err)
	}
}

func TestParseHeaderWithinUnknownKeySerializer(t *testing.T) {
	b, _ := resyncHeader(t, unknownSnap("com.example.Key$Snapshot", 0, 0, 0, 1))
	h, _, err := ParseHeaderWithin(b, "f", len(b))
	if err != nil {
		t.Fatal(err)
	}
	if h.KeyPartial == "" || !h.KeySerializer.Opaque || len(h.States) != 3 || h.KeyDecoder().Supported() {
		t.Fatalf("key partial %q, %d states", h.KeyPartial, len(h.States))
	}
	for _, m := range h.States {
		if m.Partial == "" {
			t.Fatalf("state %q not partial under an unknown key serializer", m.Name)
		}
	}
	// A header with no states after the unknown key serializer.
	b = mustHeader(t, flinkwrite.Header{KeySerializer: unknownSnap("com.example.Key$Snapshot", 7)})
	h, _, err = ParseHeaderWithin(b, "f", len(b))
	if err != nil || len(h.States) != 0 || h.KeyPartial == "" {
		t.Fatalf("no states: %v", err)
	}
}

func TestParseHeaderWithinKnownHeaderUnchanged(t *testing.T) {
	data, _, _ := sqlStream(false, 128, 1, 1)
	h1, n1, err := ReadHeader(bytes.NewReader(data), "f")
	if err != nil {
		t.Fatal(err)
	}
	h2, n2, err := ParseHeaderWithin(data, "f", int(n1))
	if err != nil || n2 != int(n1) || !bytes.Equal(h1.Raw, h2.Raw) || len(h1.States) != len(h2.States) {
		t.Fatalf("within: %v", err)
	}
	for i := range h1.States {
		if h2.States[i].Partial != "" || h1.States[i].Value.String() != h2.States[i].Value.String() {
			t.Fatalf("state %d differs", i)
		}
	}
	// An end inside the header falls back to the plain parse's error
	// path in ReadHeaderWithin (so offsets inside the header are found).
	if _, _, err := ReadHeaderWithin(bytes.NewReader(data), "f", 9); err != nil {
		t.Fatalf("end inside the header: %v", err)
	}
}

// operatorHeaderBytes is an operator-state header (proxy version 6) with
// the given list and broadcast states.
func operatorHeaderBytes(t testing.TB, list, bcast []flinkwrite.StateMetaInfo) []byte {
	t.Helper()
	b, err := flinkwrite.AppendOperatorHeader(nil, false, list, bcast)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func opMeta(name, mode string, ser ...flinkwrite.NamedSnapshot) flinkwrite.StateMetaInfo {
	typ := flinkwrite.OperatorState
	if mode == "BROADCAST" {
		typ = flinkwrite.BroadcastState
	}
	return flinkwrite.StateMetaInfo{Name: name, Type: typ, Options: []flinkwrite.Option{{Key: "OPERATOR_STATE_DISTRIBUTION_MODE", Value: mode}}, Serializers: ser}
}

func TestParseOperatorHeaderWithinResyncs(t *testing.T) {
	b := operatorHeaderBytes(t,
		[]flinkwrite.StateMetaInfo{
			opMeta("queue", "SPLIT_DISTRIBUTE", flinkwrite.NamedSnapshot{Key: "VALUE_SERIALIZER", Snapshot: unknownSnap("com.example.Q$Snapshot", decoyBody()...)}),
			opMeta("offsets", "UNION", flinkwrite.NamedSnapshot{Key: "VALUE_SERIALIZER", Snapshot: flinkwrite.LongSnapshot}),
		},
		[]flinkwrite.StateMetaInfo{opMeta("rules", "BROADCAST",
			flinkwrite.NamedSnapshot{Key: "KEY_SERIALIZER", Snapshot: flinkwrite.StringSnapshot},
			flinkwrite.NamedSnapshot{Key: "VALUE_SERIALIZER", Snapshot: unknownSnap("com.example.Rule$Snapshot", 5)})})
	if _, _, err := ParseOperatorHeader(b, "op"); err == nil {
		t.Fatal("plain parse succeeded")
	}
	h, n, err := ParseOperatorHeaderWithin(b, "op", len(b))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(b) || len(h.States) != 2 || len(h.Broadcast) != 1 {
		t.Fatalf("n %d/%d, %d list, %d broadcast states", n, len(b), len(h.States), len(h.Broadcast))
	}
	if h.States[0].Partial == "" || h.States[1].Partial != "" || h.Broadcast[0].Partial == "" || h.Broadcast[0].Key.Class != serde.ClassString {
		t.Fatalf("partial: %q %q %q", h.States[0].Partial, h.States[1].Partial, h.Broadcast[0].Partial)
	}
	// Compressed stream: the Snappy identifier sits between header and
	// first offset.
	c := append([]byte{}, b...)
	c[4] = 1
	c = append(c, 0xff, 0x06, 0x00, 0x00, 's', 'N', 'a', 'P', 'p', 'Y')
	h, n, err = ParseOperatorHeaderWithin(c, "op", len(c))
	if err != nil || n != len(b) || !h.Compressed || h.States[0].Partial == "" {
		t.Fatalf("compressed: n %d, %v", n, err)
	}
}

// fixtureMoreStream reads a file of a ../shared/flink-fixtures-more
// savepoint.
func fixtureMoreStream(t testing.TB, dir, file string) []byte {
	t.Helper()
	root := filepath.Join(fixtures.Require(t), "..", "flink-fixtures-more")
	b, err := os.ReadFile(filepath.Join(root, dir, "savepoint", file))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return b
}

// TestUserSerializerFixtureHeader reads the header of Flink 1.16's
// savepoint whose value serializer is a test-only snapshot class.
func TestUserSerializerFixtureHeader(t *testing.T) {
	fixtureMoreStream(t, "flink1.16-rocksdb-canonical-user-serializer", "_metadata")
	m0 := readTestMetadata(t, filepath.Join("..", "flink-fixtures-more", "flink1.16-rocksdb-canonical-user-serializer"))
	var data []byte
	end := 0
	for _, op := range m0.operators {
		for _, st := range op.subtasks {
			if st.keyed == nil {
				continue
			}
			data = st.keyed.stream.bytes(t)
			for _, off := range st.keyed.offsets {
				if off > 0 && (end == 0 || int(off) < end) {
					end = int(off)
				}
			}
		}
	}
	if data == nil || end == 0 {
		t.Fatal("no keyed handle with offsets")
	}
	if _, _, err := ParseHeader(data, "f"); !errors.Is(err, serde.ErrUnknownSnapshot) {
		t.Fatalf("plain parse: %v", err)
	}
	h, n, err := ParseHeaderWithin(data, "f", end)
	if err != nil {
		t.Fatal(err)
	}
	if n != end || len(h.States) != 1 || h.KeySerializer.String() != "TUPLE<BIGINT>" {
		t.Fatalf("n %d, %d states, key %s", n, len(h.States), h.KeySerializer)
	}
	m := h.States[0]
	if m.Name != "testState" || m.Kind != "VALUE" || m.Partial == "" || m.Namespace.Class != serde.ClassVoid {
		t.Fatalf("state %q kind %s partial %q", m.Name, m.Kind, m.Partial)
	}
	const class = "org.apache.flink.test.migration.TypeSerializerSnapshotMigrationITCase$TestSerializerSnapshot"
	if !m.Value.Opaque || m.Value.Class != class {
		t.Fatalf("value %+v", m.Value)
	}
	// Its body is the UTF "configPayload".
	var want binfmt.Encbuf
	_ = want.PutUTF(class)
	want.PutI32(1)
	_ = want.PutUTF("configPayload")
	if !bytes.Equal(m.Value.Raw, want.B) {
		t.Fatalf("opaque bytes %q", m.Value.Raw)
	}
}

// TestFlink19HeapHeaders parses the keyed headers of Flink 1.9's heap
// savepoint, which sit inline in its version-2 _metadata: each byte stream
// handle's data is preceded by its i32 length.
func TestFlink19HeapHeaders(t *testing.T) {
	md := fixtureMoreStream(t, "flink1.9-heap-savepoint-metadata-v2", "_metadata")
	start := []byte{0, 0, 0, 6, 0, 0, 0, 0, 2}
	found := 0
	for i := bytes.Index(md, start); i >= 4; {
		l := int(int32(uint32(md[i-4])<<24 | uint32(md[i-3])<<16 | uint32(md[i-2])<<8 | uint32(md[i-1])))
		if l <= 0 || i+l > len(md) {
			t.Fatalf("stream at %d: length %d", i, l)
		}
		data := md[i : i+l]
		h, n, err := ParseHeader(data, "inline")
		if err != nil {
			t.Fatalf("header at %d: %v", i, err)
		}
		if h.KeySerializer.String() != "TUPLE<BIGINT>" || len(h.States) == 0 {
			t.Fatalf("header at %d: key %s, states %v", i, h.KeySerializer, h.StateNames())
		}
		for _, m := range h.States {
			if m.Name == "state-name" && (m.Kind != "VALUE" || m.Value.String() != "BIGINT") {
				t.Fatalf("state-name: %s %s", m.Kind, m.Value)
			}
		}
		// The same bytes with the value snapshot class renamed (same
		// length) to one no reader knows: resynchronised within the end.
		cp := append([]byte{}, data[:n]...)
		j := bytes.LastIndex(cp, []byte("LongSerializer$LongSerializerSnapshot"))
		copy(cp[j:], "LongSerializer$XxxxSerializerSnapshot")
		if _, _, err := ParseHeader(cp, "inline"); err == nil {
			t.Fatal("renamed class parsed")
		}
		h2, n2, err := ParseHeaderWithin(cp, "inline", n)
		if err != nil || n2 != n || len(h2.States) != len(h.States) {
			t.Fatalf("renamed class at %d: %v", i, err)
		}
		partial := 0
		for _, m := range h2.States {
			if m.Partial != "" {
				partial++
			}
		}
		if partial != 1 || h2.KeyPartial != "" {
			t.Fatalf("renamed class at %d: %d partial states, key partial %q", i, partial, h2.KeyPartial)
		}
		found++
		k := bytes.Index(md[i+l:], start)
		if k < 0 {
			break
		}
		i += l + k
	}
	if found == 0 {
		t.Fatal("no keyed header found")
	}
}

// FuzzParseHeaderWithin resynchronises on fuzzed headers: never a panic
// or a hang, and a success consumes exactly what it reports.
func FuzzParseHeaderWithin(f *testing.F) {
	b, _ := resyncHeader(f, flinkwrite.LongSnapshot)
	f.Add(b, len(b))
	k, _ := resyncHeader(f, unknownSnap("com.example.Key$Snapshot", 1))
	f.Add(k, len(k))
	data, _, _ := sqlStream(false, 128, 1, 1)
	if _, n, err := ReadHeader(bytes.NewReader(data), "s"); err == nil {
		f.Add(data[:n], int(n))
	}
	if d := fixtures.Dir(); d != "" {
		if u, err := os.ReadFile(filepath.Join(d, "..", "flink-fixtures-more", "flink1.16-rocksdb-canonical-user-serializer", "savepoint", "eb314510-40b9-4516-918c-b65b9eb580f4")); err == nil {
			f.Add(u, 538)
		}
	}
	fuzzSeedsFromFixtures(f, func(h []byte, _ [][]byte, _ int) { f.Add(h, len(h)) })
	if d := fixtures.Dir(); d != "" {
		// The CEP header (inline in its _metadata), cut at its first offset.
		if _, err := os.Stat(filepath.Join(d, "..", "flink-fixtures-more", "sql-rocksdb-canonical-cep-match")); err == nil {
			m := readTestMetadata(f, filepath.Join("..", "flink-fixtures-more", "sql-rocksdb-canonical-cep-match"))
			for _, op := range m.operators {
				for _, st := range op.subtasks {
					if st.keyed == nil {
						continue
					}
					data := st.keyed.stream.bytes(f)
					for _, off := range st.keyed.offsets {
						if off > 0 && int(off) <= len(data) {
							f.Add(data[:off], int(off))
							break
						}
					}
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, end int) {
		h, n, err := ParseHeaderWithin(b, "fuzz", end)
		if err == nil && (n > len(b) || len(h.Raw) != n) {
			t.Fatal("bad header length")
		}
		_, _, _ = ParseOperatorHeaderWithin(b, "fuzz", end)
	})
}

// TestResyncBounded: a body full of bytes that look like the next record
// makes every position a candidate; the search stays bounded.
func TestResyncBounded(t *testing.T) {
	rec := []byte{0, 1, 'A', 0, 0, 0, 2, 0, 1, 'B', 0, 0, 0, 3}
	body := bytes.Repeat(rec, (4<<20)/len(rec))
	b := mustHeader(t, flinkwrite.Header{KeySerializer: flinkwrite.LongSnapshot, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("s", flinkwrite.KindValue, unknownSnap("a.N", body...), unknownSnap("a.V", body...)),
	}})
	start := time.Now()
	_, _, err := ParseHeaderWithin(b, "f", len(b))
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("resynchronisation took %v", d)
	}
	t.Logf("%d-byte header: %v (%v)", len(b), err, time.Since(start))
}

// legacySnap is a legacy TypeSerializerConfigSnapshot written through
// Flink's adapter: the serializer Java-serialized, then the config
// snapshot's own (unframed) body.
func legacySnap(configClass, serializerClass string, body ...byte) flinkwrite.RawSnapshot {
	var js binfmt.Encbuf
	js.PutBytes([]byte{0xac, 0xed, 0x00, 0x05, 0x73, 0x72})
	_ = js.PutUTF(serializerClass)
	js.PutI64(42)                         // serialVersionUID
	js.PutBytes([]byte{0x02, 0x00, 0x00}) // SC_SERIALIZABLE, no fields
	js.PutBytes([]byte{0x78, 0x70})       // end of annotations, no superclass
	var e binfmt.Encbuf
	_ = e.PutUTF(configClass)
	e.PutI32(serde.AdapterVersion)
	e.PutI32(1)
	e.PutI32(int32(len(js.B)))
	e.PutBytes(js.B)
	e.PutI32(1) // config snapshot version
	e.PutBytes(body)
	return flinkwrite.RawSnapshot{Versioned: e.B}
}

func TestLegacyConfigSnapshotResync(t *testing.T) {
	var body binfmt.Encbuf
	_ = body.PutUTF("com.example.Payload")
	void := flinkwrite.VoidNamespaceSnapshot
	b := mustHeader(t, flinkwrite.Header{KeySerializer: flinkwrite.LongSnapshot, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("old", flinkwrite.KindValue, void, legacySnap("com.example.MyConfigSnapshot", "com.example.MySerializer", body.B...)),
	}})
	_, _, err := ParseHeader(b, "f")
	if !errors.Is(err, serde.ErrUnsupported) || !strings.Contains(err.Error(), "com.example.MySerializer") {
		t.Fatalf("plain parse: %v", err)
	}
	h, _, err := ParseHeaderWithin(b, "f", len(b))
	if err != nil {
		t.Fatal(err)
	}
	m := h.States[0]
	if m.Partial == "" || m.Value.String() != "LEGACY(com.example.MySerializer)" || m.Namespace.Class != serde.ClassVoid {
		t.Fatalf("partial %q, value %s", m.Partial, m.Value)
	}
}
