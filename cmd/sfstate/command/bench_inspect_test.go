package command

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/scanbench"
)

func TestBenchInspect(t *testing.T) {
	out, errOut, code := run(t, "--json", "bench", "inspect", "--entries", "2000", "--dir", t.TempDir())
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res BenchInspectResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	names := map[string]bool{}
	for _, p := range res.Phases {
		names[p.Name] = true
	}
	if res.Entries != 2000 || res.DataBytes <= 0 || len(res.Phases) < 5 || !names[scanbench.PhaseDecode] || !names[scanbench.PhaseRaw] {
		t.Fatalf("%+v", res)
	}
	for _, p := range res.Phases {
		if p.Entries != 2000 || p.MBPerSec <= 0 || p.PeakRSS <= 0 {
			t.Fatalf("%+v", p)
		}
	}
	if res.Heap == nil || res.Heap.DataBytes <= 0 || len(res.Heap.Phases) != len(scanbench.LayoutPhases)+1 {
		t.Fatalf("heap layout: %+v", res.Heap)
	}
	for _, p := range res.Heap.Phases {
		if p.Entries != 2000 || p.EntriesPerSec <= 0 {
			t.Fatalf("heap layout: %+v", p)
		}
	}
	out, _, code = run(t, "bench", "inspect", "--entries", "500", "--dir", t.TempDir())
	if code != ExitOK || !strings.Contains(out, "full decode") || !strings.Contains(out, "/ raw cached") || !strings.Contains(out, "heap / canonical") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if _, _, code := run(t, "bench", "inspect", "--entries", "-1"); code != ExitUsage {
		t.Fatalf("negative entries: exit %d", code)
	}
}
