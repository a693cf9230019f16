package command

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/urfave/cli/v2"
)

func init() {
	RegisterBench(&cli.Command{
		Name:  "inspect",
		Usage: "savepoint read speed on a generated canonical savepoint: raw read (page cache and cold from disk) vs header-only scan, full decode (warm and cold; generic values and typed column batches), validation and check; then the same state in the heap backend's layout",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "small savepoint (200k entries) instead of 10M (~1.3 GB)"},
			&cli.Int64Flag{Name: "entries", Usage: "entries to generate (overrides --quick)"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "runs per phase (the fastest is reported)"},
			&cli.IntFlag{Name: "workers", Usage: "decode workers of the parallel phases (default: GOMAXPROCS)"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory on local disk (default: system temp)"},
		},
		Action: runBenchInspect,
	})
}

// BenchInspectResult is what `sfstate bench inspect --json` prints.
type BenchInspectResult struct {
	Entries   int64             `json:"entries"`
	DataBytes int64             `json:"dataBytes"`
	Phases    []scanbench.Phase `json:"phases"`
	// Heap is the same state in the heap backend's key-group layout (as a
	// hashmap checkpoint stores it), read with scanbench.LayoutPhases.
	Heap *BenchInspectLayout `json:"heapLayout,omitempty"`
}

// BenchInspectLayout is one more layout of the generated state.
type BenchInspectLayout struct {
	DataBytes int64             `json:"dataBytes"`
	Phases    []scanbench.Phase `json:"phases"`
}

func runBenchInspect(c *cli.Context) error {
	g := GlobalsFrom(c)
	n, err := benchEntriesRounds(c, "inspect")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(c.String("dir"), "sfstate-bench-inspect-*")
	if err != nil {
		return Fail(ExitIO, err)
	}
	defer os.RemoveAll(dir)
	if !g.Quiet && !g.JSON {
		fmt.Fprintf(c.App.ErrWriter, "bench inspect: generating %d entries in %s\n", n, dir)
	}
	gen, err := scanbench.Generate(dir, n)
	if err != nil {
		return Fail(ExitIO, err)
	}
	if c.Int("workers") < 0 || c.Int("workers") > 256 {
		return Failf(ExitUsage, "bench inspect: --workers must be 0..256")
	}
	phases, err := scanbench.RunWith(c.Context, gen, scanbench.Options{Rounds: c.Int("rounds"), Workers: c.Int("workers")})
	if err != nil {
		return Fail(ExitIO, err)
	}
	heapDir := filepath.Join(dir, "heap")
	if err := os.Mkdir(heapDir, 0o755); err != nil {
		return Fail(ExitIO, err)
	}
	if !g.Quiet && !g.JSON {
		fmt.Fprintf(c.App.ErrWriter, "bench inspect: the same %d entries in the heap backend's layout in %s\n", n, heapDir)
	}
	heapGen, err := scanbench.GenerateLayout(heapDir, n, true)
	if err != nil {
		return Fail(ExitIO, err)
	}
	heapPhases, err := scanbench.RunWith(c.Context, heapGen, scanbench.Options{Rounds: c.Int("rounds"), Workers: c.Int("workers"), Phases: scanbench.LayoutPhases})
	if err != nil {
		return Fail(ExitIO, fmt.Errorf("heap layout: %w", err))
	}
	res := BenchInspectResult{Entries: gen.Entries, DataBytes: gen.DataBytes, Phases: phases, Heap: &BenchInspectLayout{DataBytes: heapGen.DataBytes, Phases: heapPhases}}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, res)
	}
	fmt.Fprintf(w, "savepoint: %d entries, %s keyed-state file\n", gen.Entries, inspectBytes(gen.DataBytes))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tworkers\tcached\tseconds\tcpu s\tentries/s\tMB/s\tMB/cpu-s\t/ raw cached\t/ raw cold\tpeak RSS\tallocs/entry\t")
	for _, p := range phases {
		cold := "-"
		if p.RatioToColdRaw > 0 {
			cold = fmt.Sprintf("%.3f", p.RatioToColdRaw)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f%%\t%.2f\t%.2f\t%.0f\t%.1f\t%.1f\t%.3f\t%s\t%s\t%.2f\t\n", p.Name, p.Workers, 100*p.Cached, p.Seconds, p.CPUSeconds, p.EntriesPerSec, p.MBPerSec, p.MBPerCPUSecond,
			p.RatioToRaw, cold, inspectBytes(p.PeakRSS), float64(p.Allocs)/float64(max(p.Entries, 1)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nsame state, heap backend's key-group layout (%s keyed-state file) vs canonical:\n", inspectBytes(heapGen.DataBytes))
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tworkers\tcanonical entries/s\theap entries/s\theap / canonical\theap MB/s\theap allocs/entry\t")
	for _, hp := range heapPhases {
		if hp.Name == scanbench.PhaseRaw {
			continue
		}
		for _, p := range phases {
			if p.Name == hp.Name {
				fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.2f\t%.1f\t%.2f\t\n", hp.Name, hp.Workers, p.EntriesPerSec, hp.EntriesPerSec, hp.EntriesPerSec/p.EntriesPerSec, hp.MBPerSec,
					float64(hp.Allocs)/float64(max(hp.Entries, 1)))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "cached: share of the keyed file in the page cache at the start (mincore); cold phases evict it first (fsync + POSIX_FADV_DONTNEED)")
	fmt.Fprintln(w, "full decodes build every key and value; except \"kept values\" they recycle value memory between callbacks (ScanOptions.ReuseValues)")
	fmt.Fprintln(w, "\"columnar\" decodes into typed column batches (Savepoint.ScanColumns): same checks, no boxed values, whole batches handed over by the workers")
	return nil
}
