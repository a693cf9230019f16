package keyed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// The heap key-group layout
//
// The hashmap (heap) backend writes keyed state in a layout of its own
// (HeapSnapshotStrategy, AbstractStateTableSnapshot, KeyGroupPartitioner;
// read back by HeapRestoreOperation and the V2+ StateTableByKeyGroupReader):
// every retained checkpoint of that backend (key-groups handle tag 12), every
// NATIVE savepoint it takes, and every heap savepoint before Flink 1.13
// (tag 3). The stream starts with the same KeyedBackendSerializationProxy
// header as the canonical layout (ReadHeader). Then, for every key group of
// the handle's range (empty ones included), at the key group's offset:
//
//	i32 keyGroupId                          never compressed
//	per registered state, in the order of the backend's state map
//	(not necessarily by id), exactly len(header.States) times:
//	  [Snappy framed stream, its own one per state, when Compressed]
//	  i16 stateId                           index into header.States
//	  i32 n
//	  key/value state: n times
//	    namespace                            NAMESPACE_SERIALIZER
//	    key                                  the header's key serializer
//	    state value                          VALUE_SERIALIZER: the whole value
//	  priority queue (timers): n times
//	    element                              VALUE_SERIALIZER (TimerSerializer:
//	                                         sign-flipped i64 timestamp, key, namespace)
//
// There is no end-of-key-group mark and nothing is length-prefixed: an entry
// can only be delimited by walking its serializers, so a state whose
// namespace, key or value serializer has no decoder stops the read of its
// key group with an error. The whole value is the serializer's own output:
// ListSerializer (i32 size, elements) for LIST state, MapSerializer (i32
// size, then per entry: user key, bool isNull, [user value]) for MAP state,
// TTL wrappers (i64 last access, value) around values, list elements or map
// values when TTL is on.
//
// ReadOptions.Heap selects this layout. The reader hands out entries in the
// shape of the canonical layout, so that everything downstream treats both
// alike: KeyBytes is the canonical composite key (key-group prefix, key,
// [length marker], namespace, [length marker], [user key]) and ValueBytes
// the canonical value (the value; LIST elements joined by ','; for MAP
// state one entry per user key holding bool isNull + user value); a timer
// is one entry whose key is the prefix plus the element and whose value is
// empty. A LIST value becomes one entry, a MAP value one entry per user key
// (none for an empty map), as the canonical reader gives them. Offset is
// the absolute file offset of the entry in an uncompressed key group (the
// offset of the state streams, after the key-group id, in a compressed
// one); BlockPos its position in the (decompressed) stream after the id.

// heapPart is the position [s, e) of one part of a heap entry within the
// parse buffer.
type heapPart struct{ s, e int }

// heapMapEntry is one user key of a heap MAP value: the user key and the
// null flag followed by the user value (flag at v.s).
type heapMapEntry struct{ k, v heapPart }

// heapEntry is the parse of one heap entry.
type heapEntry struct {
	ns, key, val heapPart
	elems        []heapPart     // LIST elements
	mapEnts      []heapMapEntry // MAP entries
	n            int            // bytes consumed
}

// heapState is the per-state decoding plan of a heap read.
type heapState struct {
	st      *StateMeta
	kind    int
	elemDec serde.Decoder // LIST element / MAP user key
	uvDec   serde.Decoder // MAP user value
}

const (
	heapValue = iota
	heapList
	heapMap
	heapQueue
)

// maxHeapCount bounds the entry count of one state in one key group.
const maxHeapCount = math.MaxInt32

func (r *BlockReader) i32() (int32, error) {
	if err := r.fill(4); err != nil {
		return 0, r.ioErr(r.pos, err)
	}
	v := int32(binary.BigEndian.Uint32(r.win[r.wr:]))
	r.wr += 4
	r.pos += 4
	return v, nil
}

