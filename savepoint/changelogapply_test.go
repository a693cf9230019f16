package savepoint

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// fixtureEntry is the comparable form of one entry: operator, key group,
// state, key, namespace, value (timers: the timer's key and namespace, and
// the timestamp of event timers only, which the job sets the same in every
// run).
func fixtureEntry(op string, kg int, state string, key, ns, value any) string {
	j := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	return fmt.Sprintf("%s %d %s key=%s ns=%s value=%s", op, kg, state, j(key), j(ns), j(value))
}

// referenceEntries derives the expected restored state of the changelog
// checkpoint from the reference decoding of the Flink 1.9 savepoint of the
// same job (processing-timer timestamps differ between runs and are left
// out).
func referenceEntries(t *testing.T) []string {
	type refLine struct {
		KG    int             `json:"kg"`
		State string          `json:"state"`
		Key   json.RawMessage `json:"key"`
		NS    json.RawMessage `json:"ns"`
		Value json.RawMessage `json:"value"`
		Timer []json.RawMessage
		Op    string `json:"op"`
	}
	var lines []refLine
	p := filepath.Join(moreFixtureDir(t, fixtureV2), "..", "..", "_expected", fixtureV2+".entries.jsonl")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var l refLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	var out []string
	for _, l := range lines {
		if l.Timer != nil {
			var tm struct {
				TS  int64           `json:"ts"`
				Key json.RawMessage `json:"key"`
				NS  json.RawMessage `json:"ns"`
			}
			if err := json.Unmarshal(l.Timer[1], &tm); err != nil {
				t.Fatal(err)
			}
			var ts any = "*"
			if strings.Contains(l.State, "event") {
				ts = tm.TS
			}
			out = append(out, fixtureEntry(l.Op, l.KG, l.State, tm.Key, tm.NS, ts))
			continue
		}
		out = append(out, fixtureEntry(l.Op, l.KG, l.State, l.Key, l.NS, l.Value))
	}
	sort.Strings(out)
	return out
}

