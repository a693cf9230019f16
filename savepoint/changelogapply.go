package savepoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/javaser"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// This file rebuilds the keyed state Flink restores from a changelog handle
// (ChangelogBackendRestoreOperation): the materialized entries, then every
// logged change applied in log order (ChangelogBackendLogApplier and the
// per-kind StateChangeAppliers).
//
// A metadata change (key group -1) is
//
//	u8 op (METADATA), i32 meta-info version (6),
//	StateMetaInfoSnapshot (see keyed.ReadStateMetaInfo),
//	key/value states only: bool ttl [Java-serialized StateTtlConfig],
//	    bool hasDefault [default value, state serializer],
//	u16 stateId, u8 backend state type (0 KEY_VALUE, 3 PRIORITY_QUEUE)
//
// A data change is u8 op, u16 stateId, then for key/value states the scope
// (key with the job's key serializer, namespace) and the operation's data:
//
//	SET, SET_INTERNAL     the whole value (state serializer; a LIST
//	                      state's whole list, a MAP state's whole map)
//	ADD                   LIST: a whole list to append; MAP: a whole map
//	                      to put
//	ADD_ELEMENT           LIST: one element; MAP: user key, user value
//	ADD_OR_UPDATE_ELEMENT MAP: user key, user value
//	REMOVE_ELEMENT        MAP: user key
//	CLEAR                 nothing (the key's value in the namespace goes)
//	MERGE_NS              target namespace, i32 n, n source namespaces
//
// Priority queues (timers) log no scope: ADD_ELEMENT is i32 n, n elements;
// REMOVE_ELEMENT one element; REMOVE_FIRST_ELEMENT (poll) nothing.
//
// The key serializer is not part of the log (Flink takes it from the job).
// It is taken, in this order, from the header of a materialized handle of
// the same subtask, from a timer queue's TimerSerializer snapshot in the
// log (it nests the backend's key serializer), from ScanOptions.KeyType;
// without one, keys are reported as raw bytes where the namespace and the
// data have a fixed length (so the key's bytes can be cut out), and
// changes that cannot be split are reported raw and not applied.

// maxChangelogProblems bounds the problems listed per state.
const maxChangelogProblems = 4

// clValue is a value with the bytes it was decoded from.
type clValue struct {
	b []byte
	v serde.Value
}

// clEntry is the restored value of one (key group, key, namespace) of a
// key/value state, or one element of a priority queue.
type clEntry struct {
	kg      int
	key, ns clValue
	value   clValue   // VALUE, REDUCING, AGGREGATING; queue element
	list    []clValue // LIST
	mkeys   []string  // MAP: user key bytes, first-put order
	mvals   map[string][2]clValue
}

func (e *clEntry) empty(kind string) bool {
	switch kind {
	case "LIST":
		return len(e.list) == 0
	case "MAP":
		return len(e.mkeys) == 0
	}
	return e.value.b == nil && e.value.v == nil
}

// clState is one state of a changelog subtask.
type clState struct {
	name                                 string
	order                                int
	meta                                 *keyed.StateMeta // nil when its meta info could not be read
	kind                                 string
	pq                                   bool
	nsDec, valDec, elemDec, ukDec, uvDec serde.Decoder
	entries                              map[string]*clEntry
	raw                                  []*keyed.Entry
	problems                             []string
	nProblems                            int
	keyInferred                          bool
}

