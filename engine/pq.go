package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Priority-queue state (timers): a set of elements ordered by a signed
// 64-bit priority, then by element bytes. Stored key:
//
//	kg | priority big-endian with the sign bit flipped | element
//
// so the stored order within a key group is the queue order (ties across
// key groups go to the lower key group). The value is
// the 8-byte timestamp prefix alone. The queue's head is the smallest entry
// over the operator's key-group range.

// PQKey appends the stored key of an element.
func (s *State) PQKey(dst []byte, kg int, priority int64, elem []byte) []byte {
	dst = s.op.layout.AppendKeyGroup(dst, kg)
	dst = binary.BigEndian.AppendUint64(dst, uint64(priority)^(1<<63))
	return append(dst, elem...)
}

// DecodePQKey splits a stored priority-queue key.
func (op *Operator) DecodePQKey(stored []byte) (kg int, priority int64, elem []byte, err error) {
	kg, err = op.layout.KeyGroupOf(stored)
	if err != nil {
		return
	}
	p := stored[op.layout.Width():]
	if len(p) < 8 {
		return 0, 0, nil, errors.New("engine: malformed priority-queue key")
	}
	return kg, int64(binary.BigEndian.Uint64(p) ^ (1 << 63)), p[8:], nil
}

func (b *Bundle) checkPQ(s *State) error {
	if s.desc.Kind != KindPriorityQueue {
		return fmt.Errorf("engine: state %q is a %s, not a priority queue", s.desc.Name, s.desc.Kind)
	}
	return nil
}

// PQAdd inserts elem with priority (a no-op when already queued).
func (b *Bundle) PQAdd(s *State, kg int, priority int64, elem []byte) error {
	if err := b.checkPQ(s); err != nil {
		return err
	}
	return b.Put(s, s.PQKey(nil, kg, priority, elem), nil)
}

// PQRemove removes elem with priority (a no-op when absent).
func (b *Bundle) PQRemove(s *State, kg int, priority int64, elem []byte) error {
	if err := b.checkPQ(s); err != nil {
		return err
	}
	return b.Delete(s, s.PQKey(nil, kg, priority, elem))
}

// PQPeek returns the queue's head (the stored key of the smallest
// element), merging the backend with this bundle's updates.
func (b *Bundle) PQPeek(s *State) (key []byte, ok bool, err error) {
	if !b.active {
		return nil, false, ErrNoBundle
	}
	if err := b.checkPQ(s); err != nil {
		return nil, false, err
	}
	l := b.op.layout
	w := l.Width()
	better := func(k []byte) bool { return key == nil || bytes.Compare(k[w:], key[w:]) < 0 }
	for kg := l.Range.Start; kg <= l.Range.End; kg++ {
		lower, upper := l.RangeBounds(kg, kg)
		err := b.op.be.Scan(s.id, lower, upper, func(k, _ []byte) bool {
			if e, _, _ := b.entries.find(s.id, k); e != nil && !e.present {
				return true // removed in this bundle
			}
			if better(k) {
				key = append(key[:0], k...)
			}
			return false
		})
		if err != nil {
			return nil, false, err
		}
	}
	for _, e := range b.entries.ents {
		if e.st == s.id && e.present && better([]byte(e.key)) {
			key = append(key[:0], e.key...)
		}
	}
	return key, key != nil, nil
}

// PQPoll removes and returns the head when its priority is <= maxPriority
// (pass math.MaxInt64 for an unconditional poll).
func (b *Bundle) PQPoll(s *State, maxPriority int64) (kg int, priority int64, elem []byte, ok bool, err error) {
	key, found, err := b.PQPeek(s)
	if err != nil || !found {
		return 0, 0, nil, false, err
	}
	kg, priority, elem, err = b.op.DecodePQKey(key)
	if err != nil || priority > maxPriority {
		return 0, 0, nil, false, err
	}
	if err := b.Delete(s, key); err != nil {
		return 0, 0, nil, false, err
	}
	return kg, priority, append([]byte(nil), elem...), true, nil
}
