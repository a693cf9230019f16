//go:build cgo

package command

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sfstate/sfstate/internal/bench/checkpointbench"
)

func init() {
	RegisterBench(&cli.Command{
		Name: "checkpoint",
		Usage: "native RocksDB checkpoints on a local versitygw: first and incremental checkpoint, restore at the same " +
			"and a higher parallelism, canonical savepoint write and read of the same state, next to plain uploads/downloads of the same bytes",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "about 64 MiB of state instead of about 1 GiB"},
			&cli.IntFlag{Name: "keys", Usage: "keys written (default 10000000, --quick 640000)"},
			&cli.IntFlag{Name: "value-bytes", Usage: "bytes per value (default 100)"},
			&cli.IntFlag{Name: "parallelism", Usage: "subtasks / RocksDB instances (default 2)"},
			&cli.IntFlag{Name: "transfers", Usage: "uploads/downloads in flight per checkpoint or subtask (default 8)"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory (default: system temp)"},
		},
		Action: runBenchCheckpoint,
	})
}

func runBenchCheckpoint(c *cli.Context) error {
	g := GlobalsFrom(c)
	cfg := checkpointbench.DefaultBenchConfig(c.Bool("quick"))
	cfg.TempDir = c.String("dir")
	if n := c.Int("keys"); n != 0 {
		if n < 1000 || n > 1_000_000_000 {
			return Failf(ExitUsage, "bench checkpoint: --keys must be in [1000, 1e9]")
		}
		cfg.Keys = n
	}
	if n := c.Int("value-bytes"); n != 0 {
		if n < 8 || n > 1<<20 {
			return Failf(ExitUsage, "bench checkpoint: --value-bytes must be in [8, 1 MiB]")
		}
		cfg.ValueSize = n
	}
	if n := c.Int("parallelism"); n != 0 {
		if n < 1 || n > 64 {
			return Failf(ExitUsage, "bench checkpoint: --parallelism must be in [1, 64]")
		}
		cfg.Parallelism = n
	}
	if n := c.Int("transfers"); n != 0 {
		if n < 1 || n > 256 {
			return Failf(ExitUsage, "bench checkpoint: --transfers must be in [1, 256]")
		}
		cfg.Parallel = n
	}
	if !g.Quiet && !g.JSON {
		cfg.Log = func(format string, args ...any) {
			fmt.Fprintf(c.App.ErrWriter, "bench checkpoint: "+format+"\n", args...)
		}
	}
	rep, err := checkpointbench.RunBench(context.Background(), cfg)
	if err != nil {
		return Fail(ExitIO, fmt.Errorf("bench checkpoint: %w", err))
	}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, rep)
	}
	fmt.Fprintf(w, "Native checkpoints on versitygw (127.0.0.1): %d keys x %d B, parallelism %d, state %.1f MiB on the store\n",
		cfg.Keys, cfg.ValueSize, cfg.Parallelism, float64(rep.StateBytes)/(1<<20))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layout\toperation\tseconds\tsync ms\tfiles\tMiB\tMiB/s\tplain s\tplain MiB/s\t% of plain\tfetched/size\tentries/s\t")
	for _, r := range rep.Rows {
		sync, plain, plainRate, pct := "", "", "", ""
		if r.SyncMillis > 0 {
			sync = fmt.Sprintf("%.1f", r.SyncMillis)
		}
		if r.PlainSeconds > 0 {
			plain = fmt.Sprintf("%.2f", r.PlainSeconds)
			plainRate = fmt.Sprintf("%.1f", r.PlainMiBps)
			pct = fmt.Sprintf("%.0f%%", 100*r.PlainSeconds/r.Seconds)
		}
		if r.Amplification > 0 {
			pct += fmt.Sprintf("\tx%.2f", r.Amplification)
		} else {
			pct += "\t"
		}
		if r.EntriesPerSec > 0 {
			pct += fmt.Sprintf("\t%.0f", r.EntriesPerSec)
		} else {
			pct += "\t"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t\n", r.Layout, r.Name, r.Seconds, sync, r.Files, float64(r.Bytes)/(1<<20), r.MiBps, plain, plainRate, pct)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if r.Note != "" {
			fmt.Fprintf(w, "%s, %s: %s\n", r.Layout, r.Name, r.Note)
		}
	}
	fmt.Fprintln(w, "sync ms: time Take blocks (memtable flush + hard links); the upload continues in the background.")
	fmt.Fprintln(w, "fetched/size: bytes a restore downloads over the checkpoint size (1.00 = each byte once).")
	fmt.Fprintln(w, "key-group files: compactions cut SST files at key-group boundaries, a rescaled restore imports only its key groups' files.")
	fmt.Fprintln(w, "canonical savepoint: Flink's backend-independent format (Integer keys, String values), written to and read back from the same store.")
	fmt.Fprintln(w, "plain: the same bytes as the same number of objects, uploaded from / downloaded to local files, same transfers in flight.")
	return nil
}
