package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// RestoreOptions configures Restore.
type RestoreOptions struct {
	// Parallel bounds concurrent downloads; default 8.
	Parallel int
	// Rocks are the options of the restored backend.
	Rocks engine.RocksOptions
	// WholeHandles downloads every file of each overlapping subtask instead
	// of only the SST files whose key groups overlap the range (for
	// comparison in benchmarks).
	WholeHandles bool
	// KeyGroupFiles opens the restored backend with key-group SST
	// partitioning (engine.OpenRocksDBKeyGroupFiles).
	KeyGroupFiles bool
	// TidyBeforeReturn compacts the clipped key ranges of a backend
	// restored by import before Restore returns, instead of in the
	// background after (see WaitTidy).
	TidyBeforeReturn bool
}

// RestoreStats describes a restore.
type RestoreStats struct {
	// Handles is the number of old subtasks whose range overlaps.
	Handles int
	// FilesDownloaded / BytesDownloaded: objects fetched (SST and private);
	// FilesSkipped / BytesSkipped: SST files of overlapping subtasks that
	// hold no key group of the range and were not fetched.
	FilesDownloaded, FilesSkipped int
	BytesDownloaded, BytesSkipped int64
	// Imported counts subtasks rebuilt from a subset of their SST files;
	// Opened those restored from all their files; ImportsAbandoned imports
	// that did not finish within engine.ImportTimeout (the subtask was then
	// restored from all its files).
	Imported, Opened, ImportsAbandoned int
	// NotMerged tells why the overlapping subtasks' files were not
	// imported together (empty when they were, or when there was no
	// reason to try).
	NotMerged string `json:",omitempty"`
	// KeysCopied counts entries copied from non-base subtasks (scale-in).
	KeysCopied int64
	// Duration is the whole restore; Download, Build (import or open),
	// Clip and Copy its parts.
	Duration, Download, Build, Clip, Copy time.Duration
	// Reusable lists the shared SST files the restored directory holds
	// unchanged under their names (the base was restored from all its
	// files): pass them to Checkpointer.Adopt so the next checkpoint
	// references instead of uploading them.
	Reusable []SSTEntry `json:"-"`
}

