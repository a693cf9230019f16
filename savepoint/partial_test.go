package savepoint

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// openMoreFixture opens a savepoint of ../shared/flink-fixtures-more (the
// layouts kept apart from ../shared/flink-fixtures).
func openMoreFixture(t *testing.T, name string) *Savepoint {
	t.Helper()
	dir := filepath.Join(fixtures.Require(t), "..", "flink-fixtures-more", name, "savepoint")
	if _, err := os.Stat(filepath.Join(dir, MetadataName)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return openDir(t, dir)
}

func summaryOf(t *testing.T, sp *Savepoint) *Summary {
	t.Helper()
	sum := Summarize(sp)
	if err := ScanSummary(context.Background(), sp, sum, ScanOptions{KeyGroupTo: -1}); err != nil {
		t.Fatal(err)
	}
	return sum
}

func keyedStates(sum *Summary) map[string]*StateSummary {
	out := map[string]*StateSummary{}
	for _, op := range sum.Operators {
		for _, s := range op.KeyedStates {
			out[s.Name] = s
		}
	}
	return out
}

func decodeAll(t *testing.T, sp *Savepoint) map[string][]*keyed.Entry {
	t.Helper()
	out := map[string][]*keyed.Entry{}
	err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *KeyedEntry) error {
		c := *e.Entry
		c.KeyBytes = append([]byte(nil), c.KeyBytes...)
		c.ValueBytes = append([]byte(nil), c.ValueBytes...)
		out[e.State.Name] = append(out[e.State.Name], &c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func checkClean(t *testing.T, sp *Savepoint) CheckStats {
	t.Helper()
	problems, stats := Check(context.Background(), sp, CheckOptions{})
	if len(problems) != 0 {
		t.Fatalf("check: %v", problems)
	}
	return stats
}

// TestUserSerializerStateIsPartial: Flink 1.16's savepoint whose value
// serializer snapshot class only exists in Flink's tests. Its state is
// listed, partial and raw; everything else decodes.
func TestUserSerializerStateIsPartial(t *testing.T) {
	sp := openMoreFixture(t, "flink1.16-rocksdb-canonical-user-serializer")
	sum := summaryOf(t, sp)
	const class = "org.apache.flink.test.migration.TypeSerializerSnapshotMigrationITCase$TestSerializerSnapshot"
	st := keyedStates(sum)["testState"]
	if st == nil {
		t.Fatal("testState not listed")
	}
	if !strings.Contains(st.Partial, class) || st.Entries != 4 || st.KeyType != "TUPLE<BIGINT>" || st.Kind != "VALUE" {
		t.Fatalf("testState: %+v", st)
	}
	b, _ := json.Marshal(st)
	if !strings.Contains(string(b), `"partial":`) {
		t.Fatalf("summary JSON lacks the reason: %s", b)
	}
	found := false
	for _, op := range sum.Operators {
		for _, x := range op.OperatorStates {
			if x.Name == "source-state" {
				found = true
				if x.Type != "STRING" || x.Partial != "" {
					t.Fatalf("source-state %+v", x)
				}
			}
		}
	}
	if !found {
		t.Fatal("operator state source-state not listed")
	}
	entries := decodeAll(t, sp)["testState"]
	if len(entries) != 4 {
		t.Fatalf("%d entries", len(entries))
	}
	for i, e := range entries {
		raw, ok := e.Value.(*serde.Raw)
		if !ok || raw.Serializer != class || string(raw.Bytes) != string(e.ValueBytes) || len(raw.Bytes) != 8 {
			t.Fatalf("entry %d value %#v", i, e.Value)
		}
		if j, _ := json.Marshal(raw); !strings.Contains(string(j), `"decoded":false`) {
			t.Fatalf("raw JSON %s", j)
		}
		// The key serializer is known: keys decode.
		if k, ok := e.Key.(serde.Tuple); !ok || len(k) != 1 || k[0] != int64(i) {
			t.Fatalf("entry %d key %v", i, e.Key)
		}
	}
	stats := checkClean(t, sp)
	if stats.KeysVerified != 4 {
		t.Fatalf("check verified %d keys", stats.KeysVerified)
	}
}

// TestCEPStatesDecode: a MATCH_RECOGNIZE job's CEP state (NFA state,
// shared buffer) is listed and decoded in full.
func TestCEPStatesDecode(t *testing.T) {
	sp := openMoreFixture(t, "sql-rocksdb-canonical-cep-match")
	states := keyedStates(summaryOf(t, sp))
	want := map[string]string{
		"nfaStateName": "NFA_STATE",
		"sharedBuffer-entries-with-lockable-edges":    "LOCKABLE<SHARED_BUFFER_NODE>",
		"sharedBuffer-events":                         "LOCKABLE<ROW<BIGINT, STRING, TIMESTAMP_LTZ(3) NOT NULL>>",
		"sharedBuffer-events-count":                   "INT",
		"eventQueuesStateName":                        "LIST<ROW<BIGINT, STRING, TIMESTAMP_LTZ(3) NOT NULL>>",
		"_timer_state/event_watermark-callbacks":      "TIMER<ROW<>, VOID_NAMESPACE>",
		"_timer_state/processing_watermark-callbacks": "TIMER<ROW<>, VOID_NAMESPACE>",
	}
	for name, typ := range want {
		s := states[name]
		if s == nil {
			t.Fatalf("state %q not listed", name)
		}
		if s.ValueType != typ || s.Partial != "" {
			t.Errorf("%s: value %s, partial %q; want %s", name, s.ValueType, s.Partial, typ)
		}
	}
	if states["sharedBuffer-entries-with-lockable-edges"].UserKeyType != "NODE_ID" || states["sharedBuffer-events"].UserKeyType != "EVENT_ID" {
		t.Fatal("user key types")
	}
	entries := decodeAll(t, sp)
	counts := map[string]int{}
	var all []string
	for name, es := range entries {
		counts[name] = len(es)
		for _, e := range es {
			b, err := json.Marshal(map[string]any{"k": e.Key, "uk": e.UserKey, "v": e.Value})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), `"decoded":false`) {
				t.Fatalf("%s: undecoded part in %s", name, b)
			}
			all = append(all, string(b))
		}
	}
	if counts["nfaStateName"] != 1 || counts["sharedBuffer-entries-with-lockable-edges"] != 2 || counts["sharedBuffer-events"] != 2 || counts["sharedBuffer-events-count"] != 1 {
		t.Fatalf("entry counts %v", counts)
	}
	joined := strings.Join(all, "\n")
	for _, w := range []string{
		`["Lockable",{"refCount":1,"element":["+I",[9,"a",null]]}]`,
		`["Lockable",{"refCount":1,"element":["+I",[10,"b",null]]}]`,
		`"uk":["EventId",{"id":0,"ts":1701784717167}]`,
		`["ComputationState",{"state":"C"`,
		`"previousTimestamp":1701784717168`,
		`"version":"3.0"`,
	} {
		if !strings.Contains(joined, w) {
			t.Errorf("decoded entries lack %s", w)
		}
	}
	checkClean(t, sp)
}

// TestAsyncCalcInspects: the async operator's in-flight queue
// (StreamElementSerializer) is typed and its stream decodes.
func TestAsyncCalcInspects(t *testing.T) {
	sp := openMoreFixture(t, "sql-rocksdb-canonical-async-calc")
	sum := summaryOf(t, sp)
	found := false
	for _, op := range sum.Operators {
		for _, x := range op.OperatorStates {
			if x.Name == "_async_wait_operator_state_" {
				found = true
				if x.Type != "STREAM_ELEMENT<ROW<INT, BIGINT>>" || x.Partial != "" {
					t.Fatalf("async queue %+v", x)
				}
			}
		}
	}
	if !found {
		t.Fatal("_async_wait_operator_state_ not listed")
	}
	stats := checkClean(t, sp)
	if stats.OperatorStatesVerified == 0 {
		t.Fatal("no operator state decoded")
	}
}
