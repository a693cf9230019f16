//go:build cgo

package migrate

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// WriteMode selects how migrated records reach the output RocksDB.
type WriteMode string

const (
	// WriteSST writes SST files with RocksDB's SST writer and ingests them.
	WriteSST WriteMode = "sst"
	// WritePut puts the records through write batches (then flushes).
	WritePut WriteMode = "put"
)

// Options configure Checkpoint.
type Options struct {
	// ID is the source checkpoint; zero means the newest completed one.
	ID int64
	// DryRun reads and digests the bucket state and reports what would
	// change without writing anything.
	DryRun bool
	// Pool bounds the bytes buffered by the put path (and the key group
	// read-ahead); nil means a 64 MiB pool.
	Pool *engine.Pool
	// WorkDir holds temporary RocksDB directories; empty means os.TempDir.
	// Hard links from a local source store need it on the same file system.
	WorkDir string
	// Parallel is the number of subtasks migrated at once (default 1).
	Parallel int
	// Mode is WriteSST (default) or WritePut.
	Mode WriteMode
	// SSTTargetSize rolls SST writer files at this size; zero means 64 MiB.
	SSTTargetSize int64
	// CopyReferenced transfers an untouched source object to the
	// destination under the same key. Nil: a hard link between local
	// stores, else a streamed copy. The command line passes a server-side
	// copy when both stores are prefixes of one S3 bucket.
	CopyReferenced func(ctx context.Context, key string) (linked bool, err error)

	// SrcLocalDir and DstLocalDir name the local directories of src and
	// dst when they are local stores behind wrappers (retry, counters), so
	// that files can be hard-linked instead of copied. A bare *s3.Local is
	// recognized without them.
	SrcLocalDir, DstLocalDir string

	// Progress, when set, is told the key groups of the checkpoint and
	// advanced by a subtask's key groups when it is migrated (or was
	// already, by an earlier run). *progress.Bar fits.
	Progress interface {
		SetTotal(total int64)
		Add(n int64)
	}

	// tamper, when set, may alter each record before it is written (tests
	// of the verification).
	tamper func(k, v []byte)

	// failAfter, when positive, makes the run fail after that many store
	// writes (tests of resumability).
	failAfter int
}

// Report describes a migration.
type Report struct {
	Source, Destination string
	CheckpointID        int64
	DryRun              bool
	// AlreadyComplete: the destination already held the finished migration.
	AlreadyComplete bool
	// Resumed counts subtasks a previous run had finished.
	Resumed   int
	Operators []OperatorReport
	// Files and bytes written, carried over by reference (hard link or
	// server-side copy), or copied because no reference was possible.
	FilesWritten, FilesReferenced, FilesCopied int
	BytesWritten, BytesReferenced, BytesCopied int64
	// BytesRead: source bytes fetched (downloads; hard links count 0).
	BytesRead int64
	Duration  time.Duration
	Mode      WriteMode
}

// OperatorReport is one operator's migration result.
type OperatorReport struct {
	ID          string
	States      []string // the states migrated, e.g. join-buckets → join-records
	Subtasks    int
	Buckets     int64 // bucket entries read
	Rows        int64 // records written
	BytesIn     int64 // bucket entry bytes read
	BytesOut    int64 // record entry bytes written
	Source      *Digest
	Migrated    *Digest
	Mismatches  []Mismatch
	Untouched   []string // states carried over unchanged
	RecordFiles int
}

// ErrNothingToMigrate is returned when the source has no bucket state.
var ErrNothingToMigrate = errors.New("migrate: no join state in the bucket layout")

// ErrMismatch is returned when the migrated content's digest differs from
// the source's.
var ErrMismatch = errors.New("migrate: migrated join state differs from the source")

var errInjected = errors.New("migrate: injected failure")

// journalPrefix holds the progress journal under the destination checkpoint.
func journalPrefix(id int64) string { return checkpoint.Dir(id) + "/_migrate/" }

func journalKey(id int64, task int) string {
	return fmt.Sprintf("%stask-%d.json", journalPrefix(id), task)
}

// journalEntry records one finished subtask.
type journalEntry struct {
	Format     string             `json:"format"`
	Source     string             `json:"source"` // CRC-32C of the source manifest, hex
	Subtask    checkpoint.Subtask `json:"subtask"`
	Uploaded   int64              `json:"uploaded"`
	Buckets    int64              `json:"buckets"`
	Rows       int64              `json:"rows"`
	BytesIn    int64              `json:"bytesIn"`
	BytesOut   int64              `json:"bytesOut"`
	Digest     []digestEntry      `json:"digest"`
	Written    int                `json:"filesWritten"`
	Referenced int                `json:"filesReferenced"`
	Copied     int                `json:"filesCopied"`
	BWritten   int64              `json:"bytesWritten"`
	BRef       int64              `json:"bytesReferenced"`
	BCopied    int64              `json:"bytesCopied"`
}

const journalFormat = "sfstate-migrate-journal-1"

type digestEntry struct {
	Side     int `json:"side"`
	KeyGroup int `json:"keyGroup"`
	GroupStats
}

func encodeDigest(d *Digest) []digestEntry {
	var out []digestEntry
	for _, id := range d.IDs() {
		out = append(out, digestEntry{int(id.Side), id.KeyGroup, *d.Groups[id]})
	}
	return out
}

func decodeDigest(es []digestEntry) *Digest {
	d := NewDigest()
	for _, e := range es {
		*d.Group(GroupID{recordstore.Side(e.Side), e.KeyGroup}) = e.GroupStats
	}
	return d
}

// run is one migration in progress.
type run struct {
	ctx      context.Context
	src, dst s3.Storage
	opts     Options
	id       int64
	m        *checkpoint.Manifest
	srcCRC   string
	bucketCF string
	states   []checkpoint.StateInfo // output states
	rep      *Report
	op       *OperatorReport
	steps    int
	written  []s3.Written
	// srcRefs counts the source subtasks referencing each shared object:
	// a failed subtask removes its carried-over copy of an object only
	// when no other subtask (possibly journaled) needs it.
	srcRefs map[string]int
	mu      sync.Mutex // guards steps, counters and the report while subtasks run in parallel
	t0      time.Time
	c0      time.Duration
}

