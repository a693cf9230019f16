package command

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "rescale",
		Usage:     "write a savepoint for another parallelism that references the existing state files",
		ArgsUsage: "SRC (local dir or s3://bucket/prefix)",
		Description: `Writes a new _metadata for restoring SRC at --parallelism N. Canonical keyed
state is not copied: the new handles are views (key-group offset sub-ranges)
onto the existing files.

Flink's _metadata holds at most ONE managed keyed handle per subtask (the
serializer rejects more), while a new subtask's range usually spans several
old files. The new _metadata therefore records the operator at a layout
parallelism K: the smallest multiple of N whose standard key-group ranges
each lie inside one old file (at most the max parallelism). Each of the K
subtasks holds one view. This is an ordinary, self-consistent Flink layout:
restored at N (or any other parallelism) Flink's StateAssignmentOperation
intersects the views and every new subtask gets exactly the views of its
key groups; restored at K each subtask takes its own view. When N is a
multiple of the old parallelism, K = N. Operator (non-keyed) state of a keyed
operator goes to the first view of its old subtask; broadcast state to
every view. Non-keyed operators are kept as they are.

Native (incremental RocksDB) handles are kept whole and rebased: a handle is
one RocksDB instance and Flink clips it itself, so every new subtask
references all files of the handles overlapping its range. For sfstate engine
checkpoints a rescale-plan.json beside _metadata lists per new subtask only
the SST files whose key groups overlap its range (bytes needed vs whole
handles vs boundary files).

--parallelism N applies to every operator whose max parallelism allows it:
an operator with a smaller one (Flink SQL pins global sorts, limits and
non-keyed aggregates at max parallelism 1) keeps its parallelism, and the
output says so. --operator-parallelism UID_OR_ID=N sets one operator (it
must fit). --max-parallelism M likewise re-keys every operator except those
Flink pins at 1; --operator-max-parallelism UID_OR_ID=M sets one.

Handles relative to SRC become absolute URIs (file:/... or s3://...) into SRC
unless --copy copies those files into DST (server-side on S3 within one
bucket). The bytes written are then only the _metadata and a small
` + savepoint.SourcesName + ` recording SRC, which Flink ignores and sfstate
reads so that every command follows those URIs with default flags. SRC is
never modified; DST's _metadata is written last and never overwritten, so a
failed run leaves none.

SRC may also be a job's checkpoint directory or a checkpoint root: the newest
completed checkpoint is used (--checkpoint N picks one).`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "parallelism", Aliases: []string{"p"}, Usage: "parallelism the job will be restored with (required)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "destination directory or s3:// prefix (default: SRC-rescaled-pN)"},
			&cli.BoolFlag{Name: "copy", Usage: "copy referenced source files into DST instead of pointing at SRC"},
			&cli.IntFlag{Name: "max-parallelism", Usage: "re-key every entry into this max parallelism (rewrites state files)"},
			&cli.BoolFlag{Name: "merge-files", Usage: "rewrite keyed state into one file per new subtask"},
			&cli.StringSliceFlag{Name: "operator-parallelism", Usage: "parallelism of one operator, `UID_OR_ID=N` (repeatable)"},
			&cli.StringSliceFlag{Name: "operator-max-parallelism", Usage: "re-key one operator into max parallelism M, `UID_OR_ID=M` (repeatable)"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "files read or copied at once"},
			&cli.StringFlag{Name: "s3-endpoint", Usage: "endpoint URL of an S3-compatible store for s3:// paths", EnvVars: []string{"SFSTATE_S3_ENDPOINT"}},
			allowRootFlag, mapFlag, checkpointFlag,
		},
		Action: runRescale,
	})
}

// snapshotURI returns the absolute URI handles use for a snapshot directory.
func snapshotURI(loc s3.Location) string {
	if loc.Scheme == "s3" {
		if loc.Prefix == "" {
			return "s3://" + loc.Bucket
		}
		return "s3://" + loc.Bucket + "/" + loc.Prefix
	}
	return "file:" + loc.Dir
}

