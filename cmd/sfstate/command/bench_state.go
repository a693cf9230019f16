//go:build cgo

package command

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sfstate/sfstate/internal/bench/statebench"
	"github.com/urfave/cli/v2"
)

func init() {
	RegisterBench(&cli.Command{
		Name:  "state",
		Usage: "bundled state engine vs per-record RocksDB: Nexmark-shaped workloads, Flink state micro-benchmarks, slot memory",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "small sizes (seconds, not minutes)"},
			&cli.IntFlag{Name: "events", Usage: "events per workload (default 2000000, --quick 200000)"},
			&cli.IntFlag{Name: "large-events", Usage: "events of the long q4 and q17 runs, each also run bundled alone for its peak RSS, with 1 GiB of managed memory per slot (default 10000000, --quick 1000000; -1 skips them)"},
			&cli.IntFlag{Name: "bundle", Value: 5000, Usage: "events per bundle (a mini-batch)"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory (default: system temp)"},
			&cli.IntFlag{Name: "micro-keys", Usage: "keys set up per micro-benchmark (default 200000, --quick 20000)"},
			&cli.IntFlag{Name: "micro-ops", Usage: "operations per micro-benchmark (default 500000, --quick 50000)"},
			&cli.BoolFlag{Name: "micro-only", Usage: "run only the Flink state micro-benchmarks"},
			&cli.BoolFlag{Name: "memory-only", Usage: "run only the 1/4/16-operator slot memory comparison"},
			&cli.Int64Flag{Name: "memory-mib", Usage: "MiB written in the memory comparison (default 32)"},
		},
		Action: runBenchState,
	})
}

func runBenchState(c *cli.Context) error {
	g := GlobalsFrom(c)
	cfg := statebench.StateBenchConfig{
		Dir:         c.String("dir"),
		Events:      2_000_000,
		LargeEvents: 10_000_000,
		BundleSize:  c.Int("bundle"),
		MicroKeys:   200_000,
		MicroOps:    500_000,
		MicroOnly:   c.Bool("micro-only"),
		MemoryOnly:  c.Bool("memory-only"),
	}
	if c.Bool("quick") {
		cfg.Events, cfg.LargeEvents, cfg.MicroKeys, cfg.MicroOps = 200_000, 1_000_000, 20_000, 50_000
	}
	switch n := c.Int("large-events"); {
	case n < 0:
		cfg.LargeEvents = 0
	case n > 0:
		cfg.LargeEvents = n
	}
	if n := c.Int("events"); n > 0 {
		cfg.Events = n
	}
	if n := c.Int("micro-keys"); n > 0 {
		cfg.MicroKeys = n
	}
	if n := c.Int("micro-ops"); n > 0 {
		cfg.MicroOps = n
	}
	if n := c.Int64("memory-mib"); n > 0 {
		cfg.MemoryBytes = n << 20
	}
	if cfg.BundleSize <= 0 {
		return Failf(ExitUsage, "bench state: --bundle must be positive")
	}
	if !g.Quiet && !g.JSON {
		cfg.Progress = func(step string) { fmt.Fprintf(c.App.ErrWriter, "bench state: %s done\n", step) }
	}
	res, err := statebench.RunStateBench(cfg)
	if err != nil {
		return Fail(ExitIO, fmt.Errorf("bench state: %w", err))
	}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, res)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if cfg.MicroOnly && !cfg.MemoryOnly {
		return printMicro(w, tw, cfg, res)
	}
	if cfg.MemoryOnly {
		return printMemory(w, tw, res)
	}
	fmt.Fprintf(w, "Nexmark-shaped state workloads (%d events, bundles of %d, WAL off)\n", cfg.Events, cfg.BundleSize)
	fmt.Fprintln(tw, "workload\tevents\tper-record ev/s\tbundled ev/s\tspeedup\tthread-CPU speedup\tcommit p50 ms\tcommit p99 ms\tbundled alone peak RSS MiB\t")
	geo := false
	for _, r := range res.Workloads {
		if r.Events != cfg.Events && !geo {
			fmt.Fprintf(tw, "geomean\t\t\t\t%.2fx\t%.2fx\t\t\t\t\n", res.GeomeanSpeedup, res.GeomeanCPU)
			geo = true
		}
		rss := ""
		switch {
		case r.BundlePeakRSS > 0:
			rss = fmt.Sprintf("%.1f", float64(r.BundlePeakRSS)/(1<<20))
		case r.BundlePeakRSS < 0:
			rss = "n/a"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.2fx\t%.2fx\t%.3f\t%.3f\t%s\t\n", r.Name, r.Events, r.PerRecordEPS, r.BundleEPS, r.Speedup, r.CPUSpeedup, r.CommitP50Ms, r.CommitP99Ms, rss)
	}
	if !geo {
		fmt.Fprintf(tw, "geomean\t\t\t\t%.2fx\t%.2fx\t\t\t\t\n", res.GeomeanSpeedup, res.GeomeanCPU)
	}
	tw.Flush()
	fmt.Fprintln(w, "(geomean over the first five; peak RSS: the whole process while the bundled path alone ran the workload again, peak reset first)")
	fmt.Fprintln(w)
	if err := printMicro(w, tw, cfg, res); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return printMemory(w, tw, res)
}

func printMemory(w io.Writer, tw *tabwriter.Writer, res *statebench.StateBenchResult) error {
	fmt.Fprintf(w, "Native memory, operators sharing one slot (same write volume)\n")
	fmt.Fprintln(tw, "write buffer\toperators\tshare\tarena block\ttotal native\tblock cache usage\tcache capacity\tmemtables\ttable readers\twbm usage\twbm capacity\t")
	for _, m := range res.Memory {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", m.WriteBufferSize, m.Operators, m.WriteBufferShare, m.ArenaBlockSize, m.TotalNative, m.CacheUsage, m.CacheCapacity, m.MemTables, m.TableReadersMem, m.WriteBufferUsage, m.WriteBufferCap)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "(total native = block cache usage, memtables included, + table readers; each family's write buffer is min(configured, share of the wbm capacity), its arena block 1/8 of that)")
	return nil
}

func printMicro(w io.Writer, tw *tabwriter.Writer, cfg statebench.StateBenchConfig, res *statebench.StateBenchResult) error {
	fmt.Fprintf(w, "Flink state micro-benchmarks (%d keys, %d ops, ops/ms)\n", cfg.MicroKeys, cfg.MicroOps)
	fmt.Fprintln(tw, "op\tper-op (skip list)\tper-op (same options)\tengine\tspeedup\tthread-CPU speedup\tCPU vs skip list\t")
	for _, m := range res.Micro {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.2fx\t%.2fx\t%.2fx\t\n", m.Op, m.PerOpSkipListOpsMs, m.PerOpOpsMs, m.EngineOpsMs, m.Speedup, m.CPUSpeedup, m.SkipListCPUSpeedup)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "(same options: the per-op path on the engine's finger memtable; skip list: on RocksDB's default memtable, as Flink runs; speedups are engine over same options unless named)")
	return nil
}