func (r *run) phase(name string) {
	if os.Getenv("SFSTATE_MIGRATE_TRACE") != "" {
		r.mu.Lock()
		defer r.mu.Unlock()
		fmt.Fprintf(os.Stderr, "%s %v cpu %v\n", name, time.Since(r.t0), cpuTime()-r.c0)
		r.t0, r.c0 = time.Now(), cpuTime()
	}
}

// step counts one store write and injects the configured failure.
func (r *run) step() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps++
	if r.opts.failAfter > 0 && r.steps >= r.opts.failAfter {
		return fmt.Errorf("%w after %d writes", errInjected, r.steps)
	}
	return nil
}

// Checkpoint migrates native checkpoint opts.ID of src into dst: the join
// state's bucket entries become record entries, every other state is
// carried over unchanged by reference. src is never written. The result is
// checkpoint opts.ID in dst, with `_metadata` written last, after the
// migrated content's digest matched the source's (else ErrMismatch and no
// `_metadata`). Rerun with the same arguments after a failure, it resumes
// from the journal under dst and produces the same checkpoint.
func Checkpoint(ctx context.Context, src, dst s3.Storage, opts Options) (*Report, error) {
	start := time.Now()
	if opts.Mode == "" {
		opts.Mode = WriteSST
	}
	if opts.Mode != WriteSST && opts.Mode != WritePut {
		return nil, fmt.Errorf("migrate: unknown write mode %q", opts.Mode)
	}
	if opts.Pool == nil {
		opts.Pool = engine.NewPool(64 << 20)
	}
	if opts.SSTTargetSize <= 0 {
		opts.SSTTargetSize = 64 << 20
	}
	id := opts.ID
	if id == 0 {
		ids, err := checkpoint.Completed(ctx, src)
		if err != nil {
			return nil, fmt.Errorf("migrate: list checkpoints of %s: %w", src, err)
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("migrate: %s holds no completed native checkpoint", src)
		}
		id = ids[len(ids)-1]
	}
	rep := &Report{Source: src.String(), Destination: dst.String(), CheckpointID: id, DryRun: opts.DryRun, Mode: opts.Mode}
	if _, err := src.Stat(ctx, checkpoint.MetadataKey(id)); err != nil {
		return nil, fmt.Errorf("migrate: checkpoint %d is not complete in %s: %w", id, src, err)
	}
	m, err := checkpoint.ReadManifest(ctx, src, id)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	r := &run{ctx: ctx, src: src, dst: dst, opts: opts, id: id, m: m, rep: rep,
		srcCRC: fmt.Sprintf("%08x", crc32.Checksum(mb, s3.Castagnoli))}
	hasRecord := false
	for _, s := range m.States {
		switch s.Name {
		case recordstore.BucketStateName:
			r.bucketCF = s.Name
			if s.Kind != engine.KindValue.String() {
				return nil, fmt.Errorf("migrate: checkpoint %d: state %q has kind %s, want value", id, s.Name, s.Kind)
			}
		case recordstore.RecordStateName:
			hasRecord = true
		}
	}
	if r.bucketCF == "" {
		return rep, fmt.Errorf("%w: checkpoint %d of %s declares no state %q", ErrNothingToMigrate, id, src, recordstore.BucketStateName)
	}
	r.op = &OperatorReport{States: []string{recordstore.BucketStateName + " → " + recordstore.RecordStateName},
		Subtasks: len(m.Subtasks), Source: NewDigest(), Migrated: NewDigest()}
	for _, s := range m.States {
		switch s.Name {
		case recordstore.BucketStateName:
			if !hasRecord {
				r.states = append(r.states, checkpoint.StateInfo{Name: recordstore.RecordStateName, Kind: engine.KindMap.String(), TTLMillis: s.TTLMillis})
			}
		default:
			r.states = append(r.states, s)
			if s.Name != recordstore.RecordStateName {
				r.op.Untouched = append(r.op.Untouched, s.Name)
			}
		}
	}
	md, err := r.readMetadata()
	if err != nil {
		return nil, err
	}
	if len(md.Operators) != 1 {
		return nil, fmt.Errorf("migrate: checkpoint %d of %s has %d operators, want the engine's one", id, src, len(md.Operators))
	}
	r.op.ID = md.Operators[0].ID.String()
	rep.Operators = []OperatorReport{}
	defer func() { rep.Duration = time.Since(start) }()

	if !opts.DryRun {
		if _, err := dst.Stat(ctx, checkpoint.MetadataKey(id)); err == nil {
			// finished before: report from the journal
			done, jerr := r.readJournal()
			if jerr != nil || len(done) != len(m.Subtasks) {
				return nil, fmt.Errorf("migrate: %s already holds checkpoint %d that this migration did not write", dst, id)
			}
			for _, e := range done {
				r.addJournal(e)
			}
			rep.AlreadyComplete = true
			rep.Resumed = len(done)
			r.finishReport()
			return rep, nil
		} else if !s3.IsNotExist(err) {
			return nil, fmt.Errorf("migrate: %s: %w", dst, err)
		}
	}
	var done map[int]*journalEntry
	if !opts.DryRun {
		if done, err = r.readJournal(); err != nil {
			return nil, err
		}
	}
	subs := make([]checkpoint.Subtask, len(m.Subtasks))
	uploaded := make([]int64, len(m.Subtasks))
	results := make([]*journalEntry, len(m.Subtasks))
	groupsOf := func(st *checkpoint.Subtask) int64 { return int64(st.EndKeyGroup - st.StartKeyGroup + 1) }
	if opts.Progress != nil {
		var total int64
		for i := range m.Subtasks {
			total += groupsOf(&m.Subtasks[i])
		}
		opts.Progress.SetTotal(total)
	}
	r.srcRefs = map[string]int{}
	for i := range m.Subtasks {
		for _, f := range m.Subtasks[i].Shared {
			r.srcRefs[f.Key]++
		}
	}
	// A failed subtask (or an interrupt) stops the subtasks not yet
	// started; those under way stop at their next check of r.ctx.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, opts.Parallel))
	for i := range m.Subtasks {
		st := &m.Subtasks[i]
		if e, ok := done[st.Index]; ok {
			rep.Resumed++
			results[i] = e
			if opts.Progress != nil {
				opts.Progress.Add(groupsOf(st))
			}
			continue
		}
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			e, err := r.subtask(st)
			if err != nil {
				return fmt.Errorf("migrate: checkpoint %d, subtask %d: %w", id, st.Index, err)
			}
			results[i] = e
			if opts.Progress != nil {
				opts.Progress.Add(groupsOf(st))
			}
			return nil
		})
	}
	err = g.Wait()
	for i, e := range results {
		if e != nil {
			r.addJournal(e)
			subs[i], uploaded[i] = e.Subtask, e.Uploaded
		}
	}
	if err != nil {
		if errors.Is(err, ErrMismatch) {
			r.finishReport()
		}
		return rep, err
	}
	r.finishReport()
	if len(r.op.Mismatches) > 0 {
		return rep, fmt.Errorf("%w: %d (side, key group) groups differ, first: %v", ErrMismatch, len(r.op.Mismatches), r.op.Mismatches[0])
	}
	if opts.DryRun {
		return rep, nil
	}
	if err := r.publish(md, subs, uploaded); err != nil {
		return rep, err
	}
	return rep, nil
}

