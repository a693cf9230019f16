package statediff

// The compact comparison: entries compared by the bytes Flink's
// serializers wrote, decoded only where that cannot decide.
//
// The reader hands every entry out in the shape of the canonical layout,
// whether it was read from a canonical key-group block or from the heap
// backend's layout (keyed.Entry, heap.go): KeyBytes is the composite key
//
//	key-group prefix (1 byte up to max parallelism 128, else 2, big-endian)
//	key | [length marker] | namespace | [length marker] | [user key (MAP)]
//
// (for timers: prefix | the TimerSerializer element) and ValueBytes the
// value as its serializer wrote it: LIST elements joined by ',', for MAP
// state a null flag byte and the user value, TTL values as i64 last access
// followed by the user value (CompositeSerializer of TtlSerializer).
//
// When a state has byte-identical serializer snapshots on both sides (key
// serializer of every header holding it, namespace, value, user key; see
// planOperator), equal keys serialize to equal bytes — RocksDB looks
// entries up by these very bytes — so an entry's identity is its composite
// key without the key-group prefix, which does not depend on the max
// parallelism or the file it came from. Values with equal bytes are equal.
// Values whose bytes differ are different values when every serializer of
// the value is deterministic (numbers, strings, windows, tuples and TTL
// wrappers of those; see deterministic) and the TTL timestamp can be cut
// out of the bytes (VALUE: the first 8 bytes; MAP: the 8 after the null
// flag); otherwise (rows, POJOs, Kryo, maps, TTL list elements, ...) both
// entries are decoded and compared as before, by the canonical encoding of
// savepoint/digest, which sees through encodings that differ for equal
// values (map order, padding).
//
// A state whose serializers differ between the sides (another version of
// a serializer, TTL enabled on one side only, a changelog handle whose
// bytes come from the state-change log) is compared entirely by decoded
// values (the canonical form), and Diff says so in a note.
//
// JSON is rendered only for the examples kept: such an entry is decoded
// from its stored bytes by the keyed package's own block reader, through a
// one-entry canonical block (oneEntryBlock).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// TTL layouts of a state's value bytes.
const (
	ttlNone  = iota
	ttlValue // i64 last access, then the value
	ttlMap   // null flag, then (when 0) i64 last access and the value
	ttlList  // per element: decoded to compare
)

// statePlan says how one state's entries are compared.
type statePlan struct {
	name string
	// canonical: the sides' serializers differ (or are not known before
	// the walk): identity and value are the canonical encodings of the
	// decoded entry, rendered eagerly.
	canonical bool
	// exactVal: value bytes that differ are different values.
	exactVal bool
	ttl      int
	sig      []byte // serializer signature (first header seen)
}

// opPlan is the comparison plan of one operator.
type opPlan struct {
	idx    map[string]int32
	states []*statePlan
	// mode is the walk's decoding depth: ModeSplit when every state is
	// compared by bytes, ModeDecode when some needs decoded values.
	mode keyed.Mode
	// dynamic: states not in the plan are added as canonical ones
	// (operators with changelog handles, whose headers are not read
	// beforehand).
	dynamic bool
}

// state returns the index of a state, adding it when the plan is dynamic.
func (p *opPlan) state(name string) (int32, error) {
	if i, ok := p.idx[name]; ok {
		return i, nil
	}
	if !p.dynamic {
		return 0, fmt.Errorf("statediff: state %q is in no header read before the comparison", name)
	}
	return p.add(&statePlan{name: name, canonical: true}), nil
}

func (p *opPlan) add(s *statePlan) int32 {
	i := int32(len(p.states))
	p.states = append(p.states, s)
	p.idx[s.name] = i
	return i
}

// signature appends what decides a state's bytes: the key serializer of
// its header, its type and kind, and every serializer snapshot it
// registers, exactly as written.
func signature(dst []byte, h *keyed.Header, m *keyed.StateMeta) []byte {
	snap := func(s *serde.Snapshot) {
		if s == nil {
			dst = binary.AppendUvarint(dst, 0)
			return
		}
		dst = binary.AppendUvarint(dst, uint64(len(s.Raw))+1)
		dst = append(dst, s.Raw...)
	}
	snap(h.KeySerializer)
	dst = binary.AppendUvarint(dst, uint64(m.Type))
	dst = binary.AppendUvarint(dst, uint64(len(m.Kind)))
	dst = append(dst, m.Kind...)
	for _, s := range m.Serializers {
		dst = binary.AppendUvarint(dst, uint64(len(s.Key)))
		dst = append(dst, s.Key...)
		snap(s.Snapshot)
	}
	return dst
}

