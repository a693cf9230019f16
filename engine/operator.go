package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sfstate/sfstate/keygroups"
)

// TTLPrefix is the size of the big-endian last-access timestamp that starts
// every stored value.
const TTLPrefix = 8

// Operator is one operator subtask's keyed state on a Backend: declared
// states, key encoding, TTL and the bundle write path.
type Operator struct {
	be     Backend
	layout Layout
	clock  *Clock
	states []*State
	byName map[string]*State
}

// State is a handle on one declared state.
type State struct {
	op    *Operator
	id    int
	desc  StateDesc
	ttlMs int64
}

// NewOperator wraps a backend. clock nil means the wall clock; for RocksDB
// pass the same clock as RocksOptions.Clock so reads and the compaction
// filter agree.
func NewOperator(be Backend, clock *Clock) *Operator {
	if clock == nil {
		clock = SystemClock()
	}
	op := &Operator{be: be, layout: be.Layout(), clock: clock, byName: map[string]*State{}}
	for i, d := range be.States() {
		s := &State{op: op, id: i, desc: d, ttlMs: d.TTL.Milliseconds()}
		op.states = append(op.states, s)
		op.byName[d.Name] = s
	}
	return op
}

// Backend returns the underlying backend.
func (op *Operator) Backend() Backend { return op.be }

// Clock returns the TTL clock.
func (op *Operator) Clock() *Clock { return op.clock }

// Layout returns the key-group layout.
func (op *Operator) Layout() Layout { return op.layout }

// State returns the handle of a declared state.
func (op *Operator) State(name string) (*State, error) {
	s, ok := op.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownState, name)
	}
	return s, nil
}

// States returns every state handle, by id.
func (op *Operator) States() []*State { return op.states }

// Desc returns the state's declaration.
func (s *State) Desc() StateDesc { return s.desc }

// ID is the state's index (its column family, after "default").
func (s *State) ID() int { return s.id }

func appendLenBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// Key appends the stored key of (kg, key, namespace) for value and list
// states: key-group prefix | uvarint len | key | uvarint len | namespace.
func (s *State) Key(dst []byte, kg int, key, ns []byte) []byte {
	return s.op.layout.Key(dst, kg, key, ns)
}

// EntryPrefix appends the prefix shared by every map/multiset entry of
// (kg, key, namespace); it equals Key.
func (s *State) EntryPrefix(dst []byte, kg int, key, ns []byte) []byte {
	return s.Key(dst, kg, key, ns)
}

// EntryKey appends a map or multiset entry's stored key: EntryPrefix
// followed by the user key's raw bytes, so entries of one (key, namespace)
// iterate in user-key byte order.
func (s *State) EntryKey(dst []byte, kg int, key, ns, userKey []byte) []byte {
	return append(s.Key(dst, kg, key, ns), userKey...)
}

// DecodeKey splits a stored key into key group, key, namespace and the rest
// (the map user key or priority-queue element).
func (op *Operator) DecodeKey(stored []byte) (kg int, key, ns, rest []byte, err error) {
	kg, err = op.layout.KeyGroupOf(stored)
	if err != nil {
		return
	}
	p := stored[op.layout.Width():]
	take := func() ([]byte, error) {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) || w != len(binary.AppendUvarint(nil, n)) {
			return nil, errors.New("engine: malformed stored key")
		}
		b := p[w : w+int(n)]
		p = p[w+int(n):]
		return b, nil
	}
	if key, err = take(); err != nil {
		return
	}
	if ns, err = take(); err != nil {
		return
	}
	return kg, key, ns, p, nil
}

// expired reports whether a value last accessed at ts is expired at now.
func (s *State) expired(ts, now int64) bool {
	if s.ttlMs <= 0 {
		return false
	}
	if ts > math.MaxInt64-s.ttlMs {
		return false
	}
	return ts+s.ttlMs <= now
}

// splitValue reads a stored value's timestamp and payload (the list
// format flag, bit 63, masked off).
func splitValue(v []byte) (ts int64, payload []byte, ok bool) {
	if len(v) < TTLPrefix {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(v) &^ listFlag), v[TTLPrefix:], true
}

func appendValue(dst []byte, ts int64, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return append(dst, payload...)
}

// Get reads one value outside any bundle; ok is false when absent or
// expired. The payload is a copy.
func (s *State) Get(key []byte) (payload []byte, ok bool, err error) {
	now := s.op.clock.Now()
	var derr error
	err = s.op.be.MultiGet(s.id, [][]byte{key}, func(_ int, v []byte, found bool) {
		if !found {
			return
		}
		var p []byte
		if _, p, _, ok, derr = s.livePayload(nil, v, now); ok {
			payload = append([]byte{}, p...)
		}
	})
	if err == nil {
		err = derr
	}
	return
}

