package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// List values come in two stored formats, told apart by bit 63 of the
// 8-byte value prefix:
//
//	whole-list:  ts (bit 63 clear)          | uvarint(len) elem ...
//	per-element: newest ts | 1<<63          | (ts uvarint(len) elem) ...
//
// Lists of states without a TTL are stored whole-list (a timestamp per
// element would be dead weight). Lists of states with a TTL are written
// per-element: each element carries its own last-access time (Flink's list
// TTL), appends refresh only the elements they add, reads skip expired
// elements and the native compaction filter drops them. A whole-list value
// in a TTL state (written by an import) reads as if every element had the
// value's timestamp.
//
// Appends are RocksDB merges with the native "sfstate.list" operator, which
// concatenates values in order; the result is per-element as soon as one
// input is. The heap backend applies the same merge (mergeListValues) at
// commit.
//
// Outside the bundle's internals a list payload is always the whole-list
// element encoding of the live elements (uvarint(len) elem ...): Get,
// ListGet, Put, State.Get, State.MultiGet and ScanKeyGroups speak it.

// listFlag marks a per-element list value in the 8-byte prefix.
const listFlag = uint64(1) << 63

var errMalformedList = errors.New("engine: malformed list value")

// perElement reports whether the state's lists carry per-element
// timestamps (list states with a TTL).
func (s *State) perElement() bool { return s.desc.Kind == KindList && s.ttlMs > 0 }

// isPerElement reports whether a stored value is a per-element list.
func isPerElement(v []byte) bool { return len(v) >= TTLPrefix && v[0]&0x80 != 0 }

// listElems visits the elements of a list payload in either format (ts is
// the element's timestamp for per-element payloads, else def).
func listElems(p []byte, perElem bool, def int64, fn func(ts int64, el []byte) bool) error {
	ts := def
	for len(p) > 0 {
		if perElem {
			if len(p) < 8 {
				return errMalformedList
			}
			ts = int64(binary.BigEndian.Uint64(p))
			p = p[8:]
		}
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return errMalformedList
		}
		if !fn(ts, p[w:w+int(n)]) {
			return nil
		}
		p = p[w+int(n):]
	}
	return nil
}

func appendListElem(dst []byte, perElem bool, ts int64, el []byte) []byte {
	if perElem {
		dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	}
	return appendLenBytes(dst, el)
}

// listPrefix is the stored prefix of a list value whose newest element was
// written at ts.
func listPrefix(perElem bool, ts int64) uint64 {
	if perElem {
		return uint64(ts) | listFlag
	}
	return uint64(ts)
}

// normalizeList appends to dst the live elements of the stored list payload
// p (stored format perStored, value timestamp vts) in the state's own
// format, and returns the newest live timestamp and the live count.
func (s *State) normalizeList(dst, p []byte, perStored bool, vts, now int64) (out []byte, newest int64, n int, err error) {
	per := s.perElement()
	newest = math.MinInt64
	err = listElems(p, perStored, vts, func(ts int64, el []byte) bool {
		if s.expired(ts, now) {
			return true
		}
		dst = appendListElem(dst, per, ts, el)
		newest = max(newest, ts)
		n++
		return true
	})
	return dst, newest, n, err
}

// publicList appends the whole-list encoding of a per-element payload's
// elements (timestamps dropped).
func publicList(dst, p []byte) ([]byte, error) {
	err := listElems(p, true, 0, func(_ int64, el []byte) bool {
		dst = appendLenBytes(dst, el)
		return true
	})
	return dst, err
}

// livePayload reads a stored value of state s at now: its timestamp (the
// newest live element's for per-element lists), its payload in the public
// encoding (per-element lists filtered into dst), and whether it is live.
func (s *State) livePayload(dst, v []byte, now int64) (ts int64, payload, buf []byte, live bool, err error) {
	ts, p, ok := splitValue(v)
	if !ok {
		return 0, nil, dst, false, fmt.Errorf("engine: state %q: stored value of %d bytes lacks the TTL prefix", s.desc.Name, len(v))
	}
	if s.expired(ts, now) {
		return ts, nil, dst, false, nil
	}
	if s.desc.Kind != KindList || !isPerElement(v) {
		return ts, p, dst, true, nil
	}
	at := len(dst)
	newest := int64(math.MinInt64)
	n := 0
	err = listElems(p, true, 0, func(ets int64, el []byte) bool {
		if !s.expired(ets, now) {
			dst = appendLenBytes(dst, el)
			newest = max(newest, ets)
			n++
		}
		return true
	})
	if err != nil {
		return 0, nil, dst, false, fmt.Errorf("engine: state %q: %w", s.desc.Name, err)
	}
	if n == 0 {
		return ts, nil, dst, false, nil
	}
	return newest, dst[at:len(dst):len(dst)], dst, true, nil
}

