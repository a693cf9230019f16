package savepoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sfstate/sfstate/s3"
)

// Where savepoints and checkpoints live
//
// A savepoint is a directory with `_metadata` and its files. Flink writes a
// job's checkpoints to <checkpoint root>/<job id>/ as chk-<id>/ (with
// `_metadata`, written last, so a directory without one is in progress or
// failed), shared/ (files of incremental checkpoints) and taskowned/.
// Locate accepts any of these levels: a savepoint or chk-<id> directory, a
// job's checkpoint directory or a checkpoint root (a directory of job
// directories); for the last two it picks a completed checkpoint.

// ErrNoSnapshot is returned by Locate when a location holds no savepoint or
// checkpoint.
var ErrNoSnapshot = errors.New("no _metadata (not a savepoint or checkpoint directory)")

// DefaultMaxListing bounds the entries Locate and FindSnapshots read from
// one directory listing.
const DefaultMaxListing = 100_000

// CheckpointDirID parses Flink's checkpoint directory name chk-<id> (a
// decimal id without sign or leading zeros, as Flink writes it).
func CheckpointDirID(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, "chk-")
	if !ok || rest == "" || len(rest) > 19 || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil
}

// isChkDir reports whether a directory name is Flink's chk-<id>.
func isChkDir(name string) bool {
	_, ok := CheckpointDirID(name)
	return ok
}

// Checkpoint-root directories that hold files shared by the checkpoints of
// a job (Flink's CheckpointedStateScope.SHARED, and the task-owned
// directory), beside the chk-N directories.
var checkpointSharedDirs = []string{"shared", "taskowned"}

// LocateOptions configures Locate.
type LocateOptions struct {
	// Checkpoint picks chk-<id> of a job's checkpoint directory or a
	// checkpoint root; 0 picks the newest completed one (Flink's ids start
	// at 1).
	Checkpoint int64
	// MaxListing bounds the entries read from one directory listing
	// (default DefaultMaxListing).
	MaxListing int
}

// Target is what Locate found: the store and key of a `_metadata`.
type Target struct {
	Store       s3.Storage
	MetadataKey string
	// Kind is "savepoint" or "checkpoint" (the directory is chk-<id>).
	Kind string
	// CheckpointID is the id of the chk-<id> directory (0 otherwise).
	CheckpointID int64
	// Picked is set when the location was a job's checkpoint directory or a
	// checkpoint root.
	Picked *Picked
}

// Picked tells which checkpoint Locate chose and why.
type Picked struct {
	// CheckpointID is the chk-<id> picked.
	CheckpointID int64 `json:"checkpointId,string"`
	// Path is the picked chk-<id> directory.
	Path string `json:"path"`
	// From is the location given (job directory or checkpoint root).
	From string `json:"from"`
	// Level is "job" or "root".
	Level string `json:"level"`
	// Job is the job directory name (level "root").
	Job string `json:"job,omitempty"`
	// Reason is "newest completed" or "requested".
	Reason string `json:"reason"`
	// Completed is the number of completed checkpoints seen.
	Completed int `json:"completed"`
}

// String renders the choice for a note on stderr.
func (p *Picked) String() string {
	of := ""
	if p.Reason == "newest completed" {
		of = fmt.Sprintf(" (newest of %d completed", p.Completed)
		if p.Job != "" {
			of += ", job " + p.Job
		}
		of += ")"
	} else if p.Job != "" {
		of = " (job " + p.Job + ")"
	}
	return fmt.Sprintf("using checkpoint %d: %s%s", p.CheckpointID, p.Path, of)
}

