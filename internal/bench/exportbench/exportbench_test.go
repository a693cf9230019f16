package exportbench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/scanbench"
)

// TestRun runs the benchmark on a small savepoint (SFSTATE_EXPORTBENCH_ENTRIES
// entries, default 3000): every phase is there, in order, with every row
// written and positive rates.
func TestRun(t *testing.T) {
	n := int64(3000)
	if s := os.Getenv("SFSTATE_EXPORTBENCH_ENTRIES"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 1 {
			t.Fatalf("SFSTATE_EXPORTBENCH_ENTRIES=%q", s)
		}
		n = v
	}
	g, err := scanbench.Generate(t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), g, Options{Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != n || res.DataBytes != g.DataBytes || res.Workers < 1 {
		t.Fatalf("%+v", res)
	}
	var names []string
	for _, p := range res.Phases {
		names = append(names, p.Name)
		t.Logf("%-28s %6.3fs cpu %6.3fs %10.0f rows/s %8.1f MB/s %8.1f MB/cpu-s ratio %.3f out %d peak %d MiB",
			p.Name, p.Seconds, p.CPUSeconds, p.RowsPerSec, p.MBPerSec, p.MBPerCPUSecond, p.RatioToColdRaw, p.OutputBytes, p.PeakRSS>>20)
		if p.Rows != n || p.RowsPerSec <= 0 || p.MBPerSec <= 0 || p.PeakRSS <= 0 {
			t.Errorf("%+v", p)
		}
		if p.Format != "" && p.OutputBytes <= 0 {
			t.Errorf("%s wrote nothing", p.Name)
		}
	}
	i := 0
	if names[0] == PhaseRawCold {
		i = 2 // the cold phases ran (the page cache can be dropped here)
		if names[1] != PhaseDecodeCold || res.Phases[2].RatioToColdRaw <= 0 {
			t.Fatalf("phases %v", names)
		}
	}
	if len(names) != i+len(Cases) {
		t.Fatalf("phases %v", names)
	}
	for j, c := range Cases {
		if names[i+j] != "export "+c.Name() {
			t.Fatalf("phases %v", names)
		}
	}
}
