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

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
)

// Lazy restore: the new subtask's RocksDB opens empty and the subtask is
// ready at once; a background task adopts the checkpoint's files. The
// files a new subtask needs are grouped into units: connected components of
// files whose key-group ranges (cut to the subtask's range) overlap. A
// unit's files are downloaded (parallel ranged reads), imported per old
// subtask into a scratch RocksDB directory with their own sequence numbers,
// and their live entries of the key groups that old subtask owned and the
// new one owns are written into SST files cut at key-group boundaries,
// which are ingested into the open backend. Keys outside those key groups
// (boundary files, range tombstones reaching beyond an old subtask's range)
// are thereby clipped before they ever reach the backend.
//
// Ingestion gives a file a sequence number newer than everything in the
// backend, so it must never land on a key group that was already read or
// written: every access to a key group whose unit is not yet adopted waits
// for that unit (and moves it to the front of the queue), and all key
// groups of a unit become accessible together, after the whole unit has
// been ingested.

// ErrNotLazy: the checkpoint's files cannot be adopted unit by unit (some
// old subtask's files of a unit cannot be imported on their own); restore
// it with Restore instead.
var ErrNotLazy = errors.New("rescale: checkpoint cannot be restored lazily")

// ErrAdoption wraps the error that stopped the background adoption;
// accesses to key groups not yet adopted return it.
var ErrAdoption = errors.New("rescale: background adoption failed")

// LazyOptions configures RestoreLazy.
type LazyOptions struct {
	// Parallel bounds concurrent downloads; default 8.
	Parallel int
	// Rocks are the options of the restored backend; KeyGroupFiles opens
	// it with key-group SST partitioning.
	Rocks         engine.RocksOptions
	KeyGroupFiles bool
	// BatchBytes bounds the downloaded bytes adopted in one ingestion
	// (default 64 MiB); units an access waits for go in a batch of their
	// own.
	BatchBytes int64
	// Adopters bounds the batches adopted at once (default 2): a batch's
	// time goes mostly to writing and syncing its files.
	Adopters int
	// ReuseDirs are local RocksDB directories of earlier incarnations
	// (e.g. the old subtask that ran in the same slot before the rescale).
	// A needed file is taken from the first of them holding a file of its
	// name with the recorded size and CRC-32C, instead of being downloaded:
	// SST files are immutable, so an identical file is the same file, also
	// across a rescale. Counted apart in LazyStats (FilesReused,
	// BytesReused); BytesDownloaded stays the remote traffic.
	ReuseDirs []string
}

// LazyStats describes a lazy restore. Read it with Lazy.Stats.
type LazyStats struct {
	// Units, Files and Bytes: what the subtask adopts.
	Units, Files int
	Bytes        int64
	// PlannedBytes and WholeBytes from the plan (see PlannedStats).
	PlannedBytes, WholeBytes int64
	// Ready is the time until RestoreLazy returned; AllLocal until the
	// last unit was ingested (0 while adoption runs).
	Ready, AllLocal time.Duration
	// Fetched is the time until the last file was downloaded (or
	// reused); AllLocal - Fetched is the adoption's tail.
	Fetched time.Duration
	// FilesDownloaded, BytesDownloaded: fetched so far from the store;
	// FilesReused, BytesReused: taken from ReuseDirs instead.
	FilesDownloaded, FilesReused int
	BytesDownloaded, BytesReused int64
	// Batches: ingestions; Ingested: SST files ingested; Entries: entries
	// adopted.
	Batches, Ingested int
	Entries           int64
	// Import, Rewrite and Ingest: time the adoption spent building scratch
	// imports, rewriting their entries into SST files and ingesting.
	Import, Rewrite, Ingest time.Duration
	// PrioFetch and PrioAdopt: the longest time a waited-for unit took
	// to be downloaded after the first wait, and to be adopted after that.
	PrioFetch, PrioAdopt time.Duration
	// Waits counts accesses that waited for a unit; Prioritized the units
	// moved to the front of the queue by them.
	Waits, Prioritized int
}