// Locate finds the `_metadata` that prefix (a key prefix of st, "" = its
// root, or a key ending in /_metadata) names: a savepoint or chk-<id>
// directory directly; for a job's checkpoint directory or a checkpoint
// root the completed chk-<id> that o selects. Listings are bounded by
// o.MaxListing entries per directory. A location without any yields an
// error wrapping ErrNoSnapshot.
func Locate(ctx context.Context, st s3.Storage, prefix string, o LocateOptions) (*Target, error) {
	if o.MaxListing <= 0 {
		o.MaxListing = DefaultMaxListing
	}
	prefix = strings.Trim(prefix, "/")
	name := st.String()
	if prefix != "" {
		name = joinName(name, prefix)
	}
	if prefix == MetadataName || strings.HasSuffix(prefix, "/"+MetadataName) {
		if _, err := st.Stat(ctx, prefix); err != nil {
			if s3.IsNotExist(err) {
				return nil, fmt.Errorf("%s: %w", name, ErrNoSnapshot)
			}
			return nil, fmt.Errorf("savepoint: %s: %w", name, err)
		}
		return targetAt(st, prefix, o)
	}
	mk := s3.JoinKey(prefix, MetadataName)
	if _, err := st.Stat(ctx, mk); err == nil {
		return targetAt(st, mk, o)
	} else if !s3.IsNotExist(err) {
		return nil, fmt.Errorf("savepoint: %s: %w", joinName(st.String(), mk), err)
	}
	dirs, err := listDirs(ctx, st, prefix, o.MaxListing)
	if err != nil {
		return nil, err
	}
	if ids := chkIDs(dirs); len(ids) > 0 {
		c, err := pickInJob(ctx, st, prefix, ids, o.Checkpoint)
		if err != nil {
			return nil, err
		}
		if c == nil {
			return nil, noCheckpoint(name, o.Checkpoint, len(ids))
		}
		c.Picked.From, c.Picked.Level = name, "job"
		return &c.Target, nil
	}
	// A checkpoint root: job directories holding chk-<id> directories.
	var found []*pickedTarget
	jobs := 0
	for _, d := range dirs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		jp := s3.JoinKey(prefix, d)
		sub, err := listDirs(ctx, st, jp, o.MaxListing)
		if err != nil {
			return nil, err
		}
		ids := chkIDs(sub)
		if len(ids) == 0 {
			continue
		}
		jobs++
		c, err := pickInJob(ctx, st, jp, ids, o.Checkpoint)
		if err != nil {
			return nil, err
		}
		if c != nil {
			c.Picked.Job = d
			found = append(found, c)
		}
	}
	if jobs == 0 {
		hint := ""
		if len(dirs) > 0 {
			hint = "; list what is below it with `sfstate ls`"
		}
		return nil, fmt.Errorf("%s: %w%s", name, ErrNoSnapshot, hint)
	}
	if len(found) == 0 {
		return nil, noCheckpoint(name, o.Checkpoint, 0)
	}
	if o.Checkpoint != 0 && len(found) > 1 {
		var js []string
		for _, f := range found {
			js = append(js, f.Picked.Job)
		}
		return nil, fmt.Errorf("savepoint: %s: checkpoint %d exists in %d jobs (%s); give the job's directory", name, o.Checkpoint, len(found), strings.Join(js, ", "))
	}
	// Newest across jobs: the latest `_metadata`; ids of different jobs do
	// not compare.
	best := found[0]
	total := 0
	for _, f := range found {
		total += f.Picked.Completed
		if f.modTime.After(best.modTime) {
			best = f
		}
	}
	best.Picked.From, best.Picked.Level = name, "root"
	best.Picked.Completed = total
	return &best.Target, nil
}

func noCheckpoint(name string, want int64, n int) error {
	if want != 0 {
		return fmt.Errorf("savepoint: %s: no completed checkpoint %d (chk-%d/%s missing): %w", name, want, want, MetadataName, ErrNoSnapshot)
	}
	return fmt.Errorf("savepoint: %s: none of the %d chk-<id> directories is complete (no %s): %w", name, n, MetadataName, ErrNoSnapshot)
}

