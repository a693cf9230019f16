package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/sfstate/sfstate/checkpoint/manifest"
	"github.com/sfstate/sfstate/convert"
	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify/restore"
	"github.com/urfave/cli/v2"
)

// convertEngine converts a native checkpoint of the engine (checkpoint id
// in a store rooted where shared/ and chk-<id>/ live); set by
// convert_cgo.go when the engine is built in, nil otherwise.
var convertEngine func(ctx context.Context, st s3.Storage, id int64, dst s3.Storage, o restore.ConvertOptions) (*restore.ConvertResult, error)

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
one). SRC may also be a native checkpoint of sfstate's engine (.../chk-N
with manifest.json beside _metadata; needs RocksDB support) taken with a
schema, whose meta-state stream names the states' Flink serializers (and,
for a join-record state, its join sides): every subtask is restored into a
scratch RocksDB backend and exported in Flink's encodings, a join-record
state as Flink's two join states (see below for the checks); a checkpoint
taken without a schema (byte-array serializers) is refused (exit 4).

Every keyed operator keeps its parallelism and max parallelism and gets one
canonical file per subtask (tag-7 handles) with the subtask's own keyed-state
header: the same serializer snapshots, entries, key groups, timers and TTL
timestamps. Operator state and everything else in _metadata pass through
unchanged; the files it references are copied into DST, so DST stands on its
own. The new _metadata records a savepoint of format CANONICAL.

Before publishing, the decoded content of every rewritten operator is
compared with SRC (per state: entry count and digest). SRC is never written;
DST's data files are written first and its _metadata last, never replacing an
existing one, so a failed or interrupted run leaves no _metadata. For an
engine checkpoint the entries per state and key group of the written
savepoint, read back and decoded, are compared with the restored backends;
scratch (restored backends, staged streams; sfstate-tmp-convert-* under
--temp-dir) is removed in every case, and uploads of a failed run deleted.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "to", Usage: "target format: `canonical` (required)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "destination directory or s3:// prefix (default: SRC-canonical)"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "files copied at once"},
			&cli.StringFlag{Name: "temp-dir", Usage: "directory for scratch files (default: system temp)"},
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
	if st, id, ok := nativeStore(c, arg); ok {
		return runConvertEngine(c, ctx, st, id, dstLoc)
	}
	sp, err := openSavepointArg(ctx, c, arg)
	if err != nil {
		return err
	}
	if dir, _ := path.Split(sp.MetadataKey); dir != "" && !strings.Contains(strings.TrimSuffix(dir, "/"), "/") {
		// The newest checkpoint of a job directory may be the engine's.
		if id, ok := savepoint.CheckpointDirID(strings.TrimSuffix(dir, "/")); ok {
			if _, err := sp.Store.Stat(ctx, dir+manifest.Name); err == nil {
				return runConvertEngine(c, ctx, sp.Store, id, dstLoc)
			}
		}
	}
	if strings.TrimSuffix(sp.DirURI(), "/") == snapshotURI(dstLoc) {
		return Failf(ExitUsage, "--out must differ from the source %s (the source is never modified)", sp.DirURI())
	}
	dst, err := s3.OpenLocation(ctx, dstLoc, s3.OpenOptions{S3: s3Options(c), Create: true})
	if err != nil {
		return Fail(ExitIO, err)
	}
	req := convert.Request{Src: sp, Dst: dst, Concurrency: max(1, c.Int("concurrency")), TempDir: c.String("temp-dir")}
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

// runConvertEngine converts engine checkpoint id of st to a canonical
// savepoint at dstLoc.
func runConvertEngine(c *cli.Context, ctx context.Context, st s3.Storage, id int64, dstLoc s3.Location) error {
	if convertEngine == nil {
		return Failf(ExitUsage, "%s/chk-%d is a native checkpoint of the engine; converting it needs a build with RocksDB support (cgo)", st, id)
	}
	g := GlobalsFrom(c)
	dst, err := s3.OpenLocation(ctx, dstLoc, s3.OpenOptions{S3: s3Options(c), Create: true})
	if err != nil {
		return Fail(ExitIO, err)
	}
	o := restore.ConvertOptions{TempDir: c.String("temp-dir")}
	bar := progress.New(c.App.ErrWriter, g.JSON || g.Quiet || g.NoProgress, "converting", 0, "B")
	if bar != nil {
		o.Progress = bar
	}
	res, err := convertEngine(ctx, st, id, dst, o)
	bar.Done()
	if err != nil {
		if errors.Is(err, restore.ErrNoSchema) {
			return Fail(ExitUnsupported, err)
		}
		return Fail(ExitIO, err)
	}
	w := c.App.Writer
	if g.JSON {
		if err := writeJSON(w, res); err != nil {
			return Fail(ExitIO, err)
		}
		return nil
	}
	if !g.Quiet {
		fmt.Fprintf(w, "operator %s (engine checkpoint %d): parallelism %d, max parallelism %d, states %s -> %d canonical files, %d inline\n",
			res.Operator, res.Checkpoint, res.Parallelism, res.MaxParallelism, strings.Join(res.States, ", "), res.Files, res.Inline)
	}
	fmt.Fprintf(w, "%s: canonical savepoint written (metadata %s, state %s) from %s/chk-%d (%s restored) in %s\n",
		res.Destination, rescaleBytes(res.MetadataBytes), rescaleBytes(res.StreamBytes), st, id, rescaleBytes(res.BytesDownloaded), res.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "content verified before publishing: %d entries, per-state and key-group counts equal\n", res.Entries)
	return nil
}
