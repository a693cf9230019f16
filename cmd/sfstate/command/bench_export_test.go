package command

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/exportbench"
)

func TestBenchExport(t *testing.T) {
	out, errOut, code := run(t, "--json", "bench", "export", "--entries", "1500", "--dir", t.TempDir())
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkJSONConventions(t, "bench export", out)
	var res exportbench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	got := map[string]exportbench.Phase{}
	for _, p := range res.Phases {
		got[p.Name] = p
	}
	for _, c := range exportbench.Cases {
		p, ok := got["export "+c.Name()]
		if !ok || p.Rows != 1500 || p.RowsPerSec <= 0 || p.MBPerSec <= 0 || p.OutputBytes <= 0 || p.PeakRSS <= 0 {
			t.Fatalf("%s: %+v in %s", c.Name(), p, out)
		}
	}
	out, _, code = run(t, "bench", "export", "--entries", "500", "--dir", t.TempDir())
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, c := range exportbench.Cases {
		if !strings.Contains(out, "export "+c.Name()) {
			t.Fatalf("table lacks %s:\n%s", c.Name(), out)
		}
	}
	if !strings.Contains(out, "/ raw cold") {
		t.Fatalf("table:\n%s", out)
	}
	if _, _, code := run(t, "bench", "export", "--entries", "0"); code != ExitUsage {
		t.Fatalf("zero entries: exit %d", code)
	}
}