func (r *run) finishReport() {
	if r.opts.DryRun {
		r.op.Migrated = nil
	} else {
		r.op.Mismatches = Compare(r.op.Source, r.op.Migrated)
	}
	r.rep.Operators = []OperatorReport{*r.op}
}

func (r *run) addJournal(e *journalEntry) {
	r.op.Buckets += e.Buckets
	r.op.Rows += e.Rows
	r.op.BytesIn += e.BytesIn
	r.op.BytesOut += e.BytesOut
	d := decodeDigest(e.Digest)
	// a journal entry is written only after the subtask's digests matched
	r.op.Source.Merge(d)
	r.op.Migrated.Merge(d)
	r.rep.FilesWritten += e.Written
	r.rep.FilesReferenced += e.Referenced
	r.rep.FilesCopied += e.Copied
	r.rep.BytesWritten += e.BWritten
	r.rep.BytesReferenced += e.BRef
	r.rep.BytesCopied += e.BCopied
	for _, f := range e.Subtask.Shared {
		if f.ColumnFamily == recordstore.RecordStateName {
			r.op.RecordFiles++
		}
	}
}

func (r *run) readMetadata() (*savepoint.Metadata, error) {
	key := checkpoint.MetadataKey(r.id)
	rc, err := r.src.Get(r.ctx, key)
	if err != nil {
		return nil, fmt.Errorf("migrate: %s/%s: %w", r.src, key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("migrate: %s/%s: %w", r.src, key, err)
	}
	md, err := savepoint.ParseMetadata(b, r.src.String()+"/"+key)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return md, nil
}

// readJournal returns the finished subtasks recorded under dst. Entries of
// another source are an error (the destination belongs to another run).
func (r *run) readJournal() (map[int]*journalEntry, error) {
	objs, err := r.dst.List(r.ctx, journalPrefix(r.id))
	if err != nil {
		return nil, fmt.Errorf("migrate: journal in %s: %w", r.dst, err)
	}
	out := map[int]*journalEntry{}
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, ".json") || o.Size > 64<<20 {
			continue
		}
		rc, err := r.dst.Get(r.ctx, o.Key)
		if err != nil {
			return nil, fmt.Errorf("migrate: journal %s: %w", o.Key, err)
		}
		b, err := io.ReadAll(io.LimitReader(rc, 64<<20))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("migrate: journal %s: %w", o.Key, err)
		}
		var e journalEntry
		if err := json.Unmarshal(b, &e); err != nil || e.Format != journalFormat {
			return nil, fmt.Errorf("migrate: journal %s/%s is not a migration journal entry", r.dst, o.Key)
		}
		if e.Source != r.srcCRC {
			return nil, fmt.Errorf("migrate: journal %s/%s belongs to another source checkpoint; use an empty destination", r.dst, o.Key)
		}
		if journalKey(r.id, e.Subtask.Index) != o.Key {
			return nil, fmt.Errorf("migrate: journal %s/%s names subtask %d", r.dst, o.Key, e.Subtask.Index)
		}
		if err := r.checkJournal(&e); err != nil {
			return nil, fmt.Errorf("migrate: journal %s/%s: %w", r.dst, o.Key, err)
		}
		out[e.Subtask.Index] = &e
	}
	return out, nil
}

// checkJournal validates a journal entry against the source manifest:
// the subtask exists with the same range, and every object key and name is
// well formed and where a checkpoint keeps it.
func (r *run) checkJournal(e *journalEntry) error {
	var src *checkpoint.Subtask
	for i := range r.m.Subtasks {
		if r.m.Subtasks[i].Index == e.Subtask.Index {
			src = &r.m.Subtasks[i]
		}
	}
	if src == nil || src.StartKeyGroup != e.Subtask.StartKeyGroup || src.EndKeyGroup != e.Subtask.EndKeyGroup {
		return fmt.Errorf("subtask %d does not match the source checkpoint", e.Subtask.Index)
	}
	check := func(o checkpoint.Object, prefix string) error {
		if o.Name == "" || o.Name != filepath.Base(o.Name) || o.Name == "." || o.Name == ".." || strings.ContainsAny(o.Name, "/\\\x00") {
			return fmt.Errorf("hostile file name %q", o.Name)
		}
		if err := s3.ValidateKey(o.Key); err != nil || !strings.HasPrefix(o.Key, prefix) {
			return fmt.Errorf("object key %q outside %s", o.Key, prefix)
		}
		if o.Size < 0 || o.Size > 1<<40 {
			return fmt.Errorf("object %q has size %d", o.Key, o.Size)
		}
		return nil
	}
	for _, f := range e.Subtask.Shared {
		if err := check(f.Object, checkpoint.SharedPrefix); err != nil {
			return err
		}
	}
	for _, f := range e.Subtask.Private {
		if err := check(f, checkpoint.Dir(r.id)+"/"); err != nil {
			return err
		}
	}
	return nil
}

