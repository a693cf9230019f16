//go:build cgo

package command

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchStateJSON(t *testing.T) {
	out, errOut, code := run(t, "--json", "bench", "state", "--events", "3000", "--bundle", "500", "--large-events", "4000",
		"--micro-keys", "300", "--micro-ops", "1000", "--memory-mib", "1", "--dir", t.TempDir())
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Workloads []struct {
			Name         string  `json:"name"`
			Events       int     `json:"events"`
			PerRecordEPS float64 `json:"perRecordEps"`
			BundleEPS    float64 `json:"bundleEps"`
			Speedup      float64 `json:"speedup"`
			PeakRSS      int64   `json:"bundlePeakRssBytes"`
		} `json:"workloads"`
		Micro []struct {
			Op          string  `json:"op"`
			PerOpOpsMs  float64 `json:"perOpOpsMs"`
			EngineOpsMs float64 `json:"engineOpsMs"`
			Speedup     float64 `json:"speedup"`
		} `json:"micro"`
		Memory []struct {
			Operators int `json:"operators"`
		} `json:"memory"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	var names []string
	for i, w := range res.Workloads {
		names = append(names, w.Name)
		events, rss := 3000, w.PeakRSS == 0
		if i >= 5 {
			// The long runs, with the bundled path's peak RSS (or -1 where
			// the kernel cannot reset the peak).
			events, rss = 4000, w.PeakRSS > 1<<20 || w.PeakRSS == -1
		}
		if w.Events != events || w.PerRecordEPS <= 0 || w.BundleEPS <= 0 || w.Speedup <= 0 || !rss {
			t.Fatalf("workload %+v", w)
		}
	}
	if strings.Join(names, ",") != "q4,q7,q17,q18,q20,q4,q17" {
		t.Fatalf("workloads %v", names)
	}
	if len(res.Micro) < 10 || res.Micro[0].Op != "valueAdd" || res.Micro[0].EngineOpsMs <= 0 {
		t.Fatalf("micro %+v", res.Micro)
	}
	if len(res.Memory) != 6 || res.Memory[2].Operators != 16 {
		t.Fatalf("memory %+v", res.Memory)
	}
}

func TestBenchStateTable(t *testing.T) {
	out, errOut, code := run(t, "--quiet", "bench", "state", "--events", "2000", "--bundle", "400", "--large-events", "-1",
		"--micro-keys", "200", "--micro-ops", "500", "--memory-mib", "1", "--dir", t.TempDir())
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"geomean", "valueGet", "mapIterator", "block cache usage"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	if _, _, code := run(t, "bench", "state", "--bundle", "-1"); code != ExitUsage {
		t.Fatalf("negative bundle: exit %d", code)
	}
}
