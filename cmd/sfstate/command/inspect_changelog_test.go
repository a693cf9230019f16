package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

// TestInspectChangelogDump: the changelog checkpoint (Flink 1.17, nothing
// materialized) dumps the state its logs restore, entry for entry what the
// canonical 1.20 savepoint of the same job holds (processing-timer
// timestamps differ between runs); without --key-type the keys of the two
// operators without timers stay raw.
func TestInspectChangelogDump(t *testing.T) {
	dir := filepath.Join(fixtures.Require(t), "..", "flink-fixtures-more", "flink1.17-hashmap-changelog-checkpoint", "savepoint")
	if _, err := os.Stat(filepath.Join(dir, "_metadata")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	norm := func(args ...string) (lines []string, raw int) {
		t.Helper()
		out, errOut, code := run(t, append([]string{"inspect", "--dump"}, args...)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("bad line %q", l)
			}
			if m["decoded"] == false {
				raw++
			}
			if strings.HasPrefix(m["state"].(string), "_timer_state/processing") {
				if tm, ok := m["value"].([]any); ok && len(tm) == 2 {
					delete(tm[1].(map[string]any), "ts")
				}
			}
			delete(m, "keyBytes")
			delete(m, "valueBytes")
			b, _ := json.Marshal(m)
			lines = append(lines, string(b))
		}
		sort.Strings(lines)
		return lines, raw
	}
	want, _ := norm(fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
	got, raw := norm("--key-type", "tuple<bigint>", dir)
	if raw != 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("changelog dump (%d raw):\n%s\nwant:\n%s", raw, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got, raw = norm(dir)
	if len(got) != 32 || raw != 8 {
		t.Errorf("without --key-type: %d entries, %d raw; want 32, 8", len(got), raw)
	}
	out, _, code := run(t, "inspect", "--key-type", "tuple<bigint>", dir)
	if code != ExitOK || strings.Count(out, "4 entries") != 8 {
		t.Errorf("summary: exit %d:\n%s", code, out)
	}
	if _, _, code := run(t, "inspect", "--key-type", "uuid", dir); code != ExitUsage {
		t.Errorf("bad key type: exit %d", code)
	}
}