// Lazy is a backend restored lazily: an engine.Backend whose accesses
// wait for the key groups they touch to be adopted.
type Lazy struct {
	inner  engine.Backend
	nat    engine.Native
	layout engine.Layout
	st     s3.Storage
	work   string
	opts   LazyOptions
	start  time.Time

	// unitOf maps a key group of the range (index kg-Range.Start) to its
	// unit, -1 when no file holds it.
	unitOf   []int32
	units    []*unit
	pending  atomic.Int64 // units not yet adopted
	allLocal atomic.Bool  // done is closed (by the adopter that got pending to 0)
	// prioFetching counts waited-for units not yet downloaded; the bulk
	// downloaders start no new file meanwhile.
	prioFetching atomic.Int64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when every unit is adopted
	stop   chan struct{} // closed on failure or Close

	mu        sync.Mutex
	err       error // why stop was closed
	closed    bool
	queue     []*unit       // in key-group order
	qpos      int           // first unit of queue with files not yet started
	prio      []*unit       // units waited for, files not all started
	fetched   []*unit       // downloaded, not yet adopted
	kick      chan struct{} // a unit was downloaded
	prioKick  chan struct{} // a unit was waited for
	prioReady chan struct{} // a waited-for unit was downloaded
	stats     LazyStats
	batchSeq  int
}

type unit struct {
	idx    int
	lo, hi int // key groups, inside the restored range
	parts  []part
	files  []lazyFile
	bytes  int64
	next   int  // next file to start
	left   int  // files not yet downloaded
	prio   bool // waited for
	// prioAt: when first waited for; fetchedAt: when downloaded.
	prioAt, fetchedAt time.Time
	ready             chan struct{}
	isDone            atomic.Bool
}

// part is one old subtask's files of a unit.
type part struct {
	sub   *Subtask
	files []SSTEntry
}

type lazyFile struct {
	obj  Object // Name is the local name
	orig string // the name in the old subtask's directory
}

// RestoreLazy restores new subtask i of plan from st into dir (which must
// not exist) lazily: it returns as soon as the backend is open, and adopts
// the subtask's files in the background. Close stops the adoption. When
// the files cannot be adopted unit by unit the error satisfies
// errors.Is(err, ErrNotLazy) and nothing is left in dir.
func RestoreLazy(ctx context.Context, st s3.Storage, plan *rescale.NativePlan, i int, dir string, opts LazyOptions) (*Lazy, error) {
	start := time.Now()
	if plan == nil || i < 0 || i >= len(plan.Subtasks) {
		return nil, fmt.Errorf("rescale restore: no subtask %d in the plan", i)
	}
	ps := plan.Subtasks[i]
	m, err := ReadManifest(ctx, st, plan.CheckpointID)
	if err != nil {
		return nil, err
	}
	if m.MaxParallelism != plan.MaxParallelism || len(m.Subtasks) != plan.OldParallelism {
		return nil, fmt.Errorf("rescale restore: plan (max parallelism %d, %d old subtasks) does not match checkpoint %d (%d, %d)",
			plan.MaxParallelism, plan.OldParallelism, plan.CheckpointID, m.MaxParallelism, len(m.Subtasks))
	}
	rng := keygroups.Range{Start: ps.StartKeyGroup, End: ps.EndKeyGroup}
	layout := engine.Layout{MaxParallelism: m.MaxParallelism, Range: rng}
	if err := layout.Validate(); err != nil {
		return nil, fmt.Errorf("rescale restore: subtask %d: %w", i, err)
	}
	states, err := manifestStates(m)
	if err != nil {
		return nil, fmt.Errorf("rescale restore: checkpoint %d: %w", plan.CheckpointID, err)
	}
	units, err := planUnits(m, rng, states)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("rescale restore: directory %s exists", dir)
	}
	work := dir + ".adopt"
	if err := os.RemoveAll(work); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(work, "files"), 0o755); err != nil {
		return nil, err
	}
	open := engine.OpenRocksDB
	if opts.KeyGroupFiles {
		open = engine.OpenRocksDBKeyGroupFiles
	}
	inner, err := open(dir, layout, states, opts.Rocks)
	if err != nil {
		os.RemoveAll(work)
		os.RemoveAll(dir)
		return nil, err
	}
	nat, ok := engine.NativeOf(inner)
	if !ok {
		inner.Close()
		os.RemoveAll(work)
		os.RemoveAll(dir)
		return nil, engine.ErrNotNative
	}
	if opts.Parallel < 1 {
		opts.Parallel = 8
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 64 << 20
	}
	if opts.Adopters < 1 {
		opts.Adopters = 2
	}
	l := &Lazy{inner: inner, nat: nat, layout: layout, st: st, work: work, opts: opts, start: start,
		units: units, done: make(chan struct{}), stop: make(chan struct{}),
		kick: make(chan struct{}, 1), prioKick: make(chan struct{}, 1), prioReady: make(chan struct{}, 1)}
	l.unitOf = make([]int32, rng.End-rng.Start+1)
	for k := range l.unitOf {
		l.unitOf[k] = -1
	}
	for _, u := range units {
		for kg := u.lo; kg <= u.hi; kg++ {
			l.unitOf[kg-rng.Start] = int32(u.idx)
		}
		l.stats.Files += len(u.files)
		l.stats.Bytes += u.bytes
	}
	l.stats.Units = len(units)
	l.stats.PlannedBytes, l.stats.WholeBytes = ps.NeededBytes, ps.WholeBytes
	l.queue = units
	l.pending.Store(int64(len(units)))
	// The adoption outlives ctx (the caller's restore call): Close stops it.
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if len(units) == 0 {
		close(l.done)
	} else {
		for w := 0; w < min(opts.Parallel, l.stats.Files); w++ {
			l.wg.Add(1)
			go l.downloader(false, w)
		}
		for a := 0; a < opts.Adopters; a++ {
			l.wg.Add(1)
			go l.adopter(false)
		}
		// One downloader and one adopter for waited-for units only.
		l.wg.Add(2)
		go l.downloader(true, 0)
		go l.adopter(true)
	}
	l.mu.Lock()
	l.stats.Ready = time.Since(start)
	l.mu.Unlock()
	return l, nil
}