// deterministicClasses write one byte sequence per value, so different
// bytes mean different values (for the canonical comparison: floats by
// their bits).
var deterministicClasses = map[string]bool{
	serde.ClassInt: true, serde.ClassLong: true, serde.ClassString: true, serde.ClassBoolean: true,
	serde.ClassShort: true, serde.ClassByte: true, serde.ClassDouble: true, serde.ClassFloat: true,
	serde.ClassChar: true, serde.ClassBytes: true, serde.ClassVoid: true, serde.ClassTimeWindow: true,
	serde.ClassGlobalWin: true, serde.ClassTableTW: true, serde.ClassCountWindow: true,
	serde.ClassStringData: true, serde.ClassNull: true,
}

// deterministic reports whether different bytes of s always are
// different values: deterministic classes, and tuples, TTL wrappers,
// timers and lists of deterministic ones.
func deterministic(s *serde.Snapshot, depth int) bool {
	if s == nil || depth > maxJSONDepth {
		return false
	}
	if deterministicClasses[s.Class] {
		return true
	}
	switch s.Class {
	case serde.ClassTuple, serde.ClassTTL, serde.ClassTimer, serde.ClassList, serde.ClassExternal, serde.ClassTTLAware:
		if len(s.Nested) == 0 {
			return false
		}
		for _, n := range s.Nested {
			if !deterministic(n, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// valuePlan fills exactVal and ttl from a state's meta info.
func valuePlan(s *statePlan, m *keyed.StateMeta) {
	switch {
	case m.Type == keyed.PriorityQueue:
		s.exactVal = true // timers: the element is the identity, no value
	case m.Kind == "LIST":
		s.exactVal = !m.TTL && deterministic(m.Element, 0)
		if m.TTL {
			s.ttl = ttlList
		}
	case m.Kind == "MAP":
		s.exactVal = deterministic(m.UserValue, 0)
		if m.TTL {
			s.ttl = ttlMap
		}
	default:
		s.exactVal = deterministic(m.Value, 0)
		if m.TTL {
			s.ttl = ttlValue
		}
	}
}

// planOperator reads the keyed headers of op on both sides and decides
// per state how it is compared.
func (d *differ) planOperator(p opPair) (*opPlan, error) {
	plan := &opPlan{idx: map[string]int32{}, mode: keyed.ModeSplit}
	mismatch := map[string]bool{}
	var sig []byte
	for _, x := range []struct {
		sp *savepoint.Savepoint
		op *savepoint.OperatorState
	}{{d.a, p.a}, {d.b, p.b}} {
		if x.op == nil {
			continue
		}
		for _, st := range x.op.Subtasks {
			switch h := st.ManagedKeyed.(type) {
			case nil:
			case *savepoint.KeyGroupsHandle:
				if h.Delegate == nil {
					continue // the walk reports it
				}
				hdr, err := x.sp.KeyedHeader(d.ctx, h)
				if err != nil {
					return nil, err
				}
				for _, m := range hdr.States {
					if d.o.State != "" && m.Name != d.o.State {
						continue
					}
					sig = signature(sig[:0], hdr, m)
					i, ok := plan.idx[m.Name]
					if !ok {
						s := &statePlan{name: m.Name, sig: bytes.Clone(sig)}
						valuePlan(s, m)
						plan.add(s)
						continue
					}
					if !bytes.Equal(plan.states[i].sig, sig) {
						mismatch[m.Name] = true
					}
				}
			case *savepoint.ChangelogHandle:
				plan.dynamic = true
			default:
				// Native RocksDB handles are not compared (the walk
				// notes them).
			}
		}
	}
	if plan.dynamic {
		// Entries of a changelog handle come from the state-change log
		// as well: compare everything decoded.
		for _, s := range plan.states {
			s.canonical = true
		}
		plan.mode = keyed.ModeDecode
		return plan, nil
	}
	for _, s := range plan.states {
		if mismatch[s.name] {
			s.canonical = true
			plan.mode = keyed.ModeDecode
			d.notes = append(d.notes, fmt.Sprintf("operator %s state %q: the serializers differ between the snapshots, entries compared by their decoded values", p.id, s.name))
		}
	}
	return plan, nil
}

// valueDiff classifies two entries with equal identity of a bytes-mode
// state from their value bytes: same, a changed value, or the same value
// with another TTL timestamp. cmpDecoded is asked when the bytes cannot
// decide.
func valueDiff(s *statePlan, a, b []byte, cmpDecoded func() (int, error)) (int, error) {
	if bytes.Equal(a, b) {
		return same, nil
	}
	if !s.exactVal {
		return cmpDecoded()
	}
	switch s.ttl {
	case ttlValue:
		if len(a) >= 8 && len(b) >= 8 {
			if !bytes.Equal(a[8:], b[8:]) {
				return changed, nil
			}
			return ttlOnly, nil
		}
	case ttlMap:
		if len(a) >= 9 && len(b) >= 9 && a[0] == 0 && b[0] == 0 {
			if !bytes.Equal(a[9:], b[9:]) {
				return changed, nil
			}
			return ttlOnly, nil
		}
	}
	return changed, nil
}

// Outcomes of valueDiff.
const (
	same = iota
	changed
	ttlOnly
)

// side is what a pass knows about one snapshot's operator: its max
// parallelism and the keyed files entries came from, with their headers
// (to decode stored entries again).
type side struct {
	maxP    int
	files   []string
	headers []*keyed.Header
	plain   []*keyed.Header // uncompressed copies, for oneEntryBlock
	fileIdx map[string]int
	block   []byte
	br      keyed.BlockReader
}

func newSide(op *savepoint.OperatorState) *side {
	s := &side{fileIdx: map[string]int{}}
	if op != nil {
		s.maxP = int(op.MaxParallelism)
	}
	return s
}

func (s *side) fileIndex(name string, h *keyed.Header) int {
	if n := len(s.files); n > 0 && s.files[n-1] == name {
		return n - 1
	}
	i, ok := s.fileIdx[name]
	if !ok {
		i = len(s.files)
		s.files = append(s.files, name)
		s.headers = append(s.headers, h)
		s.plain = append(s.plain, nil)
		s.fileIdx[name] = i
	}
	return i
}

// decode decodes a bytes-mode record again (ModeDecode) and calls fn with
// the entry.
//
// oneEntryBlock: the record's composite key (its key-group prefix
// restored from the key group and the side's max parallelism) and value
// become a canonical key-group block of one entry, read by the keyed
// package's reader with the file's header (compression off):
//
//	u16 kvStateId | i32 key length | key, first byte | 0x80 (meta follows) |
//	i32 value length | value | u16 0xFFFF (end of key group)
//
// preceded by one pad byte (a block never starts at offset 0).
func (s *side) decode(state string, r *rec, fn func(*savepoint.KeyedEntry) error) error {
	f := int(r.file)
	if f < 0 || f >= len(s.headers) || s.headers[f] == nil {
		return fmt.Errorf("statediff: no header for entry of state %q", state)
	}
	h := s.headers[f]
	if s.plain[f] == nil {
		c := *h
		c.Compressed = false
		s.plain[f] = &c
	}
	ph := s.plain[f]
	id := -1
	for i, m := range ph.States {
		if m.Name == state {
			id = i
			break
		}
	}
	if id < 0 {
		return fmt.Errorf("statediff: %s: state %q not in its header", s.files[f], state)
	}
	prefix := keygroups.PrefixWidth(s.maxP)
	b := append(s.block[:0], 0)
	b = binary.BigEndian.AppendUint16(b, uint16(id))
	b = binary.BigEndian.AppendUint32(b, uint32(prefix+len(r.id)))
	at := len(b)
	if prefix == 2 {
		b = binary.BigEndian.AppendUint16(b, uint16(r.kg))
	} else {
		b = append(b, byte(r.kg))
	}
	b[at] |= 0x80
	b = append(b, r.id...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.val)))
	b = append(b, r.val...)
	b = binary.BigEndian.AppendUint16(b, 0xFFFF)
	s.block = b
	err := s.br.Read(bytes.NewReader(b), int64(len(b)), s.files[f], ph, int(r.kg), 1,
		keyed.ReadOptions{MaxParallelism: s.maxP, Mode: keyed.ModeDecode, End: int64(len(b))}, func(e *keyed.Entry) error {
			e.Offset, e.BlockPos = r.offset, r.bpos
			return fn(&savepoint.KeyedEntry{File: s.files[f], Header: h, Entry: e})
		})
	if err != nil {
		return fmt.Errorf("statediff: %s: key group %d offset %d: decode the entry again: %w", s.files[f], r.kg, r.offset, err)
	}
	return nil
}

// render returns the JSON of a record: kept from the walk for canonical
// states, decoded from the stored bytes for the others.
func (s *side) render(sp *statePlan, r *rec) (Entry, error) {
	if sp.canonical {
		return bytes.Clone(r.js), nil
	}
	var out Entry
	err := s.decode(sp.name, r, func(e *savepoint.KeyedEntry) error {
		var err error
		out, err = EntryJSON(e)
		return err
	})
	return out, err
}

// canonicalValue decodes a bytes-mode record and returns the canonical
// encodings of its value (TTL wrappers removed) and TTL timestamps.
func (s *side) canonicalValue(sp *statePlan, r *rec) (val, ttl []byte, err error) {
	err = s.decode(sp.name, r, func(e *savepoint.KeyedEntry) error {
		val, ttl = valueOf(e)
		return nil
	})
	return val, ttl, err
}

// groupKey is one (state, key group) of an operator.
type groupKey struct{ state, kg int32 }

// groupSum is the order-independent digest of one (state, key group): the
// entry count and two sums of 64-bit hashes (seeded per Diff) of each
// entry's identity and value bytes (TTL included), or of their canonical
// encodings for canonical states.
type groupSum struct {
	n   int64
	sum [2]uint64
}

// digestSide digests the keyed entries of op (walked as plan says).
func (d *differ) digestSide(sp *savepoint.Savepoint, op *savepoint.OperatorState, id string, plan *opPlan) (map[groupKey]*groupSum, error) {
	out := map[groupKey]*groupSum{}
	if op == nil {
		return out, nil
	}
	prefix := keygroups.PrefixWidth(int(op.MaxParallelism))
	var buf []byte
	var lastMeta *keyed.StateMeta
	var st int32
	var cur *groupSum
	curKey := groupKey{-1, -1}
	mode := plan.mode
	if mode == keyed.ModeSplit {
		mode = keyed.ModeRaw // only the bytes are hashed
	}
	so := savepoint.ScanOptions{Operator: id, State: d.o.State, KeyGroupTo: -1, Mode: mode, ReuseValues: true, SkipNative: true}
	err := sp.WalkKeyed(d.ctx, so, func(e *savepoint.KeyedEntry) error {
		if e.State != lastMeta {
			i, err := plan.state(e.State.Name)
			if err != nil {
				return err
			}
			st, lastMeta = i, e.State
		}
		buf = buf[:0]
		if plan.states[st].canonical {
			val, ttl := valueOf(e)
			buf = identity(buf, e)
			buf = appendBytes(buf, val)
			buf = append(buf, ttl...)
		} else {
			if len(e.KeyBytes) < prefix {
				return fmt.Errorf("statediff: %s: key group %d: key shorter than its key-group prefix", e.File, e.KeyGroup)
			}
			buf = appendBytes(buf, e.KeyBytes[prefix:])
			buf = append(buf, e.ValueBytes...)
		}
		k := groupKey{st, int32(e.KeyGroup)}
		if k != curKey {
			cur = out[k]
			if cur == nil {
				cur = &groupSum{}
				out[k] = cur
			}
			curKey = k
		}
		cur.n++
		cur.sum[0] += maphash.Bytes(d.seeds[0], buf)
		cur.sum[1] += maphash.Bytes(d.seeds[1], buf)
		return nil
	})
	return out, err
}
