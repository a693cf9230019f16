//go:build cgo

package command

import (
	"fmt"
	"text/tabwriter"

	"github.com/sfstate/sfstate/internal/bench/rescalebench"
	"github.com/urfave/cli/v2"
)

func init() {
	RegisterBench(&cli.Command{
		Name: "rescale",
		Usage: "remote rescale of an engine checkpoint (versitygw behind toxiproxy, 40±5 ms each way, 1 Gbit/s during restores): " +
			"Flink-style whole handles vs sfstate rescale + restore of overlapping SST files (eager, and lazy: ready at open)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "small state (8,192 keys × 8 KiB), same proxy, latency and cap"},
			&cli.Float64Flag{Name: "scale", Usage: "multiply the key count (524,288 × 8 KiB = 4 GiB) by this factor"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory (default: system temp)"},
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output (also as a global flag)"},
		},
		Action: runBenchRescale,
	})
}

func runBenchRescale(c *cli.Context) error {
	g := GlobalsFrom(c)
	scale := c.Float64("scale")
	if c.IsSet("scale") && (scale <= 0 || scale > 4) {
		return Failf(ExitUsage, "bench rescale: --scale must be in (0, 4]")
	}
	cfg := rescalebench.DefaultBenchConfig(c.Bool("quick"), scale)
	cfg.TempDir = c.String("dir")
	if !g.Quiet && !g.JSON {
		cfg.Log = func(format string, args ...any) {
			fmt.Fprintf(c.App.ErrWriter, "bench rescale: "+format+"\n", args...)
		}
	}
	rep, err := rescalebench.RunBench(c.Context, cfg)
	if err != nil {
		return Fail(ExitIO, fmt.Errorf("bench rescale: %w", err))
	}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, rep)
	}
	fmt.Fprintf(w, "Remote rescale: %d keys × %d B, max parallelism %d, latency %v ± %v each way, cap %d KB/s during restores\n",
		cfg.Keys, cfg.ValueSize, cfg.MaxParallelism, cfg.Latency, cfg.Jitter, cfg.BandwidthKBps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "direction\tstate MiB\tbaseline MiB\tsfstate MiB\tbytes ratio\tbaseline ready s\tsfstate ready s (lazy)\tspeedup\teager ready s\teager speedup\tall local s\tlimit s\tall local vs limit\trescale s\trescale bytes\t")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.3f\t%.2f\t%.3f\t%.1fx\t%.2f\t%.2fx\t%.2f\t%.2f\t%.2fx\t%.3f\t%d\t\n",
			r.Direction, rescaleMiB(r.StateBytes), rescaleMiB(r.BaselineBytes), rescaleMiB(r.SfstateBytes), float64(r.SfstateBytes)/float64(max(r.BaselineBytes, 1)),
			r.BaselineReadyS, r.SfstateReadyS, r.BaselineReadyS/max(r.SfstateReadyS, 1e-9), r.EagerReadyS, r.BaselineReadyS/max(r.EagerReadyS, 1e-9),
			r.SfstateAllLocalS, r.LimitS, r.SfstateAllLocalS/max(r.LimitS, 1e-9), r.RescaleSeconds, r.MetadataBytes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "%s lazy: first read of a not-yet-local key group %.3f s (its unit: download %.2f s, adoption %.2f s); %d units adopted in %d ingestions (slowest subtask: last file local at %.2f s; import %.2f s, rewrite %.2f s, ingest %.2f s); eager (%.1f MiB) phases, slowest subtask each: download %.2f s, import/open %.2f s, clip %.2f s, copy %.2f s; %d subtasks imported, %d keys copied\n",
			r.Direction, r.FirstReadS, r.FirstReadFetchS, r.FirstReadAdoptS, r.LazyUnits, r.LazyBatches, r.LazyFetchedS, r.LazyImportS, r.LazyRewriteS, r.LazyIngestS, rescaleMiB(r.EagerBytes), r.DownloadS, r.BuildS, r.ClipS, r.CopyS, r.ImportedSubset, r.KeysCopied)
	}
	fmt.Fprintln(w, "with local reuse (separate: new subtask i also given old subtask i's local directory; identical SST files taken from there, the rest fetched):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "direction\tremote MiB\tlocal MiB\tremote vs baseline\tready s\tall local s\t")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t%.3f\t%.2f\t\n", r.Direction, rescaleMiB(r.ReuseRemoteBytes), rescaleMiB(r.ReuseLocalBytes),
			float64(r.ReuseRemoteBytes)/float64(max(r.BaselineBytes, 1)), r.ReuseReadyS, r.ReuseAllLocalS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "targets: sfstate bytes <= 0.5 x baseline, ready >= 2x sooner (stretch 7x), all local <= 1.25 x limit\nnote: %s\n", rep.Note)
	return nil
}

func rescaleMiB(n int64) float64 { return float64(n) / (1 << 20) }
