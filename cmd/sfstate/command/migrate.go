//go:build cgo

package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

func init() {
	Register(&cli.Command{
		Name:      "migrate",
		Usage:     "move join state of a native checkpoint from the bucket layout to the record layout, losing nothing",
		ArgsUsage: "SRC DST",
		Description: "SRC is a store of native checkpoints (local directory or s3:// prefix; a chk-<id> directory selects\n" +
			"that checkpoint). DST receives the same checkpoint id with the join state in the record layout; every\n" +
			"other state is carried over by reference (hard link, or server-side copy on one S3 bucket). SRC is\n" +
			"never modified; DST gets `_metadata` last, only after the migrated rows, counts, association counts and\n" +
			"timestamps matched the source per side and key group. A killed run resumes when rerun with the same\n" +
			"arguments. Canonical savepoints already carry the logical encoding and need no migration.",
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "checkpoint", Usage: "checkpoint id in SRC (default: newest completed)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "report what would change without writing"},
			&cli.StringFlag{Name: "mode", Value: "sst", Usage: "how records are written: sst (SST writer + ingest) or put (write batches)"},
			&cli.StringFlag{Name: "to", Usage: "target for canonical savepoints: native-record materializes a native checkpoint"},
			&cli.StringFlag{Name: "work-dir", Usage: "scratch directory for RocksDB files (default: system temp)"},
			&cli.IntFlag{Name: "memory-mib", Value: 64, Usage: "memory pool for buffered records"},
			&cli.IntFlag{Name: "parallel", Usage: "subtasks migrated at once (default: number of CPUs)"},
			&cli.BoolFlag{Name: "groups", Usage: "list every (side, key group) in the text report (default: per-side totals, and only the key groups that differ)"},
			&cli.StringFlag{Name: "s3-endpoint", Usage: "S3 endpoint URL (e.g. http://127.0.0.1:7070)", EnvVars: []string{"SFSTATE_S3_ENDPOINT"}},
		},
		Action: runMigrate,
	})
}

// migrateSource resolves SRC: a store of checkpoints, or one chk-<id>
// directory inside it.
func migrateSource(arg string) (s3.Location, int64, error) {
	loc, err := s3.ParseURL(arg)
	if err != nil {
		return loc, 0, err
	}
	if loc.NamedMetadata {
		return loc, 0, fmt.Errorf("give the checkpoint store or a chk-<id> directory, not a _metadata file: %s", arg)
	}
	var base string
	if loc.Scheme == "s3" {
		base = path.Base(loc.Prefix)
	} else {
		base = filepath.Base(loc.Dir)
	}
	if id, ok := savepoint.CheckpointDirID(base); ok {
		if loc.Scheme == "s3" {
			loc.Prefix = path.Dir(loc.Prefix)
			if loc.Prefix == "." {
				loc.Prefix = ""
			}
		} else {
			loc.Dir = filepath.Dir(loc.Dir)
		}
		return loc, id, nil
	}
	return loc, 0, nil
}

