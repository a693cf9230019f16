package engine

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// heapBackend keeps each state in a Go map and sorts keys when an ordered
// scan is asked for. It mirrors the RocksDB backend's semantics exactly and
// serves as the reference in tests.
type heapBackend struct {
	mu     sync.RWMutex
	layout Layout
	states []StateDesc
	data   []map[string][]byte
	closed bool
}

// OpenHeap opens an in-memory backend.
func OpenHeap(layout Layout, states []StateDesc) (Backend, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if err := checkStates(states); err != nil {
		return nil, err
	}
	h := &heapBackend{layout: layout, states: append([]StateDesc(nil), states...)}
	h.data = make([]map[string][]byte, len(states))
	for i := range h.data {
		h.data[i] = make(map[string][]byte)
	}
	return h, nil
}

func (h *heapBackend) Name() string        { return "heap" }
func (h *heapBackend) Layout() Layout      { return h.layout }
func (h *heapBackend) States() []StateDesc { return h.states }

func (h *heapBackend) check(st int) error {
	if h.closed {
		return ErrClosed
	}
	if st < 0 || st >= len(h.data) {
		return ErrUnknownState
	}
	return nil
}

func (h *heapBackend) MultiGet(st int, keys [][]byte, fn func(i int, val []byte, ok bool)) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if err := h.check(st); err != nil {
		return err
	}
	m := h.data[st]
	for i, k := range keys {
		v, ok := m[string(k)]
		fn(i, v, ok)
	}
	return nil
}

func (h *heapBackend) sortedKeys(st int, lower, upper []byte) []string {
	m := h.data[st]
	keys := make([]string, 0, len(m))
	for k := range m {
		if k < string(lower) {
			continue
		}
		if upper != nil && k >= string(upper) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (h *heapBackend) Scan(st int, lower, upper []byte, fn func(key, val []byte) bool) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if err := h.check(st); err != nil {
		return err
	}
	for _, k := range h.sortedKeys(st, lower, upper) {
		if !fn([]byte(k), h.data[st][k]) {
			break
		}
	}
	return nil
}

func (h *heapBackend) DeleteRange(st int, lower, upper []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.check(st); err != nil {
		return err
	}
	for k := range h.data[st] {
		if bytes.Compare([]byte(k), lower) >= 0 && (upper == nil || bytes.Compare([]byte(k), upper) < 0) {
			delete(h.data[st], k)
		}
	}
	return nil
}

func (h *heapBackend) Flush() error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return ErrClosed
	}
	return nil
}

func (h *heapBackend) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.closed = true
	h.data = nil
	return nil
}

type heapOp struct {
	st    int
	del   bool
	merge bool
	key   string
	val   []byte
}

type heapKey struct {
	st  int
	key string
}

type heapBatch struct {
	h   *heapBackend
	ops []heapOp
}

func (h *heapBackend) NewBatch() Batch { return &heapBatch{h: h} }

func (b *heapBatch) Put(st int, key, val []byte) {
	b.ops = append(b.ops, heapOp{st: st, key: string(key), val: append([]byte(nil), val...)})
}

// Merge queues a list merge, applied at commit with mergeListValues (the
// same concatenation as the RocksDB merge operator).
func (b *heapBatch) Merge(st int, key, val []byte) {
	b.ops = append(b.ops, heapOp{st: st, merge: true, key: string(key), val: append([]byte(nil), val...)})
}

func (b *heapBatch) Delete(st int, key []byte) {
	b.ops = append(b.ops, heapOp{st: st, del: true, key: string(key)})
}

func (b *heapBatch) Len() int { return len(b.ops) }

func (b *heapBatch) Commit() error {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	defer func() { b.ops = b.ops[:0] }()
	if h.closed {
		return ErrClosed
	}
	for _, op := range b.ops {
		if op.st < 0 || op.st >= len(h.data) {
			return ErrUnknownState
		}
	}
	// Ops apply in order to a staged view first: a malformed stored list
	// fails the merge and the whole batch, and nothing is half-applied.
	type staged struct {
		val []byte
		del bool
	}
	stage := make(map[heapKey]staged, len(b.ops))
	for _, op := range b.ops {
		k := heapKey{op.st, op.key}
		switch {
		case op.del:
			stage[k] = staged{del: true}
		case !op.merge:
			stage[k] = staged{val: op.val}
		default:
			cur, ok := stage[k]
			if !ok {
				cur.val, ok = h.data[op.st][op.key]
				cur.del = !ok
			}
			var merged []byte
			var err error
			if cur.del {
				merged, err = mergeListValues(nil, op.val)
			} else {
				merged, err = mergeListValues(nil, cur.val, op.val)
			}
			if err != nil {
				return fmt.Errorf("engine: list merge on state %q: %w", h.states[op.st].Name, err)
			}
			stage[k] = staged{val: merged}
		}
	}
	for k, v := range stage {
		if v.del {
			delete(h.data[k.st], k.key)
		} else {
			h.data[k.st][k.key] = v.val
		}
	}
	return nil
}

func (b *heapBatch) Close() { b.ops = nil }

func (h *heapBackend) MultiGetStates(sts []int, keys [][]byte, fn func(i int, val []byte, ok bool)) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if len(sts) != len(keys) {
		return errors.New("engine: MultiGetStates: states and keys differ in length")
	}
	for i, k := range keys {
		if err := h.check(sts[i]); err != nil {
			return err
		}
		v, ok := h.data[sts[i]][string(k)]
		fn(i, v, ok)
	}
	return nil
}