// heapPlan returns how the entries of st are delimited, or an error when a
// serializer needed for that has no decoder.
func heapPlan(h *Header, st *StateMeta) (heapState, error) {
	p := heapState{st: st}
	unsupported := func(what string, s *serde.Snapshot) (heapState, error) {
		return p, fmt.Errorf("%w: heap layout: state %q: the %s serializer %s has no decoder, so its entries cannot be delimited", binfmt.ErrCorrupt, st.Name, what, snapClass(s))
	}
	switch st.Type {
	case PriorityQueue:
		p.kind = heapQueue
		if st.valDec == nil || !st.valDec.Supported() {
			return unsupported("element", st.Value)
		}
		return p, nil
	case KeyValue, KeyValueV2:
	default:
		return p, fmt.Errorf("%w: heap layout: state %q of type %s in a keyed stream", binfmt.ErrCorrupt, st.Name, st.Type)
	}
	if h.keyDec == nil || !h.keyDec.Supported() {
		return unsupported("key", h.KeySerializer)
	}
	if st.nsDec == nil || !st.nsDec.Supported() {
		return unsupported("namespace", st.Namespace)
	}
	switch {
	case st.Kind == "LIST" && st.elemDec != nil:
		p.kind, p.elemDec = heapList, st.elemDec
		if !st.elemDec.Supported() {
			return unsupported("list element", st.Element)
		}
	case st.Kind == "MAP" && st.ukDec != nil && st.uvDec != nil:
		p.kind, p.elemDec, p.uvDec = heapMap, st.ukDec, st.uvDec
		if !st.ukDec.Supported() {
			return unsupported("map key", st.UserKey)
		}
		if !st.uvDec.Supported() {
			return unsupported("map value", st.UserValue)
		}
	default:
		if st.valDec == nil || !st.valDec.Supported() {
			return unsupported("value", st.Value)
		}
		p.kind = heapValue
	}
	return p, nil
}

// walk consumes one value of dec: validated (checked like a decode) or
// only skipped.
func walk(dec serde.Decoder, d *binfmt.Decbuf, check bool) {
	if check {
		serde.Validate(dec, d)
	} else {
		dec.Skip(d)
	}
}

// parseHeapEntry delimits one entry of p at the start of d, recording the
// part positions in he. check validates every part on the way.
func parseHeapEntry(h *Header, p *heapState, d *binfmt.Decbuf, he *heapEntry, check bool) {
	he.elems, he.mapEnts = he.elems[:0], he.mapEnts[:0]
	if p.kind == heapQueue {
		walk(p.st.valDec, d, check)
		he.val = heapPart{0, d.Pos}
		he.n = d.Pos
		return
	}
	walk(p.st.nsDec, d, check)
	he.ns = heapPart{0, d.Pos}
	walk(h.keyDec, d, check)
	he.key = heapPart{he.ns.e, d.Pos}
	start := d.Pos
	switch p.kind {
	case heapList:
		n := d.Count("list size", maxHeapCount, 0)
		for i := 0; i < n && d.Err() == nil; i++ {
			s := d.Pos
			walk(p.elemDec, d, check)
			if d.Err() == nil && d.Pos == s && n-i > d.Len()+1<<16 {
				d.Failf("list of %d zero-width elements", n)
			}
			he.elems = append(he.elems, heapPart{s, d.Pos})
		}
	case heapMap:
		n := d.Count("map size", maxHeapCount, 1)
		for i := 0; i < n && d.Err() == nil; i++ {
			s := d.Pos
			walk(p.elemDec, d, check)
			f := d.Pos
			if !d.Bool() {
				walk(p.uvDec, d, check)
			}
			he.mapEnts = append(he.mapEnts, heapMapEntry{heapPart{s, f}, heapPart{f, d.Pos}})
		}
	default:
		walk(p.st.valDec, d, check)
	}
	he.val = heapPart{start, d.Pos}
	he.n = d.Pos
}

// appendLenMarker appends the length marker of ambiguous composite keys
// (the inverse of skipMarker): the length, low byte first, at least one
// byte.
func appendLenMarker(b []byte, n int) []byte {
	for {
		b = append(b, byte(n))
		n >>= 8
		if n == 0 {
			return b
		}
	}
}

