package savepoint

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// ColumnBatch is a batch of ScanColumns: decoded entries of one state of
// one key group in typed columns, with where they were read.
type ColumnBatch struct {
	Operator *OperatorState
	Subtask  int
	File     string
	Header   *keyed.Header
	*keyed.ColumnBatch
}

// ScanColumns reads the keyed state selected by o (Operator, State, key
// groups, Workers, Progress, SkipNative, ReadAhead; Mode and ReuseValues
// are ignored) and decodes the entries of columnar states
// (keyed.StateMeta.Columnar: SQL rows of scalar and string fields,
// primitives, strings, optionally TTL-wrapped, with VoidNamespace) straight
// into typed column batches handed to fn, with every byte checked as
// WalkKeyed checks it (same errors). Batches arrive in metadata order
// (operator, subtask) and ascending key group, per key group per state in
// file order; a batch and its columns are valid only during fn (they are
// recycled). Entries of other states are decoded by the generic decoder
// and handed to fallback (values valid during the call, as with
// ReuseValues); a nil fallback skips them. With Workers > 1 each file is
// decoded by that many goroutines, each handing over whole batches (and
// batches of copied fallback entries); fn and fallback still run on the
// calling goroutine, in order. Memory stays bounded (a few batches of up to
// keyed.DefaultBatchRows entries per worker).
func (sp *Savepoint) ScanColumns(ctx context.Context, o ScanOptions, fn func(*ColumnBatch) error, fallback func(*KeyedEntry) error) error {
	var ops []*OperatorState
	if o.Operator != "" {
		op := sp.FindOperator(o.Operator)
		if op == nil {
			return fmt.Errorf("savepoint: %s: operator %q not found", sp.Name(), o.Operator)
		}
		ops = []*OperatorState{op}
	} else {
		ops = sp.Meta.Operators
	}
	var total int64
	for _, op := range ops {
		for _, st := range ReadableSubtasks(op) {
			if h, ok := st.ManagedKeyed.(*KeyGroupsHandle); ok {
				for i, off := range h.Offsets {
					if off != 0 && o.keyGroupSelected(int(h.StartKeyGroup)+i) {
						total++
					}
				}
			}
		}
	}
	if o.Progress != nil {
		o.Progress.SetTotal(total)
	}
	var br keyed.BlockReader
	for _, op := range ops {
		for _, st := range ReadableSubtasks(op) {
			if st.ManagedKeyed == nil {
				continue
			}
			if err := sp.scanColumnsSubtask(ctx, o, op, st, &br, fn, fallback); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sp *Savepoint) scanColumnsSubtask(ctx context.Context, o ScanOptions, op *OperatorState, st *SubtaskState, br *keyed.BlockReader,
	fn func(*ColumnBatch) error, fallback func(*KeyedEntry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	layout := sp.handleLayout(st.ManagedKeyed)
	h, ok := st.ManagedKeyed.(*KeyGroupsHandle)
	if !ok || layout == LayoutNativeRocksDB {
		if o.SkipNative {
			return nil
		}
		return fmt.Errorf("%w: %s: operator %s subtask %d has a RocksDB native handle (tag %d)", ErrNativeLayout, sp.Name(), op.ID, st.Index, st.ManagedKeyed.HandleTag())
	}
	f, err := sp.openKeyed(ctx, h, o.ReadAhead)
	if err != nil {
		return err
	}
	layout = fileLayout(layout, f, h, int(op.MaxParallelism))
	if o.State != "" && f.header.State(o.State) == nil {
		return nil
	}
	cb := &ColumnBatch{Operator: op, Subtask: st.Index, File: f.name, Header: f.header}
	ke := &KeyedEntry{Operator: op, Subtask: st.Index, File: f.name, Header: f.header}
	var kgs []int
	var offs []int64
	for i, off := range h.Offsets {
		if kg := int(h.StartKeyGroup) + i; off != 0 && o.keyGroupSelected(kg) {
			kgs, offs = append(kgs, kg), append(offs, off)
		}
	}
	allColumnar := true // every selected state
	for _, s := range f.header.States {
		if (o.State == "" || s.Name == o.State) && !s.Columnar() {
			allColumnar = false
		}
	}
	// Entries of states not selected are decoded (checked) and dropped.
	onBatch := func(b *keyed.ColumnBatch) error {
		if o.State != "" && b.State.Name != o.State {
			return nil
		}
		cb.ColumnBatch = b
		return fn(cb)
	}
	onEntry := func(e *keyed.Entry) error {
		if fallback == nil || (o.State != "" && e.State.Name != o.State) {
			return nil
		}
		ke.Entry = e
		return fallback(ke)
	}
	if layout == LayoutNativeHeap {
		// The heap layout has no column decoder: every entry goes through
		// the generic one to fallback.
		ends := blockEnds(h)
		ropts := keyed.ReadOptions{MaxParallelism: int(op.MaxParallelism), Mode: keyed.ModeDecode, ReuseValues: true, Heap: true}
		for i, kg := range kgs {
			if err := ctx.Err(); err != nil {
				return err
			}
			ropts.ExpectedEnd = ends.after(offs[i])
			if err := br.Read(f.obj, f.obj.Size(), f.name, f.header, kg, offs[i], ropts, onEntry); err != nil {
				return err
			}
			if o.Progress != nil {
				o.Progress.Add(1)
			}
		}
		return nil
	}
	if o.Workers > 1 && len(kgs) > 1 {
		var fb func(*keyed.Entry) error
		if !allColumnar && fallback != nil {
			fb = onEntry
		}
		return sp.scanColumnsParallel(ctx, o, f, h, int(op.MaxParallelism), kgs, offs, onBatch, fb)
	}
	ends := blockEnds(h)
	copts := keyed.ColumnOptions{MaxParallelism: int(op.MaxParallelism)}
	for i, kg := range kgs {
		if err := ctx.Err(); err != nil {
			return err
		}
		copts.ExpectedEnd = ends.after(offs[i])
		if err := br.ReadColumns(f.obj, f.obj.Size(), f.name, f.header, kg, offs[i], copts, onBatch, onEntry); err != nil {
			return err
		}
		if o.Progress != nil {
			o.Progress.Add(1)
		}
	}
	return nil
}

// colItem is a batch, fallback entries or the error a column worker
// hands over.
type colItem struct {
	b   *keyed.ColumnBatch
	fb  *fallbackBatch
	err error
}

// fallbackBatch holds copies of fallback entries (bytes in buf, values in
// arena) for the caller of a parallel ScanColumns.
type fallbackBatch struct {
	entries []keyed.Entry
	buf     []byte
	arena   *serde.Arena
}

// fallbackBatchEntries and fallbackBatchBytes bound a fallbackBatch.
const (
	fallbackBatchEntries = 256
	fallbackBatchBytes   = 1 << 20
)

// columnBatchesAhead is how many batches of one key group a worker may
// queue before the caller takes them.
const columnBatchesAhead = 4

// scanColumnsParallel decodes the key groups kgs (block offsets offs) of
// one file whose selected states are all columnar with o.Workers goroutines (each
// with its own range reader); whole batches reach fn in order on the
// calling goroutine.
//
// With fallback set, entries of states that are not columnar are decoded
// by the workers into batches of copies (fresh value memory per batch) and
// handed to fallback in file order among themselves; otherwise they are
// checked and dropped.
func (sp *Savepoint) scanColumnsParallel(ctx context.Context, o ScanOptions, f *keyedFile, h *KeyGroupsHandle, maxPar int, kgs []int, offs []int64,
	fn func(*keyed.ColumnBatch) error, fallback func(*keyed.Entry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	workers := min(o.Workers, len(kgs))
	slots := make(chan struct{}, 2*workers)
	chans := make([]chan colItem, len(kgs))
	for i := range chans {
		chans[i] = make(chan colItem, columnBatchesAhead)
	}
	// Recycled batches, per state.
	pools := make([]chan *keyed.ColumnBatch, len(f.header.States))
	for i := range pools {
		pools[i] = make(chan *keyed.ColumnBatch, 2*workers*(columnBatchesAhead+1)+2)
	}
	get := func(st *keyed.StateMeta) *keyed.ColumnBatch {
		select {
		case b := <-pools[st.ID]:
			return b
		default:
			return keyed.NewColumnBatch(st)
		}
	}
	put := func(b *keyed.ColumnBatch) {
		select {
		case pools[b.State.ID] <- b:
		default:
		}
	}
	ends := blockEnds(h)
	var next atomic.Int64
	worker := func(obj *Object) {
		defer wg.Done()
		var br keyed.BlockReader
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
			send := func(it colItem) error {
				select {
				case ch <- it:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			copts := keyed.ColumnOptions{MaxParallelism: maxPar, ExpectedEnd: ends.after(offs[i]), NewBatch: get}
			onEntry := func(*keyed.Entry) error {
				return nil // a state not selected (checked, then dropped)
			}
			var fb *fallbackBatch
			if fallback != nil {
				fb = &fallbackBatch{arena: serde.NewArena()}
				copts.Arena = fb.arena
				onEntry = func(e *keyed.Entry) error {
					n := len(fb.entries)
					fb.entries = append(fb.entries, keyed.Entry{})
					fb.buf = e.CopyTo(&fb.entries[n], fb.buf)
					if n+1 < fallbackBatchEntries && len(fb.buf) < fallbackBatchBytes {
						return nil
					}
					if err := send(colItem{fb: fb}); err != nil {
						return err
					}
					fb = &fallbackBatch{arena: serde.NewArena()}
					br.SetArena(fb.arena)
					return nil
				}
			}
			err := br.ReadColumns(obj, obj.Size(), f.name, f.header, kgs[i], offs[i], copts, func(b *keyed.ColumnBatch) error {
				return send(colItem{b: b})
			}, onEntry)
			if ctx.Err() != nil {
				return
			}
			// Entries before an error reach the caller first, as in a
			// sequential read.
			if fb != nil && len(fb.entries) > 0 {
				if send(colItem{fb: fb}) != nil {
					return
				}
			}
			if err != nil {
				select {
				case ch <- colItem{err: err}:
				case <-ctx.Done():
					return
				}
			}
			close(ch)
		}
	}
	sp.startWorkers(ctx, f, workers, o.ReadAhead, &wg, worker)
	for i := range kgs {
		for {
			var it colItem
			var ok bool
			select {
			case it, ok = <-chans[i]:
			case <-ctx.Done():
				return ctx.Err()
			}
			if !ok {
				break
			}
			if it.err != nil {
				return it.err
			}
			if it.fb != nil {
				for j := range it.fb.entries {
					if err := fallback(&it.fb.entries[j]); err != nil {
						return err
					}
				}
				continue
			}
			err := fn(it.b)
			put(it.b)
			if err != nil {
				return err
			}
		}
		<-slots
		if o.Progress != nil {
			o.Progress.Add(1)
		}
	}
	return nil
}
