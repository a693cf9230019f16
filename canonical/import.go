package canonical

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// ErrUnsupported marks savepoint state that Import cannot map to the
// engine (unknown serializer, unsupported state kind).
var ErrUnsupported = errclass.New(errclass.ErrUnsupported, "canonical: unsupported state")

// NeverExpire is the engine TTL given to imported TTL states whose
// time-to-live is not configured: Flink does not record the TTL in a
// savepoint, so entries keep their last-access timestamps but never expire
// until the operator that owns the state declares its real TTL.
const NeverExpire = time.Duration(math.MaxInt64)

// BackendFactory opens an empty backend for one target subtask.
type BackendFactory func(op savepoint.OperatorID, subtask int, layout engine.Layout, states []engine.StateDesc) (engine.Backend, error)

// ImportOptions tunes Import.
type ImportOptions struct {
	// Parallelism of every restored operator (0 = each operator's
	// parallelism in the savepoint). At most the operator's max parallelism.
	Parallelism int
	// TTL gives the engine TTL of TTL states by state name; states not
	// listed get DefaultTTL, or NeverExpire when that is zero.
	TTL        map[string]time.Duration
	DefaultTTL time.Duration
	// Multisets names the MAP<row, Integer> states imported as engine
	// multisets (join records). Nil means "left-records" and
	// "right-records"; an empty non-nil map imports every map as a map.
	Multisets map[string]bool
	// JoinRecords, when recordstore.LayoutRecord, imports the two MAP
	// states of a regular join (the Multisets names; MAP<row, Integer>,
	// or MAP<row, Tuple2<Integer, Integer>> for an outer side, whose
	// association counts are kept) into one recordstore join state
	// (record layout) instead of two plain states.
	JoinRecords recordstore.Layout
	// Workers restores up to this many target subtasks of an operator at
	// once (default 1). Each worker reads the streams through its own
	// range readers; factory calls stay serialized.
	Workers int
	// BatchSize is the number of entries per write batch (default 4096).
	BatchSize int
	// ReadAhead is the range-read buffer per stream (0 = default).
	ReadAhead int
	// SkipUnsupported leaves out, instead of failing the import, state
	// that cannot be restored: a partial state (one of its serializer
	// snapshots could not be read; keyed.StateMeta.Partial) without a
	// mapping, or an operator whose key serializer could not be read.
	// ImportResult.SkippedStates lists them.
	SkipUnsupported bool
	// KeyGroups, when set, restores only the key groups from..to
	// (inclusive) it gives for an operator's max parallelism; the others
	// stay empty and their blocks are not read.
	KeyGroups func(maxParallelism int) (from, to int)
}

// SkippedState is keyed state that Import did not restore, with the
// reason: one state, or (State "") all keyed state of the operator.
type SkippedState struct {
	Operator savepoint.OperatorID
	State    string
	Reason   string
}

// ImportedSubtask is one restored subtask.
type ImportedSubtask struct {
	Index   int
	Backend engine.Backend
	Schema  *engine.Schema
	Entries int64
}

// ImportedOperator is one restored operator.
type ImportedOperator struct {
	ID savepoint.OperatorID
	// Name and UID as metadata V5+ records them ("" = absent or older
	// version); pass them to Operator to keep them in a V5+ export.
	Name, UID                   string
	Parallelism, MaxParallelism int
	Subtasks                    []ImportedSubtask
}

// ImportResult lists the restored operators and what was left out.
type ImportResult struct {
	Operators []ImportedOperator
	// Skipped describes state that was not imported (operator state,
	// operators without keyed state, state changes of a changelog handle).
	Skipped []string
	// SkippedStates lists the keyed state that exists in the savepoint but
	// was not restored: state only in a changelog handle's state-change
	// log (nothing materialized), and, with SkipUnsupported, states that
	// cannot be restored. Skipped has a line for each too.
	SkippedStates []SkippedState
	Stats         Stats
}

// Close closes every backend of the result.
func (r *ImportResult) Close() error {
	var errs []error
	for _, op := range r.Operators {
		for _, st := range op.Subtasks {
			if st.Backend != nil {
				errs = append(errs, st.Backend.Close())
			}
		}
	}
	return errors.Join(errs...)
}

// importFile is one keyed stream of the savepoint with its header.
type importFile struct {
	handle *savepoint.KeyGroupsHandle
	obj    *savepoint.Object
	header *keyed.Header
	name   string
	// heap: the stream holds the heap backend's key-group layout, which
	// the reader hands out as canonical entries (keyed.ReadOptions.Heap).
	heap bool
	// stateMap maps the file's state ids to schema states (and join side).
	stateMap []stateRef
}

