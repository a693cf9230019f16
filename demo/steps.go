//go:build cgo

package demo

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/verify"
)

// ---- step 4 ----------------------------------------------------------------

// SideCounts are one join side's totals over every key group.
type SideCounts struct {
	Side   string             `json:"side"`
	Before migrate.GroupStats `json:"before"` // bucket layout
	After  migrate.GroupStats `json:"after"`  // record layout
}

// MigrateFigures are the counts before and after the migration.
type MigrateFigures struct {
	Sides        []SideCounts `json:"sides"`
	Buckets      int64        `json:"buckets"`
	Rows         int64        `json:"rows"`
	BytesIn      int64        `json:"bytesIn"`
	BytesOut     int64        `json:"bytesOut"`
	FilesWritten int          `json:"filesWritten"`
	FilesRefs    int          `json:"filesRefs"`
	BytesWritten int64        `json:"bytesWritten"`
	BytesRefs    int64        `json:"bytesRefs"`
	Mismatches   int          `json:"mismatches"`
	Untouched    []string     `json:"untouched"`
}

// migrateJSON is the part of `sfstate --json migrate` the demo reads.
type migrateJSON struct {
	FilesWritten, FilesReferenced int
	BytesWritten, BytesReferenced int64
	Operators                     []struct {
		States     []string `json:"states"`
		Untouched  []string `json:"untouched"`
		Buckets    int64    `json:"buckets"`
		Rows       int64    `json:"rows"`
		BytesIn    int64    `json:"bytesIn"`
		BytesOut   int64    `json:"bytesOut"`
		Mismatches int      `json:"mismatches"`
		Groups     []struct {
			Side     string              `json:"side"`
			KeyGroup int                 `json:"keyGroup"`
			Source   migrate.GroupStats  `json:"source"`
			Migrated *migrate.GroupStats `json:"migrated"`
		} `json:"groups"`
	} `json:"operators"`
}

func addStats(t *migrate.GroupStats, s migrate.GroupStats) {
	t.Keys += s.Keys
	t.Rows += s.Rows
	t.Count += s.Count
	t.Assoc += s.Assoc
	t.Hash += s.Hash
	t.Bytes += s.Bytes
}

func (r *runner) stepMigrate() error {
	src, dst := r.url("checkpoint-bucket"), r.url("checkpoint-record")
	args := append(append([]string{"migrate", "--work-dir", r.tmp}, r.cfg.MigrateArgs...), src, dst)
	r.show(args...)
	var mj migrateJSON
	if _, err := r.sfstateJSON(&mj, args...); err != nil {
		return err
	}
	if len(mj.Operators) != 1 {
		return fmt.Errorf("migrate reported %d operators, want 1", len(mj.Operators))
	}
	o := mj.Operators[0]
	f := &MigrateFigures{Buckets: o.Buckets, Rows: o.Rows, BytesIn: o.BytesIn, BytesOut: o.BytesOut,
		FilesWritten: mj.FilesWritten, FilesRefs: mj.FilesReferenced, BytesWritten: mj.BytesWritten, BytesRefs: mj.BytesReferenced,
		Mismatches: o.Mismatches, Untouched: o.Untouched}
	r.res.Migrate = f
	f.Sides = []SideCounts{{Side: "left"}, {Side: "right"}}
	for _, g := range o.Groups {
		i := 0
		if g.Side == "right" {
			i = 1
		}
		addStats(&f.Sides[i].Before, g.Source)
		if g.Migrated == nil {
			return fmt.Errorf("migrate: key group %d (%s) has no migrated figures", g.KeyGroup, g.Side)
		}
		addStats(&f.Sides[i].After, *g.Migrated)
	}
	r.res.MigratedURL = r.url("checkpoint-record", checkpoint.Dir(1))
	fmt.Fprintf(r.out, "   %s: %d buckets (%s) became %d records (%s); untouched states %s carried by reference\n",
		strings.Join(o.States, ", "), o.Buckets, human(o.BytesIn), o.Rows, human(o.BytesOut), strings.Join(o.Untouched, ", "))
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "     \tside\tlayout\tkeys\trows\tsum of counts\tassociations\tTTL hash (row,count,ts)\t\t")
	bad := 0
	for _, s := range f.Sides {
		fmt.Fprintf(tw, "     \t%s\tbucket\t%d\t%d\t%d\t%d\t%016x\t\t\n", s.Side, s.Before.Keys, s.Before.Rows, s.Before.Count, s.Before.Assoc, s.Before.Hash)
		verdict := "equal"
		if s.Before != s.After {
			verdict = "DIFFERS"
			bad++
		}
		fmt.Fprintf(tw, "     \t\trecord\t%d\t%d\t%d\t%d\t%016x\t%s\t\n", s.After.Keys, s.After.Rows, s.After.Count, s.After.Assoc, s.After.Hash, verdict)
	}
	tw.Flush()
	fmt.Fprintf(r.out, "   files: %d written (%s), %d carried by reference (%s)\n", f.FilesWritten, human(f.BytesWritten), f.FilesRefs, human(f.BytesRefs))
	if bad > 0 || f.Mismatches > 0 {
		return fmt.Errorf("migrate: %d sides and %d key groups differ", bad, f.Mismatches)
	}
	return nil
}

