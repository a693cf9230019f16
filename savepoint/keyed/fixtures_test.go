package keyed

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/javaser"
	"github.com/sfstate/sfstate/savepoint/serde"
)

var canonicalFixtures = []string{
	"flink1.15-rocksdb-canonical-metadata-v3",
	"flink1.19-rocksdb-canonical-snappy-compressed",
	"flink1.20-hashmap-canonical-liststate-window-inline",
	"flink1.20-hashmap-canonical-valuestate-timers",
	"flink1.20-rocksdb-canonical-broadcast-operator-state",
	"flink1.20-rocksdb-canonical-valuestate-timers",
	"sql-rocksdb-canonical-deduplicate-valuestate",
	"sql-rocksdb-canonical-groupagg-ttl-valuestate",
	"sql-rocksdb-canonical-groupagg-valuestate",
	"sql-rocksdb-canonical-join-mapstate",
	"sql-rocksdb-canonical-join-ttl-valuestate",
	"sql-rocksdb-canonical-udagg-liststate-mapstate",
	"sql-rocksdb-canonical-windowjoin-liststate-timers",
}

// decodeFixture decodes every keyed entry of a fixture into the JSON
// shape of _expected/<fixture>.entries.jsonl.
func decodeFixture(t *testing.T, fixture string) ([]map[string]any, map[string]*Header) {
	t.Helper()
	m := readTestMetadata(t, fixture)
	var out []map[string]any
	headers := map[string]*Header{}
	for _, op := range m.operators {
		for _, st := range op.subtasks {
			k := st.keyed
			if k == nil {
				continue
			}
			if k.tag != 7 {
				t.Fatalf("%s: keyed handle tag %d is not canonical", fixture, k.tag)
			}
			data := k.stream.bytes(t)
			name := k.stream.name
			h, hl, err := ReadHeader(bytes.NewReader(data), name)
			if err != nil {
				t.Fatalf("%s op %s subtask %d: header: %v", fixture, op.id, st.index, err)
			}
			if !bytes.Equal(h.Raw, data[:hl]) {
				t.Fatal("header Raw differs from the file bytes")
			}
			headers[fmt.Sprintf("%s/%d", op.id, st.index)] = h
			for i, off := range k.offsets {
				if off == 0 {
					continue
				}
				kg := k.start + i
				err := ReadKeyGroup(bytes.NewReader(data), int64(len(data)), name, h, kg, off, op.maxParallelism, func(e *Entry) error {
					b, err := json.Marshal(e)
					if err != nil {
						return err
					}
					b = append(b[:len(b)-1], []byte(fmt.Sprintf(`,"op":%q,"subtask":%d}`, op.id, st.index))...)
					var generic map[string]any
					if err := json.Unmarshal(b, &generic); err != nil {
						return err
					}
					out = append(out, generic)
					return nil
				})
				if err != nil {
					t.Fatalf("%s: %v", fixture, err)
				}
			}
		}
	}
	return out, headers
}