func runRescale(c *cli.Context) error {
	if c.NArg() != 1 {
		return Failf(ExitUsage, "rescale takes exactly one source savepoint (got %d arguments)", c.NArg())
	}
	p := c.Int("parallelism")
	if p < 1 {
		return Failf(ExitUsage, "--parallelism N (N >= 1) is required")
	}
	if p > keygroups.MaxParallelismLimit {
		return Failf(ExitUsage, "--parallelism %d exceeds Flink's limit of %d", p, keygroups.MaxParallelismLimit)
	}
	if m := c.Int("max-parallelism"); c.IsSet("max-parallelism") && (m < 1 || m > keygroups.MaxParallelismLimit || m < p) {
		return Failf(ExitUsage, "--max-parallelism %d must be in [parallelism, 32768]", m)
	}
	g := GlobalsFrom(c)
	ctx := c.Context
	arg := c.Args().First()
	srcLoc, err := s3.ParseURL(arg)
	if err != nil {
		return Fail(ExitUsage, err)
	}
	out := c.String("out")
	if out == "" {
		base := strings.TrimSuffix(strings.TrimSuffix(arg, "/"+savepoint.MetadataName), "/")
		out = fmt.Sprintf("%s-rescaled-p%d", base, p)
	}
	dstLoc, err := s3.ParseURL(out)
	if err != nil {
		return Fail(ExitUsage, err)
	}
	if dstLoc.NamedMetadata {
		return Failf(ExitUsage, "--out names a directory, not a _metadata file: %s", out)
	}
	perP, err := operatorValues(c, "operator-parallelism")
	if err != nil {
		return err
	}
	perMaxP, err := operatorValues(c, "operator-max-parallelism")
	if err != nil {
		return err
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
	opts := s3.OpenOptions{S3: s3Options(c), Create: true}
	if dstLoc.Scheme == "file" {
		if _, err := os.Stat(dstLoc.Dir); os.IsNotExist(err) {
			// Created below; a failed run leaves no empty directory.
			defer func() {
				if _, err := os.Stat(filepath.Join(dstLoc.Dir, savepoint.MetadataName)); os.IsNotExist(err) {
					_ = os.Remove(dstLoc.Dir) // only when empty
				}
			}()
		}
	}
	dst, err := s3.OpenLocation(ctx, dstLoc, opts)
	if err != nil {
		return Fail(ExitIO, err)
	}
	req := rescale.Request{Src: sp, Dst: dst, Options: rescale.Options{
		Parallelism: p, MaxParallelism: c.Int("max-parallelism"), MergeFiles: c.Bool("merge-files"),
		Copy: c.Bool("copy"), Concurrency: max(1, c.Int("concurrency")),
		OperatorParallelism: perP, OperatorMaxParallelism: perMaxP,
	}}
	if req.Copy && srcLoc.Scheme == "s3" && dstLoc.Scheme == "s3" && srcLoc.Bucket == dstLoc.Bucket {
		// One store over the bucket: copies stay server-side.
		bucket, err := s3.OpenLocation(ctx, s3.Location{Scheme: "s3", Bucket: srcLoc.Bucket}, opts)
		if err != nil {
			return Fail(ExitIO, err)
		}
		req.CopyStore = bucket
		req.SrcPrefix, req.DstPrefix = prefixOf(srcLoc.Prefix), prefixOf(dstLoc.Prefix)
	}
	bar := progress.New(c.App.ErrWriter, g.JSON || g.Quiet || g.NoProgress, "rescaling", 0, "B")
	if bar != nil {
		req.Progress = bar
	}
	res, err := rescale.Run(ctx, req)
	bar.Done()
	if err != nil {
		return Fail(ExitIO, err) // ExitCode classifies by the error (usage, unsupported, interrupted)
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
			fmt.Fprintf(w, "operator %s (%s): parallelism %d -> %d, layout %d, max parallelism %d, %d -> %d keyed handles\n",
				o.Operator, o.Kind, o.OldParallelism, o.NewParallelism, o.LayoutParallelism, o.MaxParallelism, o.OldHandles, o.NewHandles)
			if o.Note != "" {
				fmt.Fprintf(w, "  note: %s\n", o.Note)
			}
		}
	}
	ratio := 0.0
	if res.StateBytes > 0 {
		ratio = float64(res.BytesWritten) / float64(res.StateBytes)
	}
	fmt.Fprintf(w, "%s: wrote %s (metadata %s, copied %s, rewritten %s) for %s of state (%.4f%%); %d files referenced in place, %d copied, %d new\n",
		res.Destination, rescaleBytes(res.BytesWritten), rescaleBytes(res.MetadataBytes), rescaleBytes(res.CopiedBytes), rescaleBytes(res.RewrittenBytes),
		rescaleBytes(res.StateBytes), 100*ratio, res.ReferencedFiles, res.CopiedFiles, res.NewFiles)
	if len(res.Sources) > 0 && !g.Quiet {
		fmt.Fprintf(w, "references the files of %s (recorded in %s, which sfstate follows)\n", strings.Join(res.Sources, ", "), savepoint.SourcesName)
	}
	if n := res.Native; n != nil {
		fmt.Fprintf(w, "native plan %s: new subtasks need %s of SST files (whole overlapping handles: %s; files straddling a range boundary: %s)\n",
			rescale.PlanName, rescaleBytes(n.NeededBytes), rescaleBytes(n.WholeBytes), rescaleBytes(n.BoundaryBytes))
	}
	if res.Verified {
		fmt.Fprintf(w, "content verified before publishing: %d entries, per-state counts and digests equal\n", res.Entries)
	}
	return nil
}

// operatorValues parses a repeatable UID_OR_ID=N flag.
func operatorValues(c *cli.Context, flag string) (map[string]int, error) {
	vals := c.StringSlice(flag)
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]int{}
	for _, v := range vals {
		i := strings.LastIndex(v, "=")
		if i <= 0 {
			return nil, Failf(ExitUsage, "--%s %q: want UID_OR_ID=N", flag, v)
		}
		n, err := strconv.Atoi(v[i+1:])
		if err != nil || n < 1 || n > 1<<15 {
			return nil, Failf(ExitUsage, "--%s %q: N must be in [1, 32768]", flag, v)
		}
		if _, dup := out[v[:i]]; dup {
			return nil, Failf(ExitUsage, "--%s names %q twice", flag, v[:i])
		}
		out[v[:i]] = n
	}
	return out, nil
}

func prefixOf(p string) string {
	if p == "" {
		return ""
	}
	return p + "/"
}

func rescaleBytes(n int64) string { return progress.Human(float64(n), "B") }
