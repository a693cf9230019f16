package command

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

// TestDiffCommandSpill: with a tiny --memory the diff spills sorted runs
// into --temp-dir, reports exactly what the in-memory diff reports and
// removes its spill directory.
func TestDiffCommandSpill(t *testing.T) {
	a := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	b := fixtures.Path(t, "flink1.20-hashmap-canonical-valuestate-timers")
	decode := func(out string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return m
	}
	memOut, _, code := run(t, "--json", "diff", "--limit", "3", a, b)
	if code != ExitCheckFailed {
		t.Fatalf("in memory: exit %d", code)
	}
	tmp := t.TempDir()
	spillOut, errOut, code := run(t, "--json", "diff", "--limit", "3", "--memory", "2KiB", "--temp-dir", tmp, a, b)
	if code != ExitCheckFailed {
		t.Fatalf("spilled: exit %d: %s", code, errOut)
	}
	mem, spill := decode(memOut), decode(spillOut)
	if spill["spilledRuns"] == nil || mem["spilledRuns"] != nil {
		t.Fatalf("spilled runs: %v with 2KiB, %v in memory", spill["spilledRuns"], mem["spilledRuns"])
	}
	delete(spill, "spilledRuns")
	delete(spill, "spilledBytes")
	sj, _ := json.Marshal(spill)
	mj, _ := json.Marshal(mem)
	if string(sj) != string(mj) {
		t.Fatalf("spilled diff\n%s\nin-memory diff\n%s", sj, mj)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("spill directory left: %v", left)
	}
	for _, bad := range []string{"0", "-1", "12XB", "MiB", "1.5GiB"} {
		if _, _, code := run(t, "diff", "--memory", bad, a, a); code != ExitUsage {
			t.Errorf("--memory %q: exit %d, want %d", bad, code, ExitUsage)
		}
	}
}

func TestDiffParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "256MiB": 256 << 20, "1gib": 1 << 30, "16 KiB": 16 << 10, "2K": 2048, "3MB": 3 << 20, "7B": 7} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
}