func manifestStates(m *Manifest) ([]engine.StateDesc, error) {
	var out []engine.StateDesc
	for _, s := range m.States {
		var kind engine.Kind
		for k := engine.KindValue; k <= engine.KindPriorityQueue; k++ {
			if k.String() == s.Kind {
				kind = k
			}
		}
		if kind == 0 {
			return nil, fmt.Errorf("state %q: unknown kind %q", s.Name, s.Kind)
		}
		if s.TTLMillis < 0 {
			return nil, fmt.Errorf("state %q: negative TTL", s.Name)
		}
		out = append(out, engine.StateDesc{Name: s.Name, Kind: kind, TTL: time.Duration(s.TTLMillis) * time.Millisecond})
	}
	return out, nil
}

// planUnits groups the SST files of m that may hold key groups of rng into
// units (connected components of overlapping key-group ranges cut to rng),
// in key-group order.
func planUnits(m *Manifest, rng keygroups.Range, states []engine.StateDesc) ([]*unit, error) {
	covered := 0
	type ref struct {
		sub    *Subtask
		f      SSTEntry
		lo, hi int
	}
	var refs []ref
	known := map[string]bool{"default": true}
	for _, s := range states {
		known[s.Name] = true
	}
	for si := range m.Subtasks {
		s := &m.Subtasks[si]
		if s.StartKeyGroup > rng.End || s.EndKeyGroup < rng.Start {
			continue
		}
		covered += min(s.EndKeyGroup, rng.End) - max(s.StartKeyGroup, rng.Start) + 1
		for _, f := range s.Shared {
			if !f.Overlaps(rng.Start, rng.End) {
				continue
			}
			if !known[f.ColumnFamily] {
				return nil, fmt.Errorf("rescale restore: subtask %d: SST %s of undeclared state %q", s.Index, f.Name, f.ColumnFamily)
			}
			// Only the key groups this old subtask owned are taken from
			// its files; a file reaching beyond them still joins the
			// units it overlaps (conservative).
			refs = append(refs, ref{sub: s, f: f, lo: max(f.FirstKeyGroup, rng.Start), hi: min(f.LastKeyGroup, rng.End)})
		}
	}
	if covered != rng.End-rng.Start+1 {
		return nil, fmt.Errorf("rescale restore: checkpoint %d: %d of the key groups [%d, %d] belong to no subtask", m.CheckpointID, rng.End-rng.Start+1-covered, rng.Start, rng.End)
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].lo < refs[j].lo })
	var units []*unit
	var cur *unit
	for _, r := range refs {
		if cur == nil || r.lo > cur.hi {
			cur = &unit{idx: len(units), lo: r.lo, hi: r.hi, ready: make(chan struct{})}
			units = append(units, cur)
		}
		cur.hi = max(cur.hi, r.hi)
		pi := -1
		for k := range cur.parts {
			if cur.parts[k].sub == r.sub {
				pi = k
			}
		}
		if pi < 0 {
			cur.parts = append(cur.parts, part{sub: r.sub})
			pi = len(cur.parts) - 1
		}
		cur.parts[pi].files = append(cur.parts[pi].files, r.f)
		o := r.f.Object
		o.Name = localName(r.sub, r.f)
		cur.files = append(cur.files, lazyFile{obj: o, orig: r.f.Name})
		cur.bytes += r.f.Size
	}
	for _, u := range units {
		u.left = len(u.files)
		for _, p := range u.parts {
			files := make([]engine.SSTFile, len(p.files))
			for k, f := range p.files {
				files[k] = sstFile(f)
			}
			if err := engine.CheckImportable(files); err != nil {
				return nil, fmt.Errorf("%w: subtask %d's files of key groups [%d, %d]: %v", ErrNotLazy, p.sub.Index, u.lo, u.hi, err)
			}
		}
	}
	return units, nil
}

