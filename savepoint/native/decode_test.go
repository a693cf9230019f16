package native

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/sfstate/sfstate/checkpoint/manifest"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

const testMaxPar = 256 // two-byte key-group prefix

// testHandle builds a handle over key groups [lo, hi] whose meta state
// declares String-keyed states with String namespaces (ambiguous keys).
// The header says compressed, which native data never is.
func testHandle(t testing.TB, layout Layout, lo, hi int) *Handle {
	t.Helper()
	s := flinkwrite.StringSnapshot
	hdr := flinkwrite.Header{Compressed: true, KeySerializer: s, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("v", flinkwrite.KindValue, s, flinkwrite.LongSnapshot),
		flinkwrite.KeyedStateMeta("l", flinkwrite.KindList, s, flinkwrite.ListSnapshot(s)),
		flinkwrite.KeyedStateMeta("m", flinkwrite.KindMap, s, flinkwrite.MapSnapshot(s, flinkwrite.LongSnapshot)),
		flinkwrite.TimerStateMeta("_timer_state/event_t", flinkwrite.TimerSnapshot(s, s)),
	}}
	b, err := flinkwrite.AppendHeader(nil, hdr)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := keyed.ParseHeader(b, "meta")
	if err != nil {
		t.Fatal(err)
	}
	return &Handle{
		Operator: &savepoint.OperatorState{MaxParallelism: testMaxPar},
		Incr:     &savepoint.IncrementalHandle{StartKeyGroup: int32(lo), NumKeyGroups: int32(hi - lo + 1)},
		Header:   h, MetaName: "meta", Layout: layout,
	}
}

func str(v string) []byte { return flinkwrite.AppendStringValue(nil, v) }

func stateKey(t *testing.T, kg int, key, ns string, uk []byte) []byte {
	t.Helper()
	b, err := flinkwrite.StateKey{KeyGroup: kg, PrefixLen: 2, Key: str(key), Namespace: str(ns), UserKey: uk, Ambiguous: true}.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeOne(t *testing.T, d *Decoder, cf string, k, v []byte) (map[string]any, error) {
	t.Helper()
	var got map[string]any
	err := d.Decode(cf, k, v, func(e *keyed.Entry) error {
		b, err := e.MarshalJSON()
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &got)
	})
	return got, err
}