func runMigrate(c *cli.Context) error {
	g := GlobalsFrom(c)
	if c.NArg() != 2 {
		return Failf(ExitUsage, "migrate: want SRC and DST, got %d arguments", c.NArg())
	}
	ctx := c.Context
	srcLoc, id, err := migrateSource(c.Args().Get(0))
	if err != nil {
		return Fail(ExitUsage, err)
	}
	if n := c.Int64("checkpoint"); n != 0 {
		if id != 0 && id != n {
			return Failf(ExitUsage, "migrate: SRC names checkpoint %d but --checkpoint says %d", id, n)
		}
		id = n
	}
	dstLoc, err := s3.ParseURL(c.Args().Get(1))
	if err != nil {
		return Fail(ExitUsage, err)
	}
	if dstLoc.NamedMetadata {
		return Failf(ExitUsage, "migrate: DST names a directory, not a _metadata file")
	}
	if snapshotURI(srcLoc) == snapshotURI(dstLoc) {
		return Failf(ExitUsage, "migrate: DST must differ from SRC (the source is never modified)")
	}
	mode := migrate.WriteMode(c.String("mode"))
	if mode != migrate.WriteSST && mode != migrate.WritePut {
		return Failf(ExitUsage, "migrate: --mode must be sst or put")
	}
	to := c.String("to")
	if to != "" && to != "native-record" {
		return Failf(ExitUsage, "migrate: --to must be native-record")
	}
	mib := c.Int("memory-mib")
	if mib < 1 || mib > 1<<20 {
		return Failf(ExitUsage, "migrate: --memory-mib must be in [1, 1048576]")
	}
	s3opts := s3Options(c)
	src, err := s3.OpenLocation(ctx, srcLoc, s3.OpenOptions{S3: s3opts})
	if err != nil {
		return Fail(ExitIO, err)
	}
	// A savepoint has `_metadata` at its root (our native checkpoints keep
	// theirs under chk-<id>/ beside a manifest).
	if _, err := src.Stat(ctx, s3.MetadataName); err == nil {
		if _, err := src.Stat(ctx, checkpoint.ManifestName); err != nil {
			native, err := isFlinkNative(ctx, src)
			if err != nil {
				return Fail(ExitIO, fmt.Errorf("migrate: %w", err))
			}
			if native {
				return Failf(ExitIO, "migrate: %s is a Flink native (incremental RocksDB) checkpoint: sfstate migrates the join "+
					"state of its own native checkpoints (a store with chk-<id>/manifest.json); take a canonical savepoint instead", srcLoc)
			}
			if to == "" && g.JSON {
				return writeJSON(c.App.Writer, map[string]any{"source": srcLoc.String(), "canonical": true,
					"migrationNeeded": false, "written": false})
			}
			if to == "" {
				fmt.Fprintf(c.App.Writer, "%s is a canonical savepoint: it keeps join state in the logical encoding "+
					"(rows with counts and per-row TTL) and needs no migration; nothing written\n", srcLoc)
				return nil
			}
			if c.Bool("dry-run") {
				return Failf(ExitUsage, "migrate: --dry-run does not apply to --to native-record")
			}
			return materializeCanonical(c, src, srcLoc, dstLoc, s3opts)
		}
	}
	par := c.Int("parallel")
	if par == 0 {
		par = runtime.NumCPU()
	}
	if par < 1 || par > 256 {
		return Failf(ExitUsage, "migrate: --parallel must be in [1, 256]")
	}
	opts := migrate.Options{ID: id, DryRun: c.Bool("dry-run"), Mode: mode, WorkDir: c.String("work-dir"),
		Pool: engine.NewPool(int64(mib) << 20), Parallel: par}
	var dst s3.Storage
	if opts.DryRun {
		dst = s3.NewMem()
	} else if dst, err = s3.OpenLocation(ctx, dstLoc, s3.OpenOptions{S3: s3opts, Create: true}); err != nil {
		return Fail(ExitIO, err)
	}
	if srcLoc.Scheme == "file" {
		opts.SrcLocalDir = srcLoc.Dir
	}
	if dstLoc.Scheme == "file" && !opts.DryRun {
		opts.DstLocalDir = dstLoc.Dir
	}
	if srcLoc.Scheme == "s3" && dstLoc.Scheme == "s3" && srcLoc.Bucket == dstLoc.Bucket {
		bucket, err := s3.OpenLocation(ctx, s3.Location{Scheme: "s3", Bucket: srcLoc.Bucket}, s3.OpenOptions{S3: s3opts})
		if err != nil {
			return Fail(ExitIO, err)
		}
		sp, dp := prefixOf(srcLoc.Prefix), prefixOf(dstLoc.Prefix)
		opts.CopyReferenced = func(ctx context.Context, key string) (bool, error) {
			return true, bucket.Copy(ctx, sp+key, dp+key)
		}
	}
	label := "migrating"
	if opts.DryRun {
		label = "digesting"
	}
	bar := progress.New(c.App.ErrWriter, g.JSON || g.Quiet || g.NoProgress, label, 0, "key groups")
	if bar != nil {
		opts.Progress = bar
	}
	rep, err := migrate.Checkpoint(ctx, src, dst, opts)
	bar.Done()
	if rep != nil {
		rep.Destination = dstLoc.String()
	}
	if errors.Is(err, migrate.ErrNothingToMigrate) {
		if g.JSON {
			return writeJSON(c.App.Writer, map[string]any{"source": srcLoc.String(), "migrationNeeded": false,
				"written": false, "reason": err.Error()})
		}
		fmt.Fprintf(c.App.Writer, "%v; nothing written\n", err)
		return nil
	}
	if rep != nil && (err == nil || errors.Is(err, migrate.ErrMismatch)) {
		if perr := printMigrateReport(c.App.Writer, rep, g.JSON, c.Bool("groups")); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		if errors.Is(err, migrate.ErrMismatch) {
			return Fail(ExitCheckFailed, err)
		}
		return Fail(ExitIO, err)
	}
	return nil
}

