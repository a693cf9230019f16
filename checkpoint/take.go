package checkpoint

import (
	"context"
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

	"github.com/sfstate/sfstate/checkpoint/manifest"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// Options configures a Checkpointer.
type Options struct {
	// OperatorID is the operator id written into `_metadata`; zero means
	// DefaultOperatorID.
	OperatorID savepoint.OperatorID
	// LocalDir is where local RocksDB checkpoints (hard links) are made; it
	// must be on the backends' file system. Empty: beside each backend's
	// directory.
	LocalDir string
	// Parallel bounds concurrent uploads (and downloads in Restore);
	// default 8.
	Parallel int
	// Retain is the number of completed checkpoints kept; older ones and
	// shared files no retained checkpoint references are deleted after each
	// completed checkpoint. Zero keeps everything.
	Retain int
	// Schema, when set, gives the meta-state stream Flink's real serializer
	// snapshots: the key serializer from Schema.Key and each state's meta
	// info from its StateSchema (SchemaStateMeta; a join-record state's
	// carries its join description). It must describe exactly the
	// checkpointed backends' states (Schema.Matches). StateMeta and
	// KeySerializer, when set, take precedence over it.
	Schema *engine.Schema
	// StateMeta describes a state in the meta-state stream; nil means
	// SchemaStateMeta(Schema) with a Schema, else ByteArrayStateMeta.
	// KeySerializer defaults to Schema's key serializer, else byte arrays.
	StateMeta     func(engine.StateDesc) (flinkwrite.StateMetaInfo, error)
	KeySerializer flinkwrite.Snapshot
}

func (o *Options) parallel() int {
	if o.Parallel < 1 {
		return 8
	}
	return o.Parallel
}

// Checkpointer takes native checkpoints of one operator's RocksDB backends
// into one store. It remembers which SST files it uploaded, so each
// checkpoint uploads only files that are new since the previous one. One
// Checkpointer must be the only writer of its store prefix.
type Checkpointer struct {
	store s3.Storage
	opts  Options

	// gc is held shared by every checkpoint's upload-and-publish phase and
	// exclusively by retention, so retention never sees a half-published
	// checkpoint.
	gc sync.RWMutex

	mu       sync.Mutex
	subtasks map[int]*subtaskState
	pending  map[int64]map[string]bool // shared keys of in-flight checkpoints
}

type subtaskState struct {
	backend  engine.Backend
	id       string
	uploaded map[string]*sharedObj // local SST name → object
}

// sharedObj is one shared SST object, possibly still uploading.
type sharedObj struct {
	key  string
	size int64
	crc  uint32
	done chan struct{}
	err  error
}

// New returns a Checkpointer writing to store.
func New(store s3.Storage, opts Options) *Checkpointer {
	return &Checkpointer{store: store, opts: opts, subtasks: map[int]*subtaskState{}, pending: map[int64]map[string]bool{}}
}

// Result describes a completed checkpoint.
type Result struct {
	ID int64
	// Sync is the time Take spent before returning (local RocksDB
	// checkpoints and file listing); Upload the time from then until
	// `_metadata` was written.
	Sync, Upload time.Duration
	// BytesUploaded counts new SST files plus private files and the
	// manifest; BytesReferenced the SST bytes reused from earlier
	// checkpoints.
	BytesUploaded, BytesReferenced int64
	FilesUploaded, FilesReferenced int
	Manifest                       *Manifest
}

// Pending is a checkpoint whose local part is done and whose upload runs in
// the background.
type Pending struct {
	ID     int64
	Sync   time.Duration
	done   chan struct{}
	cancel context.CancelFunc
	res    *Result
	err    error
}

// Wait blocks until the checkpoint is published (or failed) and returns
// its result. A failed checkpoint has no `_metadata`.
func (p *Pending) Wait(ctx context.Context) (*Result, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Done is closed when the upload finished.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Cancel stops the upload: unless `_metadata` is already written, the
// checkpoint fails, its uploads are aborted and its private objects
// removed (shared files stay for the next checkpoint to reuse). Wait
// returns once that is done.
func (p *Pending) Cancel() { p.cancel() }

type localSubtask struct {
	index   int
	st      *subtaskState
	dir     string
	layout  engine.Layout
	ssts    []engine.SSTFile
	objs    []*sharedObj // per ssts entry
	upload  []bool       // this checkpoint uploads ssts[i]
	private []string     // non-SST file names
}

// Take checkpoints backends (index = subtask index) as checkpoint id. The
// caller must have committed its bundles and must not write to the
// backends until Take returns; Take returns once every backend has a local
// RocksDB checkpoint (a memtable flush and hard links, independent of how
// much was written since the last checkpoint), and the upload continues in
// the background: Wait on the result. All backends must be RocksDB with
// the same states and maximum parallelism.
func (c *Checkpointer) Take(ctx context.Context, backends []engine.Backend, id int64) (*Pending, error) {
	start := time.Now()
	if id < 0 {
		return nil, fmt.Errorf("checkpoint: negative checkpoint id %d", id)
	}
	if len(backends) == 0 || len(backends) > manifest.MaxSubtasks {
		return nil, fmt.Errorf("checkpoint: %d backends", len(backends))
	}
	states := backends[0].States()
	maxPar := backends[0].Layout().MaxParallelism
	for i, b := range backends {
		if b == nil {
			return nil, fmt.Errorf("checkpoint: backend %d is nil", i)
		}
		if b.Layout().MaxParallelism != maxPar {
			return nil, fmt.Errorf("checkpoint: backend %d has max parallelism %d, backend 0 %d", i, b.Layout().MaxParallelism, maxPar)
		}
		if !sameStates(b.States(), states) {
			return nil, fmt.Errorf("checkpoint: backend %d declares other states than backend 0", i)
		}
		for j := 0; j < i; j++ {
			a, o := b.Layout().Range, backends[j].Layout().Range
			if a.Start <= o.End && o.Start <= a.End {
				return nil, fmt.Errorf("checkpoint: backends %d and %d have overlapping key-group ranges [%d, %d] and [%d, %d]", j, i, o.Start, o.End, a.Start, a.End)
			}
		}
	}
	// Never write into a published checkpoint.
	if _, err := c.store.Stat(ctx, MetadataKey(id)); err == nil {
		return nil, fmt.Errorf("checkpoint: checkpoint %d already exists in %s", id, c.store.String())
	} else if !s3.IsNotExist(err) {
		return nil, fmt.Errorf("checkpoint %d: %w", id, err)
	}
	c.mu.Lock()
	if _, busy := c.pending[id]; busy {
		c.mu.Unlock()
		return nil, fmt.Errorf("checkpoint: checkpoint %d is already in progress", id)
	}
	c.pending[id] = map[string]bool{}
	c.mu.Unlock()
	locals := make([]*localSubtask, len(backends))
	fail := func(err error) (*Pending, error) {
		for _, l := range locals {
			if l != nil {
				os.RemoveAll(l.dir)
			}
		}
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, err
	}
	for i, b := range backends {
		dbDir, err := engine.NativeDir(b)
		if err != nil {
			return fail(fmt.Errorf("checkpoint: backend %d: %w", i, err))
		}
		base := c.opts.LocalDir
		if base == "" {
			base = filepath.Dir(dbDir)
		}
		l := &localSubtask{index: i, layout: b.Layout(),
			dir: filepath.Join(base, fmt.Sprintf(".chk-%d-task-%d-%s", id, i, savepoint.NewUUID()[:8]))}
		locals[i] = l
		if err := WaitTidy(ctx, b); err != nil {
			return fail(fmt.Errorf("checkpoint %d, subtask %d: %w", id, i, err))
		}
		if err := engine.CreateNativeCheckpoint(b, l.dir); err != nil {
			return fail(fmt.Errorf("checkpoint %d, subtask %d: %w", id, i, err))
		}
		if l.ssts, err = engine.ListSSTFiles(l.dir); err != nil {
			return fail(fmt.Errorf("checkpoint %d, subtask %d: %w", id, i, err))
		}
		ents, err := os.ReadDir(l.dir)
		if err != nil {
			return fail(fmt.Errorf("checkpoint %d, subtask %d: %w", id, i, err))
		}
		for _, e := range ents {
			if e.Type().IsRegular() && !strings.HasSuffix(e.Name(), ".sst") {
				l.private = append(l.private, e.Name())
			}
		}
	}
	// Decide, per SST file, upload or reuse.
	c.mu.Lock()
	refs := c.pending[id]
	for _, l := range locals {
		st := c.subtasks[l.index]
		if st == nil || st.backend != backends[l.index] {
			st = &subtaskState{backend: backends[l.index], id: savepoint.NewUUID(), uploaded: map[string]*sharedObj{}}
			c.subtasks[l.index] = st
		}
		l.st = st
		live := map[string]*sharedObj{}
		for _, f := range l.ssts {
			o := st.uploaded[f.Name]
			up := false
			if o == nil || o.size != f.Size {
				o = &sharedObj{key: SharedPrefix + st.id + "-" + f.Name, size: f.Size, done: make(chan struct{})}
				up = true
			}
			live[f.Name] = o
			refs[o.key] = true
			l.objs = append(l.objs, o)
			l.upload = append(l.upload, up)
		}
		st.uploaded = live // files compacted away are no longer reused
	}
	c.mu.Unlock()
	// The upload outlives ctx (Take returns before it); Cancel stops it.
	uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Pending{ID: id, Sync: time.Since(start), done: make(chan struct{}), cancel: cancel}
	go c.finish(uctx, p, locals, states, maxPar)
	return p, nil
}

// Adopt tells the Checkpointer that backend b of subtask holds the given
// shared SST files unchanged (RestoreStats.Reusable of the restore that
// built it), so its next checkpoints reference those objects instead of
// uploading the files again, as long as each file keeps its name and size.
// Call it before the first Take with b.
func (c *Checkpointer) Adopt(subtask int, b engine.Backend, files []SSTEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &subtaskState{backend: b, id: savepoint.NewUUID(), uploaded: map[string]*sharedObj{}}
	for _, f := range files {
		if !strings.HasPrefix(f.Key, SharedPrefix) {
			continue
		}
		done := make(chan struct{})
		close(done)
		st.uploaded[f.Name] = &sharedObj{key: f.Key, size: f.Size, crc: f.CRC, done: done}
	}
	c.subtasks[subtask] = st
}

// TakeSync is Take followed by Wait. When ctx ends first, the upload is
// cancelled (Pending.Cancel) and TakeSync returns once it stopped: with
// ctx's error, or the result when `_metadata` was written by then.
func (c *Checkpointer) TakeSync(ctx context.Context, backends []engine.Backend, id int64) (*Result, error) {
	p, err := c.Take(ctx, backends, id)
	if err != nil {
		return nil, err
	}
	res, err := p.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		p.Cancel()
		<-p.done
		if p.err == nil {
			return p.res, nil
		}
		return nil, ctx.Err()
	}
	return res, err
}

func sameStates(a, b []engine.StateDesc) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (c *Checkpointer) finish(ctx context.Context, p *Pending, locals []*localSubtask, states []engine.StateDesc, maxPar int) {
	start := time.Now()
	res, err := c.publish(ctx, p.ID, locals, states, maxPar)
	for _, l := range locals {
		os.RemoveAll(l.dir)
	}
	c.mu.Lock()
	delete(c.pending, p.ID)
	c.mu.Unlock()
	if err == nil {
		res.Sync, res.Upload = p.Sync, time.Since(start)
		if c.opts.Retain > 0 && ctx.Err() == nil {
			if gerr := c.Collect(ctx); gerr != nil {
				err = fmt.Errorf("checkpoint %d published, but retention failed: %w", p.ID, gerr)
			}
		}
	}
	p.res, p.err = res, err
	p.cancel()
	close(p.done)
}

func (c *Checkpointer) publish(ctx context.Context, id int64, locals []*localSubtask, states []engine.StateDesc, maxPar int) (*Result, error) {
	c.gc.RLock()
	defer c.gc.RUnlock()
	var mu sync.Mutex
	var written []s3.Written
	var private []string // every private key a write was started for
	record := func(w s3.Written) {
		mu.Lock()
		written = append(written, w)
		mu.Unlock()
	}
	try := func(key string) {
		mu.Lock()
		private = append(private, key)
		mu.Unlock()
	}
	ok := false
	defer func() {
		if ok {
			return
		}
		// The cleanup runs also after Cancel, bounded in time.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		// Leave no private objects of a failed checkpoint behind, unless
		// `_metadata` landed after all (its response was lost) or whether
		// it did cannot be told: then they belong to a published
		// checkpoint.
		// A write that failed on this side (cancelled, or its response
		// lost) may have landed: every started one is deleted.
		if _, err := c.store.Stat(ctx, MetadataKey(id)); s3.IsNotExist(err) {
			mu.Lock()
			keys := append(private, Dir(id)+"/"+savepoint.SumsName)
			mu.Unlock()
			for _, k := range keys {
				_ = c.store.Delete(ctx, k)
			}
		}
	}()
	res := &Result{ID: id}
	m := &Manifest{Format: ManifestFormat, Version: ManifestVersion, CheckpointID: id, MaxParallelism: maxPar}
	for _, s := range states {
		m.States = append(m.States, StateInfo{Name: s.Name, Kind: s.Kind.String(), TTLMillis: s.TTL.Milliseconds()})
	}
	m.Subtasks = make([]Subtask, len(locals))
	uploadedPer := make([]int64, len(locals))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.parallel())
	for _, l := range locals {
		l := l
		sub := &m.Subtasks[l.index]
		*sub = Subtask{Index: l.index, BackendID: l.st.id, StartKeyGroup: l.layout.Range.Start, EndKeyGroup: l.layout.Range.End,
			Shared: make([]SSTEntry, len(l.ssts)), Private: make([]Object, len(l.private))}
		width := l.layout.Width()
		for i, f := range l.ssts {
			i, f := i, f
			o := l.objs[i]
			sub.Shared[i] = SSTEntry{Object: Object{Name: f.Name, Key: o.key, Size: f.Size}, ColumnFamily: f.ColumnFamily, Level: f.Level,
				Smallest: f.Smallest, Largest: f.Largest,
				FirstKeyGroup: KeyGroupOf(f.Smallest, width, true), LastKeyGroup: KeyGroupOf(f.Largest, width, false),
				SmallestSeqno: f.SmallestSeqno, LargestSeqno: f.LargestSeqno, Entries: f.Entries, Deletions: f.Deletions,
				Uploaded: l.upload[i]}
			if !l.upload[i] {
				continue
			}
			g.Go(func() error {
				err := c.uploadShared(gctx, l, o, filepath.Join(l.dir, f.Name))
				if err != nil {
					return fmt.Errorf("checkpoint %d, subtask %d: %w", id, l.index, err)
				}
				record(s3.Written{Key: o.key, Size: o.size, CRC: o.crc})
				return nil
			})
		}
		for i, name := range l.private {
			i, name := i, name
			key := fmt.Sprintf("%s/task-%d/%s", Dir(id), l.index, name)
			try(key)
			g.Go(func() error {
				w, err := PutFile(gctx, c.store, key, filepath.Join(l.dir, name))
				if err != nil {
					return fmt.Errorf("checkpoint %d, subtask %d: upload %s: %w", id, l.index, name, err)
				}
				record(w)
				sub.Private[i] = Object{Name: name, Key: key, Size: w.Size, CRC: w.CRC}
				return nil
			})
		}
	}
	err := g.Wait()
	// Reused files may still be uploading for an earlier checkpoint.
	for _, l := range locals {
		for i, o := range l.objs {
			if l.upload[i] {
				continue
			}
			select {
			case <-o.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if o.err != nil && err == nil {
				err = fmt.Errorf("checkpoint %d, subtask %d: reused file %s failed to upload: %w", id, l.index, l.ssts[i].Name, o.err)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	for _, l := range locals {
		sub := &m.Subtasks[l.index]
		for i, o := range l.objs {
			sub.Shared[i].CRC = o.crc
			if l.upload[i] {
				res.FilesUploaded++
				res.BytesUploaded += o.size
				uploadedPer[l.index] += o.size
			} else {
				res.FilesReferenced++
				res.BytesReferenced += o.size
			}
		}
		for _, f := range sub.Private {
			res.BytesUploaded += f.Size
			uploadedPer[l.index] += f.Size
		}
	}
	meta, err := MetaStream(states, &c.opts)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: meta-state stream: %w", id, err)
	}
	mdBytes, err := buildMetadata(m, &c.opts, c.store.String(), meta, uploadedPer)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: metadata: %w", id, err)
	}
	m.BytesUploaded, m.BytesReferenced = res.BytesUploaded, res.BytesReferenced
	mb, err := manifest.Encode(m)
	if err != nil {
		return nil, err
	}
	try(ManifestKey(id))
	w, err := s3.PutHashed(ctx, c.store, ManifestKey(id), strings.NewReader(string(mb)), int64(len(mb)))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: manifest: %w", id, err)
	}
	record(w)
	res.BytesUploaded += w.Size
	if err := savepoint.CommitMetadata(ctx, c.store, written, MetadataKey(id), mdBytes); err != nil {
		return nil, fmt.Errorf("checkpoint %d: %w", id, err)
	}
	ok = true
	res.Manifest = m
	return res, nil
}

// uploadShared uploads one new SST file and settles o.
func (c *Checkpointer) uploadShared(ctx context.Context, l *localSubtask, o *sharedObj, file string) (err error) {
	defer func() {
		if err != nil {
			o.err = err
			c.mu.Lock()
			if l.st.uploaded[filepath.Base(file)] == o {
				delete(l.st.uploaded, filepath.Base(file))
			}
			c.mu.Unlock()
		}
		close(o.done)
	}()
	w, err := PutFile(ctx, c.store, o.key, file)
	if err != nil {
		return fmt.Errorf("upload %s: %w", filepath.Base(file), err)
	}
	if w.Size != o.size {
		return fmt.Errorf("upload %s: %d bytes, RocksDB listed %d", filepath.Base(file), w.Size, o.size)
	}
	o.crc = w.CRC
	return nil
}

// PutFile computes the CRC-32C of a local file, then uploads it to st
// under key from a seekable file handle (so a retrying store can replay
// the body). The returned Written carries the size and CRC-32C.
func PutFile(ctx context.Context, st s3.Storage, key, file string) (s3.Written, error) {
	f, err := os.Open(file)
	if err != nil {
		return s3.Written{}, err
	}
	defer f.Close()
	h := crc32.New(s3.Castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		return s3.Written{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return s3.Written{}, err
	}
	if err := st.Put(ctx, key, f, n); err != nil {
		return s3.Written{}, err
	}
	return s3.Written{Key: key, Size: n, CRC: h.Sum32()}, nil
}

// Completed lists the ids of completed checkpoints in the store (those
// with `_metadata`), ascending.
func Completed(ctx context.Context, st s3.Storage) ([]int64, error) {
	objs, err := st.List(ctx, "chk-")
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, o := range objs {
		dir, name, found := strings.Cut(o.Key, "/")
		if !found || name != s3.MetadataName {
			continue
		}
		if id, ok := savepoint.CheckpointDirID(dir); ok {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}
