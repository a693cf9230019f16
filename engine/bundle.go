package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"
)

// KeyRef names one stored key of one state.
type KeyRef struct {
	State *State
	Key   []byte
	// WriteOnly declares a blind write: the bundle will only overwrite or
	// delete the key (Put, Delete, ListUpdate, ListAdd on a list), never
	// read it first, so Begin does not read it. A key named both ways is
	// read.
	WriteOnly bool
}

type bkey struct {
	st int
	k  string
}

type entry struct {
	val     []byte // payload, without the timestamp prefix
	ts      int64  // last access (write) time
	present bool   // a live value exists (after this bundle's updates)
	stored  bool   // the backend holds some value for the key (live or expired)
	dirty   bool
	before  bool   // a live value existed when the bundle first read the key
	merge   bool   // list appends not read: val holds only the appended elements, merged at commit
	key     string // the stored key
	st      int    // the state id
}

// BundleStats counts one bundle's traffic.
type BundleStats struct {
	Hydrated   int // keys read by Begin's batched reads
	Reads      int // batched backend reads issued by Begin and Hydrate
	PointReads int // keys read later, one at a time (misses of Begin)
	Writes     int // puts and deletes in the commit batch
}

// Bundle is the write path: Begin hydrates every key the bundle will touch
// with one batched read per state, updates go to the bundle's working map,
// Commit writes the dirty set with one atomic write batch (one write per
// touched key, deletes included) and clears the working map. The working
// map is a per-bundle cache, nothing more: no state survives Commit in it.
//
// Byte slices returned by a bundle stay valid until Commit or Abort. A
// bundle is not safe for concurrent use.
type Bundle struct {
	op       *Operator
	entries  entryTable
	slab     []byte
	now      int64
	active   bool
	batch    Batch
	stats    BundleStats
	keyBuf   []byte
	scratch  [][]byte
	scratchS []int
	misses   []missRef
	dirtyN   []int // dirty entries per state id
	chunks   [][]entry
	chunk    int
	dirty    []dirtyRef // dirty entries in the order they were first written
	sortTmp  []dirtyRef // Commit's sort scratch
	winners  map[int]*WinnerCache
	reads    []KeyRef
}

// SetWinnerCache attaches a Top-1 winner cache to state s: Hydrate serves
// cached winners without reading the backend, Commit admits the winners it
// wrote (clean after the write) and drops deleted ones. nil detaches.
func (b *Bundle) SetWinnerCache(s *State, c *WinnerCache) {
	if b.winners == nil {
		b.winners = map[int]*WinnerCache{}
	}
	if c == nil {
		delete(b.winners, s.id)
		return
	}
	b.winners[s.id] = c
}

// dirtyRef keeps a dirty entry's state and key beside its pointer (a copy
// of e.st and e.key) so that Commit's sort reads them from one contiguous
// slice.
type dirtyRef struct {
	k bkey
	e *entry
}

// NewBundle returns a reusable bundle for the operator.
func (op *Operator) NewBundle() *Bundle {
	return &Bundle{op: op}
}

// ErrBundleActive is returned by Begin while a bundle is open.
var ErrBundleActive = errors.New("engine: bundle already begun")

// ErrNoBundle is returned by bundle operations outside Begin..Commit.
var ErrNoBundle = errors.New("engine: no active bundle")

// Now is the bundle's clock reading, taken at Begin: TTL decisions and
// timestamps written within the bundle use it.
func (b *Bundle) Now() int64 { return b.now }

// Stats returns the current bundle's counters.
func (b *Bundle) Stats() BundleStats { return b.stats }

// Len is the number of keys in the working map.
func (b *Bundle) Len() int { return b.entries.len() }

// Begin opens a bundle and hydrates keys (repeats allowed, any order) with
// one batched read per state.
func (b *Bundle) Begin(keys []KeyRef) error {
	if b.active {
		return ErrBundleActive
	}
	b.active = true
	b.now = b.op.clock.Now()
	b.stats = BundleStats{}
	if len(keys) == 0 {
		return nil
	}
	for _, r := range keys {
		if r.State == nil || r.State.op != b.op {
			b.abort()
			return errors.New("engine: Begin: key of a foreign or nil state")
		}
	}
	if anyWriteOnly(keys) {
		// Blind writes need no read: only the other keys are hydrated.
		reads := b.reads[:0]
		for _, r := range keys {
			if !r.WriteOnly {
				reads = append(reads, r)
			}
		}
		defer func() {
			clear(reads)
			b.reads = reads[:0]
		}()
		keys = reads
		if len(keys) == 0 {
			return nil
		}
	}
	if err := b.hydrate(keys, nil, nil); err != nil {
		b.abort()
		return err
	}
	return nil
}