func (s *clState) problem(format string, args ...any) {
	s.nProblems++
	if len(s.problems) < maxChangelogProblems {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

func (s *clState) partial() string {
	p := strings.Join(s.problems, "; ")
	if n := s.nProblems - len(s.problems); n > 0 {
		p += fmt.Sprintf("; %d more problems", n)
	}
	return p
}

func (s *clState) setMeta(m *keyed.StateMeta) {
	s.meta = m
	s.pq = m.Type == keyed.PriorityQueue
	s.kind = m.Kind
	if s.pq {
		s.kind = "PRIORITY_QUEUE"
	}
	s.nsDec, s.valDec, s.elemDec, s.ukDec, s.uvDec = nil, nil, nil, nil, nil
	if m.Namespace != nil {
		s.nsDec = serde.NewDecoder(m.Namespace)
	}
	if m.Value != nil {
		s.valDec = serde.NewDecoder(m.Value)
	}
	if m.Element != nil {
		s.elemDec = serde.NewDecoder(m.Element)
	}
	if m.UserKey != nil && m.UserValue != nil {
		s.ukDec, s.uvDec = serde.NewDecoder(m.UserKey), serde.NewDecoder(m.UserValue)
	}
}

// changelogApplier rebuilds the state of one changelog handle.
type changelogApplier struct {
	keySnap   *serde.Snapshot
	keySource string
	keyDec    serde.Decoder
	// kgFrom..kgTo is the handle's key-group range: data changes of other
	// key groups are ignored, as Flink does.
	kgFrom, kgTo int
	byID         map[uint16]*clState
	byName       map[string]*clState
	states       []*clState
	// pos counts the changes seen (for problem messages).
	pos int
}

func newChangelogApplier(kgFrom, kgTo int) *changelogApplier {
	return &changelogApplier{kgFrom: kgFrom, kgTo: kgTo, byID: map[uint16]*clState{}, byName: map[string]*clState{}}
}

func (a *changelogApplier) setKey(s *serde.Snapshot, source string) {
	if a.keySnap != nil || s == nil {
		return
	}
	a.keySnap, a.keySource = s, source
	a.keyDec = serde.NewDecoder(s)
}

func (a *changelogApplier) state(name string) *clState {
	if s := a.byName[name]; s != nil {
		return s
	}
	s := &clState{name: name, order: len(a.states), entries: map[string]*clEntry{}}
	a.byName[name] = s
	a.states = append(a.states, s)
	return s
}

// changeMeta is a decoded metadata change.
type changeMeta struct {
	info *StateChangeInfo
	meta *keyed.StateMeta
}

// parseChangeMeta decodes metadata change c fully. On an error the frame
// (name, id, type) may still be set in the result.
func parseChangeMeta(c StateChange) (*changeMeta, error) {
	info, err := ParseStateChange(c)
	if err != nil {
		return nil, err
	}
	out := &changeMeta{info: info}
	if info.MetaVersion < 6 || info.MetaVersion > 7 {
		return out, &binfmt.OffsetError{Offset: 1, Err: fmt.Errorf("%w: state meta info version %d is not read (want 6 or 7)", serde.ErrUnsupported, info.MetaVersion)}
	}
	b := c.Data
	m, n, err := keyed.ReadStateMetaInfo(b[5:], 5)
	if err != nil {
		return out, err
	}
	pos := 5 + n
	end := len(b) - 3
	if pos > end {
		return out, &binfmt.OffsetError{Offset: int64(pos), Err: fmt.Errorf("%w: metadata change ends inside the state meta info", binfmt.ErrCorrupt)}
	}
	if m.Name != info.StateName {
		return out, &binfmt.OffsetError{Offset: 5, Err: fmt.Errorf("%w: state meta info names %q, the frame %q", binfmt.ErrCorrupt, m.Name, info.StateName)}
	}
	if int(m.Type) != int(info.StateType) {
		return out, &binfmt.OffsetError{Offset: int64(len(b) - 1), Err: fmt.Errorf("%w: backend state type %d, the meta info says %d", binfmt.ErrCorrupt, info.StateType, m.Type)}
	}
	out.meta = m
	if m.Type == keyed.KeyValue || m.Type == keyed.KeyValueV2 {
		d := binfmt.New(b[:end], 0)
		d.Pos = pos
		if d.Bool() {
			at := d.Offset()
			_, used, err := javaser.ParseOne(b[d.Pos:end], at)
			if err != nil {
				return out, fmt.Errorf("TTL config: %w", err)
			}
			d.Pos += used
		}
		if d.Bool() {
			if m.Value == nil {
				return out, &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: default value without a value serializer", binfmt.ErrCorrupt)}
			}
			serde.NewDecoder(m.Value).Skip(d)
		}
		if err := d.Err(); err != nil {
			return out, err
		}
		if d.Pos != end {
			return out, &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d unread bytes before the state id", binfmt.ErrCorrupt, end-d.Pos)}
		}
	} else if pos != end {
		return out, &binfmt.OffsetError{Offset: int64(pos), Err: fmt.Errorf("%w: %d unread bytes before the state id", binfmt.ErrCorrupt, end-pos)}
	}
	return out, nil
}

// preScan registers the states of a metadata change before the changes are
// applied, so that a timer queue's key serializer is known from the start.
func (a *changelogApplier) preScan(c StateChange) {
	if c.KeyGroup != MetaKeyGroup {
		return
	}
	cm, err := parseChangeMeta(c)
	if err != nil || cm.meta == nil || cm.meta.Type != keyed.PriorityQueue || cm.meta.Value == nil {
		return
	}
	if v := cm.meta.Value; v.Class == serde.ClassTimer && len(v.Nested) == 2 {
		a.setKey(v.Nested[0], "the key serializer of timer state "+cm.meta.Name)
	}
}

// apply applies one change in log order. Problems are recorded per state;
// the error is only for changes that name no state.
func (a *changelogApplier) apply(c StateChange) {
	a.pos++
	if c.KeyGroup == MetaKeyGroup {
		cm, err := parseChangeMeta(c)
		if cm == nil {
			a.unattributed(fmt.Sprintf("metadata change %d: %v", a.pos, err))
			return
		}
		s := a.state(cm.info.StateName)
		a.byID[cm.info.StateID] = s
		if err != nil {
			s.problem("metadata change %d: %v", a.pos, err)
			return
		}
		s.setMeta(cm.meta)
		return
	}
	if int(c.KeyGroup) < a.kgFrom || int(c.KeyGroup) > a.kgTo {
		return
	}
	info, err := ParseStateChange(c)
	if err != nil {
		a.unattributed(fmt.Sprintf("change %d in key group %d: %v", a.pos, c.KeyGroup, err))
		return
	}
	s := a.byID[info.StateID]
	if s == nil {
		a.unattributed(fmt.Sprintf("change %d in key group %d: state id %d has no metadata change before it", a.pos, c.KeyGroup, info.StateID))
		return
	}
	if s.meta == nil {
		s.problem("change %d in key group %d not applied: the state's meta info was not read", a.pos, c.KeyGroup)
		s.raw = append(s.raw, rawChange(c, info))
		return
	}
	if err := a.applyData(s, int(c.KeyGroup), info); err != nil {
		s.problem("%s change %d in key group %d not applied: %v", StateChangeOpName(info.Op), a.pos, c.KeyGroup, err)
		s.raw = append(s.raw, rawChange(c, info))
	}
}

func rawChange(c StateChange, info *StateChangeInfo) *keyed.Entry {
	return &keyed.Entry{KeyGroup: int(c.KeyGroup), KeyBytes: bytes.Clone(info.Payload)}
}

// unattributed records a problem of no known state under a pseudo state.
func (a *changelogApplier) unattributed(msg string) {
	s := a.state("")
	s.problem("%s", msg)
}

// wireLen is the number of bytes dec writes per value, -1 when variable or
// unknown.
func wireLen(dec serde.Decoder) int {
	if dec == nil || !dec.Supported() {
		return -1
	}
	if s := dec.Snapshot(); s != nil && s.Class == serde.ClassVoid {
		return 1
	}
	return dec.Len()
}

// dataLen is the fixed length of op's data for state s, -1 when variable.
func (s *clState) dataLen(op byte) int {
	sum := func(ds ...serde.Decoder) int {
		n := 0
		for _, d := range ds {
			w := wireLen(d)
			if w < 0 {
				return -1
			}
			n += w
		}
		return n
	}
	switch StateChangeOpName(op) {
	case "CLEAR":
		return 0
	case "SET", "SET_INTERNAL":
		if s.kind == "LIST" || s.kind == "MAP" {
			return -1
		}
		return sum(s.valDec)
	case "ADD_ELEMENT":
		if s.kind == "LIST" {
			return sum(s.elemDec)
		}
		return sum(s.ukDec, s.uvDec)
	case "ADD_OR_UPDATE_ELEMENT":
		return sum(s.ukDec, s.uvDec)
	case "REMOVE_ELEMENT":
		return sum(s.ukDec)
	}
	return -1
}

// decode reads one value with dec from d, keeping its bytes.
func decode(d *binfmt.Decbuf, dec serde.Decoder, what string) (clValue, error) {
	if dec == nil {
		return clValue{}, fmt.Errorf("no %s serializer", what)
	}
	start := d.Pos
	v := dec.Decode(d)
	if err := d.Err(); err != nil {
		return clValue{}, fmt.Errorf("%s: %w", what, err)
	}
	return clValue{b: bytes.Clone(d.B[start:d.Pos]), v: v}, nil
}

func (a *changelogApplier) applyData(s *clState, kg int, info *StateChangeInfo) error {
	op := StateChangeOpName(info.Op)
	d := binfmt.New(info.Payload, 3)
	if s.pq {
		return s.applyQueue(d, kg, op)
	}
	var key clValue
	if a.keyDec != nil {
		var err error
		if key, err = decode(d, a.keyDec, "key"); err != nil {
			return err
		}
	} else {
		nsW, dl := wireLen(s.nsDec), s.dataLen(info.Op)
		if nsW < 0 || dl < 0 {
			return errors.New("the key serializer is unknown (see --key-type) and the namespace or data has no fixed length to cut the key out by")
		}
		kl := d.Len() - nsW - dl
		if kl < 0 {
			return fmt.Errorf("%d bytes, fewer than the namespace and data need", d.Len())
		}
		key = clValue{b: bytes.Clone(d.Bytes(kl))}
		s.keyInferred = true
	}
	ns, err := decode(d, s.nsDec, "namespace")
	if err != nil {
		return err
	}
	id := fmt.Sprintf("%d\x00%x\x00%x", kg, key.b, ns.b)
	e := s.entries[id]
	get := func() *clEntry {
		if e == nil {
			e = &clEntry{kg: kg, key: key, ns: ns}
			s.entries[id] = e
		}
		return e
	}
	done := func() error {
		if d.Len() != 0 {
			return &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after the change's data", binfmt.ErrCorrupt, d.Len())}
		}
		if e != nil && e.empty(s.kind) {
			delete(s.entries, id)
		}
		return nil
	}
	notFor := func() error { return fmt.Errorf("operation not applicable to a %s state", s.kind) }
	switch op {
	case "CLEAR":
		if err := done(); err != nil {
			return err
		}
		delete(s.entries, id)
		return nil
	case "SET", "SET_INTERNAL", "ADD":
		switch s.kind {
		case "LIST":
			l, err := s.readList(d)
			if err != nil {
				return err
			}
			e := get()
			if op != "ADD" {
				e.list = nil
			}
			e.list = append(e.list, l...)
		case "MAP":
			m, err := s.readMap(d)
			if err != nil {
				return err
			}
			e := get()
			if op != "ADD" {
				e.mkeys, e.mvals = nil, nil
			}
			for _, kv := range m {
				mapPut(e, kv[0], kv[1])
			}
		default:
			if op == "ADD" {
				return notFor()
			}
			v, err := decode(d, s.valDec, "value")
			if err != nil {
				return err
			}
			get().value = v
		}
		return done()
	case "ADD_ELEMENT", "ADD_OR_UPDATE_ELEMENT":
		switch {
		case s.kind == "LIST" && op == "ADD_ELEMENT":
			v, err := decode(d, s.elemDec, "list element")
			if err != nil {
				return err
			}
			e := get()
			e.list = append(e.list, v)
		case s.kind == "MAP":
			uk, err := decode(d, s.ukDec, "user key")
			if err != nil {
				return err
			}
			uv, err := decode(d, s.uvDec, "user value")
			if err != nil {
				return err
			}
			mapPut(get(), uk, uv)
		default:
			return notFor()
		}
		return done()
	case "REMOVE_ELEMENT":
		if s.kind != "MAP" {
			return notFor()
		}
		uk, err := decode(d, s.ukDec, "user key")
		if err != nil {
			return err
		}
		if e != nil {
			k := string(uk.b)
			if _, ok := e.mvals[k]; ok {
				delete(e.mvals, k)
				for i, x := range e.mkeys {
					if x == k {
						e.mkeys = append(e.mkeys[:i], e.mkeys[i+1:]...)
						break
					}
				}
			}
		}
		return done()
	case "MERGE_NS":
		return a.mergeNamespaces(s, d, kg, key)
	}
	return notFor()
}

// readList reads a ListSerializer's whole list: i32 n, n elements.
func (s *clState) readList(d *binfmt.Decbuf) ([]clValue, error) {
	n := d.Count("list element", d.Len(), max(wireLen(s.elemDec), 1))
	if err := d.Err(); err != nil {
		return nil, err
	}
	out := make([]clValue, 0, n)
	for i := 0; i < n; i++ {
		v, err := decode(d, s.elemDec, "list element")
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// readMap reads a MapSerializer's whole map: i32 n, n × (user key, bool
// null, [user value]).
func (s *clState) readMap(d *binfmt.Decbuf) ([][2]clValue, error) {
	n := d.Count("map entry", d.Len(), max(wireLen(s.ukDec), 0)+1)
	if err := d.Err(); err != nil {
		return nil, err
	}
	out := make([][2]clValue, 0, n)
	for i := 0; i < n; i++ {
		uk, err := decode(d, s.ukDec, "user key")
		if err != nil {
			return nil, err
		}
		var uv clValue
		if null := d.Bool(); !null {
			if uv, err = decode(d, s.uvDec, "user value"); err != nil {
				return nil, err
			}
		}
		if err := d.Err(); err != nil {
			return nil, err
		}
		out = append(out, [2]clValue{uk, uv})
	}
	return out, nil
}

func mapPut(e *clEntry, uk, uv clValue) {
	if e.mvals == nil {
		e.mvals = map[string][2]clValue{}
	}
	k := string(uk.b)
	if _, ok := e.mvals[k]; !ok {
		e.mkeys = append(e.mkeys, k)
	}
	e.mvals[k] = [2]clValue{uk, uv}
}

// mergeNamespaces applies MERGE_NS: the values of the source namespaces
// move into the target (lists appended in order, as Flink's heap merge
// does). Reducing and aggregating states need the job's function when
// more than one of the namespaces holds a value.
func (a *changelogApplier) mergeNamespaces(s *clState, d *binfmt.Decbuf, kg int, key clValue) error {
	target, err := decode(d, s.nsDec, "target namespace")
	if err != nil {
		return err
	}
	minNS := max(wireLen(s.nsDec), 1)
	n := d.Count("source namespace", d.Len(), minNS)
	if err := d.Err(); err != nil {
		return err
	}
	srcs := make([]clValue, 0, n)
	for i := 0; i < n; i++ {
		v, err := decode(d, s.nsDec, "source namespace")
		if err != nil {
			return err
		}
		srcs = append(srcs, v)
	}
	if d.Len() != 0 {
		return &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after the change's data", binfmt.ErrCorrupt, d.Len())}
	}
	idOf := func(ns []byte) string { return fmt.Sprintf("%d\x00%x\x00%x", kg, key.b, ns) }
	tid := idOf(target.b)
	switch s.kind {
	case "LIST":
		t := s.entries[tid]
		for _, src := range srcs {
			sid := idOf(src.b)
			if sid == tid {
				continue
			}
			e := s.entries[sid]
			if e == nil {
				continue
			}
			delete(s.entries, sid)
			if t == nil {
				t = &clEntry{kg: kg, key: key, ns: target}
				s.entries[tid] = t
			}
			t.list = append(t.list, e.list...)
		}
		return nil
	case "REDUCING", "AGGREGATING":
		t := s.entries[tid]
		var moved *clEntry
		for _, src := range srcs {
			sid := idOf(src.b)
			if sid == tid || s.entries[sid] == nil {
				continue
			}
			if t != nil || moved != nil {
				fnName := "reduce"
				if s.kind == "AGGREGATING" {
					fnName = "aggregate"
				}
				return fmt.Errorf("merging the values of several namespaces needs the job's %s function", fnName)
			}
			moved = s.entries[sid]
		}
		if moved == nil {
			return nil
		}
		for _, src := range srcs {
			delete(s.entries, idOf(src.b))
		}
		moved.ns = target
		s.entries[tid] = moved
		return nil
	}
	return fmt.Errorf("operation not applicable to a %s state", s.kind)
}

// applyQueue applies a change of a priority queue (timers). Elements are
// keyed by their bytes; the key group is the change's.
func (s *clState) applyQueue(d *binfmt.Decbuf, kg int, op string) error {
	switch op {
	case "ADD_ELEMENT":
		n := d.Count("queue element", d.Len(), max(wireLen(s.valDec), 1))
		if err := d.Err(); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			v, err := decode(d, s.valDec, "queue element")
			if err != nil {
				return err
			}
			// A timer's bytes include its key, so they name one key
			// group: elements are keyed by their bytes alone.
			id := string(v.b)
			if s.entries[id] == nil {
				s.entries[id] = &clEntry{kg: kg, key: clValue{b: v.b}, value: v}
			}
		}
	case "REMOVE_ELEMENT":
		v, err := decode(d, s.valDec, "queue element")
		if err != nil {
			return err
		}
		delete(s.entries, string(v.b))
	case "REMOVE_FIRST_ELEMENT":
		return errors.New("polling the queue's head needs the queue's order across key groups, which is not modelled")
	default:
		return fmt.Errorf("operation not applicable to a priority queue")
	}
	if d.Len() != 0 {
		return &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after the change's data", binfmt.ErrCorrupt, d.Len())}
	}
	return nil
}

// addMaterialized adds one decoded materialized entry (ModeDecode; its
// slices are copied).
func (a *changelogApplier) addMaterialized(e *keyed.Entry) {
	s := a.state(e.State.Name)
	if s.meta == nil {
		s.setMeta(e.State)
	}
	if e.State.Partial != "" {
		s.problem("materialized entries not decoded: %s", e.State.Partial)
		c := *e
		c.KeyBytes, c.ValueBytes = bytes.Clone(e.KeyBytes), bytes.Clone(e.ValueBytes)
		s.raw = append(s.raw, &c)
		return
	}
	val := e.Value
	if e.TTLTimestamp != nil {
		val = &serde.TTLValue{LastAccess: *e.TTLTimestamp, Value: e.Value}
	}
	if s.pq {
		b := bytes.Clone(e.KeyPart)
		s.entries[string(b)] = &clEntry{kg: e.KeyGroup, key: clValue{b: b}, value: clValue{b: b, v: val}}
		return
	}
	key := clValue{b: bytes.Clone(e.KeyPart), v: e.Key}
	ns := clValue{b: bytes.Clone(e.NamespaceBytes), v: e.Namespace}
	id := fmt.Sprintf("%d\x00%x\x00%x", e.KeyGroup, key.b, ns.b)
	ce := s.entries[id]
	if ce == nil {
		ce = &clEntry{kg: e.KeyGroup, key: key, ns: ns}
		s.entries[id] = ce
	}
	vb := bytes.Clone(e.ValueBytes)
	switch s.kind {
	case "LIST":
		if l, ok := e.Value.(serde.List); ok {
			// The elements' own bytes are not kept apart: the first
			// carries the whole value's (for sizes).
			for i, v := range l {
				x := clValue{v: v, b: []byte{}}
				if i == 0 {
					x.b = vb
				}
				ce.list = append(ce.list, x)
			}
		}
	case "MAP":
		mapPut(ce, clValue{b: bytes.Clone(e.UserKeyBytes), v: e.UserKey}, clValue{b: vb, v: val})
	default:
		ce.value = clValue{b: vb, v: val}
	}
}

// entries returns the restored entries: per state (in registration
// order), sorted by key group, key and namespace bytes; then the raw
// changes.
func (a *changelogApplier) emit(fn func(*keyed.Entry) error) error {
	for _, s := range a.states {
		if s.name == "" || (s.meta == nil && len(s.raw) == 0) {
			continue
		}
		meta := s.decodedMeta()
		if s.keyInferred && !s.pq {
			meta = s.partialMeta("the key serializer is not recorded in the state-change log (pass the key type); keys are raw bytes")
		}
		ids := make([]string, 0, len(s.entries))
		for id := range s.entries {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool {
			x, y := s.entries[ids[i]], s.entries[ids[j]]
			if x.kg != y.kg {
				return x.kg < y.kg
			}
			if c := bytes.Compare(x.key.b, y.key.b); c != 0 {
				return c < 0
			}
			return bytes.Compare(x.ns.b, y.ns.b) < 0
		})
		for _, id := range ids {
			ce := s.entries[id]
			if err := emitEntry(s, meta, ce, fn); err != nil {
				return err
			}
		}
		if len(s.raw) > 0 {
			pm := s.partialMeta(s.partial())
			for _, r := range s.raw {
				r.State = pm
				if err := fn(r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *clState) decodedMeta() *keyed.StateMeta {
	if s.meta == nil {
		return &keyed.StateMeta{Name: s.name, Kind: s.kind}
	}
	m := *s.meta
	m.Partial = ""
	return &m
}

func (s *clState) partialMeta(why string) *keyed.StateMeta {
	m := s.decodedMeta()
	m.Partial = why
	return m
}

func unwrapTTL(v serde.Value) (serde.Value, *int64) {
	if t, ok := v.(*serde.TTLValue); ok {
		ts := t.LastAccess
		return t.Value, &ts
	}
	return v, nil
}

func emitEntry(s *clState, meta *keyed.StateMeta, ce *clEntry, fn func(*keyed.Entry) error) error {
	e := &keyed.Entry{KeyGroup: ce.kg, State: meta, KeyPart: ce.key.b, NamespaceBytes: ce.ns.b, Key: ce.key.v, Namespace: ce.ns.v}
	if s.pq {
		e.KeyPart = ce.value.b
		e.KeyBytes = ce.value.b
		e.Value = ce.value.v
		if t, ok := ce.value.v.(*serde.Timer); ok {
			e.Key, e.Namespace = t.Key, t.Namespace
		}
		return fn(e)
	}
	e.KeyBytes = append(append([]byte{}, ce.key.b...), ce.ns.b...)
	switch s.kind {
	case "LIST":
		l := make(serde.List, len(ce.list))
		var vb []byte
		for i, x := range ce.list {
			l[i] = x.v
			vb = append(vb, x.b...)
		}
		e.Value, e.ValueBytes = l, vb
		return fn(e)
	case "MAP":
		keys := append([]string(nil), ce.mkeys...)
		sort.Strings(keys)
		for _, k := range keys {
			kv := ce.mvals[k]
			me := *e
			me.UserKeyBytes, me.UserKey = kv[0].b, kv[0].v
			me.KeyBytes = append(append([]byte{}, e.KeyBytes...), kv[0].b...)
			me.ValueBytes = kv[1].b
			me.Value, me.TTLTimestamp = unwrapTTL(kv[1].v)
			if err := fn(&me); err != nil {
				return err
			}
		}
		return nil
	}
	e.ValueBytes = ce.value.b
	e.Value, e.TTLTimestamp = unwrapTTL(ce.value.v)
	return fn(e)
}

// headerStates is the state list reported to header observers: every
// state with its types, marked partial with the reasons found.
func (a *changelogApplier) headerStates() []*keyed.StateMeta {
	var out []*keyed.StateMeta
	for _, s := range a.states {
		if s.name == "" {
			continue
		}
		m := s.decodedMeta()
		why := s.partial()
		if s.keyInferred && !s.pq {
			k := "the key serializer is not recorded in the state-change log (pass the key type); keys are raw bytes"
			if why == "" {
				why = k
			} else {
				why = k + "; " + why
			}
		}
		m.Partial = why
		out = append(out, m)
	}
	return out
}

// notes returns the problems of changes that named no known state.
func (a *changelogApplier) notes() string {
	if s := a.byName[""]; s != nil {
		return s.partial()
	}
	return ""
}

// walkChangelog walks the state Flink restores for subtask st, whose
// managed keyed handle is changelog handle h: the materialized handles'
// entries with every logged change applied (see the top of this file).
// Entries are emitted after the whole log was applied; o's state and
// key-group selections apply to them.
func (sp *Savepoint) walkChangelog(ctx context.Context, o ScanOptions, op *OperatorState, st *SubtaskState, h *ChangelogHandle, br *keyed.BlockReader, mu *sync.Mutex,
	onHeader func(op *OperatorState, subtask int, f *keyedFile, layout string), fn func(*KeyedEntry) error) error {
	lock := func() {
		if mu != nil {
			mu.Lock()
		}
	}
	unlock := func() {
		if mu != nil {
			mu.Unlock()
		}
	}
	from, to := h.KeyGroupRange()
	a := newChangelogApplier(from, to)
	// Materialized part: decoded like a plain handle, all states and key
	// groups (changes may touch any of them).
	mo := ScanOptions{Mode: keyed.ModeDecode, KeyGroupTo: -1, ReadAhead: o.ReadAhead, SkipNative: o.SkipNative, headersOnly: o.headersOnly}
	for _, m := range MaterializedKeyed(h) {
		mst := &SubtaskState{Index: st.Index, ManagedKeyed: m}
		var native bool
		err := sp.walkSubtask(ctx, mo, op, mst, br, nil, func(op *OperatorState, subtask int, f *keyedFile, layout string) {
			if f == nil {
				native = true
				return
			}
			a.setKey(f.header.KeySerializer, "the materialized state's header")
			if onHeader != nil {
				lock()
				onHeader(op, subtask, f, layout)
				unlock()
			}
		}, func(e *KeyedEntry) error {
			a.addMaterialized(e.Entry)
			return nil
		})
		if err != nil {
			return err
		}
		if native {
			// Changes cannot be applied on top of state that was not read.
			return nil
		}
	}
	if err := sp.WalkStateChanges(ctx, h, false, func(c StateChange) error { a.preScan(c); return nil }); err != nil {
		return err
	}
	a.setKey(o.KeyType, "the given key type")
	if err := sp.WalkStateChanges(ctx, h, false, func(c StateChange) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		a.apply(c)
		return nil
	}); err != nil {
		return err
	}
	if onHeader != nil {
		f := &keyedFile{header: &keyed.Header{KeySerializer: a.keySnap, States: a.headerStates()}, name: sp.Name()}
		lock()
		onHeader(op, st.Index, f, LayoutChangelog)
		unlock()
	}
	if o.headersOnly {
		return nil
	}
	ke := &KeyedEntry{Operator: op, Subtask: st.Index, File: sp.Name(), Header: &keyed.Header{KeySerializer: a.keySnap}}
	return a.emit(func(e *keyed.Entry) error {
		if (o.State != "" && e.State.Name != o.State) || !o.keyGroupSelected(e.KeyGroup) {
			return nil
		}
		ke.Entry = e
		lock()
		defer unlock()
		return fn(ke)
	})
}