// backendID derives the migrated subtask's backend id from the source's,
// so that a rerun names its objects the same way.
func backendID(src string) string {
	b := md5.Sum([]byte("sfstate-migrate-record:" + src))
	b[6] = b[6]&0x0f | 0x30
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// subtask migrates one subtask: fetch, convert, build, verify, upload,
// journal. A subtask that fails before its journal entry is written
// removes what it wrote to the destination (a rerun redoes it): only
// journaled subtasks leave objects behind for a resume.
func (r *run) subtask(st *checkpoint.Subtask) (_ *journalEntry, err error) {
	var wrote []string
	defer func() {
		if err != nil {
			r.remove(wrote)
		}
	}()
	work, err := os.MkdirTemp(r.opts.WorkDir, s3.ScratchPrefix+"migrate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	srcDir := filepath.Join(work, "src")
	if err := os.MkdirAll(srcDir, 0o755); err != nil {
		return nil, err
	}
	if os.Getenv("SFSTATE_MIGRATE_TRACE") != "" {
		r.mu.Lock()
		r.t0, r.c0 = time.Now(), cpuTime()
		r.mu.Unlock()
	}
	// 1. the source subtask's files, verified (links from a local store)
	infos := map[string]os.FileInfo{}
	objs := append([]checkpoint.Object(nil), st.Private...)
	for _, f := range st.Shared {
		objs = append(objs, f.Object)
	}
	for _, o := range objs {
		if err := r.ctx.Err(); err != nil {
			return nil, err
		}
		n, err := r.fetch(o, filepath.Join(srcDir, o.Name))
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.rep.BytesRead += n
		r.mu.Unlock()
		fi, err := os.Stat(filepath.Join(srcDir, o.Name))
		if err != nil {
			return nil, err
		}
		infos[o.Name] = fi
	}
	layout := engine.Layout{MaxParallelism: r.m.MaxParallelism, Range: keygroups.Range{Start: st.StartKeyGroup, End: st.EndKeyGroup}}
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	// 2. read the bucket state (and records of keys an online migration
	// already moved), convert, digest
	rd, err := engine.OpenNativeReadOnly(srcDir)
	if err != nil {
		return nil, fmt.Errorf("open source RocksDB of subtask %d: %w", st.Index, err)
	}
	defer rd.Close()
	conv := &conversion{r: r, layout: layout, rd: rd, dir: filepath.Join(work, "sst"), src: NewDigest()}
	if r.opts.DryRun {
		if err := conv.run(true); err != nil {
			return nil, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.op.Buckets += conv.buckets
		r.op.Rows += conv.rows
		r.op.BytesIn += conv.bytesIn
		r.op.BytesOut += conv.bytesOut
		r.op.Source.Merge(conv.src)
		return nil, nil
	}
	if err := os.MkdirAll(conv.dir, 0o755); err != nil {
		return nil, err
	}
	// 3. the output RocksDB: untouched files imported (hard links of the
	// fetched files, so the inode tells them apart later), then the
	// records written (SST writer + ingest, or batches)
	impDir := filepath.Join(work, "import")
	if err := os.MkdirAll(impDir, 0o755); err != nil {
		return nil, err
	}
	var untouched []engine.SSTFile
	for _, f := range st.Shared {
		if f.ColumnFamily == recordstore.BucketStateName || f.ColumnFamily == recordstore.RecordStateName {
			continue
		}
		if err := os.Link(filepath.Join(srcDir, f.Name), filepath.Join(impDir, f.Name)); err != nil {
			return nil, err
		}
		untouched = append(untouched, engine.SSTFile{Name: f.Name, ColumnFamily: f.ColumnFamily, Level: f.Level, Size: f.Size,
			Smallest: f.Smallest, Largest: f.Largest, SmallestSeqno: f.SmallestSeqno, LargestSeqno: f.LargestSeqno,
			Entries: f.Entries, Deletions: f.Deletions})
	}
	outDir := filepath.Join(work, "out")
	if err := engine.ImportSSTFiles(outDir, impDir, untouched); err != nil {
		return nil, fmt.Errorf("build output RocksDB: %w", err)
	}
	out, err := openOut(outDir, r.states)
	if err != nil {
		return nil, fmt.Errorf("open output RocksDB: %w", err)
	}
	defer out.Close()
	conv.out = out
	r.phase("prepare")
	if err := conv.run(false); err != nil {
		return nil, err
	}
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	rd.Close()
	r.phase("convert")
	if err := finishOut(out, conv.files); err != nil {
		return nil, err
	}
	snapDir := filepath.Join(work, "snap")
	if err := out.Checkpoint(snapDir); err != nil {
		return nil, err
	}
	out.Close()
	r.phase("ingest")
	dstDigest, err := digestRecordsDir(snapDir, layout.Width())
	if err != nil {
		return nil, fmt.Errorf("read back the migrated records: %w", err)
	}
	r.phase("verify")
	// 4. verify before anything is uploaded
	if ms := Compare(conv.src, dstDigest); len(ms) > 0 {
		r.mu.Lock()
		r.op.Source.Merge(conv.src)
		r.op.Migrated.Merge(dstDigest)
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %d groups differ, first: %v", ErrMismatch, len(ms), ms[0])
	}
	// 5. upload
	e := &journalEntry{Format: journalFormat, Source: r.srcCRC, Buckets: conv.buckets, Rows: conv.rows,
		BytesIn: conv.bytesIn, BytesOut: conv.bytesOut, Digest: encodeDigest(conv.src)}
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	sub, err := r.upload(st, snapDir, infos, e, &wrote)
	if err != nil {
		return nil, err
	}
	r.phase("upload")
	e.Subtask = *sub
	jb, err := json.MarshalIndent(e, "", " ")
	if err != nil {
		return nil, err
	}
	if err := r.step(); err != nil {
		return nil, err
	}
	if err := r.dst.Put(r.ctx, journalKey(r.id, st.Index), bytes.NewReader(jb), int64(len(jb))); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return e, nil
}

// fetch places source object o at dst: a hard link from a local store
// (after checking its size and CRC-32C), else a verified download
// (checkpoint.FetchObject). It returns the bytes downloaded.
func (r *run) fetch(o checkpoint.Object, dst string) (int64, error) {
	if root, ok := localRoot(r.src, r.opts.SrcLocalDir); ok {
		p, err := localPath(root, o.Key)
		if err != nil {
			return 0, err
		}
		if err := checkpoint.VerifyFile(p, o); err != nil {
			return 0, fmt.Errorf("%w (%s/%s)", err, r.src, o.Key)
		}
		if err := os.Link(p, dst); err == nil {
			return 0, nil
		}
	}
	if err := checkpoint.FetchObject(r.ctx, r.src, o, dst); err != nil {
		return 0, fmt.Errorf("source object: %w", err)
	}
	return o.Size, nil
}

func localPath(root, key string) (string, error) {
	if err := s3.ValidateKey(key); err != nil {
		return "", err
	}
	return filepath.Join(root, filepath.FromSlash(key)), nil
}

// localRoot is the directory of a local store: the given one, or the root
// of a bare *s3.Local.
func localRoot(st s3.Storage, dir string) (string, bool) {
	if dir != "" {
		return dir, true
	}
	if l, ok := st.(*s3.Local); ok {
		return l.Root(), true
	}
	return "", false
}

// conversion streams one subtask's bucket entries (merged with records
// already migrated online) into record entries.
type conversion struct {
	r      *run
	layout engine.Layout
	rd     *engine.NativeDB
	dir    string

	src               *Digest
	buckets, rows     int64
	bytesIn, bytesOut int64
	files             []string                          // SST writer output
	sink              func(prefix, row, v []byte) error // one record, key prefix+row
	kbuf, vbuf        []byte
	pipe              *sstPipe         // SST mode
	bufSize           int              // scan and SST batch buffers
	out               *engine.NativeDB // put mode
	batch             *engine.NativeBatch
	batchBytes        int64
	res               *engine.Reservation
}

// run reads the subtask's records and buckets. Bucket keys and record keys
// of one (key, side) never coexist (an online migration deletes the bucket
// in the batch that writes its records), so merging the two sorted streams
// by key is a plain interleave.
func (c *conversion) run(dry bool) error {
	// three batch buffers (scan, two for the SST writer), reserved from
	// the pool
	c.bufSize = 1 << 20
	bres, ok := c.r.opts.Pool.Reserve(int64(3 * c.bufSize))
	if !ok {
		c.bufSize = 64 << 10
		bres, _ = c.r.opts.Pool.Reserve(0)
	}
	defer bres.Release()
	width := c.layout.Width()
	rdg := &RecordDigester{D: c.src, Width: width}
	if dry {
		c.sink = func(_, _, _ []byte) error { return nil }
	} else if c.r.opts.Mode == WriteSST {
		c.pipe = newSSTPipe(c.dir, c.r.opts.SSTTargetSize, c.bufSize)
		c.sink = c.pipe.put
		defer c.pipe.close()
	} else {
		c.sink = c.putBatch
		b, err := c.out.NewBatch(recordstore.RecordStateName)
		if err != nil {
			return err
		}
		c.batch = b
		defer b.Close()
		res, ok := c.r.opts.Pool.Reserve(0)
		if !ok {
			return errors.New("pool exhausted")
		}
		c.res = res
		defer res.Release()
	}
	if t := c.r.opts.tamper; t != nil && !dry {
		sink := c.sink
		c.sink = func(p, row, v []byte) error {
			k, v := append(append([]byte(nil), p...), row...), append([]byte(nil), v...)
			t(k, v)
			return sink(k, nil, v)
		}
	}
	// records already in the record state (mixed state) are copied
	// through, merged by key with the converted buckets
	bi := c.rd.Iter(recordstore.BucketStateName, c.bufSize)
	defer bi.Close()
	ri := c.rd.Iter(recordstore.RecordStateName, 64<<10)
	defer ri.Close()
	bk, bv, bok, err := bi.Next()
	if err != nil {
		return fmt.Errorf("state %q: %w", recordstore.BucketStateName, err)
	}
	rk, rv, rok, err := ri.Next()
	if err != nil {
		return fmt.Errorf("state %q: %w", recordstore.RecordStateName, err)
	}
	for n := 0; bok || rok; n++ {
		if n&1023 == 0 {
			if err := c.r.ctx.Err(); err != nil {
				return err
			}
		}
		if rok && (!bok || bytes.Compare(rk, bk) < 0) {
			if err := rdg.Add(rk, rv); err != nil {
				return fmt.Errorf("state %q: %w", recordstore.RecordStateName, err)
			}
			c.rows++
			c.bytesOut += int64(len(rk) + len(rv))
			if err := c.sink(rk, nil, rv); err != nil {
				return err
			}
			if rk, rv, rok, err = ri.Next(); err != nil {
				return fmt.Errorf("state %q: %w", recordstore.RecordStateName, err)
			}
			continue
		}
		if err := c.bucket(bk, bv); err != nil {
			return err
		}
		if bk, bv, bok, err = bi.Next(); err != nil {
			return fmt.Errorf("state %q: %w", recordstore.BucketStateName, err)
		}
	}
	if c.pipe != nil {
		files, err := c.pipe.close()
		c.files = files
		return err
	}
	if c.batch != nil {
		return c.commitBatch()
	}
	return nil
}

// bucket converts one bucket entry: its rows are decoded in place (the
// value's bytes as scanned), digested, and handed to the sink as the
// bucket key plus the row, so no record key is assembled on the way.
func (c *conversion) bucket(k, v []byte) error {
	kg, _ := c.layout.KeyGroupOf(k)
	if !c.layout.Range.Contains(kg) {
		return fmt.Errorf("%w: bucket key %x of key group %d outside the subtask's range [%d, %d]", ErrCorrupt, k, kg, c.layout.Range.Start, c.layout.Range.End)
	}
	b, off, err := DecodeBucketKey(k, c.layout.Width())
	if err != nil {
		return fmt.Errorf("state %q: bucket key %x offset %d: %w", recordstore.BucketStateName, k, off, err)
	}
	var g *GroupStats
	var pc uint64
	rows, bytesOut := c.rows, c.bytesOut
	off, err = recordstore.DecodeBucketValue(v, func(r recordstore.LogicalRow) error {
		if g == nil {
			g = c.src.Group(GroupID{b.Side, b.KeyGroup})
			pc = PrefixHash(k)
			g.Keys++
			g.Bytes += int64(len(b.Key))
		}
		g.Rows++
		g.Count += r.Count
		g.Assoc += r.Assoc
		g.Hash += RowHash(pc, r.Row, r.Count, r.TS)
		g.Bytes += int64(len(r.Row))
		rows++
		bytesOut += int64(len(k) + len(r.Row) + recordstore.RecordValueSize)
		c.vbuf = recordstore.AppendRecordValue(c.vbuf[:0], r.TS, r.Count, r.Assoc)
		return c.sink(k, r.Row, c.vbuf)
	})
	c.rows, c.bytesOut = rows, bytesOut
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("bucket %x value offset %d: %w", k, off, err)
		}
		return fmt.Errorf("state %q: %w", recordstore.BucketStateName, err)
	}
	if want := recordstore.KeyGroupOf(b.Key, c.layout.MaxParallelism); want != b.KeyGroup {
		return fmt.Errorf("%w: bucket key %x stored in key group %d, its join key hashes to %d", ErrCorrupt, k, b.KeyGroup, want)
	}
	c.buckets++
	c.bytesIn += int64(len(k) + len(v))
	return nil
}

// putBatch writes through write batches into the output DB, committing
// when the pool refuses more buffered bytes or the batch reaches 4 MiB.
func (c *conversion) putBatch(k, row, v []byte) error {
	if len(row) > 0 {
		c.kbuf = append(append(c.kbuf[:0], k...), row...)
		k = c.kbuf
	}
	n := int64(len(k) + len(v) + 32)
	if c.batchBytes > 0 && (c.batchBytes+n > 4<<20 || !c.res.Grow(n)) {
		if err := c.commitBatch(); err != nil {
			return err
		}
		c.res.Grow(n) // may fail: one record always proceeds
	} else if c.batchBytes == 0 {
		c.res.Grow(n)
	}
	c.batch.Put(k, v)
	c.batchBytes += n
	return nil
}

func (c *conversion) commitBatch() error {
	if c.batchBytes == 0 {
		return nil
	}
	if err := c.batch.Commit(); err != nil {
		return fmt.Errorf("write records: %w", err)
	}
	c.res.Shrink(c.res.Size())
	c.batchBytes = 0
	return nil
}

// openOut opens the output RocksDB of one subtask for writing, with the
// families of every state, automatic compactions off (imported files must
// stay as they are).
func openOut(dir string, states []checkpoint.StateInfo) (*engine.NativeDB, error) {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = s.Name
	}
	return engine.OpenNativeBulk(dir, names)
}

