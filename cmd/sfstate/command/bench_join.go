//go:build cgo

package command

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sfstate/sfstate/internal/bench/joinbench"
	"github.com/urfave/cli/v2"
)

func init() {
	RegisterBench(&cli.Command{
		Name:  "join",
		Usage: "inner-join state: bucket layout vs record layout (no reuse, 8 MiB / 64 MiB allowance, pool reservations)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "small shapes (seconds, not minutes)"},
			&cli.IntFlag{Name: "trials", Value: 5, Usage: "measured trials per policy (median reported)"},
			&cli.IntFlag{Name: "warmup", Value: 1, Usage: "warm-up trials per policy"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory (default: system temp)"},
			&cli.IntFlag{Name: "inputs", Usage: "input rows per shape (default 100000, --quick 20000)"},
			&cli.IntFlag{Name: "group-rows", Usage: "rows of the one large group (default 50000)"},
			&cli.StringSliceFlag{Name: "shapes", Usage: "run only these shapes: unique, repeated, skewed, group50k, optionally /0 or /256 (comma-separated or repeated)"},
			&cli.BoolFlag{Name: "prefix-bloom", Value: true, Usage: "record layout with its group-prefix extractor and prefix bloom filters (the default; --prefix-bloom=false measures without)"},
		},
		Action: runBenchJoin,
	})
}

func runBenchJoin(c *cli.Context) error {
	g := GlobalsFrom(c)
	if c.Int("trials") <= 0 {
		return Failf(ExitUsage, "bench join: --trials must be positive")
	}
	if c.Int("inputs") < 0 || c.Int("group-rows") < 0 || c.Int("warmup") < 0 {
		return Failf(ExitUsage, "bench join: --inputs, --group-rows and --warmup must not be negative")
	}
	warmup := c.Int("warmup")
	if warmup == 0 {
		warmup = -1 // none
	}
	cfg := joinbench.JoinBenchConfig{Dir: c.String("dir"), Quick: c.Bool("quick"), Trials: c.Int("trials"), Warmup: warmup,
		Inputs: c.Int("inputs"), GroupRows: c.Int("group-rows"),
		Shapes: c.StringSlice("shapes"), NoPrefixBloom: !c.Bool("prefix-bloom")}
	if !g.Quiet && !g.JSON {
		cfg.Progress = func(step string) { fmt.Fprintf(c.App.ErrWriter, "bench join: %s done\n", step) }
	}
	res, err := joinbench.RunJoinBench(cfg)
	if errors.Is(err, joinbench.ErrUnknownShape) {
		return Fail(ExitUsage, fmt.Errorf("bench join: --shapes: %w", err))
	}
	if err != nil {
		return Fail(ExitIO, fmt.Errorf("bench join: %w", err))
	}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, res)
	}
	return printJoinBench(w, res, cfg.Trials)
}

func printJoinBench(w io.Writer, res *joinbench.JoinBenchResult, trials int) error {
	orig := map[string]joinbench.JoinBenchRow{}
	for _, o := range res.Original {
		orig[fmt.Sprintf("%s/%d", o.Shape, o.Payload)] = o
	}
	fmt.Fprintf(w, "Inner-join state, median of %d trials in seconds (64 MiB pool, 8 MiB block cache, 2 x 16 MiB write buffers, no compression)\n", trials)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape/payload\tinputs\toutput rows\tbucket\trecord no reuse\trecord 8 MiB\trecord 64 MiB\trecord pool\tpool/bucket\t|\torig bucket\torig no reuse\torig 8 MiB\torig 64 MiB\torig 64MiB/bucket\t")
	for _, r := range res.Rows {
		name := fmt.Sprintf("%s/%d", r.Shape, r.Payload)
		o := orig[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.2fx\t|\t%.4f\t%.4f\t%.4f\t%.4f\t%.2fx\t\n",
			name, r.Inputs, r.OutputRows, r.Bucket, r.RecordNoReuse, r.Record8MiB, r.Record64MiB, r.RecordPool,
			ratio(r.RecordPool, r.Bucket), o.Bucket, o.RecordNoReuse, o.Record8MiB, o.Record64MiB, ratio(o.Record64MiB, o.Bucket))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "pool/bucket: record with pool reservations relative to bucket (lower is better); orig: the original engine's medians (other hardware)")
	fmt.Fprintf(w, "\nProcess CPU seconds (user + system, median of the same trials)\n")
	fmt.Fprintln(tw, "shape/payload\tbucket\trecord no reuse\trecord 8 MiB\trecord 64 MiB\trecord pool\tpool/bucket\t")
	for _, r := range res.Rows {
		if r.CPU == nil {
			continue
		}
		c := r.CPU
		fmt.Fprintf(tw, "%s/%d\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.2fx\t\n", r.Shape, r.Payload,
			c.Bucket, c.RecordNoReuse, c.Record8MiB, c.Record64MiB, c.RecordPool, ratio(c.RecordPool, c.Bucket))
	}
	return tw.Flush()
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