func targetAt(st s3.Storage, mk string, o LocateOptions) (*Target, error) {
	t := &Target{Store: st, MetadataKey: mk, Kind: "savepoint"}
	if dir := path.Dir(mk); dir != "." {
		if id, ok := CheckpointDirID(path.Base(dir)); ok {
			t.Kind, t.CheckpointID = "checkpoint", id
		}
	} else if l, ok := unwrapStore(st).(*s3.Local); ok {
		if id, ok := CheckpointDirID(filepath.Base(l.Root())); ok {
			t.Kind, t.CheckpointID = "checkpoint", id
		}
	}
	if o.Checkpoint != 0 && t.Kind == "checkpoint" && t.CheckpointID != o.Checkpoint {
		return nil, fmt.Errorf("savepoint: %s names checkpoint %d but checkpoint %d was asked for", joinName(st.String(), mk), t.CheckpointID, o.Checkpoint)
	}
	return t, nil
}

// chkIDs returns the ids of the chk-<id> names, descending.
func chkIDs(dirs []string) []int64 {
	var ids []int64
	for _, d := range dirs {
		if id, ok := CheckpointDirID(d); ok {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] })
	return ids
}

// pickedTarget is a Target with the time its `_metadata` was written.
type pickedTarget struct {
	Target
	modTime time.Time
}

// pickInJob picks checkpoint want (0: the newest completed) among the
// chk-<id> directories ids (descending) of the job directory jp. It returns
// nil when none qualifies.
func pickInJob(ctx context.Context, st s3.Storage, jp string, ids []int64, want int64) (*pickedTarget, error) {
	completed := 0
	var best *pickedTarget
	for _, id := range ids {
		if want != 0 && id != want {
			continue
		}
		dir := s3.JoinKey(jp, "chk-"+strconv.FormatInt(id, 10))
		mk := s3.JoinKey(dir, MetadataName)
		info, err := st.Stat(ctx, mk)
		if s3.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("savepoint: %s: %w", joinName(st.String(), mk), err)
		}
		completed++
		if best == nil {
			reason := "newest completed"
			if want != 0 {
				reason = "requested"
			}
			best = &pickedTarget{Target: Target{Store: st, MetadataKey: mk, Kind: "checkpoint", CheckpointID: id,
				Picked: &Picked{CheckpointID: id, Path: joinName(st.String(), dir), Reason: reason}}, modTime: info.ModTime}
		}
	}
	if best != nil {
		best.Picked.Completed = completed
	}
	return best, nil
}