// materializeCanonical writes a canonical savepoint as native checkpoints
// in the record layout (--to native-record).
func materializeCanonical(c *cli.Context, src s3.Storage, srcLoc, dstLoc s3.Location, s3opts s3.S3Options) error {
	ctx := c.Context
	g := GlobalsFrom(c)
	sp, err := savepoint.Open(ctx, src, s3.MetadataName)
	if err != nil {
		return Fail(ExitIO, err)
	}
	open := func(loc s3.Location) (s3.Storage, error) {
		return s3.OpenLocation(ctx, loc, s3.OpenOptions{S3: s3opts, Create: true})
	}
	dst, err := open(dstLoc)
	if err != nil {
		return Fail(ExitIO, err)
	}
	prefixed := func(p string) (s3.Storage, error) {
		loc := dstLoc
		if loc.Scheme == "s3" {
			loc.Prefix = prefixOf(loc.Prefix) + p
		} else {
			loc.Dir = filepath.Join(loc.Dir, p)
		}
		return open(loc)
	}
	rep, err := migrate.MaterializeCanonical(ctx, sp, dst, prefixed, c.String("work-dir"))
	if err != nil {
		return Fail(ExitIO, err)
	}
	w := c.App.Writer
	if g.JSON {
		return writeJSON(w, rep)
	}
	fmt.Fprintf(w, "%s → %s: canonical savepoint materialized as native checkpoint %d (join state in the record layout)\n", srcLoc, dstLoc, rep.CheckpointID)
	for _, o := range rep.Operators {
		where := "."
		if o.Prefix != "" {
			where = o.Prefix + "/"
		}
		fmt.Fprintf(w, "operator %s → %s: parallelism %d, states %v, %d entries, %s uploaded\n", o.ID, where, o.Parallelism, o.States, o.Entries, inspectBytes(o.BytesUploaded))
		if o.Join != nil {
			t := o.Join.Total()
			fmt.Fprintf(w, "  join records: %d keys, %d rows, sum count %d, hash %016x\n", t.Keys, t.Rows, t.Count, t.Hash)
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	return nil
}

// isFlinkNative reports whether the savepoint at the root of st holds
// native (incremental RocksDB) keyed handles.
func isFlinkNative(ctx context.Context, st s3.Storage) (bool, error) {
	rc, err := st.Get(ctx, s3.MetadataName)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 256<<20))
	if err != nil {
		return false, err
	}
	md, err := savepoint.ParseMetadata(b, st.String()+"/"+s3.MetadataName)
	if err != nil {
		return false, err
	}
	for _, op := range md.Operators {
		for _, s := range op.Subtasks {
			if _, ok := s.ManagedKeyed.(*savepoint.IncrementalHandle); ok {
				return true, nil
			}
		}
	}
	return false, nil
}