// Hydrate reads the keys of one state not yet in the working map with one
// batched read. Begin calls it; operators may call it for keys they learn
// about later in the bundle.
func (b *Bundle) Hydrate(s *State, keys [][]byte) error {
	if !b.active {
		return ErrNoBundle
	}
	return b.hydrate(nil, s, keys)
}

// hydrate reads the misses among refs (or among keys of state one) with one
// batched read: a single MultiGet over every state involved when the
// backend supports it, else one per state.
func (b *Bundle) hydrate(refs []KeyRef, one *State, keys [][]byte) error {
	misses := b.misses[:0]
	single := true
	consider := func(s *State, k []byte) {
		found, h, slot := b.entries.find(s.id, k)
		if found != nil {
			return
		}
		e := b.newEntry()
		e.st, e.key = s.id, string(k)
		b.entries.insert(h, slot, e)
		if wc := b.winners[s.id]; wc != nil {
			if w, ok := wc.get(k); ok {
				e.stored = true
				if !s.expired(w.ts, b.now) {
					e.present, e.before, e.ts = true, true, w.ts
					off := len(b.slab)
					b.slab = append(b.slab, w.val...)
					e.val = b.slab[off:len(b.slab):len(b.slab)]
				}
				return
			}
		}
		if len(misses) > 0 && misses[0].s != s {
			single = false
		}
		misses = append(misses, missRef{s, k, e})
	}
	if one != nil {
		for _, k := range keys {
			consider(one, k)
		}
	} else {
		for _, r := range refs {
			consider(r.State, r.Key)
		}
	}
	defer func() {
		clear(misses)
		b.misses = misses[:0]
	}()
	if len(misses) == 0 {
		return nil
	}
	b.stats.Hydrated += len(misses)
	need := b.scratch[:0]
	for _, m := range misses {
		need = append(need, m.k)
	}
	defer func() {
		clear(need)
		b.scratch = need[:0]
	}()
	var derr error
	fill := func(i int, v []byte, found bool) {
		if err := b.fill(misses[i].s, misses[i].e, v, found); err != nil && derr == nil {
			derr = err
		}
	}
	var err error
	b.stats.Reads++
	if single {
		err = b.op.be.MultiGet(misses[0].s.id, need, fill)
	} else if mg, ok := b.op.be.(MultiStateGetter); ok {
		sts := b.scratchS[:0]
		for _, m := range misses {
			sts = append(sts, m.s.id)
		}
		b.scratchS = sts[:0]
		err = mg.MultiGetStates(sts, need, fill)
	} else {
		for i := range misses {
			i := i
			if err = b.op.be.MultiGet(misses[i].s.id, need[i:i+1], func(_ int, v []byte, found bool) { fill(i, v, found) }); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	return derr
}

func anyWriteOnly(keys []KeyRef) bool {
	for _, r := range keys {
		if r.WriteOnly {
			return true
		}
	}
	return false
}

type missRef struct {
	s *State
	k []byte
	e *entry
}

func (b *Bundle) newEntry() *entry {
	if b.chunk >= len(b.chunks) {
		b.chunks = append(b.chunks, make([]entry, 0, 4096))
	}
	c := &b.chunks[b.chunk]
	if len(*c) == cap(*c) {
		b.chunk++
		return b.newEntry()
	}
	*c = (*c)[:len(*c)+1]
	return &(*c)[len(*c)-1]
}

// fill sets a hydrated entry from the stored value.
func (b *Bundle) fill(s *State, e *entry, v []byte, found bool) error {
	if !found {
		return nil
	}
	e.stored = true
	ts, p, ok := splitValue(v)
	if !ok {
		return fmt.Errorf("engine: state %q: stored value of %d bytes lacks the TTL prefix", s.desc.Name, len(v))
	}
	if s.desc.Kind == KindList {
		return b.fillList(s, e, v, ts, p)
	}
	if !s.expired(ts, b.now) {
		e.present, e.before = true, true
		e.ts = ts
		off := len(b.slab)
		b.slab = append(b.slab, p...)
		e.val = b.slab[off:len(b.slab):len(b.slab)]
	}
	return nil
}

// fillList sets a hydrated list entry: the live elements of the stored
// value, in the state's own format (per-element for TTL states).
func (b *Bundle) fillList(s *State, e *entry, v []byte, ts int64, p []byte) error {
	if s.expired(ts, b.now) {
		return nil
	}
	per := isPerElement(v)
	if per == s.perElement() && (!per || !s.expired(b.oldestElem(p), b.now)) {
		// Already in the state's format with every element live: as is.
		e.present, e.before, e.ts = true, true, ts
		off := len(b.slab)
		b.slab = append(b.slab, p...)
		e.val = b.slab[off:len(b.slab):len(b.slab)]
		return nil
	}
	off := len(b.slab)
	out, newest, n, err := s.normalizeList(b.slab, p, per, ts, b.now)
	if err != nil {
		b.slab = b.slab[:off]
		return fmt.Errorf("engine: state %q: %w", s.desc.Name, err)
	}
	b.slab = out
	if n == 0 {
		b.slab = b.slab[:off]
		return nil
	}
	e.present, e.before, e.ts = true, true, newest
	e.val = b.slab[off:len(b.slab):len(b.slab)]
	return nil
}

// oldestElem is the oldest element timestamp of a per-element payload
// (MaxInt64 when malformed or empty: normalizeList then reports it).
func (b *Bundle) oldestElem(p []byte) int64 {
	oldest := int64(math.MaxInt64)
	if err := listElems(p, true, 0, func(ts int64, _ []byte) bool {
		oldest = min(oldest, ts)
		return true
	}); err != nil {
		return math.MinInt64 // take the normalizing path, which reports it
	}
	return oldest
}

func (b *Bundle) lookup(s *State, key []byte) (*entry, error) {
	if !b.active {
		return nil, ErrNoBundle
	}
	e, h, slot := b.entries.find(s.id, key)
	if e != nil {
		if e.merge {
			return e, b.resolveMerge(s, e)
		}
		if e.present && !e.dirty && s.expired(e.ts, b.now) {
			e.present = false
		}
		return e, nil
	}
	b.stats.PointReads++
	e = b.newEntry()
	e.st, e.key = s.id, string(key)
	b.entries.insert(h, slot, e)
	var derr error
	if err := b.op.be.MultiGet(s.id, [][]byte{key}, func(_ int, v []byte, found bool) { derr = b.fill(s, e, v, found) }); err != nil {
		return nil, err
	}
	return e, derr
}

// resolveMerge turns a list entry holding unread appends into a full one:
// it reads the stored list and puts the appends after its live elements.
// The entry stays dirty (the commit writes the whole list).
func (b *Bundle) resolveMerge(s *State, e *entry) error {
	b.stats.PointReads++
	pending := e.val
	e.merge, e.present, e.val = false, false, nil
	var derr error
	if err := b.op.be.MultiGet(s.id, [][]byte{unsafe.Slice(unsafe.StringData(e.key), len(e.key))}, func(_ int, v []byte, found bool) {
		derr = b.fill(s, e, v, found)
	}); err != nil {
		return err
	}
	if derr != nil {
		return derr
	}
	e.before = e.present
	off := len(b.slab)
	b.slab = append(b.slab, e.val...)
	b.slab = append(b.slab, pending...)
	e.val = b.slab[off:len(b.slab):len(b.slab)]
	e.present, e.ts = true, b.now
	return nil
}

// Get returns the live payload of key, or ok=false. For a list state the
// payload is the whole-list encoding of the live elements (see ListGet).
func (b *Bundle) Get(s *State, key []byte) (payload []byte, ok bool, err error) {
	e, err := b.lookup(s, key)
	if err != nil || !e.present {
		return nil, false, err
	}
	if s.perElement() {
		off := len(b.slab)
		if b.slab, err = publicList(b.slab, e.val); err != nil {
			return nil, false, fmt.Errorf("engine: state %q: %w", s.desc.Name, err)
		}
		return b.slab[off:len(b.slab):len(b.slab)], true, nil
	}
	return e.val, true, nil
}

// Contains reports whether key holds a live value.
func (b *Bundle) Contains(s *State, key []byte) (bool, error) {
	_, ok, err := b.Get(s, key)
	return ok, err
}

func (b *Bundle) entryFor(s *State, key []byte) *entry {
	e, h, slot := b.entries.find(s.id, key)
	if e == nil {
		// Blind write: no read needed. Assume the backend may hold a value.
		e = b.newEntry()
		e.stored = true
		e.st, e.key = s.id, string(key)
		b.entries.insert(h, slot, e)
	}
	return e
}

// Put sets key's payload (copied) and refreshes its timestamp. For a list
// state the payload is the whole-list encoding of the elements (as
// ListUpdate writes), each element then timestamped now.
func (b *Bundle) Put(s *State, key, payload []byte) error {
	if !b.active {
		return ErrNoBundle
	}
	e := b.entryFor(s, key)
	off := len(b.slab)
	if s.perElement() {
		var err error
		if b.slab, _, _, err = s.normalizeList(b.slab, payload, false, b.now, b.now); err != nil {
			b.slab = b.slab[:off]
			return fmt.Errorf("engine: state %q: %w", s.desc.Name, err)
		}
	} else {
		b.slab = append(b.slab, payload...)
	}
	e.val = b.slab[off:len(b.slab):len(b.slab)]
	e.present, e.ts, e.merge = true, b.now, false
	b.markDirty(s, e)
	return nil
}

func (b *Bundle) markDirty(s *State, e *entry) {
	if !e.dirty {
		e.dirty = true
		for len(b.dirtyN) <= s.id {
			b.dirtyN = append(b.dirtyN, 0)
		}
		b.dirtyN[s.id]++
		b.dirty = append(b.dirty, dirtyRef{bkey{s.id, e.key}, e})
	}
}

// Delete removes key.
func (b *Bundle) Delete(s *State, key []byte) error {
	if !b.active {
		return ErrNoBundle
	}
	e := b.entryFor(s, key)
	e.val, e.present, e.merge = nil, false, false
	b.markDirty(s, e)
	return nil
}

// ---- list state: see list.go for the stored formats. In the working map a
// list entry holds its live elements in the state's format (per-element
// for TTL states); an entry marked merge holds only elements appended
// without a read, written at commit as one merge.

// decodeList visits the elements of a whole-list payload.
func decodeList(p []byte, fn func(elem []byte) bool) error {
	return listElems(p, false, 0, func(_ int64, el []byte) bool { return fn(el) })
}

// ListAdd appends elem to the list at key.
func (b *Bundle) ListAdd(s *State, key, elem []byte) error {
	return b.ListAddAll(s, key, [][]byte{elem})
}

// ListAddAll appends elems to the list at key, each timestamped now. An
// append to a key the bundle has not read is a blind write: the elements go
// to the store as one merge at commit, without reading the list.
func (b *Bundle) ListAddAll(s *State, key []byte, elems [][]byte) error {
	if !b.active {
		return ErrNoBundle
	}
	if len(elems) == 0 {
		return nil
	}
	e, h, slot := b.entries.find(s.id, key)
	ok := e != nil
	switch {
	case ok && e.merge:
	case ok:
		if e.present && !e.dirty && s.expired(e.ts, b.now) {
			e.present = false
		}
	case b.canMerge():
		e = b.newEntry()
		e.st, e.key = s.id, string(key)
		e.stored, e.merge = true, true
		b.entries.insert(h, slot, e)
	default:
		var err error
		if e, err = b.lookup(s, key); err != nil {
			return err
		}
	}
	// The new list goes to the slab. When the old one is the slab's tail
	// (the key appended to last), the elements extend it in place;
	// otherwise it is copied first.
	off := len(b.slab)
	if !e.present && !e.merge {
		e.val = nil
	}
	if n := len(e.val); n > 0 && n <= off && &b.slab[off-n] == &e.val[0] {
		off -= n
	} else {
		b.slab = append(b.slab, e.val...)
	}
	per := s.perElement()
	for _, el := range elems {
		b.slab = appendListElem(b.slab, per, b.now, el)
	}
	e.val, e.present, e.ts = b.slab[off:len(b.slab):len(b.slab)], true, b.now
	b.markDirty(s, e)
	return nil
}

// canMerge reports whether the backend's batches take merges (both built-in
// backends do; a wrapping backend may not, and appends then read first).
func (b *Bundle) canMerge() bool {
	if b.batch == nil {
		b.batch = b.op.be.NewBatch()
	}
	_, ok := b.batch.(merger)
	return ok
}

// merger is implemented by batches that take list merges (see list.go).
type merger interface {
	Merge(st int, key, val []byte)
}

// ListUpdate replaces the list at key; an empty elems deletes it.
func (b *Bundle) ListUpdate(s *State, key []byte, elems [][]byte) error {
	if len(elems) == 0 {
		return b.Delete(s, key)
	}
	if !b.active {
		return ErrNoBundle
	}
	e := b.entryFor(s, key)
	off := len(b.slab)
	per := s.perElement()
	for _, el := range elems {
		b.slab = appendListElem(b.slab, per, b.now, el)
	}
	e.val = b.slab[off:len(b.slab):len(b.slab)]
	e.present, e.ts, e.merge = true, b.now, false
	b.markDirty(s, e)
	return nil
}

// ListGet visits the list's live elements in order until fn returns false.
func (b *Bundle) ListGet(s *State, key []byte, fn func(elem []byte) bool) error {
	e, err := b.lookup(s, key)
	if err != nil || !e.present {
		return err
	}
	if err := listElems(e.val, s.perElement(), 0, func(ts int64, el []byte) bool {
		return s.expired(ts, b.now) || fn(el)
	}); err != nil {
		return fmt.Errorf("engine: state %q: %w", s.desc.Name, err)
	}
	return nil
}

// ---- multiset state: value -> count, count stored as 8-byte big-endian.

// MultisetAdd adds delta to the count of the entry key and returns the new
// count; a count that reaches zero or below removes the entry.
func (b *Bundle) MultisetAdd(s *State, key []byte, delta int64) (int64, error) {
	e, err := b.lookup(s, key)
	if err != nil {
		return 0, err
	}
	var c int64
	if e.present {
		if len(e.val) != 8 {
			return 0, fmt.Errorf("engine: state %q: multiset count of %d bytes", s.desc.Name, len(e.val))
		}
		c = int64(binary.BigEndian.Uint64(e.val))
	}
	c += delta
	if c <= 0 {
		e.val, e.present = nil, false
		b.markDirty(s, e)
		return 0, nil
	}
	off := len(b.slab)
	b.slab = binary.BigEndian.AppendUint64(b.slab, uint64(c))
	e.val = b.slab[off:len(b.slab):len(b.slab)]
	e.present, e.ts = true, b.now
	b.markDirty(s, e)
	return c, nil
}

// MultisetCount returns the count of the entry key (0 when absent).
func (b *Bundle) MultisetCount(s *State, key []byte) (int64, error) {
	p, ok, err := b.Get(s, key)
	if err != nil || !ok {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("engine: state %q: multiset count of %d bytes", s.desc.Name, len(p))
	}
	return int64(binary.BigEndian.Uint64(p)), nil
}

// Iterate visits, in key order, the live entries of s whose stored key
// starts with prefix (an EntryPrefix for map and multiset states), merging
// the backend with this bundle's updates. fn gets the suffix after prefix
// (the user key) and the payload, both valid only during the call.
func (b *Bundle) Iterate(s *State, prefix []byte, fn func(userKey, payload []byte) bool) error {
	if !b.active {
		return ErrNoBundle
	}
	if s.id >= len(b.dirtyN) || b.dirtyN[s.id] == 0 {
		// Nothing of this state changed in the bundle: the backend is the
		// truth (hydrated clean entries equal it); stream it.
		return b.scanLive(s, prefix, fn)
	}
	type kv struct {
		k string
		v []byte
	}
	for _, e := range b.entries.ents {
		if e.st == s.id && e.merge && bytes.HasPrefix([]byte(e.key), prefix) {
			if err := b.resolveMerge(s, e); err != nil {
				return err
			}
		}
	}
	merged := map[string][]byte{}
	upper := prefixEnd(prefix)
	var derr error
	err := b.op.be.Scan(s.id, prefix, upper, func(k, v []byte) bool {
		if e, _, _ := b.entries.find(s.id, k); e != nil {
			return true // the working map decides
		}
		_, p, _, live, err := s.livePayload(nil, v, b.now)
		if err != nil {
			derr = err
			return false
		}
		if live {
			merged[string(k)] = append([]byte{}, p...)
		}
		return true
	})
	if err != nil {
		return err
	}
	if derr != nil {
		return derr
	}
	for _, e := range b.entries.ents {
		if e.st != s.id || !e.present || !bytes.HasPrefix([]byte(e.key), prefix) {
			continue
		}
		if !e.dirty && s.expired(e.ts, b.now) {
			continue
		}
		v := e.val
		if s.perElement() {
			var err error
			if v, err = publicList(nil, v); err != nil {
				return fmt.Errorf("engine: state %q: %w", s.desc.Name, err)
			}
		}
		merged[e.key] = v
	}
	out := make([]kv, 0, len(merged))
	for k, v := range merged {
		out = append(out, kv{k, v})
	}
	slices.SortFunc(out, func(x, y kv) int { return strings.Compare(x.k, y.k) })
	for _, e := range out {
		if !fn([]byte(e.k[len(prefix):]), e.v) {
			break
		}
	}
	return nil
}

func (b *Bundle) scanLive(s *State, prefix []byte, fn func(userKey, payload []byte) bool) error {
	var derr error
	var buf []byte
	err := b.op.be.Scan(s.id, prefix, prefixEnd(prefix), func(k, v []byte) bool {
		_, p, nb, live, err := s.livePayload(buf[:0], v, b.now)
		buf = nb
		if err != nil {
			derr = err
			return false
		}
		if !live {
			return true
		}
		return fn(k[len(prefix):], p)
	})
	if err != nil {
		return err
	}
	return derr
}

// prefixEnd returns the smallest key greater than every key starting with
// p, or nil when there is none.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Commit writes the dirty set with one atomic write batch and clears the
// working map.
func (b *Bundle) Commit() error {
	if !b.active {
		return ErrNoBundle
	}
	if b.batch == nil {
		b.batch = b.op.be.NewBatch()
	}
	// Write in key order: sorted inserts keep the memtable's skip-list walk
	// cache-friendly, and the batch is the same whatever the write order.
	// The dirty list is kept as writes arrive, so no pass over the working
	// map is needed, and an already ordered list (keys written in order) is
	// not sorted again.
	dirty := b.dirty[:0]
	sorted := true
	for _, d := range b.dirty {
		if d.e.present || d.e.stored {
			if n := len(dirty); n > 0 && sorted && compareDirty(dirty[n-1], d) > 0 {
				sorted = false
			}
			dirty = append(dirty, d)
		}
	}
	if !sorted {
		b.sortDirty(dirty)
	}
	writes := 0
	for _, d := range dirty {
		e := d.e
		// The batch copies the key: no need to copy it out of the string.
		key := unsafe.Slice(unsafe.StringData(d.k.k), len(d.k.k))
		switch {
		case e.merge:
			s := b.op.states[d.k.st]
			b.keyBuf = binary.BigEndian.AppendUint64(b.keyBuf[:0], listPrefix(s.perElement(), e.ts))
			b.keyBuf = append(b.keyBuf, e.val...)
			b.batch.(merger).Merge(d.k.st, key, b.keyBuf)
		case e.present:
			b.keyBuf = appendValue(b.keyBuf[:0], e.ts, e.val)
			if b.op.states[d.k.st].perElement() {
				b.keyBuf[0] |= 0x80
			}
			b.batch.Put(d.k.st, key, b.keyBuf)
		default:
			b.batch.Delete(d.k.st, key)
		}
		writes++
	}
	b.dirty = dirty
	b.stats.Writes = writes
	err := b.batch.Commit()
	if len(b.winners) > 0 {
		b.admitWinners(err == nil)
	}
	b.abort()
	return err
}

// sortDirty sorts dirty by (state, key) with a most-significant-byte-first
// radix sort: runs of keys sharing a byte (the zero high bytes of small
// integer keys, one key group's prefix) cost one scan per byte, and the
// entries move through one scratch slice instead of being compared pairwise
// through string pointers.
func (b *Bundle) sortDirty(dirty []dirtyRef) {
	maxSt := 0
	for _, d := range dirty {
		maxSt = max(maxSt, d.k.st)
	}
	if maxSt > 255 {
		slices.SortFunc(dirty, compareDirty)
		return
	}
	tmp := slices.Grow(b.sortTmp[:0], len(dirty))[:len(dirty)]
	// By state first (a stable counting pass), then each state's run by key.
	var count [257]int
	if maxSt > 0 {
		for _, d := range dirty {
			count[d.k.st+1]++
		}
		for i := 1; i <= maxSt+1; i++ {
			count[i] += count[i-1]
		}
		for _, d := range dirty {
			tmp[count[d.k.st]] = d
			count[d.k.st]++
		}
		copy(dirty, tmp)
	}
	for lo := 0; lo < len(dirty); {
		hi := lo + 1
		for hi < len(dirty) && dirty[hi].k.st == dirty[lo].k.st {
			hi++
		}
		radixKeys(dirty[lo:hi], tmp[lo:hi], 0)
		lo = hi
	}
	clear(tmp)
	b.sortTmp = tmp[:0]
}

// radixKeys sorts a by key, all keys sharing their first depth bytes; tmp
// is scratch of the same length.
func radixKeys(a, tmp []dirtyRef, depth int) {
	for {
		if len(a) <= 24 {
			slices.SortFunc(a, func(x, y dirtyRef) int { return strings.Compare(x.k.k[depth:], y.k.k[depth:]) })
			return
		}
		// Bucket 0: the key ends at depth; bucket c+1: byte c.
		digit := func(d dirtyRef) int {
			if len(d.k.k) <= depth {
				return 0
			}
			return int(d.k.k[depth]) + 1
		}
		first := digit(a[0])
		same := true
		for _, d := range a[1:] {
			if digit(d) != first {
				same = false
				break
			}
		}
		if same {
			if first == 0 {
				return // all keys end here: equal
			}
			depth++
			continue
		}
		var count [258]int
		for _, d := range a {
			count[digit(d)+1]++
		}
		for i := 1; i < len(count); i++ {
			count[i] += count[i-1]
		}
		for _, d := range a {
			c := digit(d)
			tmp[count[c]] = d
			count[c]++
		}
		copy(a, tmp)
		// count[c] is now the end of bucket c.
		start := count[0]
		for c := 1; c < 257; c++ {
			if end := count[c]; end-start > 1 {
				radixKeys(a[start:end], tmp[start:end], depth+1)
			}
			start = count[c]
		}
		return
	}
}

func compareDirty(a, b dirtyRef) int {
	if a.k.st != b.k.st {
		return a.k.st - b.k.st
	}
	return strings.Compare(a.k.k, b.k.k)
}

func (b *Bundle) admitWinners(written bool) {
	for _, d := range b.dirty {
		wc := b.winners[d.k.st]
		if wc == nil {
			continue
		}
		switch {
		case !written || !d.e.present:
			wc.remove(d.k.k)
		case d.e.before:
			wc.admit(d.k.k, d.e.val, d.e.ts)
		default:
			wc.remove(d.k.k) // fresh key: bypass admission
		}
	}
}

// Abort discards the bundle's updates.
func (b *Bundle) Abort() {
	if b.active {
		b.abort()
	}
}

func (b *Bundle) abort() {
	b.entries.reset()
	clear(b.dirtyN)
	clear(b.dirty)
	b.dirty = b.dirty[:0]
	for i := range b.chunks {
		clear(b.chunks[i])
		b.chunks[i] = b.chunks[i][:0]
	}
	b.chunk = 0
	if cap(b.slab) > 64<<20 {
		b.slab = nil
	} else {
		b.slab = b.slab[:0]
	}
	b.active = false
}

// Close releases the bundle's native batch.
func (b *Bundle) Close() {
	b.Abort()
	if b.batch != nil {
		b.batch.Close()
		b.batch = nil
	}
}