// finishOut ingests the SST writer's files (moved, not copied) or flushes
// the records put through batches.
func finishOut(o *engine.NativeDB, files []string) error {
	if len(files) > 0 {
		if err := o.Ingest(recordstore.RecordStateName, files, true); err != nil {
			return fmt.Errorf("ingest migrated records: %w", err)
		}
		return nil
	}
	if err := o.Flush(recordstore.RecordStateName); err != nil {
		return fmt.Errorf("flush migrated records: %w", err)
	}
	return nil
}

// digestRecordsDir digests the record state of a RocksDB directory.
func digestRecordsDir(dir string, width int) (*Digest, error) {
	rd, err := engine.OpenNativeReadOnly(dir)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	dg := &RecordDigester{D: NewDigest(), Width: width}
	err = rd.Scan(recordstore.RecordStateName, 1<<20, dg.Add)
	return dg.D, err
}

// upload publishes the subtask's output directory: new SST files and the
// private files are written; SST files that are hard links of source files
// keep the source's object key and are carried over by reference.
func (r *run) upload(st *checkpoint.Subtask, dir string, infos map[string]os.FileInfo, e *journalEntry, wrote *[]string) (*checkpoint.Subtask, error) {
	files, err := engine.ListSSTFiles(dir)
	if err != nil {
		return nil, err
	}
	width := keygroups.PrefixWidth(r.m.MaxParallelism)
	bid := backendID(st.BackendID)
	sub := &checkpoint.Subtask{Index: st.Index, BackendID: bid, StartKeyGroup: st.StartKeyGroup, EndKeyGroup: st.EndKeyGroup}
	isSST := map[string]bool{}
	for _, f := range files {
		isSST[f.Name] = true
		fi, err := os.Stat(filepath.Join(dir, f.Name))
		if err != nil {
			return nil, err
		}
		ent := checkpoint.SSTEntry{ColumnFamily: f.ColumnFamily, Level: f.Level, Smallest: f.Smallest, Largest: f.Largest,
			FirstKeyGroup: checkpoint.KeyGroupOf(f.Smallest, width, true), LastKeyGroup: checkpoint.KeyGroupOf(f.Largest, width, false),
			SmallestSeqno: f.SmallestSeqno, LargestSeqno: f.LargestSeqno, Entries: f.Entries, Deletions: f.Deletions}
		var srcObj *checkpoint.Object
		for i := range st.Shared {
			if si := infos[st.Shared[i].Name]; si != nil && os.SameFile(si, fi) {
				srcObj = &st.Shared[i].Object
				break
			}
		}
		if err := r.ctx.Err(); err != nil {
			return nil, err
		}
		if srcObj != nil {
			if err := r.step(); err != nil {
				return nil, err
			}
			linked, err := r.reference(srcObj.Key, srcObj)
			if err != nil {
				return nil, fmt.Errorf("carry over %s: %w", srcObj.Key, err)
			}
			if r.srcRefs[srcObj.Key] == 1 {
				*wrote = append(*wrote, srcObj.Key)
			}
			ent.Object = checkpoint.Object{Name: f.Name, Key: srcObj.Key, Size: srcObj.Size, CRC: srcObj.CRC}
			if linked {
				e.Referenced++
				e.BRef += srcObj.Size
			} else {
				e.Copied++
				e.BCopied += srcObj.Size
			}
		} else {
			key := checkpoint.SharedPrefix + bid + "-" + f.Name
			w, err := r.putFile(key, filepath.Join(dir, f.Name))
			if err != nil {
				return nil, err
			}
			*wrote = append(*wrote, key)
			ent.Object = checkpoint.Object{Name: f.Name, Key: key, Size: w.Size, CRC: w.CRC}
			ent.Uploaded = true
			e.Written++
			e.BWritten += w.Size
			e.Uploaded += w.Size
		}
		sub.Shared = append(sub.Shared, ent)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, d := range des {
		if d.IsDir() || isSST[d.Name()] || !d.Type().IsRegular() {
			continue
		}
		key := fmt.Sprintf("%s/task-%d/%s", checkpoint.Dir(r.id), st.Index, d.Name())
		w, err := r.putFile(key, filepath.Join(dir, d.Name()))
		if err != nil {
			return nil, err
		}
		*wrote = append(*wrote, key)
		sub.Private = append(sub.Private, checkpoint.Object{Name: d.Name(), Key: key, Size: w.Size, CRC: w.CRC})
		e.Written++
		e.BWritten += w.Size
		e.Uploaded += w.Size
	}
	sort.Slice(sub.Private, func(i, j int) bool { return sub.Private[i].Name < sub.Private[j].Name })
	return sub, nil
}

// remove deletes the destination objects of a failed subtask, best
// effort and bounded in time: the run has failed already, and a rerun
// overwrites what is left.
func (r *run) remove(keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 30*time.Second)
	defer cancel()
	for _, k := range keys {
		_ = r.dst.Delete(ctx, k)
	}
}