type stateRef struct {
	idx  int // -1: a skipped state (entries dropped)
	side uint8
}

type importPlan struct {
	op     *savepoint.OperatorState
	files  []*importFile
	schema *engine.Schema
	codecs []*stateCodec
	joins  []*joinCodec
}

// Import restores the keyed state of sp into new backends opened by
// factory. See the package documentation for what is supported; every
// stream header is read, every state and the target parallelism checked
// before the first backend is opened. On error, backends opened so far are
// closed (their on-disk files, if any, belong to the factory's caller).
func Import(ctx context.Context, sp *savepoint.Savepoint, factory BackendFactory, o ImportOptions) (*ImportResult, error) {
	if o.BatchSize <= 0 {
		o.BatchSize = 4096
	}
	if o.Multisets == nil {
		o.Multisets = map[string]bool{"left-records": true, "right-records": true}
	}
	res := &ImportResult{}
	var plans []*importPlan
	for _, op := range sp.Meta.Operators {
		p, err := planOperator(ctx, sp, op, o, res)
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue
		}
		par := o.Parallelism
		if par == 0 {
			par = int(p.op.Parallelism)
		}
		if err := keygroups.CheckParallelism(int(p.op.MaxParallelism), par); err != nil {
			return nil, fmt.Errorf("canonical: operator %s: %w", p.op.ID, err)
		}
		plans = append(plans, p)
		res.Stats.Files += len(p.files)
		for _, f := range p.files {
			res.Stats.StreamBytes += f.obj.Size()
		}
	}
	var opened []engine.Backend
	ok := false
	defer func() {
		if !ok {
			for _, be := range opened {
				be.Close()
			}
			res.Operators = nil
		}
	}()
	for _, p := range plans {
		par := o.Parallelism
		if par == 0 {
			par = int(p.op.Parallelism)
		}
		maxP := int(p.op.MaxParallelism)
		iop := ImportedOperator{ID: p.op.ID, Name: p.op.Name, UID: p.op.UID, Parallelism: par, MaxParallelism: maxP, Subtasks: make([]ImportedSubtask, par)}
		workers := max(1, min(o.Workers, par))
		var (
			mu       sync.Mutex // factory calls, opened, res.Stats, firstErr
			firstErr error
			next     int
			wg       sync.WaitGroup
		)
		fail := func(err error) {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
		for w := 0; w < workers; w++ {
			wp := p
			if w > 0 {
				var err error
				if wp, err = p.clone(ctx, sp, o); err != nil {
					return nil, err
				}
			}
			wg.Add(1)
			go func(wp *importPlan) {
				defer wg.Done()
				for {
					mu.Lock()
					j := next
					next++
					stop := firstErr != nil
					mu.Unlock()
					if j >= par || stop {
						return
					}
					r := keygroups.RangeForSubtask(maxP, par, j)
					layout := engine.Layout{MaxParallelism: maxP, Range: r}
					mu.Lock()
					be, err := factory(p.op.ID, j, layout, p.schema.Descs())
					if err == nil {
						opened = append(opened, be)
					}
					mu.Unlock()
					if err != nil {
						fail(fmt.Errorf("canonical: operator %s subtask %d: open backend: %w", p.op.ID, j, err))
						return
					}
					n, err := wp.restore(ctx, be, r, o)
					if err != nil {
						fail(fmt.Errorf("canonical: operator %s subtask %d: %w", p.op.ID, j, err))
						return
					}
					iop.Subtasks[j] = ImportedSubtask{Index: j, Backend: be, Schema: p.schema, Entries: n}
					mu.Lock()
					res.Stats.Entries += n
					mu.Unlock()
				}
			}(wp)
		}
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr
		}
		res.Operators = append(res.Operators, iop)
	}
	ok = true
	return res, nil
}