// ---- step 5 ----------------------------------------------------------------

// RescaleFigures are the bytes the rescale moved.
type RescaleFigures struct {
	// Written by `sfstate rescale` (new metadata and plan) for StateBytes.
	Written         int64 `json:"written"`
	StateBytes      int64 `json:"stateBytes"`
	ReferencedFiles int   `json:"referencedFiles"`
	// Planned: the SST bytes the plan fetches; Whole: what a restore that
	// downloads every overlapping handle moves; Downloaded: what the
	// restore through the plan fetched.
	Planned    int64 `json:"planned"`
	Whole      int64 `json:"whole"`
	Downloaded int64 `json:"downloaded"`
	// Checkpoint at parallelism 3 taken after the restore.
	CheckpointURL   string `json:"checkpointUrl"`
	CheckpointBytes int64  `json:"checkpointBytes"`
}

func (r *runner) stepRescale() error {
	src, dst := r.url("checkpoint-record", checkpoint.Dir(1)), r.url("rescaled-p3")
	args := []string{"rescale", "-p", "3", "--out", dst, src}
	r.show(args...)
	var res rescale.Result
	if _, err := r.sfstateJSON(&res, args...); err != nil {
		return err
	}
	if res.Native == nil {
		return fmt.Errorf("rescale wrote no native plan for %s", src)
	}
	plan := res.Native
	f := &RescaleFigures{Written: res.BytesWritten, StateBytes: res.StateBytes, ReferencedFiles: res.ReferencedFiles,
		Planned: plan.NeededBytes, Whole: plan.WholeBytes}
	r.res.Rescale = f
	r.res.RescaledURL = dst
	fmt.Fprintf(r.out, "   wrote %s (new _metadata and %s) for %s of state: %d files referenced in place, nothing copied\n",
		human(res.BytesWritten), rescale.PlanName, human(res.StateBytes), res.ReferencedFiles)

	// Restore the three new subtasks through the plan, as a job started at
	// parallelism 3 would, then checkpoint them.
	st, err := r.sub("checkpoint-record")
	if err != nil {
		return err
	}
	// The restored backends run on a clock stopped at the job's start, so
	// their compactions purge no expired entry and step 6 can compare the
	// checkpoint at 3 entry for entry with the original (verify --against
	// compares raw content). Expiry itself is checked by verify --ttl.
	clock := engine.NewManualClock(r.res.Workload.Start)
	var backends []engine.Backend
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	t0 := time.Now()
	bar := r.bar("restoring at 3", int64(plan.NewParallelism), "")
	for i := 0; i < plan.NewParallelism; i++ {
		be, s, err := checkpoint.RestorePlanned(r.ctx, st, plan, i, filepath.Join(r.tmp, fmt.Sprintf("p3-%d", i)), false,
			checkpoint.RestoreOptions{Rocks: engine.RocksOptions{Clock: clock}})
		if err != nil {
			bar.Done()
			return fmt.Errorf("restore of new subtask %d: %w", i, err)
		}
		backends = append(backends, be)
		f.Downloaded += s.BytesDownloaded
		want := keygroups.RangeForSubtask(MaxParallelism, 3, i)
		if got := be.Layout().Range; got.Start != want.Start || got.End != want.End {
			bar.Done()
			return fmt.Errorf("new subtask %d restored key groups %d-%d, want %d-%d", i, got.Start, got.End, want.Start, want.End)
		}
		bar.Add(1)
	}
	bar.Done()
	restore := time.Since(t0)
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "     \trestore 2 -> 3 through the plan downloaded\t%s\t(%s)\t\n", human(f.Downloaded), restore.Round(time.Millisecond))
	fmt.Fprintf(tw, "     \ta full-download restore (every overlapping handle whole) would move\t%s\t\t\n", human(f.Whole))
	fmt.Fprintf(tw, "     \tsfstate rescale itself wrote\t%s\t\t\n", human(f.Written))
	tw.Flush()

	cst, err := r.sub("checkpoint-p3")
	if err != nil {
		return err
	}
	// The job now keeps its join state in the record layout.
	cres, err := checkpoint.New(cst, checkpoint.Options{Schema: Schema(recordstore.LayoutRecord)}).TakeSync(r.ctx, backends, 1)
	if err != nil {
		return fmt.Errorf("checkpoint at parallelism 3: %w", err)
	}
	f.CheckpointURL = r.url("checkpoint-p3", checkpoint.Dir(1))
	f.CheckpointBytes = cres.BytesUploaded
	fmt.Fprintf(r.out, "   the restored job at parallelism 3 checkpointed to %s (%d files, %s)\n", r.rel(f.CheckpointURL), cres.FilesUploaded, human(cres.BytesUploaded))
	return nil
}

// ---- step 6 ----------------------------------------------------------------

