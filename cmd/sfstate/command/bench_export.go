package command

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/sfstate/sfstate/internal/bench/exportbench"
	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/urfave/cli/v2"
)

func init() {
	RegisterBench(&cli.Command{
		Name:  "export",
		Usage: "export speed on the inspect benchmark's generated savepoint: cold raw read and cold columnar decode beside Parquet (zstd, snappy), Arrow IPC, CSV and JSON lines exports, each from a cold page cache",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "small savepoint (200k entries) instead of 10M (~1.3 GB)"},
			&cli.Int64Flag{Name: "entries", Usage: "entries to generate (overrides --quick)"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "runs per phase (the fastest is reported)"},
			&cli.IntFlag{Name: "workers", Usage: "decode workers (default: GOMAXPROCS)"},
			&cli.IntFlag{Name: "row-group-rows", Usage: "rows per row group / record batch (default: export's default)"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory on local disk (default: system temp)"},
		},
		Action: runBenchExport,
	})
}

func runBenchExport(c *cli.Context) error {
	g := GlobalsFrom(c)
	n, err := benchEntriesRounds(c, "export")
	if err != nil {
		return err
	}
	if c.Int("workers") < 0 || c.Int("workers") > 256 {
		return Failf(ExitUsage, "bench export: --workers must be 0..256")
	}
	if c.Int("row-group-rows") < 0 || c.Int("row-group-rows") > 1<<24 {
		return Failf(ExitUsage, "bench export: --row-group-rows must be 0..2^24")
	}
	dir, err := os.MkdirTemp(c.String("dir"), "sfstate-bench-export-*")
	if err != nil {
		return Fail(ExitIO, err)
	}
	defer os.RemoveAll(dir)
	logf := func(format string, args ...any) {
		if !g.Quiet && !g.JSON {
			fmt.Fprintf(c.App.ErrWriter, "bench export: "+format+"\n", args...)
		}
	}
	spDir := dir + string(os.PathSeparator) + "savepoint"
	if err := os.Mkdir(spDir, 0o755); err != nil {
		return Fail(ExitIO, err)
	}
	logf("generating %d entries in %s", n, spDir)
	gen, err := scanbench.Generate(spDir, n)
	if err != nil {
		return Fail(ExitIO, err)
	}
	res, err := exportbench.Run(c.Context, gen, exportbench.Options{Rounds: c.Int("rounds"), Workers: c.Int("workers"), RowGroupRows: c.Int("row-group-rows"),
		Progress: func(phase string) { logf("%s", phase) }})
	if err != nil {
		return Fail(ExitIO, err)
	}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, res)
	}
	fmt.Fprintf(w, "savepoint: %d entries, %s keyed-state file; %d decode workers, %d rows per row group, best of %d\n",
		res.Entries, inspectBytes(res.DataBytes), res.Workers, res.RowGroupRows, res.Rounds)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tcached\tseconds\tcpu s\trows/s\tMB/s\tMB/cpu-s\t/ raw cold\toutput\tpeak RSS\t")
	for _, p := range res.Phases {
		ratio, out := "-", "-"
		if p.RatioToColdRaw > 0 {
			ratio = fmt.Sprintf("%.3f", p.RatioToColdRaw)
		}
		if p.Format != "" {
			out = inspectBytes(p.OutputBytes)
		}
		fmt.Fprintf(tw, "%s\t%.0f%%\t%.2f\t%.2f\t%.0f\t%.1f\t%.1f\t%s\t%s\t%s\t\n", p.Name, 100*p.Cached, p.Seconds, p.CPUSeconds, p.RowsPerSec, p.MBPerSec, p.MBPerCPUSecond,
			ratio, out, inspectBytes(p.PeakRSS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "MB/s: keyed-state file bytes per second; / raw cold: over the cold raw read of the same file (evicted with fsync + POSIX_FADV_DONTNEED before each round)")
	fmt.Fprintln(w, "exports write one Parquet/Arrow/CSV/JSONL table (plus _states, _operators, manifest) to the scratch directory; output is their total size")
	return nil
}