// heapBuf returns n bytes of scratch for synthesized entry bytes. With
// pinned windows (ReadOptions.Windows) entries outlive their callback, so
// the bytes come from slabs that are never written again; otherwise the
// buffer is reused by the next call of the same kind.
func (r *BlockReader) heapBuf(which int, n int, pin bool) []byte {
	if pin {
		if cap(r.heapSlab)-len(r.heapSlab) < n {
			r.heapSlab = make([]byte, 0, max(n, 64<<10))
		}
		b := r.heapSlab[len(r.heapSlab) : len(r.heapSlab) : len(r.heapSlab)+n]
		r.heapSlab = r.heapSlab[:len(r.heapSlab)+n]
		return b
	}
	if cap(r.heapScratch[which]) < n {
		r.heapScratch[which] = make([]byte, 0, max(n, 256))
	}
	return r.heapScratch[which][:0:n]
}

// readHeap reads one key group in the heap layout (ReadOptions.Heap); see
// the layout above and Read.
func (r *BlockReader) readHeap(src io.ReaderAt, size int64, name string, h *Header, keyGroup int, off int64, o ReadOptions, fn func(*Entry) error) error {
	if off <= 0 || off+4 > size || (o.End > 0 && off+4 >= o.End) {
		return &Error{File: name, KeyGroup: keyGroup, Offset: off, BlockPos: -1, Err: fmt.Errorf("%w: heap key-group offset %d leaves no room for its key group in a stream of %d bytes", binfmt.ErrCorrupt, off, size)}
	}
	var idb [4]byte
	if _, err := src.ReadAt(idb[:], off); err != nil {
		if err == io.EOF {
			err = fmt.Errorf("%w: key-group id", binfmt.ErrTruncated)
		}
		return &Error{File: name, KeyGroup: keyGroup, Offset: off, BlockPos: -1, Err: err}
	}
	if g := int32(binary.BigEndian.Uint32(idb[:])); int(g) != keyGroup {
		return &Error{File: name, KeyGroup: keyGroup, Offset: off, BlockPos: -1, Err: fmt.Errorf("%w: heap key group starts with key-group id %d", binfmt.ErrCorrupt, g)}
	}
	if err := r.begin(src, size, name, h, keyGroup, off+4, o); err != nil {
		return err
	}
	defer func() { r.src = nil }()
	prefix := keygroups.PrefixWidth(o.MaxParallelism)
	reuse := o.ReuseValues && o.Mode == ModeDecode && o.Arena == nil
	r.useArena(reuse, o.Arena)
	pin := o.Windows != nil
	if cap(r.heapSeen) < len(h.States) {
		r.heapSeen = make([]bool, len(h.States))
	}
	seen := r.heapSeen[:len(h.States)]
	clear(seen)
	// ModeValidate checks every part while delimiting it; ModeDecode
	// decodes each delimited part exactly afterwards (the same checks).
	check := o.Mode == ModeValidate
	he := &r.heapEnt
	for range h.States {
		at := r.pos
		id, err := r.u16()
		if err != nil {
			return err
		}
		if int(id) >= len(h.States) {
			return r.errAt(at, fmt.Errorf("%w: heap state id %d but the header lists %d states", binfmt.ErrCorrupt, int16(id), len(h.States)))
		}
		if seen[id] {
			return r.errAt(at, fmt.Errorf("%w: heap state id %d twice in one key group", binfmt.ErrCorrupt, id))
		}
		seen[id] = true
		st := h.States[id]
		at = r.pos
		n, err := r.i32()
		if err != nil {
			return err
		}
		if n < 0 {
			return r.errAt(at, fmt.Errorf("%w: state %q: heap entry count %d", binfmt.ErrCorrupt, st.Name, n))
		}
		if n == 0 {
			continue
		}
		p, err := heapPlan(h, st)
		if err != nil {
			return r.errAt(at, err)
		}
		for i := 0; i < int(n); i++ {
			entryPos := r.pos
			if err := r.parseHeap(h, &p, he, check); err != nil {
				return err
			}
			if he.n == 0 {
				return r.errAt(entryPos, fmt.Errorf("%w: state %q: zero-width heap entry", binfmt.ErrCorrupt, st.Name))
			}
			if reuse && r.sinceReset >= reuseEvery {
				r.resetArena()
			}
			if err := r.emitHeap(h, &p, he, keyGroup, prefix, entryPos, o, pin, reuse, fn); err != nil {
				return err
			}
			r.wr += he.n
			r.pos += int64(he.n)
		}
	}
	if o.End > 0 {
		left := r.ww - r.wr
		if left == 0 {
			if err := r.fill(1); err == nil {
				left = r.ww - r.wr
			} else if err != io.EOF && err != io.ErrUnexpectedEOF {
				return r.ioErr(r.pos, err)
			}
		}
		if left > 0 {
			return r.errAt(r.pos, fmt.Errorf("%w: bytes after the last state of heap key group %d", binfmt.ErrCorrupt, keyGroup))
		}
	}
	return nil
}