func printMigrateReport(w io.Writer, rep *migrate.Report, asJSON, groups bool) error {
	if asJSON {
		type group struct {
			Side     string              `json:"side"`
			KeyGroup int                 `json:"keyGroup"`
			Source   migrate.GroupStats  `json:"source"`
			Migrated *migrate.GroupStats `json:"migrated,omitempty"`
		}
		type op struct {
			ID         string   `json:"id"`
			States     []string `json:"states"`
			Untouched  []string `json:"untouched"`
			Subtasks   int      `json:"subtasks"`
			Buckets    int64    `json:"buckets"`
			Rows       int64    `json:"rows"`
			BytesIn    int64    `json:"bytesIn"`
			BytesOut   int64    `json:"bytesOut"`
			Mismatches int      `json:"mismatches"`
			Groups     []group  `json:"groups"`
		}
		out := struct {
			Source          string            `json:"source"`
			Destination     string            `json:"destination"`
			CheckpointID    int64             `json:"checkpointId"`
			DryRun          bool              `json:"dryRun"`
			AlreadyComplete bool              `json:"alreadyComplete"`
			Resumed         int               `json:"resumed"`
			Mode            migrate.WriteMode `json:"mode"`
			FilesWritten    int               `json:"filesWritten"`
			FilesReferenced int               `json:"filesReferenced"`
			FilesCopied     int               `json:"filesCopied"`
			BytesWritten    int64             `json:"bytesWritten"`
			BytesReferenced int64             `json:"bytesReferenced"`
			BytesCopied     int64             `json:"bytesCopied"`
			BytesRead       int64             `json:"bytesRead"`
			Seconds         float64           `json:"seconds"`
			Operators       []op              `json:"operators"`
		}{Source: rep.Source, Destination: rep.Destination, CheckpointID: rep.CheckpointID, DryRun: rep.DryRun,
			AlreadyComplete: rep.AlreadyComplete, Resumed: rep.Resumed, Mode: rep.Mode,
			FilesWritten: rep.FilesWritten, FilesReferenced: rep.FilesReferenced, FilesCopied: rep.FilesCopied,
			BytesWritten: rep.BytesWritten, BytesReferenced: rep.BytesReferenced, BytesCopied: rep.BytesCopied,
			BytesRead: rep.BytesRead, Seconds: rep.Duration.Seconds()}
		for _, o := range rep.Operators {
			j := op{ID: o.ID, States: o.States, Untouched: o.Untouched, Subtasks: o.Subtasks, Buckets: o.Buckets, Rows: o.Rows,
				BytesIn: o.BytesIn, BytesOut: o.BytesOut, Mismatches: len(o.Mismatches)}
			for _, id := range o.Source.IDs() {
				gr := group{Side: id.Side.String(), KeyGroup: id.KeyGroup, Source: *o.Source.Groups[id]}
				if o.Migrated != nil {
					if m := o.Migrated.Groups[id]; m != nil {
						gr.Migrated = m
					} else {
						gr.Migrated = &migrate.GroupStats{}
					}
				}
				j.Groups = append(j.Groups, gr)
			}
			out.Operators = append(out.Operators, j)
		}
		return writeJSON(w, out)
	}
	verb := "migrated"
	switch {
	case rep.DryRun:
		verb = "would migrate (dry run, nothing written)"
	case rep.AlreadyComplete:
		verb = "already migrated (nothing written)"
	}
	fmt.Fprintf(w, "checkpoint %d: %s → %s: %s in %.2fs\n", rep.CheckpointID, rep.Source, rep.Destination, verb, rep.Duration.Seconds())
	if rep.Resumed > 0 && !rep.AlreadyComplete {
		fmt.Fprintf(w, "resumed: %d subtasks were finished by an earlier run\n", rep.Resumed)
	}
	for _, o := range rep.Operators {
		fmt.Fprintf(w, "operator %s (%d subtasks): %v; untouched states %v\n", o.ID, o.Subtasks, o.States, o.Untouched)
		fmt.Fprintf(w, "  buckets read %d (%s), records %d (%s)\n", o.Buckets, inspectBytes(o.BytesIn), o.Rows, inspectBytes(o.BytesOut))
		printMigrateGroups(w, o, rep.DryRun, groups)
	}
	if !rep.DryRun {
		fmt.Fprintf(w, "files: %d written (%s), %d carried by reference (%s), %d copied (%s); source bytes downloaded %s\n",
			rep.FilesWritten, inspectBytes(rep.BytesWritten), rep.FilesReferenced, inspectBytes(rep.BytesReferenced),
			rep.FilesCopied, inspectBytes(rep.BytesCopied), inspectBytes(rep.BytesRead))
	}
	return nil
}