// planOperator reads the headers of an operator's keyed streams and builds
// its schema. It returns nil for operators without keyed state.
func planOperator(ctx context.Context, sp *savepoint.Savepoint, op *savepoint.OperatorState, o ImportOptions, res *ImportResult) (*importPlan, error) {
	p := &importPlan{op: op}
	changelogOnly := false
	for _, st := range op.Subtasks {
		if st.ManagedOperator != nil && len(st.ManagedOperator.States) > 0 {
			names := ""
			for i, s := range st.ManagedOperator.States {
				if i > 0 {
					names += ", "
				}
				names += s.Name
			}
			res.Skipped = append(res.Skipped, fmt.Sprintf("operator %s subtask %d: operator state (%s) is not imported", op.ID, st.Index, names))
		}
		if st.RawKeyed != nil || st.RawOperator != nil {
			res.Skipped = append(res.Skipped, fmt.Sprintf("operator %s subtask %d: raw state is not imported", op.ID, st.Index))
		}
		if st.ManagedKeyed == nil {
			continue
		}
		mat := savepoint.MaterializedKeyed(st.ManagedKeyed)
		if ch, ok := st.ManagedKeyed.(*savepoint.ChangelogHandle); ok {
			switch {
			case len(mat) == 0:
				changelogOnly = true
				res.Skipped = append(res.Skipped, fmt.Sprintf("operator %s subtask %d: %s", op.ID, st.Index, NoteChangelogOnly))
			case changelogHasChanges(ch):
				res.Skipped = append(res.Skipped, fmt.Sprintf("operator %s subtask %d: the state changes logged after materialization %d are not applied (the materialized state is restored)", op.ID, st.Index, ch.MaterializationID))
			}
		}
		for _, kh := range mat {
			f, err := openImportFile(ctx, sp, op, st, kh, o)
			if err != nil {
				return nil, err
			}
			p.files = append(p.files, f)
		}
	}
	if len(p.files) == 0 {
		if changelogOnly {
			res.SkippedStates = append(res.SkippedStates, SkippedState{Operator: op.ID, Reason: NoteChangelogOnly})
		} else if len(op.Subtasks) > 0 {
			res.Skipped = append(res.Skipped, fmt.Sprintf("operator %s: no keyed state", op.ID))
		}
		return nil, nil
	}
	sort.Slice(p.files, func(i, j int) bool { return p.files[i].handle.StartKeyGroup < p.files[j].handle.StartKeyGroup })
	s := &engine.Schema{}
	byName := map[string]int{}
	outer := map[string]bool{} // outer join sides (multisets with association counts)
	var sigs []string
	skipped := map[string]bool{} // partial states left out (SkipUnsupported)
	for fi, f := range p.files {
		where := fmt.Sprintf("%s: operator %s", f.name, op.ID)
		kt, err := typeOf(f.header.KeySerializer, "key")
		if err != nil {
			if o.SkipUnsupported && f.header.KeyPartial != "" {
				why := fmt.Sprintf("the key serializer could not be read: %s", f.header.KeyPartial)
				res.Skipped = append(res.Skipped, fmt.Sprintf("operator %s: keyed state not restored: %s", op.ID, why))
				res.SkippedStates = append(res.SkippedStates, SkippedState{Operator: op.ID, Reason: why})
				return nil, nil
			}
			return nil, fmt.Errorf("%w: %s: key serializer: %v", ErrUnsupported, where, err)
		}
		if fi == 0 {
			s.Key = kt
		} else if kt.Kind != s.Key.Kind || len(kt.Fields) != len(s.Key.Fields) {
			return nil, fmt.Errorf("%w: %s: key serializer %s differs from the other streams' (%s)", ErrUnsupported, where, f.header.KeySerializer.Class, s.Key.Kind)
		}
		f.stateMap = make([]stateRef, len(f.header.States))
		for i, m := range f.header.States {
			if skipped[m.Name] {
				f.stateMap[i] = stateRef{idx: -1}
				continue
			}
			if idx, ok := byName[m.Name]; ok {
				if sigs[idx] != metaSig(m) {
					return nil, fmt.Errorf("%w: %s: state %q has other serializers than in the operator's other streams", ErrUnsupported, where, m.Name)
				}
				f.stateMap[i] = stateRef{idx: idx}
				continue
			}
			ss, err := stateOf(m, o)
			if err != nil {
				if o.SkipUnsupported && m.Partial != "" {
					why := fmt.Sprintf("%v (%s)", err, m.Partial)
					res.Skipped = append(res.Skipped, fmt.Sprintf("operator %s: state %q not restored: %s", op.ID, m.Name, why))
					res.SkippedStates = append(res.SkippedStates, SkippedState{Operator: op.ID, State: m.Name, Reason: why})
					skipped[m.Name] = true
					f.stateMap[i] = stateRef{idx: -1}
					continue
				}
				return nil, fmt.Errorf("%w: %s state %q: %v", ErrUnsupported, where, m.Name, err)
			}
			if o.JoinRecords != "" && outerJoinSide(m, o) {
				outer[m.Name] = true
			}
			byName[m.Name] = len(s.States)
			sigs = append(sigs, metaSig(m))
			f.stateMap[i] = stateRef{idx: len(s.States)}
			s.States = append(s.States, ss)
		}
	}
	if o.JoinRecords != "" {
		if err := foldJoin(s, p.files, o, outer); err != nil {
			return nil, fmt.Errorf("%w: operator %s: %v", ErrUnsupported, op.ID, err)
		}
	}
	for _, ss := range s.States {
		if ss.Kind == engine.KindMultiset && outer[ss.Name] {
			return nil, fmt.Errorf("%w: operator %s: outer join side %q (MAP<row, Tuple2<Integer, Integer>>) keeps association counts, which engine multisets cannot hold: join records need both sides", ErrUnsupported, op.ID, ss.Name)
		}
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w: operator %s: %v", ErrUnsupported, op.ID, err)
	}
	p.codecs = make([]*stateCodec, len(s.States))
	p.joins = make([]*joinCodec, len(s.States))
	for i, ss := range s.States {
		var err error
		if ss.Join != nil {
			p.joins[i], err = newJoinCodec(s.Key, ss)
		} else {
			p.codecs[i], err = newStateCodec(s.Key, ss)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: operator %s: %v", ErrUnsupported, op.ID, err)
		}
	}
	p.schema = s
	return p, nil
}