// parseHeap delimits the entry at the window start, reading more of the
// block until it is whole.
func (r *BlockReader) parseHeap(h *Header, p *heapState, he *heapEntry, check bool) error {
	d := &r.decs[0]
	done := false
	for {
		d.Reset(r.win[r.wr:r.ww], r.pos)
		parseHeapEntry(h, p, d, he, check)
		err := d.Err()
		if err == nil {
			return nil
		}
		if done || !errors.Is(err, binfmt.ErrTruncated) {
			return r.errFromDec(fmt.Sprintf("state %q", p.st.Name), err)
		}
		have := r.ww - r.wr
		if have >= maxEntryBytes {
			return r.errAt(r.pos, fmt.Errorf("%w: state %q: heap entry longer than %d bytes", binfmt.ErrCorrupt, p.st.Name, maxEntryBytes))
		}
		want := min(max(2*have, have+minWindowRead), maxEntryBytes)
		if err := r.fill(want); err != nil {
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				return r.ioErr(r.pos+int64(have), err)
			}
			done = true // all of the block is in the window: parse once more
		}
	}
}

// emitHeap hands out the canonical entries of the parsed heap entry he
// (bytes at the window start, block position entryPos).
func (r *BlockReader) emitHeap(h *Header, p *heapState, he *heapEntry, keyGroup, prefix int, entryPos int64, o ReadOptions, pin, reuse bool, fn func(*Entry) error) error {
	b := r.win[r.wr : r.wr+he.n : r.wr+he.n]
	st := p.st
	next := func() *Entry {
		e := &r.entry
		if o.EntrySlot != nil {
			e = o.EntrySlot()
		}
		*e = Entry{KeyGroup: keyGroup, State: st, BlockPos: entryPos, Offset: r.off + entryPos}
		if r.compress {
			e.Offset = r.off
		}
		if reuse {
			r.sinceReset++
		}
		return e
	}
	if p.kind == heapQueue {
		e := next()
		el := b[he.val.s:he.val.e]
		key := keygroups.AppendPrefix(r.heapBuf(0, prefix+len(el), pin), keyGroup, prefix)
		key = append(key, el...)
		e.KeyBytes, e.ValueBytes, e.KeyPart = key, key[len(key):], key[prefix:]
		if o.Mode == ModeDecode {
			v, err := r.decodeExact(st.valDec, el, entryPos)
			if err != nil {
				return r.errFromDec(fmt.Sprintf("state %q timer", st.Name), err)
			}
			e.Value = v
			if t, ok := v.(*serde.Timer); ok {
				e.Key, e.Namespace = t.Key, t.Namespace
			}
		}
		return fn(e)
	}
	keyB, nsB := b[he.key.s:he.key.e], b[he.ns.s:he.ns.e]
	ambiguous := h.keyDec.Len() < 0 && st.nsDec.Len() < 0
	// The composite key without user key; MAP entries append theirs.
	buildKey := func(uk []byte) (key []byte, kp, nsp, ukp []byte) {
		n := prefix + len(keyB) + len(nsB) + len(uk)
		if ambiguous {
			n += 8
		}
		key = keygroups.AppendPrefix(r.heapBuf(0, n, pin), keyGroup, prefix)
		key = append(key, keyB...)
		ke := len(key)
		if ambiguous {
			key = appendLenMarker(key, len(keyB))
		}
		ns := len(key)
		key = append(key, nsB...)
		ne := len(key)
		if ambiguous {
			key = appendLenMarker(key, len(nsB))
		}
		us := len(key)
		key = append(key, uk...)
		return key, key[prefix:ke:ke], key[ns:ne:ne], key[us:len(key):len(key)]
	}
	var keyV, nsV serde.Value
	if o.Mode == ModeDecode {
		if r.lastKeyOK && string(keyB) == string(r.lastKeyBytes) {
			keyV = r.lastKey
		} else {
			v, err := r.decodeExact(h.keyDec, keyB, entryPos+int64(he.key.s))
			if err != nil {
				return r.errFromDec(fmt.Sprintf("state %q key", st.Name), err)
			}
			keyV = v
			r.lastKey, r.lastKeyOK = v, true
			r.lastKeyBytes = append(r.lastKeyBytes[:0], keyB...)
		}
		v, err := r.decodeExact(st.nsDec, nsB, entryPos)
		if err != nil {
			return r.errFromDec(fmt.Sprintf("state %q namespace", st.Name), err)
		}
		nsV = v
	}
	switch p.kind {
	case heapMap:
		for _, me := range he.mapEnts {
			e := next()
			uk := b[me.k.s:me.k.e]
			e.KeyBytes, e.KeyPart, e.NamespaceBytes, e.UserKeyBytes = buildKey(uk)
			val := b[me.v.s:me.v.e:me.v.e]
			e.ValueBytes = val
			switch o.Mode {
			case ModeDecode:
				e.Key, e.Namespace = keyV, nsV
				u, err := r.decodeExact(p.elemDec, uk, entryPos+int64(me.k.s))
				if err != nil {
					return r.errFromDec(fmt.Sprintf("state %q user key", st.Name), err)
				}
				e.UserKey = u
				if val[0] == 0 {
					v, err := r.decodeExact(p.uvDec, val[1:], entryPos+int64(me.v.s)+1)
					if err != nil {
						return r.errFromDec(fmt.Sprintf("map state %q value", st.Name), err)
					}
					e.Value = r.unwrapTTL(e, v)
				}
			case ModeValidate:
				if val[0] == 0 {
					r.validatedTTL(e, p.uvDec, val[1:])
				}
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	case heapList:
		e := next()
		e.KeyBytes, e.KeyPart, e.NamespaceBytes, _ = buildKey(nil)
		e.UserKeyBytes = nil
		n := 0
		for i, el := range he.elems {
			if i > 0 {
				n++
			}
			n += el.e - el.s
		}
		val := r.heapBuf(1, n, pin)
		for i, el := range he.elems {
			if i > 0 {
				val = append(val, listDelimiter)
			}
			val = append(val, b[el.s:el.e]...)
		}
		e.ValueBytes = val
		if o.Mode == ModeDecode {
			e.Key, e.Namespace = keyV, nsV
			out := r.listBuf[:0]
			for i, el := range he.elems {
				v, err := r.decodeExact(p.elemDec, b[el.s:el.e], entryPos+int64(el.s))
				if err != nil {
					clear(out)
					r.listBuf = out[:0]
					return r.errFromDec(fmt.Sprintf("list state %q element %d", st.Name, i), err)
				}
				out = append(out, v)
			}
			e.Value = serde.ArenaList(r.cur, append(serde.ArenaValues(r.cur, len(out)), out...))
			clear(out)
			r.listBuf = out[:0]
		}
		return fn(e)
	default:
		e := next()
		e.KeyBytes, e.KeyPart, e.NamespaceBytes, _ = buildKey(nil)
		e.UserKeyBytes = nil
		val := b[he.val.s:he.val.e:he.val.e]
		e.ValueBytes = val
		switch o.Mode {
		case ModeDecode:
			e.Key, e.Namespace = keyV, nsV
			v, err := r.decodeExact(st.valDec, val, entryPos+int64(he.val.s))
			if err != nil {
				return r.errFromDec(fmt.Sprintf("state %q value", st.Name), err)
			}
			e.Value = r.unwrapTTL(e, v)
		case ModeValidate:
			r.validatedTTL(e, st.valDec, val)
		}
		return fn(e)
	}
}