func (r *run) putFile(key, file string) (s3.Written, error) {
	if err := r.step(); err != nil {
		return s3.Written{}, err
	}
	if root, ok := localRoot(r.dst, r.opts.DstLocalDir); ok {
		if w, ok := linkFile(root, key, file); ok {
			return w, nil
		}
	}
	w, err := checkpoint.PutFile(r.ctx, r.dst, key, file)
	if err != nil {
		return s3.Written{}, fmt.Errorf("upload %s to %s: %w", filepath.Base(file), r.dst, err)
	}
	return w, nil
}

// linkFile publishes a finished local file into a local store as a hard
// link (no second copy of the bytes): the file is checksummed and synced,
// linked under key and the directory synced. The work directory's name
// goes away with it; the content is never written again. ok is false when
// no link is possible (another file system): the caller copies.
func linkFile(root, key, file string) (w s3.Written, ok bool) {
	dp, err := localPath(root, key)
	if err != nil {
		return w, false
	}
	f, err := os.Open(file)
	if err != nil {
		return w, false
	}
	h := crc32.New(s3.Castagnoli)
	n, err := io.Copy(h, f)
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil || os.MkdirAll(filepath.Dir(dp), 0o755) != nil {
		return w, false
	}
	if err := os.Remove(dp); err != nil && !os.IsNotExist(err) {
		return w, false
	}
	if os.Link(file, dp) != nil {
		return w, false
	}
	if d, err := os.Open(filepath.Dir(dp)); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			os.Remove(dp)
			return w, false
		}
	}
	return s3.Written{Key: key, Size: n, CRC: h.Sum32()}, true
}

