package savepoint

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// canonJSON re-marshals a JSON value so that key order and spacing do not
// matter.
func canonJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(x)
	return string(b)
}

// TestWalkKeyedAgreesWithExpectedEntries decodes every canonical fixture
// and compares the multiset of entries with the reference decoding.
func TestWalkKeyedAgreesWithExpectedEntries(t *testing.T) {
	for _, name := range allFixtures(t) {
		t.Run(name, func(t *testing.T) {
			path := fixtures.Path(t, "_expected", name+".entries.jsonl")
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				t.Skip("no reference entries")
			}
			compareExpected(t, openFixture(t, name), path, ScanOptions{KeyGroupTo: -1})
		})
	}
}

// compareExpected walks sp with o and compares the multiset of entries with
// the reference decoding in the entries.jsonl file at path.
func compareExpected(t *testing.T, sp *Savepoint, path string, o ScanOptions) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := decodeObj(t, sc.Bytes())
		if tm, ok := m["timer"]; ok {
			m = map[string]any{"kg": m["kg"], "state": m["state"], "value": tm, "op": m["op"], "subtask": m["subtask"]}
		} else {
			delete(m, "type")
		}
		if strings.Contains(sc.Text(), `"raw8"`) {
			// The reference left these nested values undecoded
			// (fixed-length slots printed raw); compare the rest.
			m["value"] = "reference-undecoded"
		}
		want = append(want, canonJSON(t, m))
	}
	var got []string
	err = sp.WalkKeyed(context.Background(), o, func(e *KeyedEntry) error {
		m := map[string]any{"kg": e.KeyGroup, "state": e.State.Name, "op": e.Operator.ID.String(), "subtask": e.Subtask, "value": e.Value}
		if e.State.Type != keyed.PriorityQueue {
			m["key"], m["ns"] = e.Key, e.Namespace
			if e.UserKey != nil {
				m["userKey"] = e.UserKey
			}
		}
		got = append(got, canonJSON(t, m))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Values the reference did not decode are compared without value.
	for i, w := range want {
		if strings.Contains(w, "reference-undecoded") {
			for j, g := range got {
				gm := decodeObj(t, []byte(g))
				gm["value"] = "reference-undecoded"
				if canonJSON(t, gm) == w {
					got[j] = w
					break
				}
			}
			if testing.Verbose() {
				t.Logf("undecoded %d %s", i, w)
			}
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if len(got) != len(want) {
		t.Fatalf("%d entries, reference has %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("entry %d:\n got  %s\n want %s", i, got[i], want[i])
		}
	}
}

func TestWalkKeyedFilters(t *testing.T) {
	sp := openFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	ctx := context.Background()
	count := func(o ScanOptions) (n int, kgs map[int]bool, states map[string]bool) {
		kgs, states = map[int]bool{}, map[string]bool{}
		err := sp.WalkKeyed(ctx, o, func(e *KeyedEntry) error {
			n++
			kgs[e.KeyGroup] = true
			states[e.State.Name] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	all, _, _ := count(ScanOptions{KeyGroupTo: -1})
	if all != 32 {
		t.Fatalf("%d entries, want 32", all)
	}
	n, _, states := count(ScanOptions{KeyGroupTo: -1, Operator: "CheckpointingTimelyStatefulOperator1"})
	if n != 12 || len(states) != 3 {
		t.Fatalf("operator filter by uid: %d entries, states %v", n, states)
	}
	n, _, states = count(ScanOptions{KeyGroupTo: -1, State: "state-name"})
	if n != 16 || len(states) != 1 {
		t.Fatalf("state filter: %d entries %v", n, states)
	}
	n, kgs, _ := count(ScanOptions{KeyGroupFrom: 2, KeyGroupTo: 2})
	if n == 0 || len(kgs) != 1 || !kgs[2] {
		t.Fatalf("key-group filter: %d entries in %v", n, kgs)
	}
	// Early stop.
	seen := 0
	err := sp.WalkKeyed(ctx, ScanOptions{KeyGroupTo: -1}, func(*KeyedEntry) error {
		seen++
		if seen == 3 {
			return StopWalk
		}
		return nil
	})
	if !IsStop(err) || seen != 3 {
		t.Fatalf("stop: %v after %d", err, seen)
	}
}

// TestNativeFixtures: the RocksDB native snapshot refuses entries (only
// its files are listed); the hashmap backend's native savepoint, in the
// heap key-group layout, decodes, and its summary counts its entries.
func TestNativeFixtures(t *testing.T) {
	for _, name := range []string{"flink1.20-hashmap-NATIVE-for-contrast", "flink1.20-rocksdb-NATIVE-incremental-for-contrast"} {
		sp := openFixture(t, name)
		heap := strings.Contains(name, "hashmap")
		n := 0
		err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1}, func(*KeyedEntry) error { n++; return nil })
		if heap && (err != nil || n != 32) {
			t.Fatalf("%s: %d entries, %v; want 32", name, n, err)
		}
		if !heap && !errors.Is(err, ErrNativeLayout) {
			t.Fatalf("%s: %v, want ErrNativeLayout", name, err)
		}
		sum := Summarize(sp)
		if err := ScanSummary(context.Background(), sp, sum, ScanOptions{KeyGroupTo: -1}); err != nil {
			t.Fatalf("%s: summary: %v", name, err)
		}
		natives, entries := 0, int64(0)
		for _, op := range sum.Operators {
			for _, s := range op.KeyedStates {
				entries += s.Entries
			}
			switch op.KeyedLayout {
			case LayoutNativeHeap:
				natives++
				if op.Note != "" {
					t.Errorf("%s: operator %s: note %q on decoded state", name, op.ID, op.Note)
				}
				if op.KeyGroups.NonEmpty == 0 {
					t.Errorf("%s: operator %s: no key-group distribution", name, op.ID)
				}
			case LayoutNativeRocksDB:
				natives++
				if op.Note == "" {
					t.Errorf("%s: operator %s has no note", name, op.ID)
				}
				if len(op.NativeFiles) == 0 {
					t.Errorf("%s: no native files listed", name)
				}
			}
		}
		if natives != 4 {
			t.Fatalf("%s: %d native operators, want 4", name, natives)
		}
		if heap && entries != 32 {
			t.Fatalf("%s: summary counts %d entries, want 32", name, entries)
		}
	}
}

// TestProbeDetectsHeapLayout hides the NATIVE format type (as in a V3
// file or a checkpoint) and checks the block probe still recognizes the
// heap layout, while canonical tag-7 files stay canonical.
func TestProbeDetectsHeapLayout(t *testing.T) {
	sp := openFixture(t, "flink1.20-hashmap-NATIVE-for-contrast")
	sp.Props = nil
	layouts := map[string]int{}
	n := 0
	err := sp.walkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1}, func(_ *OperatorState, _ int, _ *keyedFile, layout string) {
		layouts[layout]++
	}, func(*KeyedEntry) error { n++; return nil })
	if err != nil || n != 32 || layouts[LayoutNativeHeap] == 0 || layouts[LayoutCanonical] != 0 {
		t.Fatalf("probe: %d entries, layouts %v, %v", n, layouts, err)
	}
}

func TestScanSummaryStats(t *testing.T) {
	sp := openFixture(t, "sql-rocksdb-canonical-groupagg-ttl-valuestate")
	sum := Summarize(sp)
	// lastAccess of the two entries: 1706683111476 and 1706683111489.
	o := ScanOptions{KeyGroupTo: -1, TTLMillis: 1000, NowMillis: 1706683111476 + 1000 + 5}
	if err := ScanSummary(context.Background(), sp, sum, o); err != nil {
		t.Fatal(err)
	}
	var st *StateSummary
	var op *OperatorSummary
	for _, x := range sum.Operators {
		for _, s := range x.KeyedStates {
			if s.Name == "accState" {
				st, op = s, x
			}
		}
	}
	if st == nil {
		t.Fatal("accState not found")
	}
	if st.Entries != 2 || !st.TTL || st.Kind != "VALUE" || st.ValueType != "ROW<BIGINT, BIGINT, BIGINT, STRING>" || st.KeyType != "ROW<BIGINT>" {
		t.Fatalf("accState summary %+v", st)
	}
	if *st.TTLOldest != 1706683111476 || *st.TTLNewest != 1706683111489 || st.Expired != 1 {
		t.Fatalf("ttl oldest %d newest %d expired %d", *st.TTLOldest, *st.TTLNewest, st.Expired)
	}
	d := op.KeyGroups
	if d.KeyGroups != 128 || d.NonEmpty != 2 || d.Max != 1 || d.Min != 0 || len(d.Hottest) != 2 || d.Hottest[0].KeyGroup != 93 {
		t.Fatalf("key-group distribution %+v", d)
	}
}

func decodeObj(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTag12WithoutFormatIsProbed rewrites a canonical savepoint's handles as
// tag 12 in a V3 file (no format type, like a Flink 1.15 RocksDB full
// checkpoint): the block probe must find the canonical layout and decode.
func TestTag12WithoutFormatIsProbed(t *testing.T) {
	dir := copyFixture(t, "flink1.20-hashmap-canonical-valuestate-timers")
	sp := openDir(t, dir)
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			if h, ok := st.ManagedKeyed.(*KeyGroupsHandle); ok {
				h.Tag, h.StateHandleID = TagKeyGroupsV2, "some-handle-id"
			}
		}
	}
	sp.Meta.Version, sp.Meta.Trailer = 3, nil
	rewriteMetadata(t, dir, sp)
	sp = openDir(t, dir)
	if sp.Props != nil {
		t.Fatal("V3 has properties")
	}
	n := 0
	if err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1}, func(*KeyedEntry) error { n++; return nil }); err != nil || n != 32 {
		t.Fatalf("%d entries, %v", n, err)
	}
	sum := Summarize(sp)
	if err := ScanSummary(context.Background(), sp, sum, ScanOptions{KeyGroupTo: -1}); err != nil {
		t.Fatal(err)
	}
	for _, op := range sum.Operators {
		if op.KeyedLayout != "" && op.KeyedLayout != LayoutCanonical {
			t.Fatalf("operator %s layout %s", op.ID, op.KeyedLayout)
		}
	}
	if probs, _ := Check(context.Background(), sp, CheckOptions{}); len(probs) != 0 {
		t.Fatal(probs)
	}
}