// mergeListValues is the "sfstate.list" merge operator: it concatenates
// stored list values in order (see the formats above) into one value.
func mergeListValues(dst []byte, vals ...[]byte) ([]byte, error) {
	per := false
	var newest uint64
	for i, v := range vals {
		if len(v) < TTLPrefix {
			return dst, errMalformedList
		}
		pre := binary.BigEndian.Uint64(v)
		per = per || pre&listFlag != 0
		if ts := pre &^ listFlag; i == 0 || ts > newest {
			newest = ts
		}
	}
	at := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, newest)
	for _, v := range vals {
		pre := binary.BigEndian.Uint64(v)
		pe := pre&listFlag != 0
		if err := listElems(v[TTLPrefix:], pe, int64(pre), func(ts int64, el []byte) bool {
			dst = appendListElem(dst, per, ts, el)
			return true
		}); err != nil {
			return dst[:at], err
		}
	}
	if per {
		dst[at] |= 0x80
	}
	return dst, nil
}

// ListMergeName is the name of the list merge operator in the OPTIONS file
// of an engine RocksDB directory (merge_operator of list families).
const ListMergeName = "sfstate.list"

// ListMergeOperator is the engine's list merge operator as a
// grocksdb.MergeOperator, for tools that open an engine RocksDB directory
// (or a native checkpoint of one) themselves: list appends are merge
// records until a compaction folds them, and only this operator merges them
// into the stored list format. Families whose OPTIONS name ListMergeName
// need it; Flink's own list families need Flink's string-append operator.
// Keep the grocksdb.Options it is set on alive: grocksdb v1.7.15's
// Options.Destroy frees a Go merge operator after the options owning it.
type ListMergeOperator struct{}

// Name returns ListMergeName.
func (ListMergeOperator) Name() string { return ListMergeName }

// FullMerge concatenates the existing list value (if any) and the operands.
func (ListMergeOperator) FullMerge(_, existing []byte, operands [][]byte) ([]byte, bool) {
	vals := make([][]byte, 0, len(operands)+1)
	if len(existing) > 0 {
		vals = append(vals, existing)
	}
	out, err := mergeListValues(nil, append(vals, operands...)...)
	return out, err == nil
}

// PartialMerge concatenates two operands.
func (ListMergeOperator) PartialMerge(_, left, right []byte) ([]byte, bool) {
	out, err := mergeListValues(nil, left, right)
	return out, err == nil
}

// StoredTimestamp returns the last-access time of a stored value (for a
// per-element list, its newest element's time): the 8-byte prefix with
// the per-element flag (bit 63) cleared. ok is false when v is shorter
// than the prefix.
func StoredTimestamp(v []byte) (ts int64, ok bool) {
	ts, _, ok = splitValue(v)
	return ts, ok
}

// LiveValue appends to dst what a read of the stored value v of a state of
// kind kind with TTL ttl returns at now, in the form ScanKeyGroups reports
// it: the 8-byte big-endian time (a list's newest live element's) followed
// by the public payload (a list's live elements in the whole-list
// encoding). live is false when nothing of v is live. It lets tools compare
// stored entries with what a restored backend returns.
func LiveValue(dst []byte, kind Kind, ttl time.Duration, v []byte, now int64) (out []byte, live bool, err error) {
	s := &State{desc: StateDesc{Name: "stored", Kind: kind, TTL: ttl}, ttlMs: ttl.Milliseconds()}
	ts, p, _, live, err := s.livePayload(nil, v, now)
	if err != nil || !live {
		return dst, false, err
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return append(dst, p...), true, nil
}

// ListElems visits the elements of a list payload: the whole-list encoding
// (uvarint length, bytes per element) when timed is false, else the
// per-element encoding ScanKeyGroupsTimed reports (8-byte big-endian time,
// uvarint length, bytes), ts then being each element's time (0 otherwise).
// It returns an error for a malformed payload.
func ListElems(payload []byte, timed bool, fn func(ts int64, elem []byte) bool) error {
	return listElems(payload, timed, 0, fn)
}