func localName(s *Subtask, f SSTEntry) string {
	return fmt.Sprintf("s%d-%s", s.Index, f.Name)
}

// fail stops the adoption with err (the first error wins).
func (l *Lazy) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLocked(err)
}

func (l *Lazy) failLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	close(l.stop)
	l.cancel()
}

// nextFile picks the next file to download: files of units an access
// waits for first, then in key-group order.
func (l *Lazy) nextFile(prioOnly bool) (*unit, int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, 0, false
	}
	for len(l.prio) > 0 {
		u := l.prio[0]
		if u.next < len(u.files) {
			u.next++
			return u, u.next - 1, true
		}
		l.prio = l.prio[1:]
	}
	if prioOnly {
		return nil, 0, false
	}
	for l.qpos < len(l.queue) {
		u := l.queue[l.qpos]
		if u.next < len(u.files) {
			u.next++
			return u, u.next - 1, true
		}
		l.qpos++
	}
	return nil, 0, false
}

// downloader fetches files until none is left to start. With prioOnly
// it fetches only files of units an access waits for, and waits for more
// until the adoption ends: a waiting access never queues behind the
// bulk downloads.
func (l *Lazy) downloader(prioOnly bool, id int) {
	defer l.wg.Done()
	// While a waited-for unit downloads, the upper half of the bulk
	// downloaders start no new file (the lower half keep the bulk
	// adoption going).
	pauses := !prioOnly && id >= l.opts.Parallel/2
	for {
		for pauses && l.prioFetching.Load() > 0 {
			select {
			case <-time.After(5 * time.Millisecond):
			case <-l.stop:
				return
			}
		}
		u, k, ok := l.nextFile(prioOnly)
		if !ok {
			if !prioOnly {
				return
			}
			select {
			case <-l.prioKick:
				continue
			case <-l.stop:
				return
			case <-l.done:
				return
			}
		}
		f := &u.files[k]
		dst := filepath.Join(l.work, "files", f.obj.Name)
		reused := l.reuse(f, dst)
		if !reused {
			fetch := FetchObject
			if prioOnly {
				// A waiting access: more, smaller ranges in flight, to
				// take a larger share of a link the bulk downloads fill.
				fetch = func(ctx context.Context, st s3.Storage, o Object, dst string) error {
					return FetchObjectRanged(ctx, st, o, dst, 2<<20, 8)
				}
			}
			if err := fetch(l.ctx, l.st, f.obj, dst); err != nil {
				l.fail(fmt.Errorf("%w: %w", ErrAdoption, err))
				return
			}
		}
		l.mu.Lock()
		if reused {
			l.stats.FilesReused++
			l.stats.BytesReused += f.obj.Size
		} else {
			l.stats.FilesDownloaded++
			l.stats.BytesDownloaded += f.obj.Size
		}
		if l.stats.FilesDownloaded+l.stats.FilesReused == l.stats.Files {
			l.stats.Fetched = time.Since(l.start)
		}
		u.left--
		if u.left == 0 {
			if u.prio {
				l.prioFetching.Add(-1)
			}
			u.fetchedAt = time.Now()
			l.fetched = append(l.fetched, u)
			signal(l.kick)
			if u.prio {
				signal(l.prioReady)
			}
		}
		l.mu.Unlock()
	}
}

