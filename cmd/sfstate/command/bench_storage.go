package command

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sfstate/sfstate/internal/bench/s3bench"
)

func init() {
	RegisterBench(&cli.Command{
		Name: "storage",
		Usage: "S3 storage layer against a local versitygw, with and without 40ms latency (toxiproxy), " +
			"next to raw loopback TCP throughput",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "small sizes (32 MiB blob, short range runs)"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory for the server's data (default: system temp)"},
			&cli.IntFlag{Name: "blob-mib", Usage: "upload/download object size in MiB (default 256, --quick 32)"},
			&cli.DurationFlag{Name: "range-time", Usage: "duration of each range-read measurement (default 2s, --quick 600ms)"},
		},
		Action: runBenchStorage,
	})
}

func runBenchStorage(c *cli.Context) error {
	g := GlobalsFrom(c)
	cfg := s3bench.DefaultConfig(c.Bool("quick"))
	cfg.TempDir = c.String("dir")
	if n := c.Int("blob-mib"); n != 0 {
		if n < 2 || n > 64<<10 {
			return Failf(ExitUsage, "bench storage: --blob-mib must be in [2, 65536]")
		}
		cfg.BlobSize = int64(n) << 20
	}
	if d := c.Duration("range-time"); d != 0 {
		if d < 0 || d > time.Hour {
			return Failf(ExitUsage, "bench storage: --range-time must be in (0, 1h]")
		}
		cfg.RangeTime = d
	}
	if !g.Quiet && !g.JSON {
		cfg.Log = func(format string, args ...any) {
			fmt.Fprintf(c.App.ErrWriter, "bench storage: "+format+"\n", args...)
		}
	}
	rep, err := s3bench.Run(context.Background(), cfg)
	if err != nil {
		return Fail(ExitIO, fmt.Errorf("bench storage: %w", err))
	}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, rep)
	}
	fmt.Fprintf(w, "Storage layer vs versitygw on 127.0.0.1 (latency rows: toxiproxy, server-to-client delay;\n"+
		"latency cost = same proxy without latency / with latency, target <= 2x)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tnetwork\tMiB/s\tops/s\tin flight\tloopback MiB/s\t% of loopback\tslowdown vs direct\tlatency cost\t")
	for _, r := range rep.Rows {
		ops, pct, slow, lat := "", "", "", ""
		if r.OpsPerSec > 0 {
			ops = fmt.Sprintf("%.0f", r.OpsPerSec)
		}
		if r.LoopbackMiBps > 0 {
			pct = fmt.Sprintf("%.1f%%", 100*r.MiBps/r.LoopbackMiBps)
		}
		if r.VsDirect > 0 {
			slow = fmt.Sprintf("%.2fx", r.VsDirect)
		}
		if r.VsNoLatency > 0 {
			lat = fmt.Sprintf("%.2fx", r.VsNoLatency)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%s\t%d\t%.0f\t%s\t%s\t%s\t\n", r.Name, r.Network, r.MiBps, ops, r.Concurrency, r.LoopbackMiBps, pct, slow, lat)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	cs := rep.Counters
	fmt.Fprintf(w, "\nrequests %d (%v), retries %d, read %d MiB, written %d MiB\n",
		cs.TotalRequests(), cs.Requests, cs.Retries, cs.BytesRead>>20, cs.BytesWritten>>20)
	return nil
}