// migrateDiffersShown bounds the differing key groups the text report lists
// without --groups (the JSON report lists every group).
const migrateDiffersShown = 64

// printMigrateGroups writes one operator's table: per side the totals over
// all key groups (keys, rows, sums of counts and association counts, the
// hash sum) and whether the migrated records match them. The per-(side, key
// group) rows follow only with groups set, or for the groups that differ
// (each with its source and its migrated figures), so that the report fits
// a screen at any max parallelism.
func printMigrateGroups(w io.Writer, o migrate.OperatorReport, dryRun, groups bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "side\tkey group\tkeys\trows\tsum count\tsum assoc\thash (row,count,ts)\tcheck\t")
	line := func(side, kg string, s migrate.GroupStats, check string) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%016x\t%s\t\n", side, kg, s.Keys, s.Rows, s.Count, s.Assoc, s.Hash, check)
	}
	bad := map[migrate.GroupID]migrate.Mismatch{}
	for _, m := range o.Mismatches {
		bad[m.ID] = m
	}
	var tot [2]migrate.GroupStats
	var badSide [2]int
	shown := 0
	for _, id := range o.Source.IDs() {
		s := *o.Source.Groups[id]
		t := &tot[id.Side&1]
		t.Keys, t.Rows, t.Count, t.Assoc, t.Hash = t.Keys+s.Keys, t.Rows+s.Rows, t.Count+s.Count, t.Assoc+s.Assoc, t.Hash+s.Hash
		m, differs := bad[id]
		if differs {
			badSide[id.Side&1]++
		}
		switch {
		case differs && (groups || shown < migrateDiffersShown):
			shown++
			line(id.Side.String(), strconv.Itoa(id.KeyGroup), m.Src, "source")
			line("", "", m.Dst, "migrated DIFFERS")
		case groups && !dryRun:
			line(id.Side.String(), strconv.Itoa(id.KeyGroup), s, "equal")
		case groups:
			line(id.Side.String(), strconv.Itoa(id.KeyGroup), s, "-")
		}
	}
	// Groups only the migrated side has (the source digest lacks them).
	for _, m := range o.Mismatches {
		if _, ok := o.Source.Groups[m.ID]; ok {
			continue
		}
		badSide[m.ID.Side&1]++
		if groups || shown < migrateDiffersShown {
			shown++
			line(m.ID.Side.String(), strconv.Itoa(m.ID.KeyGroup), m.Src, "source")
			line("", "", m.Dst, "migrated DIFFERS")
		}
	}
	for side, t := range tot {
		c := "equal"
		switch {
		case dryRun:
			c = "-"
		case badSide[side] > 0:
			c = plural(badSide[side], "key group") + " differ"
			if badSide[side] == 1 {
				c += "s"
			}
		}
		line([]string{"left", "right"}[side], "all", t, c)
	}
	tw.Flush()
	if n := len(o.Mismatches) - shown; n > 0 {
		fmt.Fprintf(w, "  (%d more differing key groups; --groups or --json lists each)\n", n)
	} else if !groups && len(o.Mismatches) == 0 {
		fmt.Fprintf(w, "  (%d side/key-group rows summarized; --groups or --json lists each)\n", len(o.Source.Groups))
	}
}