// reference carries source object key over to the destination under the
// same key: the caller's copier, a hard link between local stores, or a
// verified streamed copy. linked is false for a streamed copy.
func (r *run) reference(key string, o *checkpoint.Object) (linked bool, err error) {
	if r.opts.CopyReferenced != nil {
		return r.opts.CopyReferenced(r.ctx, key)
	}
	sl, ok1 := localRoot(r.src, r.opts.SrcLocalDir)
	dl, ok2 := localRoot(r.dst, r.opts.DstLocalDir)
	if ok1 && ok2 {
		sp, err := localPath(sl, key)
		if err != nil {
			return false, err
		}
		dp, err := localPath(dl, key)
		if err != nil {
			return false, err
		}
		if err := os.MkdirAll(filepath.Dir(dp), 0o755); err != nil {
			return false, err
		}
		if a, err1 := os.Stat(sp); err1 == nil {
			if b, err2 := os.Stat(dp); err2 == nil && os.SameFile(a, b) {
				return true, nil
			}
		}
		os.Remove(dp)
		if err := os.Link(sp, dp); err == nil {
			return true, nil
		}
	}
	if info, err := r.dst.Stat(r.ctx, key); err == nil && info.Size == o.Size {
		// a previous run copied it; the manifest records its CRC, which
		// restores verify
		return false, nil
	}
	rc, err := r.src.Get(r.ctx, key)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	if err := r.dst.Put(r.ctx, key, s3.VerifyingReader(io.LimitReader(rc, o.Size+1), o.Size, o.CRC), o.Size); err != nil {
		return false, err
	}
	return false, nil
}