// reuse links (or copies) f from the first ReuseDirs entry holding an
// identical file (same name, size and CRC-32C) to dst.
func (l *Lazy) reuse(f *lazyFile, dst string) bool {
	for _, d := range l.opts.ReuseDirs {
		src := filepath.Join(d, f.orig)
		fi, err := os.Stat(src)
		if err != nil || !fi.Mode().IsRegular() || VerifyFile(src, f.obj) != nil {
			continue
		}
		if os.Link(src, dst) == nil || copyFile(src, dst) == nil {
			return true
		}
		os.Remove(dst)
	}
	return false
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// takeBatch removes the next batch from the downloaded units: the waited
// for ones alone when there are any, else in download order up to
// BatchBytes.
func (l *Lazy) takeBatch(prioOnly bool) []*unit {
	l.mu.Lock()
	defer l.mu.Unlock()
	var batch, rest []*unit
	for _, u := range l.fetched {
		if u.prio {
			batch = append(batch, u)
		} else {
			rest = append(rest, u)
		}
	}
	if len(batch) == 0 && !prioOnly {
		var n int64
		for len(rest) > 0 && (len(batch) == 0 || n+rest[0].bytes <= l.opts.BatchBytes) {
			n += rest[0].bytes
			batch, rest = append(batch, rest[0]), rest[1:]
		}
	}
	l.fetched = rest
	if len(rest) > 0 {
		signal(l.kick) // another adopter may take the rest
	}
	return batch
}

// signal makes a non-blocking send on a wake-up channel of capacity 1.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// adopter adopts downloaded batches until every unit is adopted. With
// prioOnly it adopts only units an access waits for, so such a unit never
// waits behind the bulk batches.
func (l *Lazy) adopter(prioOnly bool) {
	defer l.wg.Done()
	wake := l.kick
	if prioOnly {
		wake = l.prioReady
	}
	for {
		batch := l.takeBatch(prioOnly)
		if len(batch) == 0 {
			select {
			case <-wake:
				continue
			case <-l.stop:
				return
			case <-l.done:
				return
			}
		}
		if err := l.adopt(batch); err != nil {
			l.fail(fmt.Errorf("%w: %w", ErrAdoption, err))
			return
		}
		now := time.Now()
		l.mu.Lock()
		for _, u := range batch {
			if u.prio {
				l.stats.PrioFetch = max(l.stats.PrioFetch, u.fetchedAt.Sub(u.prioAt))
				from := u.fetchedAt
				if u.prioAt.After(from) {
					from = u.prioAt
				}
				l.stats.PrioAdopt = max(l.stats.PrioAdopt, now.Sub(from))
			}
		}
		l.mu.Unlock()
		for _, u := range batch {
			u.isDone.Store(true)
			close(u.ready)
		}
		if l.pending.Add(-int64(len(batch))) == 0 && l.allLocal.CompareAndSwap(false, true) {
			l.mu.Lock()
			l.stats.AllLocal = time.Since(l.start)
			l.mu.Unlock()
			close(l.done)
			return
		}
	}
}

// adopt ingests the downloaded units of batch into the backend.
func (l *Lazy) adopt(batch []*unit) error {
	l.mu.Lock()
	l.batchSeq++
	seq := l.batchSeq
	l.mu.Unlock()
	bdir := filepath.Join(l.work, fmt.Sprint("batch-", seq))
	defer os.RemoveAll(bdir)
	out := filepath.Join(bdir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	w := &sstOut{dir: out, layout: l.layout, byState: make([][]string, len(l.inner.States()))}
	defer w.close()
	stateOf := map[string]int{}
	for i, s := range l.inner.States() {
		stateOf[s.Name] = i
	}
	filesDir := filepath.Join(l.work, "files")
	// One scratch import per old subtask (per unit when the batch's files
	// of that subtask cannot be imported together): each holds one old
	// RocksDB instance's files with their own sequence numbers, and only
	// the key groups that subtask owned are taken from it.
	type group struct {
		sub   *Subtask
		units []*unit
		files []engine.SSTFile
	}
	var groups []*group
	bySub := map[*Subtask]*group{}
	for _, u := range batch {
		for _, p := range u.parts {
			g := bySub[p.sub]
			if g == nil {
				g = &group{sub: p.sub}
				bySub[p.sub] = g
				groups = append(groups, g)
			}
			g.units = append(g.units, u)
			for _, f := range p.files {
				e := sstFile(f)
				e.Name = localName(p.sub, f)
				g.files = append(g.files, e)
			}
		}
	}
	var runs []*group
	for _, g := range groups {
		if len(g.units) == 1 || engine.CheckImportable(g.files) == nil {
			runs = append(runs, g)
			continue
		}
		for _, u := range g.units {
			one := &group{sub: g.sub, units: []*unit{u}}
			for _, p := range u.parts {
				if p.sub == g.sub {
					for _, f := range p.files {
						e := sstFile(f)
						e.Name = localName(p.sub, f)
						one.files = append(one.files, e)
					}
				}
			}
			runs = append(runs, one)
		}
	}
	r := l.layout.Range
	mask := make([]bool, r.End-r.Start+1)
	for gi, g := range runs {
		clear(mask)
		for _, u := range g.units {
			for kg := max(u.lo, g.sub.StartKeyGroup); kg <= min(u.hi, g.sub.EndKeyGroup); kg++ {
				mask[kg-r.Start] = true
			}
		}
		imp := filepath.Join(bdir, fmt.Sprint("import-", gi))
		// Not cancelled by Close: the native import cannot be
		// interrupted, and it only links files and reads indexes.
		t0 := time.Now()
		if err := engine.ImportSSTFiles(imp, filesDir, g.files); err != nil {
			return fmt.Errorf("old subtask %d: %w", g.sub.Index, err)
		}
		t1 := time.Now()
		for _, f := range g.files {
			os.Remove(filepath.Join(filesDir, f.Name))
		}
		err := readScratch(l.ctx, imp, l.layout, mask, stateOf, w.add)
		if err == nil {
			err = w.finish()
		}
		os.RemoveAll(imp)
		if err != nil {
			return fmt.Errorf("old subtask %d: %w", g.sub.Index, err)
		}
		l.mu.Lock()
		l.stats.Import += t1.Sub(t0)
		l.stats.Rewrite += time.Since(t1)
		l.mu.Unlock()
	}
	t2 := time.Now()
	n := 0
	for st, paths := range w.byState {
		if len(paths) == 0 {
			continue
		}
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if err := l.nat.Ingest(st, paths, true); err != nil {
			return fmt.Errorf("ingest %d files into state %q: %w", len(paths), l.inner.States()[st].Name, err)
		}
		n += len(paths)
	}
	l.mu.Lock()
	l.stats.Ingest += time.Since(t2)
	l.stats.Batches++
	l.stats.Ingested += n
	l.stats.Entries += w.entries
	l.mu.Unlock()
	return nil
}

// rewriteBlockSize is the data block size of the rewritten SST files.
var rewriteBlockSize = 32 << 10

// sstOut writes adopted entries into SST files, one per (state, key group).
type sstOut struct {
	dir     string
	layout  engine.Layout
	w       *engine.SSTWriter
	open    bool // w has a file open
	st, kg  int
	n       int
	byState [][]string
	entries int64
}

func (o *sstOut) add(st, kg int, key, val []byte) error {
	if o.open && (st != o.st || kg != o.kg) {
		if err := o.finish(); err != nil {
			return err
		}
	}
	if !o.open {
		if o.w == nil {
			// The adopted values were compressed (or not) when the old
			// subtask wrote them and are rewritten once: no compression
			// (readable by any build of the engine) and larger blocks
			// keep the rewrite's CPU to copying.
			o.w = engine.NewSSTWriter(engine.SSTOptions{Compression: engine.CompressionNone, BlockSize: rewriteBlockSize})
		}
		o.n++
		path := filepath.Join(o.dir, fmt.Sprintf("%06d.sst", o.n))
		if err := o.w.Open(path); err != nil {
			return err
		}
		o.open = true
		o.st, o.kg = st, kg
		o.byState[st] = append(o.byState[st], path)
	}
	o.entries++
	return o.w.Put(key, val)
}

func (o *sstOut) finish() error {
	if !o.open {
		return nil
	}
	o.open = false
	return o.w.Finish()
}

func (o *sstOut) close() {
	if o.w != nil {
		o.w.Close()
		o.w = nil
	}
	o.open = false
}

// waitRange waits until the key groups [lo, hi] (cut to the range) are
// adopted, moving their units to the front of the queue.
func (l *Lazy) waitRange(lo, hi int) error {
	if l.pending.Load() == 0 {
		return l.closedErr()
	}
	r := l.layout.Range
	lo, hi = max(lo, r.Start), min(hi, r.End)
	var need []*unit
	last := int32(-1)
	for kg := lo; kg <= hi; kg++ {
		ui := l.unitOf[kg-r.Start]
		if ui < 0 || ui == last {
			continue
		}
		last = ui
		if u := l.units[ui]; !u.isDone.Load() {
			need = append(need, u)
		}
	}
	return l.waitUnits(need)
}

// waitKeys waits for the units of the key groups of keys.
func (l *Lazy) waitKeys(keys [][]byte) error {
	if l.pending.Load() == 0 {
		return l.closedErr()
	}
	var need []*unit
	for _, k := range keys {
		if u := l.unitFor(k); u != nil {
			need = append(need, u)
		}
	}
	return l.waitUnits(need)
}

func (l *Lazy) unitFor(key []byte) *unit {
	kg := KeyGroupOf(key, l.layout.Width(), true)
	r := l.layout.Range
	if !r.Contains(kg) {
		return nil
	}
	ui := l.unitOf[kg-r.Start]
	if ui < 0 {
		return nil
	}
	if u := l.units[ui]; !u.isDone.Load() {
		return u
	}
	return nil
}

func (l *Lazy) closedErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return engine.ErrClosed
	}
	return nil
}

