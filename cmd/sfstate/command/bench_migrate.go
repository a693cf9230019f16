//go:build cgo

package command

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sfstate/sfstate/internal/bench/migratebench"
	"github.com/sfstate/sfstate/migrate"
)

func init() {
	RegisterBench(&cli.Command{
		Name: "migrate",
		Usage: "bucket → record join-state migration of native checkpoints (uniform and skewed keys, payload 0 and 256 B) " +
			"on local disk and a local versitygw, SST writer + ingest vs write batches, next to reading and writing the same bytes",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "24 MiB of bucket state instead of 2 GiB"},
			&cli.Int64Flag{Name: "bucket-mib", Usage: "bucket state size in MiB (default 2048, --quick 24)"},
			&cli.BoolFlag{Name: "no-s3", Usage: "skip the versitygw measurements"},
			&cli.StringFlag{Name: "mode", Usage: "only this write mode: sst or put"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory (default: system temp)"},
		},
		Action: runBenchMigrate,
	})
}

func runBenchMigrate(c *cli.Context) error {
	g := GlobalsFrom(c)
	cfg := migratebench.DefaultBenchConfig(c.Bool("quick"))
	cfg.Dir = c.String("dir")
	cfg.NoS3 = c.Bool("no-s3")
	if n := c.Int64("bucket-mib"); n != 0 {
		if n < 1 || n > 1<<20 {
			return Failf(ExitUsage, "bench migrate: --bucket-mib must be in [1, 1048576]")
		}
		cfg.BucketBytes = n << 20
	}
	switch m := c.String("mode"); m {
	case "":
	case "sst", "put":
		cfg.Modes = []migrate.WriteMode{migrate.WriteMode(m)}
	default:
		return Failf(ExitUsage, "bench migrate: --mode must be sst or put")
	}
	if !g.Quiet && !g.JSON {
		cfg.Log = func(format string, args ...any) {
			fmt.Fprintf(c.App.ErrWriter, "bench migrate: "+format+"\n", args...)
		}
	}
	rep, err := migratebench.RunBench(context.Background(), cfg)
	if err != nil {
		return Fail(ExitIO, fmt.Errorf("bench migrate: %w", err))
	}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, rep)
	}
	fmt.Fprintf(w, "Bucket → record migration, %.0f MiB of bucket state per shape, %d cores\n", float64(cfg.BucketBytes)/(1<<20), rep.Cores)
	if rep.S3Skipped != "" {
		fmt.Fprintf(w, "versitygw skipped: %s\n", rep.S3Skipped)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tshape\tpayload\tmode\trows\tseconds\trows/s\trows/cpu-s\tMB/s\tMiB in\tMiB out\tlimit s\t% of limit\t")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%.2f\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.2f\t%.0f%%\t\n", r.Store, r.Shape, r.Payload, r.Mode, r.Rows,
			r.Seconds, r.RowsPerSec, r.RowsPerCPUSec, r.MBPerSec, float64(r.FileBytesIn)/(1<<20), float64(r.FileBytesOut)/(1<<20), r.LimitSeconds, r.PctOfLimit)
	}
	tw.Flush()
	fmt.Fprintln(w, "rows/cpu-s: rows per second of process CPU time (target ≥ 1,000,000 per core on local disk); limit: read the source")
	fmt.Fprintln(w, "bucket SST bytes and write the record SST bytes as plain files/objects; % of limit = limit time / migration time")
	return nil
}
