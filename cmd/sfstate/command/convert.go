package command

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sfstate/sfstate/convert"
	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "convert",
		Usage:     "rewrite a native snapshot (heap layout or RocksDB) as a canonical savepoint",
		ArgsUsage: "SRC --to canonical [--out DST]",
		Description: `Writes a canonical savepoint of SRC, which Flink restores into any state
backend (hashmap or RocksDB), at DST. SRC may be a NATIVE savepoint or a
retained checkpoint of the hashmap backend (heap key-group layout, also heap
savepoints of Flink before 1.13) or of the RocksDB backend (incremental or
full native handles; needs a build with RocksDB support), or a job's
checkpoint directory (the newest completed checkpoint; --checkpoint N picks
one).

Every keyed operator keeps its parallelism and max parallelism and gets one
canonical file per subtask (tag-7 handles) with the subtask's own keyed-state
header: the same serializer snapshots, entries, key groups, timers and TTL
timestamps. Operator state and everything else in _metadata pass through
unchanged; the files it references are copied into DST, so DST stands on its
own. The new _metadata records a savepoint of format CANONICAL.

Before publishing, the decoded content of every rewritten operator is
compared with SRC (per state: entry count and digest). SRC is never written;
DST's data files are written first and its _metadata last, never replacing an
existing one, so a failed or interrupted run leaves no _metadata.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "to", Usage: "target format: `canonical` (required)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "destination directory or s3:// prefix (default: SRC-canonical)"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "files copied at once"},
			allowRootFlag, mapFlag, checkpointFlag,
		},
		Action: runConvert,
	})
}

func runConvert(c *cli.Context) error {
	if c.NArg() != 1 {
		return Failf(ExitUsage, "convert takes exactly one source snapshot (got %d arguments)", c.NArg())
	}
	switch to := strings.ToLower(c.String("to")); to {
	case "canonical":
	case "":
		return Failf(ExitUsage, "--to canonical is required (the only target format)")
	default:
		return Failf(ExitUsage, "--to %q: the only target format is canonical", c.String("to"))
	}
	g := GlobalsFrom(c)
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	arg := c.Args().First()
	srcLoc, err := s3.ParseURL(arg)
	if err != nil {
		return Fail(ExitUsage, err)
	}
	out := c.String("out")
	if out == "" {
		out = strings.TrimSuffix(strings.TrimSuffix(arg, "/"+savepoint.MetadataName), "/") + "-canonical"
	}
	dstLoc, err := s3.ParseURL(out)
	if err != nil {
		return Fail(ExitUsage, err)
	}
	if dstLoc.NamedMetadata {
		return Failf(ExitUsage, "--out names a directory, not a _metadata file: %s", out)
	}
	if snapshotURI(srcLoc) == snapshotURI(dstLoc) {
		return Failf(ExitUsage, "--out must differ from the source (the source is never modified)")
	}
	sp, err := openSavepointArg(ctx, c, arg)
	if err != nil {
		return err
	}
	if strings.TrimSuffix(sp.DirURI(), "/") == snapshotURI(dstLoc) {
		return Failf(ExitUsage, "--out must differ from the source %s (the source is never modified)", sp.DirURI())
	}
	dst, err := s3.OpenLocation(ctx, dstLoc, s3.OpenOptions{S3: s3Options(c), Create: true})
	if err != nil {
		return Fail(ExitIO, err)
	}
	req := convert.Request{Src: sp, Dst: dst, Concurrency: max(1, c.Int("concurrency"))}
	bar := progress.New(c.App.ErrWriter, g.JSON || g.Quiet || g.NoProgress, "converting", 0, "B")
	if bar != nil {
		req.Progress = bar
	}
	res, err := convert.Run(ctx, req)
	bar.Done()
	if err != nil {
		if errors.Is(err, convert.ErrNoRocksDB) {
			return Fail(ExitUsage, err)
		}
		return Fail(ExitIO, err) // ExitCode classifies by the error
	}
	w := c.App.Writer
	if g.JSON {
		if err := writeJSON(w, res); err != nil {
			return Fail(ExitIO, err)
		}
		return nil
	}
	if !g.Quiet {
		for _, o := range res.Operators {
			fmt.Fprintf(w, "operator %s (%s): parallelism %d, max parallelism %d, %d keyed handles -> %d canonical files\n",
				o.Operator, o.Kind, o.NewParallelism, o.MaxParallelism, o.OldHandles, o.NewHandles)
		}
	}
	fmt.Fprintf(w, "%s: canonical savepoint written (%s: metadata %s, state files %s, copied %s) from %s of state; %d new files, %d copied\n",
		res.Destination, rescaleBytes(res.BytesWritten), rescaleBytes(res.MetadataBytes), rescaleBytes(res.RewrittenBytes), rescaleBytes(res.CopiedBytes),
		rescaleBytes(res.StateBytes), res.NewFiles, res.CopiedFiles)
	if res.Verified {
		fmt.Fprintf(w, "content verified before publishing: %d entries, per-state counts and digests equal\n", res.Entries)
	}
	return nil
}