func walkedEntries(t *testing.T, sp *Savepoint, o ScanOptions) (got []string, partial map[string]string) {
	t.Helper()
	partial = map[string]string{}
	err := sp.WalkKeyed(t.Context(), o, func(e *KeyedEntry) error {
		op := e.Operator.ID.String()
		if e.State.Partial != "" {
			partial[op+" "+e.State.Name] = e.State.Partial
			// Raw keys: the key bytes (a Tuple1<Long>) are the part before
			// the namespace.
			if len(e.KeyPart) != 8 {
				return fmt.Errorf("raw key of %d bytes", len(e.KeyPart))
			}
			k := []int64{int64(binary.BigEndian.Uint64(e.KeyPart))}
			got = append(got, fixtureEntry(op, e.KeyGroup, e.State.Name, k, e.Namespace, e.Value))
			return nil
		}
		if tm, ok := e.Value.(*serde.Timer); ok {
			var ts any = "*"
			if strings.Contains(e.State.Name, "event") {
				ts = tm.Timestamp
			}
			got = append(got, fixtureEntry(op, e.KeyGroup, e.State.Name, tm.Key, tm.Namespace, ts))
			return nil
		}
		got = append(got, fixtureEntry(op, e.KeyGroup, e.State.Name, e.Key, e.Namespace, e.Value))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	return got, partial
}

// TestChangelogRestoreFixture rebuilds the state of the Flink 1.17
// changelog checkpoint (nothing materialized, every entry in the inline
// logs) and compares it with the reference decoding of the same job's 1.9
// savepoint: same entries, keys, namespaces and values.
func TestChangelogRestoreFixture(t *testing.T) {
	sp := openMoreFixture(t, fixtureChangelog)
	want := referenceEntries(t)
	if len(want) != 32 {
		t.Fatalf("reference has %d entries", len(want))
	}
	kt, err := ParseKeyType("tuple<bigint>")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		keyType *serde.Snapshot
		partial int
	}{{"no key type", nil, 2}, {"tuple<bigint>", kt, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			got, partial := walkedEntries(t, sp, ScanOptions{KeyGroupTo: -1, KeyType: tc.keyType})
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("restored entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			// Operators with timers take the key serializer from the timer
			// snapshot; the two without need the key type.
			if len(partial) != tc.partial {
				t.Errorf("partial states %v, want %d", partial, tc.partial)
			}
			for k, why := range partial {
				if strings.Contains(k, "_timer_state") || !strings.Contains(why, "key serializer") {
					t.Errorf("%s partial: %s", k, why)
				}
			}
		})
	}
	// The selections apply.
	got, _ := walkedEntries(t, sp, ScanOptions{KeyGroupFrom: 2, KeyGroupTo: 2, State: "state-name", KeyType: kt})
	if len(got) != 8 {
		t.Errorf("key group 2 of state-name: %d entries, want 8", len(got))
	}
	// The summary counts the restored entries.
	sum := Summarize(sp)
	if err := ScanSummary(t.Context(), sp, sum, ScanOptions{KeyGroupTo: -1, KeyType: kt}); err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	for _, op := range sum.Operators {
		for _, s := range op.KeyedStates {
			n += s.Entries
			if s.Name == "state-name" && (s.KeyType == "" || s.ValueType == "") {
				t.Errorf("%s %s: types %q %q", op.ID, s.Name, s.KeyType, s.ValueType)
			}
		}
	}
	if n != 32 {
		t.Errorf("summary counts %d entries, want 32", n)
	}
}

// clLog builds state-change logs for tests.
type clLog struct {
	t       *testing.T
	changes []StateChange
}

func (l *clLog) meta(id uint16, m flinkwrite.StateMetaInfo, extra []byte) {
	var e binfmt.Encbuf
	e.PutU8(8)
	e.PutI32(6)
	if err := e.PutUTF(m.Name); err != nil {
		l.t.Fatal(err)
	}
	e.PutI32(int32(m.Type))
	e.PutI32(int32(len(m.Options)))
	for _, o := range m.Options {
		_ = e.PutUTF(o.Key)
		_ = e.PutUTF(o.Value)
	}
	e.PutI32(int32(len(m.Serializers)))
	for _, s := range m.Serializers {
		_ = e.PutUTF(s.Key)
		b, err := flinkwrite.AppendTopLevel(nil, s.Snapshot)
		if err != nil {
			l.t.Fatal(err)
		}
		e.PutBytes(b)
	}
	if m.Type == flinkwrite.KeyValueState {
		e.PutBytes(extra) // ttl flag, default-value flag (+ value)
	}
	e.PutU16(id)
	e.PutU8(byte(m.Type))
	l.changes = append(l.changes, StateChange{KeyGroup: MetaKeyGroup, Data: e.B})
}

func (l *clLog) data(kg int32, op byte, id uint16, parts ...[]byte) {
	b := []byte{op, byte(id >> 8), byte(id)}
	for _, p := range parts {
		b = append(b, p...)
	}
	l.changes = append(l.changes, StateChange{KeyGroup: kg, Data: b})
}

func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

// javaStr is StringSerializer's encoding of an ASCII string.
func javaStr(s string) []byte { return append([]byte{byte(len(s) + 1)}, s...) }

func applyLog(changes []StateChange, keyType *serde.Snapshot) (map[string][]string, map[string]string) {
	a := newChangelogApplier(0, 127)
	for _, c := range changes {
		a.preScan(c)
	}
	a.setKey(keyType, "test")
	for _, c := range changes {
		a.apply(c)
	}
	got := map[string][]string{}
	partial := map[string]string{}
	_ = a.emit(func(e *keyed.Entry) error {
		b, _ := json.Marshal([]any{e.KeyGroup, e.Key, e.Namespace, e.UserKey, e.Value})
		if e.State.Partial != "" {
			partial[e.State.Name] = e.State.Partial
			b, _ = json.Marshal([]any{"raw", e.KeyGroup, e.KeyBytes})
		}
		got[e.State.Name] = append(got[e.State.Name], string(b))
		return nil
	})
	for _, m := range a.headerStates() {
		if m.Partial != "" {
			partial[m.Name] = m.Partial
		}
	}
	if n := a.notes(); n != "" {
		partial[""] = n
	}
	return got, partial
}

func generatedLog(t *testing.T) *clLog {
	l := &clLog{t: t}
	long := flinkwrite.LongSnapshot
	l.meta(0, flinkwrite.KeyedStateMeta("value", flinkwrite.KindValue, long, long), []byte{0, 0})
	l.meta(1, flinkwrite.KeyedStateMeta("list", flinkwrite.KindList, long, flinkwrite.ListSnapshot(long)), []byte{0, 0})
	l.meta(2, flinkwrite.KeyedStateMeta("map", flinkwrite.KindMap, flinkwrite.VoidNamespaceSnapshot, flinkwrite.MapSnapshot(flinkwrite.StringSnapshot, long)), []byte{0, 0})
	l.meta(3, flinkwrite.KeyedStateMeta("reduce", flinkwrite.KindReducing, long, long), append([]byte{0, 1}, be64(99)...))
	l.meta(4, flinkwrite.TimerStateMeta("_timer_state/event_timers", flinkwrite.TimerSnapshot(long, long)), nil)
	k := be64
	void := []byte{0}
	timer := func(ts, key, ns int64) []byte { return append(append(be64(ts^-1<<63), be64(key)...), be64(ns)...) }
	// VALUE: set, overwrite, clear of another key.
	l.data(1, 1, 0, k(7), k(1), k(70))
	l.data(1, 2, 0, k(7), k(1), k(71))
	l.data(2, 1, 0, k(8), k(1), k(80))
	l.data(2, 0, 0, k(8), k(1))
	// LIST: whole list, element, merge of namespace 2 into 1, add list.
	l.data(1, 1, 1, k(7), k(1), be32(2), k(10), k(11))
	l.data(1, 5, 1, k(7), k(1), k(12))
	l.data(1, 5, 1, k(7), k(2), k(20))
	l.data(1, 4, 1, k(7), k(1), k(1), be32(1), k(2))
	l.data(1, 3, 1, k(7), k(1), be32(1), k(13))
	l.data(3, 5, 1, k(9), k(1), k(90))
	l.data(3, 0, 1, k(9), k(1))
	// MAP: put, update, remove, whole-map set of another key.
	l.data(1, 6, 2, k(7), void, javaStr("a"), k(1))
	l.data(1, 6, 2, k(7), void, javaStr("b"), k(2))
	l.data(1, 6, 2, k(7), void, javaStr("a"), k(3))
	l.data(1, 7, 2, k(7), void, javaStr("b"))
	l.data(2, 1, 2, k(8), void, be32(2), javaStr("x"), []byte{0}, k(5), javaStr("y"), []byte{1})
	// REDUCING: set, then a merge of one value (moves), then a merge of
	// two (needs the function: not applied).
	l.data(1, 1, 3, k(7), k(2), k(5))
	l.data(1, 4, 3, k(7), k(3), k(3), be32(1), k(2))
	l.data(1, 1, 3, k(7), k(4), k(6))
	l.data(1, 4, 3, k(7), k(3), k(3), be32(1), k(4))
	// Timers: add two, remove one; a change outside the key-group range
	// is ignored.
	l.data(1, 5, 4, be32(2), timer(100, 7, 1), timer(200, 7, 2))
	l.data(1, 7, 4, timer(100, 7, 1))
	l.data(500, 5, 4, be32(1), timer(300, 7, 3))
	return l
}

// TestChangelogApplyOps applies a generated log exercising every operation
// and checks the restored state.
func TestChangelogApplyOps(t *testing.T) {
	l := generatedLog(t)
	kt, _ := ParseKeyType("bigint")
	got, partial := applyLog(l.changes, kt)
	want := map[string][]string{
		"value": {`[1,7,1,null,71]`},
		"list":  {`[1,7,1,null,[10,11,12,20,13]]`},
		"map":   {`[1,7,["void",0],"a",3]`, `[2,8,["void",0],"x",5]`, `[2,8,["void",0],"y",null]`},
		// The second merge was not applied: both values stay, and the
		// change is reported raw.
		"reduce": {`[1,7,3,null,5]`, `[1,7,4,null,6]`,
			`["raw",1,"` + base64.StdEncoding.EncodeToString(bytes.Join([][]byte{be64(7), be64(3), be64(3), be32(1), be64(4)}, nil)) + `"]`},
		"_timer_state/event_timers": {`[1,7,2,null,["Timer",{"key":7,"ns":2,"ts":200}]]`},
	}
	for name, w := range want {
		if strings.Join(got[name], "\n") != strings.Join(w, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", name, strings.Join(got[name], "\n"), strings.Join(w, "\n"))
		}
	}
	if len(got) != len(want) {
		t.Errorf("states %v", got)
	}
	if p := partial["reduce"]; !strings.Contains(p, "MERGE_NS change 25") || !strings.Contains(p, "reduce function") {
		t.Errorf("reduce partial %q", p)
	}
	for _, n := range []string{"value", "list", "map", "_timer_state/event_timers"} {
		if partial[n] != "" {
			t.Errorf("%s partial: %s", n, partial[n])
		}
	}

	// Without the key type the keys are cut out where the rest has a
	// fixed length; other changes cannot be split and stay raw.
	// (The timer queue's snapshot would give the key serializer: leave
	// it out.)
	var noTimers []StateChange
	for _, c := range l.changes {
		if bytes.Contains(c.Data, []byte("_timer_state")) || (c.KeyGroup != MetaKeyGroup && c.Data[2] == 4) {
			continue
		}
		noTimers = append(noTimers, c)
	}
	got, partial = applyLog(noTimers, nil)
	if v, w := got["value"], `["raw",1,"`+base64.StdEncoding.EncodeToString(append(be64(7), be64(1)...))+`"]`; len(v) != 1 || v[0] != w {
		t.Errorf("value without key type: %v, want %s", v, w)
	}
	if p := partial["list"]; !strings.Contains(p, "key serializer is unknown") {
		t.Errorf("list partial %q", p)
	}
	if p := partial["value"]; !strings.Contains(p, "key serializer is not recorded") {
		t.Errorf("value partial %q", p)
	}
}

// TestChangelogApplyProblems: unknown state ids, poll of a queue's head
// and malformed data are reported per state, never applied.
func TestChangelogApplyProblems(t *testing.T) {
	l := &clLog{t: t}
	long := flinkwrite.LongSnapshot
	l.meta(0, flinkwrite.KeyedStateMeta("value", flinkwrite.KindValue, long, long), []byte{0, 0})
	l.meta(1, flinkwrite.TimerStateMeta("_timer_state/t", flinkwrite.TimerSnapshot(long, long)), nil)
	l.data(1, 1, 0, be64(1), be64(1), be64(2)[:5]) // truncated value
	l.data(1, 1, 0, be64(1), be64(1), be64(2), []byte{9})
	l.data(1, 8, 1)              // REMOVE_FIRST_ELEMENT
	l.data(1, 5, 1, be32(1<<30)) // absurd element count
	l.data(1, 1, 7, be64(1))     // no metadata for id 7
	l.data(1, 1, 0, be64(1), be64(1), be64(3))
	l.changes = append(l.changes, StateChange{KeyGroup: MetaKeyGroup, Data: []byte{8, 0, 0, 0, 6, 0}})
	kt, _ := ParseKeyType("long")
	got, partial := applyLog(l.changes, kt)
	if v := got["value"]; len(v) != 3 || v[0] != `[1,1,1,null,3]` {
		t.Errorf("value: %v", v)
	}
	p := partial["value"]
	for _, w := range []string{"SET change 3", "offset", "SET change 4", "1 bytes left"} {
		if !strings.Contains(p, w) {
			t.Errorf("value partial %q lacks %q", p, w)
		}
	}
	if p := partial["_timer_state/t"]; !strings.Contains(p, "REMOVE_FIRST_ELEMENT") || !strings.Contains(p, "count") {
		t.Errorf("timer partial %q", p)
	}
	if p := partial[""]; !strings.Contains(p, "state id 7") || !strings.Contains(p, "metadata change 9") {
		t.Errorf("notes %q", p)
	}
}

// TestParseKeyType builds decodable key serializers from type strings.
func TestParseKeyType(t *testing.T) {
	for _, tc := range []struct {
		spec string
		data []byte
		want string
	}{
		{"bigint", be64(-5), `-5`},
		{"tuple<int, string>", append(be32(3), javaStr("ab")...), `[3,"ab"]`},
		{"row<bigint>", append(be32(16), 0, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0), `["+I",[42]]`},
	} {
		s, err := ParseKeyType(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		v, err := serde.DecodeAll(serde.NewDecoder(s), tc.data, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		b, _ := json.Marshal(v)
		if string(b) != tc.want {
			t.Errorf("%s: %s, want %s", tc.spec, b, tc.want)
		}
	}
	for _, bad := range []string{"", "tuple<>", "tuple<date>", "row<>", "uuid"} {
		if _, err := ParseKeyType(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzChangelogApply applies arbitrary change sequences: the applier never
// panics, and emits no more entries than changes.
func FuzzChangelogApply(f *testing.F) {
	enc := func(cs []StateChange) []byte {
		var b []byte
		for _, c := range cs {
			b = binary.BigEndian.AppendUint32(b, uint32(c.KeyGroup))
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.Data)))
			b = append(b, c.Data...)
		}
		return b
	}
	f.Add(enc(generatedLog(&testing.T{}).changes))
	if b, err := os.ReadFile(filepath.Join(fixtures.Dir(), "..", "flink-fixtures-more", fixtureChangelog, "savepoint", MetadataName)); err != nil {
		f.Logf("no fixture seeds: %v", err)
	} else if md, err := ParseMetadata(b, fixtureChangelog); err == nil {
		for _, op := range md.Operators {
			for _, st := range op.Subtasks {
				if h, ok := st.ManagedKeyed.(*ChangelogHandle); ok {
					for _, nm := range h.NonMaterialized {
						f.Add(enc(nm.Changes))
					}
				}
			}
		}
	}
	kt, _ := ParseKeyType("tuple<bigint>")
	f.Fuzz(func(t *testing.T, b []byte) {
		var cs []StateChange
		for len(b) >= 8 && len(cs) < 256 {
			kg := int32(binary.BigEndian.Uint32(b))
			n := int(binary.BigEndian.Uint32(b[4:]) % 4096)
			b = b[8:]
			n = min(n, len(b))
			cs = append(cs, StateChange{KeyGroup: kg%130 - 1, Data: b[:n]})
			b = b[n:]
		}
		for _, key := range []*serde.Snapshot{nil, kt} {
			got, _ := applyLog(cs, key)
			n := 0
			for _, v := range got {
				n += len(v)
			}
			// A change adds at most one entry per element it carries;
			// bytes bound elements.
			if n > len(cs)*4096 {
				t.Fatalf("%d entries from %d changes", n, len(cs))
			}
		}
	})
}