func (l *Lazy) waitUnits(need []*unit) error {
	if len(need) == 0 {
		return l.closedErr()
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return engine.ErrClosed
	}
	waits := false
	for _, u := range need {
		if u.isDone.Load() {
			continue
		}
		waits = true
		if !u.prio {
			u.prio = true
			u.prioAt = time.Now()
			if u.left > 0 {
				l.prioFetching.Add(1)
			}
			l.stats.Prioritized++
			if u.next < len(u.files) {
				l.prio = append(l.prio, u)
			}
		}
	}
	if waits {
		l.stats.Waits++
		signal(l.prioKick)
		// A unit already downloaded is picked up by the next batch.
		signal(l.prioReady)
	}
	l.mu.Unlock()
	for _, u := range need {
		select {
		case <-u.ready:
		case <-l.stop:
			if u.isDone.Load() {
				continue
			}
			l.mu.Lock()
			err := l.err
			l.mu.Unlock()
			return err
		}
	}
	return nil
}

// Inner returns the RocksDB backend being restored into. Use it only after
// WaitLocal returned nil (e.g. to take a checkpoint); it is closed by
// Close.
func (l *Lazy) Inner() engine.Backend { return l.inner }

// WaitLocal returns when every unit is adopted (nil), adoption failed (its
// error), the backend was closed or ctx ended.
func (l *Lazy) WaitLocal(ctx context.Context) error {
	select {
	case <-l.done:
		return nil
	case <-l.stop:
		select {
		case <-l.done:
			return nil
		default:
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Local reports whether every unit is adopted.
func (l *Lazy) Local() bool { return l.pending.Load() == 0 }

// Stats returns a snapshot of the restore's statistics.
func (l *Lazy) Stats() LazyStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Name, Layout and States are the restored backend's.
func (l *Lazy) Name() string               { return l.inner.Name() }
func (l *Lazy) Layout() engine.Layout      { return l.inner.Layout() }
func (l *Lazy) States() []engine.StateDesc { return l.inner.States() }

// MultiGet waits for the key groups of keys, then reads.
func (l *Lazy) MultiGet(st int, keys [][]byte, fn func(i int, val []byte, ok bool)) error {
	if err := l.waitKeys(keys); err != nil {
		return err
	}
	return l.inner.MultiGet(st, keys, fn)
}

// MultiGetStates is engine.MultiStateGetter's, when the restored backend
// has it.
func (l *Lazy) MultiGetStates(sts []int, keys [][]byte, fn func(i int, val []byte, ok bool)) error {
	if err := l.waitKeys(keys); err != nil {
		return err
	}
	if g, ok := l.inner.(engine.MultiStateGetter); ok {
		return g.MultiGetStates(sts, keys, fn)
	}
	for i, k := range keys {
		err := l.inner.MultiGet(sts[i], [][]byte{k}, func(_ int, val []byte, ok bool) { fn(i, val, ok) })
		if err != nil {
			return err
		}
	}
	return nil
}

// boundsGroups returns the key groups [lo, hi] that keys in [lower, upper)
// may belong to.
func (l *Lazy) boundsGroups(lower, upper []byte) (int, int) {
	w := l.layout.Width()
	lo := KeyGroupOf(lower, w, true)
	if upper == nil {
		return lo, 1<<(8*w) - 1
	}
	if len(upper) < w {
		return lo, 1<<(8*w) - 1 // (never written by the engine) conservative
	}
	hi := KeyGroupOf(upper, w, false)
	if len(upper) == w {
		hi-- // upper is the prefix of its key group, which is excluded
	}
	return lo, hi
}

// Scan waits for the key groups of [lower, upper), then scans.
func (l *Lazy) Scan(st int, lower, upper []byte, fn func(key, val []byte) bool) error {
	lo, hi := l.boundsGroups(lower, upper)
	if err := l.waitRange(lo, hi); err != nil {
		return err
	}
	return l.inner.Scan(st, lower, upper, fn)
}

// DeleteRange waits for the key groups of [lower, upper), then deletes.
func (l *Lazy) DeleteRange(st int, lower, upper []byte) error {
	lo, hi := l.boundsGroups(lower, upper)
	if err := l.waitRange(lo, hi); err != nil {
		return err
	}
	return l.inner.DeleteRange(st, lower, upper)
}

// Flush flushes the restored backend.
func (l *Lazy) Flush() error {
	if err := l.closedErr(); err != nil {
		return err
	}
	return l.inner.Flush()
}

// Close stops the background adoption, waits for it to end and closes the
// backend. The scratch files of the adoption are removed.
func (l *Lazy) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return engine.ErrClosed
	}
	l.closed = true
	l.failLocked(engine.ErrClosed)
	l.mu.Unlock()
	l.wg.Wait()
	err := l.inner.Close()
	os.RemoveAll(l.work)
	return err
}

// NewBatch returns a batch whose Commit waits for the key groups it
// writes.
func (l *Lazy) NewBatch() engine.Batch { return &lazyBatch{l: l, b: l.inner.NewBatch()} }

type lazyBatch struct {
	l    *Lazy
	b    engine.Batch
	need []*unit
}

func (b *lazyBatch) note(key []byte) {
	if b.l.pending.Load() == 0 {
		return
	}
	if u := b.l.unitFor(key); u != nil {
		for _, x := range b.need {
			if x == u {
				return
			}
		}
		b.need = append(b.need, u)
	}
}

func (b *lazyBatch) Put(st int, key, val []byte) { b.note(key); b.b.Put(st, key, val) }
func (b *lazyBatch) Delete(st int, key []byte)   { b.note(key); b.b.Delete(st, key) }
func (b *lazyBatch) Len() int                    { return b.b.Len() }
func (b *lazyBatch) Close()                      { b.b.Close() }

func (b *lazyBatch) Commit() error {
	if err := b.l.waitUnits(b.need); err != nil {
		return err
	}
	b.need = b.need[:0]
	return b.b.Commit()
}

var (
	_ engine.Backend          = (*Lazy)(nil)
	_ engine.MultiStateGetter = (*Lazy)(nil)
)
