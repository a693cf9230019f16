package savepoint

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// DefaultWorkers is a ScanOptions.Workers value: one decode worker per CPU
// the Go scheduler runs on (GOMAXPROCS), at most maxDefaultWorkers (each
// worker keeps up to a few MiB of batches and read windows in flight).
func DefaultWorkers() int { return min(runtime.GOMAXPROCS(0), maxDefaultWorkers) }

const maxDefaultWorkers = 8

// Parallel decoding of one keyed file: workers claim key groups in
// ascending order, each reading its blocks through its own range reader and
// decoding them into batches of entries; the walking goroutine takes the
// batches key group by key group, so callbacks see exactly the sequential
// order, on the caller's goroutine.
//
// Memory stays bounded: a worker claims a key group only while fewer than
// 2*workers claimed key groups are unconsumed, and each key group holds at
// most batchesAhead finished batches (plus the one its worker fills), so at
// most 2*workers*(batchesAhead+1)+1 batches exist, each about batchBytes of
// entry bytes, batchEntries entries and their decoded values. A batch made
// larger by one big entry is queued only once the caller has reached its
// key group, so besides that at most one per worker exists.
const (
	batchBytes   = 512 << 10
	batchesAhead = 2
)

// batchEntries is a variable for tests (small batches on small data).
var batchEntries = 512

// batch is a run of entries of one key group: built in place by the
// worker's reader, their bytes in the read windows wins (shared with
// neighbouring batches) and, for ModeDecode, their values in arena.
type batch struct {
	entries []keyed.Entry
	bytes   int // key and value bytes of the entries
	wins    []*window
	arena   *serde.Arena
	// err ends the key group: the read failed after the entries.
	err error
}

// window is a read window of a worker's reader (keyed.ReadOptions.Windows)
// with the number of batches aliasing it, plus one while the reader fills
// it; at zero it goes back to the pool.
type window struct {
	buf  []byte
	refs atomic.Int32
}

// windowPool recycles read windows of windowBytes.
type windowPool struct{ free chan []byte }

const windowBytes = 1 << 20

func (p *windowPool) get() []byte {
	select {
	case b := <-p.free:
		return b
	default:
		return make([]byte, windowBytes)
	}
}

func (w *window) release(p *windowPool) {
	if w.refs.Add(-1) != 0 || len(w.buf) != windowBytes {
		return
	}
	select {
	case p.free <- w.buf:
	default:
	}
}

// workerWindows is the keyed.WindowSource of one worker's reader.
type workerWindows struct {
	pool      *windowPool
	cur, prev *window
}

func (ws *workerWindows) Get() []byte {
	ws.prev, ws.cur = ws.cur, &window{buf: ws.pool.get()}
	ws.cur.refs.Store(1)
	return ws.cur.buf
}

func (ws *workerWindows) Retire(b []byte) {
	// The reader retires the window it filled before the one Get just
	// gave it (windows it allocated itself for oversized entries are
	// not pooled).
	if w := ws.prev; w != nil && len(b) > 0 && len(w.buf) > 0 && &w.buf[0] == &b[0] {
		ws.prev = nil
		w.release(ws.pool)
	}
}

// batchPool recycles batches. With reuse, a recycled batch's arena is
// reset (its values die with it); otherwise each batch gets a fresh arena,
// so values handed to callbacks stay valid after them.
type batchPool struct {
	reuse bool
	free  chan *batch
}

func (p *batchPool) get() *batch {
	var b *batch
	select {
	case b = <-p.free:
	default:
		b = &batch{entries: make([]keyed.Entry, 0, batchEntries)}
		if p.reuse {
			// The batch's windows stay intact until its values are
			// recycled: strings alias them.
			b.arena = serde.NewReusableArena()
			b.arena.SetViews(true)
		}
	}
	if !p.reuse {
		b.arena = serde.NewArena()
	}
	return b
}

func (p *batchPool) put(b *batch, wp *windowPool) {
	clear(b.entries) // drop references to values and bytes
	b.entries, b.err, b.bytes = b.entries[:0], nil, 0
	for _, w := range b.wins {
		w.release(wp)
	}
	clear(b.wins)
	b.wins = b.wins[:0]
	if p.reuse {
		b.arena.Reset()
	} else {
		b.arena = nil
	}
	select {
	case p.free <- b:
	default:
	}
}