// NoteChangelogOnly says why the keyed state of a changelog handle without
// materialized state is not restored: Import does not apply state-change
// logs.
const NoteChangelogOnly = "state only in the change log (not applied)"

// changelogHasChanges reports whether h logs state changes (inline or in
// change-log files).
func changelogHasChanges(h *savepoint.ChangelogHandle) bool {
	for _, l := range h.NonMaterialized {
		if l != nil && (len(l.Changes) > 0 || len(l.Streams) > 0) {
			return true
		}
	}
	return false
}

// openImportFile opens the stream of one keyed handle of subtask st and
// reads its header. The layout decision is the savepoint reader's
// (Savepoint.KeyedLayout: tag 7, or tag 3/12 of a canonical or native
// savepoint, or, for checkpoints and V3 files such as Flink 1.11
// savepoints, whatever the first key group shows); canonical and
// heap-layout streams are read, the latter through the reader's heap mode,
// which hands out the same canonical entries. The header is parsed up to
// the handle's first key-group offset, so that serializer snapshots of
// unknown classes are stepped over as the reader does (their states are
// partial).
func openImportFile(ctx context.Context, sp *savepoint.Savepoint, op *savepoint.OperatorState, st *savepoint.SubtaskState, kh savepoint.KeyedHandle, o ImportOptions) (*importFile, error) {
	layout, err := sp.KeyedLayout(ctx, kh, int(op.MaxParallelism))
	if err != nil {
		return nil, err
	}
	h, ok := kh.(*savepoint.KeyGroupsHandle)
	if !ok || (layout != savepoint.LayoutCanonical && layout != savepoint.LayoutNativeHeap) {
		return nil, fmt.Errorf("%w: %s: operator %s subtask %d: keyed handle tag %d holds the %s layout", savepoint.ErrNativeLayout, sp.Name(), op.ID, st.Index, kh.HandleTag(), layout)
	}
	obj, hdr, err := sp.OpenKeyed(ctx, h, o.ReadAhead)
	if err != nil {
		return nil, err
	}
	return &importFile{handle: h, obj: obj, header: hdr, name: obj.Loc.Name, heap: layout == savepoint.LayoutNativeHeap}, nil
}

// metaSig identifies a state's kind and serializers.
func metaSig(m *keyed.StateMeta) string {
	sig := fmt.Sprintf("%d/%s", m.Type, m.Kind)
	for _, ns := range m.Serializers {
		sig += "/" + ns.Key + ":"
		if ns.Snapshot != nil {
			sig += string(ns.Snapshot.Raw)
		}
	}
	return sig
}

func rawSnap(s *serde.Snapshot) flinkwrite.Snapshot {
	return flinkwrite.RawSnapshot{Versioned: s.Raw}
}