// ScanKeyGroups visits the live (unexpired) entries of the state whose key
// group lies in [start, end], in stored-key order, with the stored key, the
// last-access timestamp and the payload. Bytes are valid only during fn.
func (s *State) ScanKeyGroups(start, end int, fn func(key []byte, ts int64, payload []byte) bool) error {
	if start > end {
		return nil
	}
	lower, upper := s.op.layout.RangeBounds(start, end)
	now := s.op.clock.Now()
	var derr error
	var buf []byte
	err := s.op.be.Scan(s.id, lower, upper, func(k, v []byte) bool {
		ts, p, b, live, err := s.livePayload(buf[:0], v, now)
		buf = b
		if err != nil {
			derr = err
			return false
		}
		if !live {
			return true
		}
		return fn(k, ts, p)
	})
	if err == nil {
		err = derr
	}
	return err
}

// ScanKeyGroupsTimed is ScanKeyGroups keeping list elements' own
// timestamps: for a list state with a TTL, payload holds the live elements
// in the per-element encoding (8-byte big-endian last-access time, uvarint
// length, bytes per element; see ListElems) and timed is true, ts being the
// newest live element's time; other states' entries come as ScanKeyGroups
// gives them, with timed false. Bytes are valid only during fn.
func (s *State) ScanKeyGroupsTimed(start, end int, fn func(key []byte, ts int64, payload []byte, timed bool) bool) error {
	if !s.perElement() {
		return s.ScanKeyGroups(start, end, func(key []byte, ts int64, payload []byte) bool {
			return fn(key, ts, payload, false)
		})
	}
	if start > end {
		return nil
	}
	lower, upper := s.op.layout.RangeBounds(start, end)
	now := s.op.clock.Now()
	var derr error
	var buf []byte
	err := s.op.be.Scan(s.id, lower, upper, func(k, v []byte) bool {
		ts, p, ok := splitValue(v)
		if !ok {
			derr = fmt.Errorf("engine: state %q: stored value of %d bytes lacks the TTL prefix", s.desc.Name, len(v))
			return false
		}
		if s.expired(ts, now) {
			return true
		}
		out, newest, n, err := s.normalizeList(buf[:0], p, isPerElement(v), ts, now)
		buf = out
		if err != nil {
			derr = fmt.Errorf("engine: state %q: %w", s.desc.Name, err)
			return false
		}
		if n == 0 {
			return true
		}
		return fn(k, newest, out, true)
	})
	if err == nil {
		err = derr
	}
	return err
}

// DeleteKeyGroups removes every entry of the state in key groups
// [start, end].
func (s *State) DeleteKeyGroups(start, end int) error {
	if start > end {
		return nil
	}
	lower, upper := s.op.layout.RangeBounds(start, end)
	return s.op.be.DeleteRange(s.id, lower, upper)
}

// ClipToRange deletes, in every state, the entries whose key group lies
// outside r (after a restore from handles covering more key groups).
func (op *Operator) ClipToRange(r keygroups.Range) error {
	last := 1<<(8*op.layout.Width()) - 1
	for _, s := range op.states {
		if r.Start > 0 {
			if err := s.DeleteKeyGroups(0, r.Start-1); err != nil {
				return err
			}
		}
		if r.End < last {
			if err := s.DeleteKeyGroups(r.End+1, last); err != nil {
				return err
			}
		}
	}
	return nil
}

// Flush makes every committed bundle durable.
func (op *Operator) Flush() error { return op.be.Flush() }

// MultiGet reads keys of the state with one batched read and hands each
// live payload to fn in input order (ok=false when absent or expired),
// straight from the backend's memory: for RocksDB the bytes are pinned
// block or memtable memory, valid only during fn, released after the batch.
// Operators decode into their own structures here without a copy.
func (s *State) MultiGet(keys [][]byte, fn func(i int, ts int64, payload []byte, ok bool)) error {
	now := s.op.clock.Now()
	var derr error
	var buf []byte
	err := s.op.be.MultiGet(s.id, keys, func(i int, v []byte, found bool) {
		if !found {
			fn(i, 0, nil, false)
			return
		}
		ts, p, b, live, err := s.livePayload(buf[:0], v, now)
		buf = b
		if err != nil {
			if derr == nil {
				derr = err
			}
			fn(i, 0, nil, false)
			return
		}
		if !live {
			fn(i, 0, nil, false)
			return
		}
		fn(i, ts, p, true)
	})
	if err == nil {
		err = derr
	}
	return err
}