// walkParallel reads the key groups kgs (block offsets offs) of one keyed
// file with workers goroutines and calls fn for each entry in order, like
// the sequential loop of walkSubtask.
func (sp *Savepoint) walkParallel(ctx context.Context, o ScanOptions, f *keyedFile, h *KeyGroupsHandle, kgs []int, offs []int64, workers int,
	ropts keyed.ReadOptions, ke *KeyedEntry, lock, unlock func(), fn func(*KeyedEntry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	workers = min(workers, len(kgs))
	slots := make(chan struct{}, 2*workers)
	chans := make([]chan *batch, len(kgs))
	turn := make([]chan struct{}, len(kgs)) // closed when the caller reaches key group i
	for i := range chans {
		chans[i] = make(chan *batch, batchesAhead)
		turn[i] = make(chan struct{})
	}
	reuse := ropts.ReuseValues && ropts.Mode == keyed.ModeDecode
	pool := &batchPool{reuse: reuse, free: make(chan *batch, 2*workers*(batchesAhead+1)+2)}
	wpool := &windowPool{free: make(chan []byte, 4*workers*(batchesAhead+1)+4)}
	var next atomic.Int64
	ends := blockEnds(h)
	worker := func(obj *Object) {
		defer wg.Done()
		var br keyed.BlockReader
		ws := &workerWindows{pool: wpool}
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			i := int(next.Add(1) - 1)
			if i >= len(kgs) {
				<-slots
				return
			}
			ch := chans[i]
			send := func(b *batch) bool {
				if b.bytes > 2*batchBytes {
					// Oversized entries: queue them only for the key group
					// being consumed, so at most one per worker is held.
					select {
					case <-turn[i]:
					case <-ctx.Done():
						return false
					}
				}
				select {
				case ch <- b:
					return true
				case <-ctx.Done():
					return false
				}
			}
			b := pool.get()
			ro := ropts
			ro.Arena, ro.ExpectedEnd, ro.Windows = b.arena, ends.after(offs[i]), ws
			// Entries are built in place in the batch and alias the
			// worker's read windows, which stay intact until every batch
			// using them is consumed: nothing is copied.
			ro.EntrySlot = func() *keyed.Entry {
				n := len(b.entries)
				return &b.entries[:n+1][n]
			}
			err := br.Read(obj, obj.Size(), f.name, f.header, kgs[i], offs[i], ro, func(e *keyed.Entry) error {
				if o.State != "" && e.State.Name != o.State {
					return nil // its slot is reused
				}
				n := len(b.entries)
				b.entries = b.entries[:n+1]
				b.bytes += len(e.KeyBytes) + len(e.ValueBytes)
				if len(b.wins) == 0 || b.wins[len(b.wins)-1] != ws.cur {
					ws.cur.refs.Add(1)
					b.wins = append(b.wins, ws.cur)
				}
				if n+1 == cap(b.entries) || b.bytes >= batchBytes {
					// Full: the next entry decodes into the next batch.
					if !send(b) {
						return ctx.Err()
					}
					b = pool.get()
					br.SetArena(b.arena)
				}
				return nil
			})
			if ctx.Err() != nil {
				return
			}
			b.err = err
			if len(b.entries) > 0 || err != nil {
				if !send(b) {
					return
				}
			} else {
				pool.put(b, wpool)
			}
			close(ch)
		}
	}
	sp.startWorkers(ctx, f, workers, o.ReadAhead, &wg, worker)
	for i := range kgs {
		close(turn[i])
		for {
			var b *batch
			var ok bool
			select {
			case b, ok = <-chans[i]:
			case <-ctx.Done():
				return ctx.Err()
			}
			if !ok {
				break
			}
			for j := range b.entries {
				ke.Entry = &b.entries[j]
				lock()
				err := fn(ke)
				unlock()
				if err != nil {
					return err
				}
			}
			if b.err != nil {
				return b.err
			}
			pool.put(b, wpool)
		}
		<-slots
		if o.Progress != nil {
			lock()
			o.Progress.Add(1)
			unlock()
		}
	}
	return nil
}

// startWorkers starts up to n workers on the keyed file f: the first reads
// through f's own object, each other one through a range reader of its own
// (their read-ahead buffers would evict each other). A reader that cannot
// be opened leaves the walk with the workers started so far.
func (sp *Savepoint) startWorkers(ctx context.Context, f *keyedFile, n, readAhead int, wg *sync.WaitGroup, worker func(*Object)) {
	for w := range n {
		obj := f.obj
		if w > 0 {
			var err error
			if obj, err = sp.OpenLocation(ctx, f.obj.Loc, readAhead); err != nil {
				return
			}
		}
		wg.Add(1)
		go worker(obj)
	}
}