// stateOf maps one state meta info to an engine state schema, keeping its
// serializer snapshots verbatim.
func stateOf(m *keyed.StateMeta, o ImportOptions) (engine.StateSchema, error) {
	ss := engine.StateSchema{Name: m.Name}
	meta := &flinkwrite.StateMetaInfo{Name: m.Name, Type: flinkwrite.BackendStateType(m.Type)}
	for _, kv := range m.Options {
		meta.Options = append(meta.Options, flinkwrite.Option{Key: kv[0], Value: kv[1]})
	}
	for _, ns := range m.Serializers {
		if ns.Snapshot == nil {
			return ss, fmt.Errorf("serializer %s missing", ns.Key)
		}
		meta.Serializers = append(meta.Serializers, flinkwrite.NamedSnapshot{Key: ns.Key, Snapshot: rawSnap(ns.Snapshot)})
	}
	ss.Meta = meta
	if m.Value == nil {
		return ss, errors.New("no value serializer")
	}
	switch m.Type {
	case keyed.PriorityQueue:
		ss.Kind = engine.KindPriorityQueue
		ss.Value = engine.Type{Kind: engine.TypeRaw, Snapshot: rawSnap(m.Value)}
		return ss, nil
	case keyed.KeyValue:
	default:
		return ss, fmt.Errorf("backend state type %s", m.Type)
	}
	var err error
	if m.Namespace == nil {
		return ss, errors.New("no namespace serializer")
	}
	if ss.Namespace, err = typeOf(m.Namespace, "namespace"); err != nil {
		return ss, err
	}
	switch ss.Namespace.Kind {
	case engine.TypeVoid, engine.TypeLong, engine.TypeTimeWindow, engine.TypeGlobalWindow:
	default:
		return ss, fmt.Errorf("namespace serializer %s", m.Namespace.Class)
	}
	unwrap := func(s *serde.Snapshot) *serde.Snapshot {
		if s != nil && s.Class == serde.ClassTTL && len(s.Nested) == 2 {
			return s.Nested[1]
		}
		return s
	}
	if m.TTL {
		ss.TTL = NeverExpire
		if o.DefaultTTL > 0 {
			ss.TTL = o.DefaultTTL
		}
		if d, ok := o.TTL[m.Name]; ok && d > 0 {
			ss.TTL = d
		}
	}
	switch m.Kind {
	case flinkwrite.KindValue, flinkwrite.KindAggregating, flinkwrite.KindReducing:
		ss.Kind = engine.KindValue
		ss.FlinkKind = m.Kind
		if ss.Value, err = valueTypeOf(unwrap(m.Value), "value", false); err != nil {
			return ss, err
		}
	case flinkwrite.KindList:
		if m.Element == nil && m.Partial != "" && !m.TTL {
			// The list serializer's snapshot could not be read (partial
			// state): Flink's ','-joined list is kept whole as one raw
			// engine element (see stateCodec.rawLen), under the kept
			// snapshot.
			ss.Kind = engine.KindList
			ss.Value = engine.Type{Kind: engine.TypeRaw, Snapshot: rawSnap(m.Value)}
			break
		}
		if m.Element == nil {
			return ss, errors.New("list state without element serializer")
		}
		ss.Kind = engine.KindList
		if ss.Value, err = valueTypeOf(unwrap(m.Element), "list element", m.TTL); err != nil {
			return ss, err
		}
		switch ss.Value.Kind {
		case engine.TypeRow, engine.TypeLong, engine.TypeInt, engine.TypeString, engine.TypeRaw:
		default:
			return ss, fmt.Errorf("list element serializer %s", m.Element.Class)
		}
	case flinkwrite.KindMap:
		if (m.UserKey == nil || m.UserValue == nil) && m.Partial != "" && !m.TTL {
			// The map serializer's snapshot could not be read (partial
			// state): user keys and user values (NULL flag included) are
			// kept as raw bytes, which the entry format delimits.
			raw := engine.Type{Kind: engine.TypeRaw, Snapshot: rawSnap(m.Value)}
			ss.Kind, ss.UserKey, ss.Value = engine.KindMap, raw, raw
			break
		}
		if m.UserKey == nil || m.UserValue == nil {
			return ss, errors.New("map state without user key/value serializers")
		}
		if ss.UserKey, err = valueTypeOf(m.UserKey, "user key", false); err != nil {
			return ss, err
		}
		uv := unwrap(m.UserValue)
		if o.Multisets[m.Name] && ss.UserKey.Kind == engine.TypeRow && (uv.Class == serde.ClassInt || o.JoinRecords != "" && outerJoinSide(m, o)) {
			// Join records. An outer side becomes one only when folded
			// into join records (JoinRecords; checked after folding);
			// otherwise it is a map with raw Tuple2 values.
			ss.Kind = engine.KindMultiset
			break
		}
		ss.Kind = engine.KindMap
		if ss.Value, err = valueTypeOf(uv, "user value", false); err != nil {
			return ss, err
		}
	default:
		return ss, fmt.Errorf("%s state is not supported (value, list, map, priority queue)", m.Kind)
	}
	if err := ss.Validate(); err != nil {
		return ss, err
	}
	return ss, nil
}