// publish writes the manifest, then `_metadata` (PutIfAbsent, after every
// object was confirmed).
func (r *run) publish(md *savepoint.Metadata, subs []checkpoint.Subtask, uploaded []int64) error {
	m := &checkpoint.Manifest{Format: checkpoint.ManifestFormat, Version: checkpoint.ManifestVersion, CheckpointID: r.id,
		MaxParallelism: r.m.MaxParallelism, States: r.states, Subtasks: subs}
	var written []s3.Written
	for _, s := range subs {
		for _, f := range s.Shared {
			written = append(written, s3.Written{Key: f.Key, Size: f.Size, CRC: f.CRC})
			if f.Uploaded {
				m.BytesUploaded += f.Size
			} else {
				m.BytesReferenced += f.Size
			}
		}
		for _, f := range s.Private {
			written = append(written, s3.Written{Key: f.Key, Size: f.Size, CRC: f.CRC})
			m.BytesUploaded += f.Size
		}
	}
	meta, err := r.metaStream(md.Operators[0])
	if err != nil {
		return err
	}
	op := md.Operators[0]
	bySub := map[int]*checkpoint.Subtask{}
	for i := range subs {
		bySub[subs[i].Index] = &subs[i]
	}
	for i, ss := range op.Subtasks {
		h, ok := ss.ManagedKeyed.(*savepoint.IncrementalHandle)
		if !ok {
			return fmt.Errorf("migrate: checkpoint %d: subtask %d has no native keyed handle", r.id, ss.Index)
		}
		s := bySub[ss.Index]
		if s == nil {
			return fmt.Errorf("migrate: checkpoint %d: `_metadata` subtask %d is not in the manifest", r.id, ss.Index)
		}
		nh := *h
		nh.BackendID = s.BackendID
		nh.CheckpointedSize = uploaded[i]
		checkpoint.SetHandleStreams(&nh, r.dst.String(), r.id, s, meta)
		ss.ManagedKeyed = &nh
	}
	mdBytes, err := savepoint.EncodeMetadata(md)
	if err != nil {
		return fmt.Errorf("migrate: encode `_metadata`: %w", err)
	}
	mb, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	if err := r.removeOrphans(subs); err != nil {
		return err
	}
	if err := r.step(); err != nil {
		return err
	}
	if err := r.dst.Put(r.ctx, checkpoint.ManifestKey(r.id), bytes.NewReader(mb), int64(len(mb))); err != nil {
		return fmt.Errorf("migrate: manifest: %w", err)
	}
	written = append(written, s3.Written{Key: checkpoint.ManifestKey(r.id), Size: int64(len(mb))})
	if err := r.step(); err != nil {
		return err
	}
	if err := savepoint.CommitMetadata(r.ctx, r.dst, written, checkpoint.MetadataKey(r.id), mdBytes); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// removeOrphans deletes what interrupted runs uploaded and the final
// subtasks do not reference: objects under this migration's own shared
// names (shared/<derived backend id>-*) and the subtasks' private
// directories. Nothing else in dst is touched.
func (r *run) removeOrphans(subs []checkpoint.Subtask) error {
	used := map[string]bool{}
	for _, s := range subs {
		for _, f := range s.Shared {
			used[f.Key] = true
		}
		for _, f := range s.Private {
			used[f.Key] = true
		}
	}
	for _, s := range subs {
		for _, prefix := range []string{checkpoint.SharedPrefix + s.BackendID + "-", fmt.Sprintf("%s/task-%d/", checkpoint.Dir(r.id), s.Index)} {
			objs, err := r.dst.List(r.ctx, prefix)
			if err != nil {
				return fmt.Errorf("migrate: list %s: %w", prefix, err)
			}
			for _, o := range objs {
				if !used[o.Key] {
					if err := r.dst.Delete(r.ctx, o.Key); err != nil {
						return fmt.Errorf("migrate: remove leftover %s: %w", o.Key, err)
					}
				}
			}
		}
	}
	return nil
}

// metaStream is the meta-state header of the output states. When the
// source's meta-state stream describes its states with Flink's
// serializers (taken with a schema; canonical.SchemaOfHeader reads it
// back), the output keeps that schema, the bucket-layout join state
// becoming the record-layout one with the same join description, so the
// migrated checkpoint converts to canonical like its source; otherwise the
// states get byte-array serializers, as native checkpoints write by
// default.
func (r *run) metaStream(op *savepoint.OperatorState) ([]byte, error) {
	descs, err := checkpoint.StateDescs(r.states)
	if err != nil {
		return nil, fmt.Errorf("migrate: output states: %w", err)
	}
	if sch := r.outputSchema(op); sch != nil {
		if meta, err := checkpoint.MetaStream(descs, &checkpoint.Options{Schema: sch}); err == nil {
			return meta, nil
		}
	}
	return checkpoint.MetaStream(descs, &checkpoint.Options{})
}

// outputSchema is the source's schema with the join state moved to the
// record layout, or nil when the source has none.
func (r *run) outputSchema(op *savepoint.OperatorState) *engine.Schema {
	hdr, err := checkpoint.MetaHeader(op, r.src.String())
	if err != nil {
		return nil
	}
	srcDescs, err := checkpoint.StateDescs(r.m.States)
	if err != nil {
		return nil
	}
	sch, err := canonical.SchemaOfHeader(hdr, srcDescs)
	if err != nil {
		return nil
	}
	out := &engine.Schema{Key: sch.Key}
	for _, st := range sch.States {
		if st.Join != nil && st.Name == r.bucketCF {
			rec := recordstore.StateDesc(recordstore.LayoutRecord, st.TTL)
			st.Name, st.Kind = rec.Name, rec.Kind
		}
		out.States = append(out.States, st)
	}
	return out
}

// MarshalJSON encodes the digest as a list of (side, key group, stats).
func (d *Digest) MarshalJSON() ([]byte, error) {
	return json.Marshal(encodeDigest(d))
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (d *Digest) UnmarshalJSON(b []byte) error {
	var es []digestEntry
	if err := json.Unmarshal(b, &es); err != nil {
		return err
	}
	*d = *decodeDigest(es)
	return nil
}