func TestDecodeFlinkKinds(t *testing.T) {
	d, err := testHandle(t, LayoutFlink, 256-8, 255).NewDecoder(testMaxPar)
	if err != nil {
		t.Fatal(err)
	}
	check := func(cf string, k, v []byte, want string) {
		t.Helper()
		got, err := decodeOne(t, d, cf, k, v)
		if err != nil {
			t.Fatalf("%s: %v", cf, err)
		}
		b, _ := json.Marshal(got)
		if string(b) != want {
			t.Fatalf("%s:\n got %s\nwant %s", cf, b, want)
		}
	}
	check("v", stateKey(t, 250, "alice", "w1", nil), flinkwrite.AppendLong(nil, 42),
		`{"key":"alice","kg":250,"ns":"w1","state":"v","type":"VALUE","value":42}`)
	lv, err := flinkwrite.AppendListValue(nil, str("a"), str("bc"), str(""))
	if err != nil {
		t.Fatal(err)
	}
	check("l", stateKey(t, 251, "bob", "", nil), lv,
		`{"key":"bob","kg":251,"ns":"","state":"l","type":"LIST","value":["a","bc",""]}`)
	check("m", stateKey(t, 255, "carol", "n", str("uk")), flinkwrite.AppendMapEntryValue(nil, flinkwrite.AppendLong(nil, -7), false),
		`{"key":"carol","kg":255,"ns":"n","state":"m","type":"MAP","userKey":"uk","value":-7}`)
	tk, err := flinkwrite.AppendTimerKey(nil, 248, 2, 1000, str("dave"), str("x"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeOne(t, d, "_timer_state/event_t", tk, nil)
	if err != nil || got["kg"] != float64(248) || !strings.Contains(mustJSON(got["timer"]), `"ts":1000`) {
		t.Fatalf("timer: %v %v", got, err)
	}
	// The empty default family is ignored; undeclared ones are refused.
	if _, err := decodeOne(t, d, "default", []byte{0, 0}, nil); err != nil {
		t.Fatalf("default family: %v", err)
	}
	if _, err := decodeOne(t, d, "other", stateKey(t, 250, "a", "b", nil), nil); !errors.Is(err, ErrFormat) {
		t.Fatalf("undeclared family: %v", err)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestDecodeFlinkRejects(t *testing.T) {
	d, err := testHandle(t, LayoutFlink, 248, 255).NewDecoder(testMaxPar)
	if err != nil {
		t.Fatal(err)
	}
	good := stateKey(t, 250, "alice", "w1", nil)
	bad := append([]byte(nil), good...)
	bad[2+len(str("alice"))] ^= 0x01 // the key's length marker
	cases := []struct {
		name    string
		cf      string
		k, v    []byte
		wantErr error
		want    string
	}{
		{"bad length marker", "v", bad, flinkwrite.AppendLong(nil, 1), ErrFormat, "length marker"},
		{"short value", "v", good, []byte{1, 2, 3}, ErrFormat, `state "v"`},
		{"trailing value bytes", "v", good, append(flinkwrite.AppendLong(nil, 1), 9), ErrFormat, ""},
		{"short key", "v", []byte{0}, nil, ErrFormat, "shorter than the key-group prefix"},
		{"key group beyond max parallelism", "v", []byte{0x7F, 0xFF}, nil, ErrFormat, "max parallelism"},
		{"outside the range", "v", stateKey(t, 3, "a", "b", nil), flinkwrite.AppendLong(nil, 1), ErrOutOfRange, ""},
		{"map null flag", "m", stateKey(t, 250, "a", "b", str("u")), []byte{7}, ErrFormat, "null flag"},
		{"list delimiter", "l", stateKey(t, 250, "a", "b", nil), append(append(str("x"), ';'), str("y")...), ErrFormat, "delimiter"},
		{"timer with a value", "_timer_state/event_t", good, []byte{1}, ErrFormat, ""},
	}
	for _, c := range cases {
		_, err := decodeOne(t, d, c.cf, c.k, c.v)
		if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %v containing %q", c.name, err, c.wantErr, c.want)
		}
	}
}

func engineKey(kg int, key, ns, rest []byte) []byte {
	b := []byte{byte(kg >> 8), byte(kg)}
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(ns)))
	b = append(b, ns...)
	return append(b, rest...)
}

func TestDecodeEngine(t *testing.T) {
	h := testHandle(t, LayoutEngine, 0, 255)
	h.EngineStates = []manifest.StateInfo{{Name: "v", Kind: "value"}, {Name: "l", Kind: "list"}, {Name: "m", Kind: "multiset"}, {Name: "_timer_state/event_t", Kind: "priority-queue"}}
	d, err := h.NewDecoder(testMaxPar)
	if err != nil {
		t.Fatal(err)
	}
	ts := binary.BigEndian.AppendUint64(nil, 1700000000000)
	var e keyed.Entry
	grab := func(x *keyed.Entry) error { e = *x; return nil }
	if err := d.Decode("v", engineKey(7, []byte("k"), nil, nil), append(ts, 'z'), grab); err != nil {
		t.Fatal(err)
	}
	if e.KeyGroup != 7 || e.TTLTimestamp == nil || *e.TTLTimestamp != 1700000000000 || mustJSON(e.Value) != `{"decoded":false,"raw":"eg==","serializer":"sfstate-engine-bytes"}` {
		t.Fatalf("value entry: kg %d ttl %v value %s", e.KeyGroup, e.TTLTimestamp, mustJSON(e.Value))
	}
	lv := append(append([]byte(nil), ts...), 1, 'a', 2, 'b', 'c')
	if err := d.Decode("l", engineKey(8, []byte("k"), []byte("n"), nil), lv, grab); err != nil {
		t.Fatal(err)
	}
	if s := mustJSON(e.Value); !strings.Contains(s, `"YQ=="`) || !strings.Contains(s, `"YmM="`) {
		t.Fatalf("list: %s", s)
	}
	// Per-element list (TTL state): bit 63 of the prefix, per-element
	// timestamps; elements decode as Flink's TtlValue list.
	pv := binary.BigEndian.AppendUint64(nil, 1700000000500|1<<63)
	pv = append(binary.BigEndian.AppendUint64(pv, 1700000000000), 1, 'a')
	pv = append(binary.BigEndian.AppendUint64(pv, 1700000000500), 2, 'b', 'c')
	if err := d.Decode("l", engineKey(8, []byte("k"), []byte("n"), nil), pv, grab); err != nil {
		t.Fatal(err)
	}
	want := `[["TtlValue",{"lastAccess":1700000000000,"value":{"decoded":false,"raw":"YQ==","serializer":"sfstate-engine-bytes"}}],["TtlValue",{"lastAccess":1700000000500,"value":{"decoded":false,"raw":"YmM=","serializer":"sfstate-engine-bytes"}}]]`
	if s := mustJSON(e.Value); s != want || e.TTLTimestamp == nil || *e.TTLTimestamp != 1700000000500 {
		t.Fatalf("per-element list: ttl %v %s", e.TTLTimestamp, s)
	}
	mv := binary.BigEndian.AppendUint64(append([]byte(nil), ts...), 3)
	if err := d.Decode("m", engineKey(9, []byte("k"), nil, []byte("uk")), mv, grab); err != nil {
		t.Fatal(err)
	}
	if e.Value != int64(3) || mustJSON(e.UserKey) != `{"decoded":false,"raw":"dWs=","serializer":"sfstate-engine-bytes"}` {
		t.Fatalf("multiset: %v %s", e.Value, mustJSON(e.UserKey))
	}
	prio := int64(-5)
	pk := binary.BigEndian.AppendUint64([]byte{0, 10}, uint64(prio)^(1<<63))
	if err := d.Decode("_timer_state/event_t", append(pk, 'e'), nil, grab); err != nil {
		t.Fatal(err)
	}
	if e.Key != int64(-5) || e.TTLTimestamp != nil {
		t.Fatalf("priority queue: %v", e.Key)
	}
	for name, c := range map[string][2][]byte{
		"non-minimal varint": {append([]byte{0, 1, 0x81, 0x00}, 'k', 0), ts},
		"length beyond key":  {[]byte{0, 1, 9, 'k'}, ts},
		"no timestamp":       {engineKey(1, []byte("k"), nil, nil), []byte{1, 2}},
		"value trailing key": {engineKey(1, []byte("k"), nil, []byte("x")), ts},
		"bad list element":   {engineKey(1, []byte("k"), nil, nil), append(append([]byte(nil), ts...), 5, 'a')},
		"list short elem ts": {engineKey(1, []byte("k"), nil, nil), append(binary.BigEndian.AppendUint64(nil, 1<<63|5), 0, 0, 1)},
		"list bad elem":      {engineKey(1, []byte("k"), nil, nil), append(binary.BigEndian.AppendUint64(make([]byte, 0, 20), 1<<63|5), 0, 0, 0, 0, 0, 0, 0, 5, 9)},
		"short multiset":     {engineKey(1, []byte("k"), nil, nil), append(append([]byte(nil), ts...), 1)},
		"timer without prio": {[]byte{0, 1, 2}, nil},
		"timer with a value": {append(append([]byte(nil), pk...), 'e'), []byte{1}},
	} {
		cf := "v"
		switch {
		case strings.Contains(name, "list"):
			cf = "l"
		case strings.Contains(name, "multiset"):
			cf = "m"
		case strings.Contains(name, "timer"):
			cf = "_timer_state/event_t"
		}
		if err := d.Decode(cf, c[0], c[1], grab); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}

func TestValidLocalName(t *testing.T) {
	for _, n := range []string{"000010.sst", "MANIFEST-000004", "CURRENT", "OPTIONS-000009"} {
		if !validLocalName(n) {
			t.Errorf("%q refused", n)
		}
	}
	for _, n := range []string{"", ".", "..", "../x", "a/b", `a\b`, "x\x00", strings.Repeat("a", 300)} {
		if validLocalName(n) {
			t.Errorf("%q accepted", n)
		}
	}
}

func TestKeyGroupDist(t *testing.T) {
	d := KeyGroupDist(map[int]int64{3: 5, 1: 1, 7: 2}, 8)
	if d.NonEmpty != 3 || d.KeyGroups != 8 || d.Min != 0 || d.Max != 5 || d.Median != 0 || d.Hottest[0].KeyGroup != 3 || d.Counts[0].KeyGroup != 1 {
		t.Fatalf("%+v", d)
	}
}

// BenchmarkDecodeFlink measures decoding one Flink-layout entry (String
// key and namespace, Long value) through the one-entry block framing.
func BenchmarkDecodeFlink(b *testing.B) {
	t := &testing.T{}
	d, err := testHandle(t, LayoutFlink, 0, 255).NewDecoder(testMaxPar)
	if err != nil {
		b.Fatal(err)
	}
	k := stateKey(t, 9, "user-000123", "window-7", nil)
	v := flinkwrite.AppendLong(nil, 42)
	var n int
	fn := func(*keyed.Entry) error { n++; return nil }
	b.SetBytes(int64(len(k) + len(v)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode("v", k, v, fn); err != nil {
			b.Fatal(err)
		}
	}
	if n == 0 {
		b.Fatal("nothing decoded")
	}
}

// BenchmarkDecodeEngine measures splitting one engine-layout map entry.
func BenchmarkDecodeEngine(b *testing.B) {
	t := &testing.T{}
	h := testHandle(t, LayoutEngine, 0, 255)
	h.EngineStates = []manifest.StateInfo{{Name: "m", Kind: "map"}}
	d, err := h.NewDecoder(testMaxPar)
	if err != nil {
		b.Fatal(err)
	}
	k := engineKey(9, []byte("user-000123"), []byte("window-7"), []byte("uk-1"))
	v := append(binary.BigEndian.AppendUint64(nil, 1700000000000), "payload-bytes"...)
	fn := func(*keyed.Entry) error { return nil }
	b.SetBytes(int64(len(k) + len(v)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode("m", k, v, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeEngineJoinRecords decodes entries of a join-record state
// (meta info with the join description option) in both of recordstore's
// layouts: bucket keys (no row; raw bucket payload) and record keys (row
// as user key; count and association count), sides as namespace; keys
// that are not in that layout are errors naming the state.
func TestDecodeEngineJoinRecords(t *testing.T) {
	h := testHandle(t, LayoutEngine, 0, 255)
	j := *h.Header.States[0]
	j.Name, j.OptionMap = "j", map[string]string{joinOptVersion: "1"}
	h.Header.States = append(h.Header.States, &j)
	h.EngineStates = []manifest.StateInfo{{Name: "j", Kind: "value"}}
	d, err := h.NewDecoder(testMaxPar)
	if err != nil {
		t.Fatal(err)
	}
	groupKey := func(kg int, side byte, key, row string) []byte {
		b := append([]byte{0, byte(kg), side}, byte(len(key)))
		return append(append(b, key...), row...)
	}
	ts := binary.BigEndian.AppendUint64(nil, 1700000000000)
	var e keyed.Entry
	grab := func(x *keyed.Entry) error { e = *x; return nil }
	bucket := append(append([]byte(nil), ts...), 1, 2, 3)
	if err := d.Decode("j", groupKey(5, 0, "jk", ""), bucket, grab); err != nil {
		t.Fatal(err)
	}
	if e.KeyGroup != 5 || e.Namespace != "left" || string(e.KeyPart) != "jk" || e.UserKey != nil || *e.TTLTimestamp != 1700000000000 ||
		mustJSON(e.Value) != `{"decoded":false,"raw":"AQID","serializer":"sfstate-engine-bytes"}` {
		t.Fatalf("bucket entry: %+v value %s", e, mustJSON(e.Value))
	}
	rec := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append([]byte(nil), ts...), 3), 2)
	if err := d.Decode("j", groupKey(6, 1, "jk", "row"), rec, grab); err != nil {
		t.Fatal(err)
	}
	if e.Namespace != "right" || mustJSON(e.UserKey) != `{"decoded":false,"raw":"cm93","serializer":"sfstate-engine-bytes"}` || mustJSON(e.Value) != `[3,2]` {
		t.Fatalf("record entry: ns %v user key %s value %s", e.Namespace, mustJSON(e.UserKey), mustJSON(e.Value))
	}
	// Without the description: recognised by the manifest's name and kind.
	b := *h.Header.States[0]
	b.Name = bucketStateName
	h.Header.States = append(h.Header.States, &b)
	h.EngineStates = []manifest.StateInfo{{Name: bucketStateName, Kind: "value"}}
	db, err := h.NewDecoder(testMaxPar)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Decode(bucketStateName, groupKey(5, 1, "jk", ""), bucket, grab); err != nil || e.Namespace != "right" {
		t.Fatalf("bucket state without description: %v, namespace %v", err, e.Namespace)
	}
	for name, c := range map[string][2][]byte{
		"side byte 2":    {groupKey(1, 2, "jk", ""), bucket},
		"no side":        {[]byte{0, 1}, bucket},
		"key beyond end": {[]byte{0, 1, 0, 9, 'k'}, bucket},
		"no timestamp":   {groupKey(1, 0, "jk", ""), []byte{1}},
		"short record":   {groupKey(1, 0, "jk", "row"), append(append([]byte(nil), ts...), 1)},
	} {
		err := d.Decode("j", c[0], c[1], grab)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `"j"`) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