// typeOf maps a serializer snapshot to an engine type, keeping the
// snapshot bytes.
func typeOf(s *serde.Snapshot, role string) (engine.Type, error) {
	if s == nil {
		return engine.Type{}, fmt.Errorf("no %s serializer", role)
	}
	t := engine.Type{Snapshot: rawSnap(s)}
	switch s.Class {
	case serde.ClassLong:
		t.Kind = engine.TypeLong
	case serde.ClassInt:
		t.Kind = engine.TypeInt
	case serde.ClassString:
		t.Kind = engine.TypeString
	case serde.ClassVoid:
		t.Kind = engine.TypeVoid
	case serde.ClassTimeWindow, serde.ClassTableTW:
		t.Kind = engine.TypeTimeWindow
	case serde.ClassGlobalWin:
		t.Kind = engine.TypeGlobalWindow
	case serde.ClassTuple:
		if len(s.Nested) != 1 {
			return t, fmt.Errorf("%s serializer %s with %d fields (only one-field tuples)", role, s.TupleClass, len(s.Nested))
		}
		inner, err := typeOf(s.Nested[0], role)
		if err != nil {
			return t, err
		}
		switch inner.Kind {
		case engine.TypeLong, engine.TypeInt, engine.TypeString:
		default:
			return t, fmt.Errorf("%s serializer %s of %s", role, s.TupleClass, s.Nested[0].Class)
		}
		t.Kind, t.Tuple = inner.Kind, s.TupleClass
	case serde.ClassRowData:
		t.Kind = engine.TypeRow
		for i, lt := range s.Types {
			ft, err := fieldOf(lt)
			if err != nil {
				return t, fmt.Errorf("%s row field %d: %v", role, i, err)
			}
			t.Fields = append(t.Fields, ft)
			t.Nullable = append(t.Nullable, lt.Nullable)
			if lt != nil && i < len(s.Nested) {
				if want := fieldSerializer(ft); want != "" && s.Nested[i].Class != want {
					return t, fmt.Errorf("%s row field %d: %s serializer %s", role, i, lt.Root, s.Nested[i].Class)
				}
			}
		}
	default:
		return t, fmt.Errorf("%s serializer %s", role, s.Class)
	}
	return t, nil
}

// valueTypeOf is typeOf for values, list elements, map user keys and map
// user values (user keys are the rest of Flink's key bytes, and the engine
// compares them byte for byte, as Flink's RocksDB backend does): a
// serializer without a typed engine mapping (tuples of several fields,
// rows with structured, nested or RAW fields, Boolean, user serializers
// package serde cannot decode, ...) is carried raw: Flink's bytes
// unchanged under the kept snapshot, opaque to the engine, exported back
// byte for byte (checks and digests decode them when package serde can,
// and see serde.Raw otherwise). The entry format delimits values, user
// keys and user values, so their serializer need not be known. Raw
// elements of a TTL list must have a fixed length: the engine splits
// Flink's list into elements to take their timestamps off (see
// stateCodec.rawLen).
func valueTypeOf(s *serde.Snapshot, role string, ttlList bool) (engine.Type, error) {
	t, err := typeOf(s, role)
	if err == nil || s == nil {
		return t, err
	}
	if ttlList {
		if dec := serde.NewDecoder(s); !dec.Supported() || dec.Len() < 0 {
			return t, fmt.Errorf("%v (elements of a TTL list are kept as raw bytes only with a fixed length)", err)
		}
	}
	return engine.Type{Kind: engine.TypeRaw, Snapshot: rawSnap(s)}, nil
}

// fieldSerializer is the serializer Flink uses inside rows for a field
// type ("" when any is fine for the row codec).
func fieldSerializer(ft keygroups.FieldType) string {
	switch ft.Kind {
	case keygroups.KindString:
		return serde.ClassStringData
	case keygroups.KindBigInt:
		return serde.ClassLong
	case keygroups.KindInt:
		return serde.ClassInt
	}
	return ""
}