func readExpected(t *testing.T, fixture string) []map[string]any {
	f, err := os.Open(fixtures.Path(t, "_expected", fixture+".entries.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// semEqual compares decoded JSON values. The reference decoder printed
// nested rows of StructuredType accumulators as ["raw8", slotHex]; we
// decode those rows, so any row matches such a placeholder.
func semEqual(want, got any) bool {
	if w, ok := want.([]any); ok && len(w) == 2 && w[0] == "raw8" {
		g, ok := got.([]any)
		return ok && len(g) == 2 && (g[0] == "+I" || g[0] == "-U" || g[0] == "+U" || g[0] == "-D")
	}
	switch w := want.(type) {
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !semEqual(w[i], g[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			gv, ok := g[k]
			if !ok || !semEqual(v, gv) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(want, got)
}

func TestFixturesMatchExpected(t *testing.T) {
	fixtures.Require(t)
	for _, fx := range canonicalFixtures {
		t.Run(fx, func(t *testing.T) {
			got, _ := decodeFixture(t, fx)
			want := readExpected(t, fx)
			if len(got) != len(want) {
				t.Errorf("%d entries, want %d", len(got), len(want))
			}
			for i := 0; i < len(got) && i < len(want); i++ {
				if !semEqual(want[i], got[i]) {
					gb, _ := json.Marshal(got[i])
					wb, _ := json.Marshal(want[i])
					t.Errorf("entry %d:\n got  %s\n want %s", i, gb, wb)
				}
			}
		})
	}
}

func TestHeaderTypes(t *testing.T) {
	fixtures.Require(t)
	_, hs := decodeFixture(t, "sql-rocksdb-canonical-deduplicate-valuestate")
	var found bool
	for _, h := range hs {
		if s := h.State("deduplicate-state"); s != nil {
			found = true
			if got := s.Value.String(); got != "ROW<BIGINT, STRING, STRING, BIGINT, TIMESTAMP(3)>" {
				t.Errorf("value type %s", got)
			}
			if h.KeySerializer.String() != "ROW<STRING>" {
				t.Errorf("key type %s", h.KeySerializer.String())
			}
			if s.Kind != "VALUE" || s.Namespace.Class == "" || s.TTL {
				t.Errorf("meta %+v", s)
			}
		}
	}
	if !found {
		t.Fatal("deduplicate-state not found")
	}
	_, hs = decodeFixture(t, "sql-rocksdb-canonical-join-mapstate")
	for _, h := range hs {
		if s := h.State("left-records"); s != nil {
			if s.Kind != "MAP" || s.UserKey.String() != "ROW<INT, BIGINT, STRING>" || s.UserValue.String() != "INT" {
				t.Errorf("left-records: %s %s %s", s.Kind, s.UserKey, s.UserValue)
			}
		}
	}
	_, hs = decodeFixture(t, "sql-rocksdb-canonical-groupagg-ttl-valuestate")
	for _, h := range hs {
		if s := h.State("accState"); s != nil && !s.TTL {
			t.Error("accState not flagged TTL")
		}
	}
	// Nested StructuredType accumulators render with their row types.
	_, hs = decodeFixture(t, "sql-rocksdb-canonical-udagg-liststate-mapstate")
	for _, h := range hs {
		if s := h.State("accState"); s != nil {
			if !strings.HasPrefix(s.Value.String(), "ROW<STRUCTURED<") {
				t.Errorf("accState type %s", s.Value.String())
			}
		}
	}
}

// walkSnapshots visits s and every nested snapshot.
func walkSnapshots(s *serde.Snapshot, fn func(*serde.Snapshot)) {
	if s == nil {
		return
	}
	fn(s)
	for _, n := range s.Nested {
		walkSnapshots(n, fn)
	}
}

func TestSnapshotRawReparses(t *testing.T) {
	fixtures.Require(t)
	classes := map[string]bool{}
	for _, fx := range canonicalFixtures {
		_, hs := decodeFixture(t, fx)
		for _, h := range hs {
			var all []*serde.Snapshot
			all = append(all, h.KeySerializer)
			for _, st := range h.States {
				for _, ns := range st.Serializers {
					all = append(all, ns.Snapshot)
				}
			}
			for _, s := range all {
				walkSnapshots(s, func(s *serde.Snapshot) {
					classes[s.Class] = true
					d := binfmt.New(s.Raw, 0)
					again := serde.ReadVersioned(d)
					if d.Err() != nil || d.Len() != 0 || again.Class != s.Class || again.String() != s.String() {
						t.Errorf("%s: %s does not re-parse from Raw: %v", fx, s.Class, d.Err())
					}
					for _, js := range s.JavaStreams {
						if !bytes.Contains(s.Raw, js.Raw) {
							t.Errorf("%s: java stream not inside Raw", s.Class)
						}
					}
					if s.Class == serde.ClassExternal {
						o, _ := s.JavaStreams[0].First().(*javaser.Object)
						if o.ClassName() != "org.apache.flink.table.types.AtomicDataType" {
							t.Errorf("external data type class %s", o.ClassName())
						}
					}
					for _, lt := range s.Types {
						if lt.Java == nil || !bytes.Contains(s.Raw, lt.Java.Raw) || lt.Root == "" {
							t.Errorf("%s: logical type %+v", s.Class, lt)
						}
					}
				})
			}
		}
	}
	for _, c := range []string{serde.ClassRowData, serde.ClassExternal, serde.ClassTTL, serde.ClassTimer, serde.ClassTuple, serde.ClassTimestamp, serde.ClassRawValue} {
		if !classes[c] {
			t.Errorf("fixtures did not exercise %s", c)
		}
	}
}

func TestExternalSerializerDataType(t *testing.T) {
	fixtures.Require(t)
	_, hs := decodeFixture(t, "sql-rocksdb-canonical-udagg-liststate-mapstate")
	n := 0
	for _, h := range hs {
		for _, st := range h.States {
			walkSnapshots(st.Value, func(s *serde.Snapshot) {
				if s.Class != serde.ClassExternal {
					return
				}
				n++
				if len(s.Types) != 1 || (s.Types[0].Root != "VARCHAR" && s.Types[0].Root != "BOOLEAN") {
					t.Errorf("external data type %+v", s.Types)
				}
			})
		}
	}
	if n != 3 {
		t.Fatalf("%d external serializers, want 3", n)
	}
}