func TestOperatorStateTypes(t *testing.T) {
	sp := openFixture(t, "flink1.20-rocksdb-canonical-broadcast-operator-state")
	sum := Summarize(sp)
	if err := ScanSummary(context.Background(), sp, sum, ScanOptions{KeyGroupTo: -1}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"broadcast-state-1": "MAP<BIGINT, BIGINT>", "broadcast-state-2": "MAP<STRING, BIGINT>", "broadcast-state-3": "MAP<BIGINT, STRING>", "source-state": "STRING"}
	seen := 0
	for _, op := range sum.Operators {
		for _, x := range op.OperatorStates {
			if x.Type != want[x.Name] {
				t.Errorf("%s: type %q, want %q", x.Name, x.Type, want[x.Name])
			}
			if x.Mode == "BROADCAST" {
				seen++
				if x.MapEntries != 4 || x.Subtasks != 4 {
					t.Errorf("%s: %d entries in %d subtasks", x.Name, x.MapEntries, x.Subtasks)
				}
			}
		}
	}
	if seen != 3 {
		t.Fatalf("%d broadcast states", seen)
	}
}

func TestParallelScanMatchesSerial(t *testing.T) {
	for _, name := range []string{fixtureUDF, "flink1.20-hashmap-canonical-liststate-window-inline"} {
		sp := openFixture(t, name)
		var outs []string
		for _, conc := range []int{1, 4} {
			sum := Summarize(sp)
			if err := ScanSummary(context.Background(), sp, sum, ScanOptions{KeyGroupTo: -1, Concurrency: conc, NowMillis: 1}); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(sum)
			outs = append(outs, string(b))
			n := 0
			if err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Concurrency: conc}, func(*KeyedEntry) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("no entries")
			}
		}
		if outs[0] != outs[1] {
			t.Fatalf("%s: parallel summary differs from serial", name)
		}
		p1, s1 := Check(context.Background(), sp, CheckOptions{Concurrency: 1})
		p4, s4 := Check(context.Background(), sp, CheckOptions{Concurrency: 4})
		if len(p1) != 0 || len(p4) != 0 || s1 != s4 {
			t.Fatalf("%s: check serial %+v %v, parallel %+v %v", name, s1, p1, s4, p4)
		}
	}
}