// fieldOf maps a row field's logical type to a SQL field type.
func fieldOf(lt *serde.LogicalType) (keygroups.FieldType, error) {
	if lt == nil {
		return keygroups.FieldType{}, errors.New("missing logical type")
	}
	switch lt.Root {
	case "BOOLEAN":
		return keygroups.TypeBoolean, nil
	case "TINYINT":
		return keygroups.TypeTinyInt, nil
	case "SMALLINT":
		return keygroups.TypeSmallInt, nil
	case "INTEGER":
		return keygroups.TypeInt, nil
	case "BIGINT":
		return keygroups.TypeBigInt, nil
	case "FLOAT":
		return keygroups.TypeFloat, nil
	case "DOUBLE":
		return keygroups.TypeDouble, nil
	case "CHAR", "VARCHAR":
		return keygroups.TypeString, nil
	case "BINARY", "VARBINARY":
		return keygroups.TypeBytes, nil
	case "DATE":
		return keygroups.TypeDate, nil
	case "TIME_WITHOUT_TIME_ZONE":
		return keygroups.TypeTime, nil
	case "TIMESTAMP_WITHOUT_TIME_ZONE":
		return keygroups.TypeTimestamp(lt.Precision), nil
	case "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
		return keygroups.TypeTimestampLTZ(lt.Precision), nil
	case "DECIMAL":
		return keygroups.TypeDecimal(lt.Precision, lt.Scale), nil
	case "INTERVAL_YEAR_MONTH":
		return keygroups.FieldType{Kind: keygroups.KindIntervalYearMonth}, nil
	case "INTERVAL_DAY_TIME":
		return keygroups.FieldType{Kind: keygroups.KindIntervalDayTime}, nil
	}
	return keygroups.FieldType{}, fmt.Errorf("logical type %s (%s) is not supported", lt.Root, lt.Class)
}