// Restore rebuilds the state of key groups rng from completed checkpoint
// id into a new RocksDB backend in dir (which must not exist) and returns
// it open, with layout (checkpoint's max parallelism, rng) and the
// checkpoint's states.
//
// When the SST files of all overlapping old subtasks that may hold key
// groups of rng can be imported together (importMerged), they are, and
// nothing is copied; keys outside rng are clipped on the sides the files
// reach beyond, and those ranges compacted in the background (WaitTidy).
// Otherwise, like Flink's RocksDB restore: the old subtask with the largest overlap is
// the base. Only its SST files that may hold key groups of rng are fetched
// when they can be imported as one LSM (else all its files, and the
// checkpoint's own MANIFEST is used); keys outside rng are then removed
// with DeleteRange. Every other overlapping subtask (scale-in) is rebuilt
// the same way in a temporary directory and its keys in rng are copied
// into the base. Downloads are parallel, bounded, and verified against the
// recorded size and CRC-32C.
func Restore(ctx context.Context, st s3.Storage, id int64, rng keygroups.Range, dir string, opts RestoreOptions) (engine.Backend, *RestoreStats, error) {
	start := time.Now()
	if _, err := st.Stat(ctx, MetadataKey(id)); err != nil {
		return nil, nil, fmt.Errorf("checkpoint %d is not complete in %s: %w", id, st.String(), err)
	}
	m, err := ReadManifest(ctx, st, id)
	if err != nil {
		return nil, nil, err
	}
	layout := engine.Layout{MaxParallelism: m.MaxParallelism, Range: rng}
	if err := layout.Validate(); err != nil {
		return nil, nil, fmt.Errorf("checkpoint %d: restore range: %w", id, err)
	}
	states, err := StateDescs(m.States)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %d: %w", id, err)
	}
	if _, err := os.Stat(dir); err == nil {
		return nil, nil, fmt.Errorf("checkpoint %d: restore directory %s exists", id, dir)
	}
	var handles []*Subtask
	for i := range m.Subtasks {
		s := &m.Subtasks[i]
		if s.StartKeyGroup <= rng.End && s.EndKeyGroup >= rng.Start {
			handles = append(handles, s)
		}
	}
	covered := 0
	for _, h := range handles {
		covered += min(h.EndKeyGroup, rng.End) - max(h.StartKeyGroup, rng.Start) + 1
	}
	if covered != rng.End-rng.Start+1 {
		return nil, nil, fmt.Errorf("checkpoint %d: %d of the key groups [%d, %d] belong to no subtask of the checkpoint", id, rng.End-rng.Start+1-covered, rng.Start, rng.End)
	}
	overlap := func(s *Subtask) int { return min(s.EndKeyGroup, rng.End) - max(s.StartKeyGroup, rng.Start) + 1 }
	sort.SliceStable(handles, func(i, j int) bool { return overlap(handles[i]) > overlap(handles[j]) })
	stats := &RestoreStats{Handles: len(handles)}
	r := &restorer{ctx: ctx, st: st, id: id, rng: rng, opts: opts, stats: stats, states: states, maxPar: m.MaxParallelism}
	open := engine.OpenRocksDB
	if opts.KeyGroupFiles {
		open = engine.OpenRocksDBKeyGroupFiles
	}
	var b engine.Backend
	ok := false
	defer func() {
		if !ok {
			if b != nil {
				b.Close()
			}
			os.RemoveAll(dir)
		}
	}()
	merged := false
	if len(handles) > 0 {
		merged, err = r.importMerged(handles, dir)
	}
	switch {
	case err != nil:
		// reported below
	case len(handles) == 0:
		b, err = open(dir, layout, states, opts.Rocks)
	case merged:
		t := time.Now()
		b, err = open(dir, layout, states, opts.Rocks)
		stats.Build += time.Since(t)
		if err == nil {
			t := time.Now()
			err = clipSides(b, layout, r.reachLow, r.reachHigh)
			stats.Clip = time.Since(t)
		}
		if err == nil {
			tidy(b, layout, r.reachLow, r.reachHigh, opts.TidyBeforeReturn)
		}
	default:
		var whole bool
		if whole, err = r.materialize(handles[0], dir); err == nil {
			t := time.Now()
			b, err = open(dir, layout, states, opts.Rocks)
			stats.Build += time.Since(t)
			if whole {
				stats.Reusable = append([]SSTEntry(nil), handles[0].Shared...)
			}
		}
		if err == nil {
			t := time.Now()
			if whole {
				// The files stay as checkpointed (Reusable).
				err = clip(b, layout)
			} else {
				low, high := r.reachLow, r.reachHigh
				if err = clipSides(b, layout, low, high); err == nil {
					tidy(b, layout, low, high, opts.TidyBeforeReturn)
				}
			}
			stats.Clip = time.Since(t)
		}
		for i, h := range handles[1:] {
			if err != nil {
				break
			}
			t := time.Now()
			err = r.copyFrom(h, b, fmt.Sprintf("%s.restore-%d", dir, i+1))
			stats.Copy += time.Since(t)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %d: restore of key groups [%d, %d]: %w", id, rng.Start, rng.End, err)
	}
	ok = true
	stats.Duration = time.Since(start)
	return b, stats, nil
}