// Verdict is one verify run's outcome.
type Verdict struct {
	Target   string         `json:"target"`
	OK       bool           `json:"ok"`
	Report   *verify.Report `json:"-"`
	Failures []string       `json:"failures,omitempty"`
}

// verifyRun runs `sfstate --json verify ARGS... TARGET`, prints its table
// and returns the verdict.
func (r *runner) verifyRun(target string, extra ...string) (*Verdict, error) {
	args := []string{"verify", "--temp-dir", r.tmp}
	if !contains(extra, "--backends") {
		args = append(args, "--backends", "rocksdb,heap")
	}
	args = append(args, extra...)
	args = append(args, target)
	r.show(args...)
	out, code, err := r.sfstate(append([]string{"--json"}, args...)...)
	rep, perr := verify.ReadReport(bytes.NewReader(out), "verify output")
	if perr != nil {
		if err != nil {
			return nil, err
		}
		return nil, perr
	}
	var tbl bytes.Buffer
	if werr := rep.WriteTable(&tbl); werr == nil {
		r.indent(tbl.Bytes(), 0)
	}
	v := &Verdict{Target: target, OK: rep.OK && code == 0, Report: rep, Failures: rep.Failures()}
	if !v.OK {
		return v, fmt.Errorf("verify %s: %s", target, strings.Join(v.Failures, "; "))
	}
	return v, nil
}

func (r *runner) stepVerify() error {
	now := fmt.Sprint(r.res.Workload.End)
	// The checkpoint the job took at 3, after migrate and rescale:
	// restored at 3 and back at 2 into both backends ...
	v, err := r.verifyRun(r.res.Rescale.CheckpointURL, "--parallelism", "3,2", "--ttl", "24h", "--now", now)
	if v != nil {
		r.res.Verify = append(r.res.Verify, *v)
	}
	if err != nil {
		return err
	}
	// ... and compared with the job's original checkpoint (bucket layout,
	// parallelism 2): same logical content, counts and TTL timestamps.
	v, err = r.verifyRun(r.res.Rescale.CheckpointURL, "--backends", "none", "--against", r.res.CheckpointURL)
	if v != nil {
		r.res.Verify = append(r.res.Verify, *v)
	}
	if err != nil {
		return err
	}
	// The canonical savepoint, the form Flink restores, at 3 and 2.
	v, err = r.verifyRun(r.res.SavepointURL, "--parallelism", "3,2", "--ttl", "24h", "--now", now)
	if v != nil {
		r.res.Verify = append(r.res.Verify, *v)
	}
	if err != nil {
		return err
	}
	return r.convertCheckpoints()
}

// ConvertFigures are one `sfstate convert` of an engine checkpoint.
type ConvertFigures struct {
	Source      string        `json:"source"`
	URL         string        `json:"url"`
	States      []string      `json:"states"`
	Entries     int64         `json:"entries,string"`
	StreamBytes int64         `json:"streamBytes,string"`
	Elapsed     time.Duration `json:"elapsedNanos,string"`
}

// convertJSON is the part of `sfstate --json convert` the demo reads.
type convertJSON struct {
	States      []string      `json:"states"`
	Entries     int64         `json:"entries,string"`
	StreamBytes int64         `json:"streamBytes,string"`
	Elapsed     time.Duration `json:"elapsedNanos,string"`
	Verified    bool          `json:"verified"`
}

// convertCheckpoints converts both engine checkpoints, taken with the
// job's schema, to canonical savepoints — the job's own (bucket layout, 2
// subtasks) and the one after migrate and rescale (record layout, 3) —
// and diffs them: the join state of either layout becomes the same two
// Flink join states.
func (r *runner) convertCheckpoints() error {
	var urls []string
	for _, c := range []struct{ src, name string }{
		{r.res.CheckpointURL, "checkpoint-bucket-canonical"},
		{r.res.Rescale.CheckpointURL, "checkpoint-p3-canonical"},
	} {
		dst := r.url(c.name)
		args := []string{"convert", "--temp-dir", r.tmp, c.src, "--to", "canonical", "--out", dst}
		r.show(args...)
		var cj convertJSON
		if _, err := r.sfstateJSON(&cj, args...); err != nil {
			return err
		}
		if !cj.Verified || cj.Entries == 0 {
			return fmt.Errorf("convert %s: %d entries, verified %v", c.src, cj.Entries, cj.Verified)
		}
		r.res.Converted = append(r.res.Converted, ConvertFigures{Source: c.src, URL: dst, States: cj.States, Entries: cj.Entries,
			StreamBytes: cj.StreamBytes, Elapsed: cj.Elapsed})
		fmt.Fprintf(r.out, "   %d entries (%s) in states %s, verified before publishing (%s)\n",
			cj.Entries, human(cj.StreamBytes), strings.Join(cj.States, ", "), cj.Elapsed.Round(time.Millisecond))
		urls = append(urls, dst)
	}
	args := []string{"diff", "--temp-dir", r.tmp, urls[0], urls[1]}
	r.show(args...)
	out, _, err := r.sfstate(args...)
	r.indent(out, 0)
	if err != nil {
		return err
	}
	r.res.ConvertedEqual = true
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