// listDirs returns the names of the directories directly below prefix
// ("" = the store root), at most limit entries read; more is an error.
// Local stores follow symbolic links to directories; S3 lists with a
// delimiter, so no object below a subdirectory is read.
func listDirs(ctx context.Context, st s3.Storage, prefix string, limit int) ([]string, error) {
	name := st.String()
	if prefix != "" {
		name = joinName(name, prefix)
	}
	tooMany := fmt.Errorf("savepoint: %s: more than %d entries; give a narrower location", name, limit)
	var out []string
	switch b := unwrapStore(st).(type) {
	case *s3.Local:
		dir := filepath.Join(b.Root(), filepath.FromSlash(prefix))
		f, err := os.Open(dir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, nil
			}
			return nil, fmt.Errorf("savepoint: %s: %w", name, err)
		}
		defer f.Close()
		seen := 0
		for {
			ents, err := f.ReadDir(1024)
			for _, e := range ents {
				seen++
				if seen > limit {
					return nil, tooMany
				}
				isDir := e.IsDir()
				if e.Type()&os.ModeSymlink != 0 {
					if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
						isDir = fi.IsDir()
					}
				}
				if isDir && s3.ValidateKey(e.Name()) == nil {
					out = append(out, e.Name())
				}
			}
			if err != nil || len(ents) == 0 {
				break
			}
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
		}
	case *s3.S3:
		full := b.Prefix()
		if prefix != "" {
			full += prefix + "/"
		}
		in := &awss3.ListObjectsV2Input{Bucket: aws.String(b.Bucket()), Prefix: aws.String(full), Delimiter: aws.String("/"),
			MaxKeys: aws.Int32(int32(min(1000, limit)))}
		p := awss3.NewListObjectsV2Paginator(b.Client(), in)
		seen := 0
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("savepoint: %s: list: %w", name, err)
			}
			seen += len(page.Contents) + len(page.CommonPrefixes)
			if seen > limit {
				return nil, tooMany
			}
			for _, cp := range page.CommonPrefixes {
				d := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), full), "/")
				if d != "" && s3.ValidateKey(d) == nil && !strings.Contains(d, "/") {
					out = append(out, d)
				}
			}
		}
	default:
		lp := ""
		if prefix != "" {
			lp = prefix + "/"
		}
		objs, err := st.List(ctx, lp)
		if err != nil {
			return nil, fmt.Errorf("savepoint: %s: %w", name, err)
		}
		seen := map[string]bool{}
		for _, o := range objs {
			d, _, ok := strings.Cut(strings.TrimPrefix(o.Key, lp), "/")
			if ok && !seen[d] {
				seen[d] = true
				out = append(out, d)
				if len(out) > limit {
					return nil, tooMany
				}
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// FindOptions bounds FindSnapshots.
type FindOptions struct {
	// MaxDepth is how many directory levels below the prefix are searched
	// (default 4: root/job/chk-N, or a/b/savepoint).
	MaxDepth int
	// MaxDirs bounds the directories visited (default 10000).
	MaxDirs int
	// MaxListing bounds the entries of one listing (DefaultMaxListing).
	MaxListing int
}

// Found is one `_metadata` FindSnapshots found.
type Found struct {
	MetadataKey string
	// Kind is "savepoint" or "checkpoint" (in a chk-<id> directory).
	Kind         string
	CheckpointID int64
	ModTime      time.Time
	MetadataSize int64
}

// FindSnapshots lists the savepoints and checkpoints at or below prefix,
// in key order: every directory holding a `_metadata`, searched
// breadth-first to o.MaxDepth levels. Directories with a `_metadata` are
// not searched further, and shared/ and taskowned/ directories are
// skipped, so the files of snapshots are never listed. truncated is set
// when o.MaxDirs stopped the search.
func FindSnapshots(ctx context.Context, st s3.Storage, prefix string, o FindOptions) (found []Found, truncated bool, err error) {
	if o.MaxDepth <= 0 {
		o.MaxDepth = 4
	}
	if o.MaxDirs <= 0 {
		o.MaxDirs = 10000
	}
	if o.MaxListing <= 0 {
		o.MaxListing = DefaultMaxListing
	}
	type dir struct {
		key   string
		depth int
	}
	queue := []dir{{strings.Trim(prefix, "/"), 0}}
	visited := 0
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		d := queue[0]
		queue = queue[1:]
		if visited++; visited > o.MaxDirs {
			truncated = true
			break
		}
		mk := s3.JoinKey(d.key, MetadataName)
		info, err := st.Stat(ctx, mk)
		if err == nil {
			f := Found{MetadataKey: mk, Kind: "savepoint", ModTime: info.ModTime, MetadataSize: info.Size}
			if id, ok := CheckpointDirID(path.Base(d.key)); ok && d.key != "" {
				f.Kind, f.CheckpointID = "checkpoint", id
			}
			found = append(found, f)
			continue
		}
		if !s3.IsNotExist(err) {
			return nil, false, fmt.Errorf("savepoint: %s: %w", joinName(st.String(), mk), err)
		}
		if d.depth >= o.MaxDepth {
			continue
		}
		subs, err := listDirs(ctx, st, d.key, o.MaxListing)
		if err != nil {
			return nil, false, err
		}
		for _, s := range subs {
			if s == "shared" || s == "taskowned" {
				continue
			}
			queue = append(queue, dir{s3.JoinKey(d.key, s), d.depth + 1})
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].MetadataKey < found[j].MetadataKey })
	return found, truncated, nil
}
