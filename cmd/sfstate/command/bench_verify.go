//go:build cgo

package command

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/sfstate/sfstate/internal/bench/verifybench"
	"github.com/urfave/cli/v2"
)

func init() {
	RegisterBench(&cli.Command{
		Name:  "verify",
		Usage: "digest throughput of sfstate verify on a generated savepoint: one process on one core vs 2 shards in 2 processes",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "small savepoint (seconds, not minutes)"},
			&cli.IntFlag{Name: "keys", Usage: "grouping keys to generate (default ~1 GiB of state, --quick 20000)"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory (default: system temp)"},
		},
		Action: runBenchVerify,
	})
}

func runBenchVerify(c *cli.Context) error {
	g := GlobalsFrom(c)
	keys := c.Int("keys")
	if keys < 0 {
		return Failf(ExitUsage, "bench verify: --keys must not be negative")
	}
	if keys == 0 {
		keys = 1_600_000 // ~1 GiB of canonical streams (~690 bytes per key)
		if c.Bool("quick") {
			keys = 20_000
		}
	}
	self, err := os.Executable()
	if err != nil {
		return Fail(ExitIO, err)
	}
	ctx := c.Context
	if ctx == nil {
		ctx = context.Background()
	}
	res, err := verifybench.Run(ctx, verifybench.Config{Keys: keys, Dir: c.String("dir"), Exe: self, Logf: func(format string, args ...any) {
		if !g.Quiet && !g.JSON {
			fmt.Fprintf(c.App.ErrWriter, "bench verify: "+format+"\n", args...)
		}
	}})
	if err != nil {
		return Fail(ExitIO, err)
	}
	w := c.App.Writer
	if g.JSON {
		if err := writeJSON(w, res); err != nil {
			return Fail(ExitIO, err)
		}
	} else {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "savepoint\t%d keys, %d entries, %.1f MB\n", res.Keys, res.Entries, float64(res.Bytes)/1e6)
		fmt.Fprintf(tw, "1 process, 1 core\t%.2f s\t%.0f entries/s\t%.1f MB/s\n", res.OneSeconds, res.EntriesPerSec, res.MBPerSec)
		fmt.Fprintf(tw, "2 shards, 2 processes\t%.2f s\tspeed-up %.2fx\tmerged digest equal: %v\n", res.ShardSeconds, res.Speedup, res.MergeOK)
		fmt.Fprintf(tw, "CPU time\t%.2f s one process (%.0f entries/CPU-s)\t%.2f s slower shard\tspeed-up with a core per shard %.2fx\n", res.OneCPUSeconds, res.EntriesPerCPUSecond, res.ShardCPUSeconds, res.CPUSpeedup)
		if err := tw.Flush(); err != nil {
			return Fail(ExitIO, err)
		}
	}
	if !res.MergeOK {
		return Failf(ExitCheckFailed, "bench verify: merged shard digests differ from the whole")
	}
	return nil
}