// clone returns a copy of the plan for another worker: its own range
// readers, headers (decoders keep state) and codecs.
func (p *importPlan) clone(ctx context.Context, sp *savepoint.Savepoint, o ImportOptions) (*importPlan, error) {
	c := &importPlan{op: p.op, schema: p.schema, codecs: make([]*stateCodec, len(p.codecs)), joins: make([]*joinCodec, len(p.joins))}
	for _, f := range p.files {
		obj, err := sp.OpenStream(ctx, f.handle.Delegate, o.ReadAhead)
		if err != nil {
			return nil, err
		}
		// The header as first read ends exactly where its bytes do.
		hdr, _, err := keyed.ParseHeaderWithin(f.header.Raw, f.name, len(f.header.Raw))
		if err != nil {
			return nil, err
		}
		c.files = append(c.files, &importFile{handle: f.handle, obj: obj, header: hdr, name: f.name, heap: f.heap, stateMap: f.stateMap})
	}
	for i, ss := range p.schema.States {
		var err error
		if p.joins[i] != nil {
			c.joins[i], err = newJoinCodec(p.schema.Key, ss)
		} else {
			c.codecs[i], err = newStateCodec(p.schema.Key, ss)
		}
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// restore reads the key groups of r from every stream and writes them into
// be. It returns the number of entries written.
func (p *importPlan) restore(ctx context.Context, be engine.Backend, r keygroups.Range, o ImportOptions) (int64, error) {
	layout := be.Layout()
	var br keyed.BlockReader
	b := be.NewBatch()
	defer b.Close()
	var kbuf, vbuf []byte
	var n int64
	for _, f := range p.files {
		start, end := f.handle.KeyGroupRange()
		lo, hi := max(start, r.Start), min(end, r.End)
		if o.KeyGroups != nil {
			from, to := o.KeyGroups(layout.MaxParallelism)
			lo, hi = max(lo, from), min(hi, to)
		}
		ropts := keyed.ReadOptions{MaxParallelism: layout.MaxParallelism, Mode: keyed.ModeSplit, Heap: f.heap}
		for kg := lo; kg <= hi; kg++ {
			off := f.handle.Offset(kg)
			if off == 0 {
				continue
			}
			if err := ctx.Err(); err != nil {
				return n, err
			}
			err := br.Read(f.obj, f.obj.Size(), f.name, f.header, kg, off, ropts, func(e *keyed.Entry) error {
				if e.State.ID < 0 || e.State.ID >= len(f.stateMap) {
					return fmt.Errorf("%s: key group %d: state id %d out of range", f.name, kg, e.State.ID)
				}
				ref := f.stateMap[e.State.ID]
				if ref.idx < 0 {
					return nil // a skipped state
				}
				sid := ref.idx
				var err error
				if jc := p.joins[sid]; jc != nil {
					if kbuf, vbuf, err = jc.engineEntry(kbuf[:0], vbuf[:0], layout.Width(), e.KeyGroup, ref.side, e.KeyPart, e.NamespaceBytes, e.UserKeyBytes, e.ValueBytes); err != nil {
						return fmt.Errorf("%s: key group %d offset %d: state %q: %w", f.name, kg, e.Offset, e.State.Name, err)
					}
					b.Put(sid, kbuf, vbuf)
					n++
					if b.Len() >= o.BatchSize {
						return b.Commit()
					}
					return nil
				}
				c := p.codecs[sid]
				if kbuf, err = c.engineKey(kbuf[:0], layout, e.KeyGroup, e.KeyPart, e.NamespaceBytes, e.UserKeyBytes); err != nil {
					return fmt.Errorf("%s: key group %d offset %d: state %q: %w", f.name, kg, e.Offset, c.s.Name, err)
				}
				if vbuf, err = c.engineValue(vbuf[:0], e.ValueBytes); err != nil {
					return fmt.Errorf("%s: key group %d offset %d: state %q: %w", f.name, kg, e.Offset, c.s.Name, err)
				}
				b.Put(sid, kbuf, vbuf)
				n++
				if b.Len() >= o.BatchSize {
					return b.Commit()
				}
				return nil
			})
			if err != nil {
				return n, err
			}
		}
	}
	return n, b.Commit()
}

// outerJoinSide reports whether m is the outer side of a Flink streaming
// join without unique key: a Multisets-named MAP state from a row to
// Tuple2<Integer, Integer> (count, association count), TTL-wrapped or not.
func outerJoinSide(m *keyed.StateMeta, o ImportOptions) bool {
	if m.Type != keyed.KeyValue || m.Kind != flinkwrite.KindMap || !o.Multisets[m.Name] || m.UserKey == nil || m.UserKey.Class != serde.ClassRowData {
		return false
	}
	uv := m.UserValue
	if uv != nil && uv.Class == serde.ClassTTL && len(uv.Nested) == 2 {
		uv = uv.Nested[1]
	}
	return uv != nil && uv.Class == serde.ClassTuple && uv.TupleClass == engine.OuterTupleClass && len(uv.Nested) == 2 &&
		uv.Nested[0] != nil && uv.Nested[0].Class == serde.ClassInt && uv.Nested[1] != nil && uv.Nested[1].Class == serde.ClassInt
}

// foldJoin replaces the two multiset states of a regular join (both
// sides present) by one recordstore join state and remaps the files'
// state references. outer names the sides that are outer join inputs.
func foldJoin(s *engine.Schema, files []*importFile, o ImportOptions, outer map[string]bool) error {
	if o.JoinRecords != recordstore.LayoutRecord {
		return fmt.Errorf("join records can only be imported into the %q layout, not %q", recordstore.LayoutRecord, o.JoinRecords)
	}
	side := map[string]int{}
	var names []string
	for name := range o.Multisets {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) != 2 {
		return fmt.Errorf("join records need exactly two state names (left, right), got %v", names)
	}
	// Flink's names sort left before right.
	for i, st := range s.States {
		if st.Kind == engine.KindMultiset && (st.Name == names[0] || st.Name == names[1]) {
			side[st.Name] = i
		}
	}
	li, lok := side[names[0]]
	ri, rok := side[names[1]]
	if !lok || !rok {
		return nil // not a regular join with both sides: keep multisets
	}
	left, right := s.States[li], s.States[ri]
	if (left.TTL > 0) != (right.TTL > 0) {
		return fmt.Errorf("join sides %q and %q disagree on TTL", left.Name, right.Name)
	}
	if s.Key.Kind != engine.TypeRow {
		return fmt.Errorf("join records need a row key, not %s", s.Key.Kind)
	}
	js := engine.StateSchema{
		Name: recordstore.RecordStateName, Kind: engine.KindMap, Namespace: engine.VoidType, TTL: left.TTL,
		Join: &engine.JoinSides{Left: left.UserKey, Right: right.UserKey, LeftName: left.Name, RightName: right.Name,
			LeftMeta: left.Meta, RightMeta: right.Meta, LeftOuter: outer[left.Name], RightOuter: outer[right.Name]},
	}
	if left.TTL < right.TTL {
		js.TTL = right.TTL
	}
	// New state list: the join state takes the left side's place.
	remap := make([]stateRef, len(s.States))
	var out []engine.StateSchema
	for i, st := range s.States {
		switch i {
		case li:
			remap[i] = stateRef{idx: len(out), side: 0}
			out = append(out, js)
		case ri:
			continue
		default:
			remap[i] = stateRef{idx: len(out)}
			out = append(out, st)
		}
	}
	for i := range s.States {
		if i == ri {
			remap[i] = stateRef{idx: remap[li].idx, side: 1}
		}
	}
	s.States = out
	for _, f := range files {
		for j, r := range f.stateMap {
			if r.idx >= 0 {
				f.stateMap[j] = remap[r.idx]
			}
		}
	}
	return nil
}