// StateDescs returns the declared states of a checkpoint (its manifest's
// States), in state-id order, as a restore declares them.
func StateDescs(states []StateInfo) ([]engine.StateDesc, error) {
	var out []engine.StateDesc
	for _, s := range states {
		k, err := kindOf(s.Kind)
		if err != nil {
			return nil, fmt.Errorf("state %q: %w", s.Name, err)
		}
		if s.TTLMillis < 0 {
			return nil, fmt.Errorf("state %q: negative TTL", s.Name)
		}
		out = append(out, engine.StateDesc{Name: s.Name, Kind: k, TTL: time.Duration(s.TTLMillis) * time.Millisecond})
	}
	return out, nil
}

func kindOf(s string) (engine.Kind, error) {
	for k := engine.KindValue; k <= engine.KindPriorityQueue; k++ {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown state kind %q", s)
}

type restorer struct {
	ctx    context.Context
	st     s3.Storage
	id     int64
	rng    keygroups.Range
	opts   RestoreOptions
	stats  *RestoreStats
	states []engine.StateDesc
	maxPar int
	// noImport: an import was abandoned; restore from whole files only.
	noImport bool
	// reachLow, reachHigh: an imported file may hold keys below (above)
	// the range, which must be clipped.
	reachLow, reachHigh bool
}

// reach notes which sides of the range imported file f may hold keys of.
func (r *restorer) reach(f SSTEntry) {
	r.reachLow = r.reachLow || f.FirstKeyGroup < r.rng.Start
	r.reachHigh = r.reachHigh || f.LastKeyGroup > r.rng.End
}

// importMerged builds the restore directory dir in one import from the SST
// files of every overlapping old subtask that may hold key groups of the
// range, when that is possible: the files of different subtasks must not
// overlap (they hold disjoint key groups, but a file whose range tombstones
// reach into another subtask's key groups would shadow that subtask's data
// by an unrelated sequence number) and must fit RocksDB's levels. Then no
// key is copied on scale-in. It reports false, having done nothing, when
// the restore must take the per-subtask path (or the import was abandoned).
func (r *restorer) importMerged(handles []*Subtask, dir string) (bool, error) {
	if r.opts.WholeHandles || r.noImport {
		return false, nil
	}
	type sel struct {
		h     *Subtask
		files []SSTEntry
	}
	var sels []sel
	var files []engine.SSTFile
	var objs []Object
	var skippedFiles int
	var skipped int64
	total, needed := 0, 0
	for _, h := range handles {
		s := sel{h: h}
		for _, f := range h.Shared {
			total++
			if !f.Overlaps(r.rng.Start, r.rng.End) {
				skippedFiles++
				skipped += f.Size
				continue
			}
			needed++
			r.reach(f)
			s.files = append(s.files, f)
			e := sstFile(f)
			e.Name = fmt.Sprintf("s%d-%s", h.Index, f.Name)
			files = append(files, e)
			o := f.Object
			o.Name = e.Name
			objs = append(objs, o)
		}
		sels = append(sels, s)
	}
	if len(handles) == 1 && needed == total {
		return false, nil // restore the subtask whole: its files stay reusable
	}
	if needed == 0 {
		return false, nil
	}
	for i := range sels {
		for j := i + 1; j < len(sels); j++ {
			for _, a := range sels[i].files {
				for _, b := range sels[j].files {
					if string(a.Smallest) <= string(b.Largest) && string(b.Smallest) <= string(a.Largest) {
						r.stats.NotMerged = fmt.Sprintf("file %s of subtask %d (key groups %d-%d) overlaps file %s of subtask %d (%d-%d)",
							a.Name, sels[i].h.Index, a.FirstKeyGroup, a.LastKeyGroup, b.Name, sels[j].h.Index, b.FirstKeyGroup, b.LastKeyGroup)
						return false, nil
					}
				}
			}
		}
	}
	if err := engine.CheckImportable(files); err != nil {
		r.stats.NotMerged = err.Error()
		return false, nil
	}
	tmp := dir + ".sst"
	defer os.RemoveAll(tmp)
	if err := r.download(objs, tmp); err != nil {
		return false, err
	}
	t := time.Now()
	imp := dir + ".import"
	err := engine.ImportSSTFilesContext(r.ctx, imp, tmp, files)
	if err == nil {
		err = os.Rename(imp, dir)
	}
	r.stats.Build += time.Since(t)
	switch {
	case err == nil:
		r.stats.Imported += len(handles)
		r.stats.FilesSkipped += skippedFiles
		r.stats.BytesSkipped += skipped
		return true, nil
	case errors.Is(err, engine.ErrImportStalled) && r.ctx.Err() == nil:
		r.stats.ImportsAbandoned++
		r.noImport = true
		return false, nil
	default:
		// RocksDB refused the combination (e.g. its level-0 sequence
		// checks when all 7 levels are needed): restore per subtask.
		os.RemoveAll(imp)
		if r.ctx.Err() != nil {
			return false, err
		}
		r.stats.NotMerged = err.Error()
		return false, nil
	}
}

// materialize builds old subtask h's RocksDB directory in dir: from the SST
// files overlapping the range when they can be imported, else from all its
// files (whole).
func (r *restorer) materialize(h *Subtask, dir string) (whole bool, err error) {
	var need []SSTEntry
	var skipped int64
	for _, f := range h.Shared {
		if f.Overlaps(r.rng.Start, r.rng.End) {
			need = append(need, f)
		} else {
			skipped += f.Size
		}
	}
	if !r.opts.WholeHandles && !r.noImport && len(need) < len(h.Shared) {
		files := make([]engine.SSTFile, len(need))
		for i, f := range need {
			files[i] = sstFile(f)
		}
		if engine.CheckImportable(files) == nil {
			for _, f := range need {
				r.reach(f)
			}
			tmp := dir + ".sst"
			defer os.RemoveAll(tmp)
			objs := make([]Object, len(need))
			for i, f := range need {
				objs[i] = f.Object
			}
			if err := r.download(objs, tmp); err != nil {
				return false, err
			}
			// Import beside dir and rename: an import that does not
			// finish in time is abandoned with its directory, and the
			// subtask is restored from all its files into dir instead.
			t := time.Now()
			imp := dir + ".import"
			err := engine.ImportSSTFilesContext(r.ctx, imp, tmp, files)
			if err == nil {
				err = os.Rename(imp, dir)
			}
			r.stats.Build += time.Since(t)
			switch {
			case err == nil:
				r.stats.Imported++
				r.stats.FilesSkipped += len(h.Shared) - len(need)
				r.stats.BytesSkipped += skipped
				return false, nil
			case errors.Is(err, engine.ErrImportStalled) && r.ctx.Err() == nil:
				r.stats.ImportsAbandoned++
				r.noImport = true
			default:
				os.RemoveAll(imp)
				return false, fmt.Errorf("subtask %d: %w", h.Index, err)
			}
		}
	}
	objs := append([]Object(nil), h.Private...)
	for _, f := range h.Shared {
		objs = append(objs, f.Object)
	}
	if err := r.download(objs, dir); err != nil {
		return false, err
	}
	r.stats.Opened++
	return true, nil
}

// download fetches objs into dir (created) under their local names,
// verifying size and CRC-32C; parallel and bounded.
func (r *restorer) download(objs []Object, dir string) error {
	defer func(t time.Time) { r.stats.Download += time.Since(t) }(time.Now())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(r.ctx)
	p := r.opts.Parallel
	if p < 1 {
		p = 8
	}
	g.SetLimit(p)
	var files, bytes atomic.Int64
	for _, o := range objs {
		o := o
		g.Go(func() error {
			if err := fetch(ctx, r.st, o, filepath.Join(dir, o.Name)); err != nil {
				return err
			}
			files.Add(1)
			bytes.Add(o.Size)
			return nil
		})
	}
	err := g.Wait()
	r.stats.FilesDownloaded += int(files.Load())
	r.stats.BytesDownloaded += bytes.Load()
	return err
}

// ErrCorrupt marks a downloaded object whose size or CRC-32C differs from
// the manifest.
var ErrCorrupt = errclass.New(errclass.ErrCorrupt, "checkpoint: object does not match its recorded size and CRC-32C")

// objCorrupt is ErrCorrupt for object o of st, positioned as an
// *errclass.CorruptionError at o's key and offset off (-1 for a mismatch
// of the whole object): "ErrCorrupt: KEY at offset N: NAME in STORE: ...".
func objCorrupt(st s3.Storage, o Object, off int64, format string, args ...any) error {
	cause := fmt.Errorf("%s in %s: "+format, append([]any{o.Name, st.String()}, args...)...)
	return fmt.Errorf("%w: %w", ErrCorrupt, &errclass.CorruptionError{File: o.Key, Offset: off, Err: cause})
}

// Objects larger than rangedThreshold are fetched as rangedChunk-sized
// ranges, rangedInFlight at a time, written in place, and their CRC-32C is
// computed from the local file afterwards. (Variables for tests.)
var (
	rangedThreshold int64 = 16 << 20
	rangedChunk     int64 = 8 << 20
	rangedInFlight        = 4
)

func fetch(ctx context.Context, st s3.Storage, o Object, dst string) error {
	return fetchRanged(ctx, st, o, dst, rangedThreshold, rangedChunk, rangedInFlight)
}

// fetchRanged is fetch with its own ranged-read parameters.
func fetchRanged(ctx context.Context, st s3.Storage, o Object, dst string, threshold, chunk int64, inFlight int) error {
	tmp := dst + ".part"
	err := fetchTo(ctx, st, o, tmp, threshold, chunk, inFlight)
	if err != nil {
		os.Remove(tmp)
		if errors.Is(err, ErrCorrupt) {
			return err
		}
		if errors.Is(err, s3.ErrIntegrity) {
			return objCorrupt(st, o, -1, "%v", err)
		}
		return fmt.Errorf("download %s: %w", o.Key, err)
	}
	return os.Rename(tmp, dst)
}

func fetchTo(ctx context.Context, st s3.Storage, o Object, tmp string, threshold, chunk int64, inFlight int) error {
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if o.Size <= threshold {
		rc, err := st.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		defer rc.Close()
		n, err := io.Copy(f, s3.VerifyingReader(io.LimitReader(rc, o.Size+1), o.Size, o.CRC))
		if err != nil {
			return err
		}
		if n != o.Size {
			return objCorrupt(st, o, n, "%d bytes, want %d", n, o.Size)
		}
		return f.Close()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	for off := int64(0); off < o.Size; off += chunk {
		off, n := off, min(chunk, o.Size-off)
		g.Go(func() error {
			rc, err := st.GetRange(gctx, o.Key, off, n)
			if err != nil {
				if errors.Is(err, s3.ErrPermanent) && !s3.IsNotExist(err) {
					return objCorrupt(st, o, off, "%v", err)
				}
				return err
			}
			defer rc.Close()
			w := io.NewOffsetWriter(f, off)
			m, err := io.Copy(w, io.LimitReader(rc, n))
			if err == nil && m != n {
				err = objCorrupt(st, o, off+m, "range at %d returned %d bytes, want %d", off, m, n)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := verifyOpen(f, o, tmp); err != nil {
		return fmt.Errorf("%w (%s in %s)", err, o.Name, st.String())
	}
	return f.Close()
}

// clip deletes every key outside the layout's range from every state.
func clip(b engine.Backend, l engine.Layout) error { return clipSides(b, l, true, true) }

// clipSides deletes the keys below the layout's range (low) and above it
// (high) from every state.
func clipSides(b engine.Backend, l engine.Layout, low, high bool) error {
	for st := range b.States() {
		if low && l.Range.Start > 0 {
			lo, hi := l.RangeBounds(0, l.Range.Start-1)
			if err := b.DeleteRange(st, lo, hi); err != nil {
				return err
			}
		}
		if high && l.Range.End+1 < l.MaxParallelism {
			lo, hi := l.RangeBounds(l.Range.End+1, l.MaxParallelism-1)
			if err := b.DeleteRange(st, lo, hi); err != nil {
				return err
			}
		}
	}
	return nil
}

// tidying holds the backends restored by import whose clipped key ranges
// are being compacted in the background: engine.Backend → chan struct{},
// closed when done.
var tidying sync.Map

// tidy compacts the clipped key ranges of a backend restored by import
// (compactClipped), in the background unless now is set. The restore is
// ready without it; Checkpointer.Take waits for it (WaitTidy).
func tidy(b engine.Backend, l engine.Layout, low, high, now bool) {
	if !low && !high {
		return
	}
	if now {
		compactClipped(b, l, low, high)
		return
	}
	done := make(chan struct{})
	tidying.Store(b, done)
	go func() {
		defer close(done)
		defer tidying.Delete(b)
		// An error (the backend was closed first) leaves the tombstones:
		// still exact, only not importable next to other subtasks' files.
		compactClipped(b, l, low, high)
	}()
}

// WaitTidy returns when the background compaction Restore started on b
// (if any) has finished, or ctx ends.
func WaitTidy(ctx context.Context, b engine.Backend) error {
	v, ok := tidying.Load(b)
	if !ok {
		return nil
	}
	select {
	case <-v.(chan struct{}):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// compactClipped compacts the key ranges clip deleted, so that neither the
// boundary entries nor the range tombstones survive in the backend's SST
// files: its next checkpoint has no file reaching into other subtasks' key
// groups, and a later rescale can import its files next to theirs.
func compactClipped(b engine.Backend, l engine.Layout, low, high bool) error {
	// Each compaction also takes the first (last) key group of the range:
	// a tombstone ends up in one file with the adjacent key group's
	// entries, and is only dropped by a compaction down to the level that
	// holds that key group's oldest data.
	if low && l.Range.Start > 0 {
		lo, hi := l.RangeBounds(0, l.Range.Start)
		if err := engine.CompactNativeRange(b, lo, hi); err != nil {
			return err
		}
	}
	if high && l.Range.End+1 < l.MaxParallelism {
		lo, hi := l.RangeBounds(l.Range.End, l.MaxParallelism-1)
		if err := engine.CompactNativeRange(b, lo, hi); err != nil {
			return err
		}
	}
	return nil
}

// copyFrom rebuilds old subtask h in tmp and copies its keys in range into dst.
func (r *restorer) copyFrom(h *Subtask, dst engine.Backend, tmp string) error {
	defer os.RemoveAll(tmp)
	if _, err := r.materialize(h, tmp); err != nil {
		return err
	}
	src, err := engine.OpenRocksDB(tmp, engine.Layout{MaxParallelism: r.maxPar, Range: keygroups.Range{Start: h.StartKeyGroup, End: h.EndKeyGroup}}, r.states, engine.RocksOptions{})
	if err != nil {
		return err
	}
	defer src.Close()
	lo, hi := dst.Layout().RangeBounds(max(h.StartKeyGroup, r.rng.Start), min(h.EndKeyGroup, r.rng.End))
	batch := dst.NewBatch()
	defer batch.Close()
	for st := range r.states {
		var cerr error
		err := src.Scan(st, lo, hi, func(k, v []byte) bool {
			batch.Put(st, k, v)
			r.stats.KeysCopied++
			if batch.Len() >= 4096 {
				cerr = batch.Commit()
			}
			return cerr == nil
		})
		if err == nil {
			err = cerr
		}
		if err == nil {
			err = batch.Commit()
		}
		if err != nil {
			return fmt.Errorf("copy subtask %d: %w", h.Index, err)
		}
	}
	return nil
}
