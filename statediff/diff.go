// Package statediff compares the keyed state of two snapshots of one job
// entry by entry: per operator and state the entries only in the first
// (removed), only in the second (added), and under the same key with a
// different value (changed) or only a different TTL timestamp (TTL
// changes, reported apart).
//
// Entries are matched by their decoded identity — key, namespace and, for
// MAP states, user key; the whole element for timers — never by key group
// or file, so the snapshots may differ in format (Flink with either
// backend, sfstate's writers), parallelism and max parallelism. Values are
// compared in the canonical encoding of savepoint/digest (equal logical
// values compare equal whatever bytes they were decoded from).
//
// Memory is bounded by comparing in passes: when an operator has the same
// max parallelism on both sides, the per-key-group digests of
// savepoint/digest are computed first and only key groups whose digests
// differ are read again, a bounded number of key groups per pass; otherwise
// each pass holds the entries whose identity hashes to one of P
// partitions, P chosen from the operator's keyed bytes and
// Options.MemoryBytes.
package statediff

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// DefaultMemoryBytes is the default budget of one comparison pass.
const DefaultMemoryBytes = 256 << 20

// kgPerPass bounds the key groups read again in one pass of the digest
// path.
const kgPerPass = 64

// maxPasses bounds the hash partitions of one operator.
const maxPasses = 4096

// Options configures Diff.
type Options struct {
	// Operator (id, uid or name, looked up in either snapshot) and State
	// restrict the comparison.
	Operator, State string
	// Limit is the number of examples kept per kind of difference and
	// state (0 = none).
	Limit int
	// IgnoreTTL leaves TTL-only changes out.
	IgnoreTTL bool
	// MemoryBytes bounds one pass (DefaultMemoryBytes when 0).
	MemoryBytes int64
	// NoDigest disables the digest fast path (tests compare both paths).
	NoDigest bool
}

// Result is the outcome of Diff.
type Result struct {
	// Equal is set when no compared state differs.
	Equal bool `json:"equal"`
	// Incomplete is set when some keyed state could not be compared
	// (native layouts); Notes say which.
	Incomplete bool         `json:"incomplete,omitempty"`
	States     []*StateDiff `json:"states"`
	Notes      []string     `json:"notes,omitempty"`
}

// StateDiff is the difference of one keyed state of one operator.
type StateDiff struct {
	Operator string `json:"operator"`
	State    string `json:"state"`
	// Entries on each side.
	EntriesA int64 `json:"entriesA,string"`
	EntriesB int64 `json:"entriesB,string"`
	Added    int64 `json:"added,string"`
	Removed  int64 `json:"removed,string"`
	Changed  int64 `json:"changed,string"`
	// TTLChanged counts entries whose value is equal and whose TTL
	// timestamp differs (0 with Options.IgnoreTTL).
	TTLChanged int64 `json:"ttlChanged,string"`
	// KeyGroupsSkipped counts key groups found equal by their digests.
	KeyGroupsSkipped int `json:"keyGroupsSkipped,omitempty"`

	AddedExamples      []Entry  `json:"addedExamples,omitempty"`
	RemovedExamples    []Entry  `json:"removedExamples,omitempty"`
	ChangedExamples    []Change `json:"changedExamples,omitempty"`
	TTLChangedExamples []Change `json:"ttlChangedExamples,omitempty"`
}

// Differs reports whether the state differs (TTL-only changes count
// unless they were ignored).
func (s *StateDiff) Differs() bool {
	return s.Added+s.Removed+s.Changed+s.TTLChanged > 0
}

// Entry is a decoded entry as JSON (see EntryJSON).
type Entry = jsonRaw

// Change is an entry before (in A) and after (in B).
type Change struct {
	Before Entry `json:"before"`
	After  Entry `json:"after"`
}

type stateKey struct{ op, state string }

// rec is one entry held during a pass.
type rec struct {
	val, ttl []byte
	js       Entry
}

type side struct {
	sp      *savepoint.Savepoint
	entries map[stateKey]map[string]*rec
}

// Diff compares the keyed state of a and b.
func Diff(ctx context.Context, a, b *savepoint.Savepoint, o Options) (*Result, error) {
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = DefaultMemoryBytes
	}
	d := &differ{ctx: ctx, a: a, b: b, o: o, seed: maphash.MakeSeed(), states: map[stateKey]*StateDiff{}}
	ops, err := d.operators()
	if err != nil {
		return nil, err
	}
	for _, p := range ops {
		if err := d.operator(p); err != nil {
			return nil, err
		}
	}
	res := &Result{Equal: true, Notes: d.notes, Incomplete: len(d.notes) > 0}
	for _, s := range d.states {
		res.States = append(res.States, s)
		if s.Differs() {
			res.Equal = false
		}
	}
	sort.Slice(res.States, func(i, j int) bool {
		x, y := res.States[i], res.States[j]
		if x.Operator != y.Operator {
			return x.Operator < y.Operator
		}
		return x.State < y.State
	})
	return res, nil
}

type differ struct {
	ctx    context.Context
	a, b   *savepoint.Savepoint
	o      Options
	seed   maphash.Seed
	states map[stateKey]*StateDiff
	notes  []string
	sums   map[*savepoint.Savepoint]*savepoint.Summary
}

// opPair is one operator id with its state on each side (nil = absent).
type opPair struct {
	id   string
	a, b *savepoint.OperatorState
}

func hasKeyed(op *savepoint.OperatorState) bool {
	if op == nil {
		return false
	}
	for _, st := range op.Subtasks {
		if st.ManagedKeyed != nil {
			return true
		}
	}
	return false
}

func (d *differ) operators() ([]opPair, error) {
	var want string
	if d.o.Operator != "" {
		opA, opB := d.a.FindOperator(d.o.Operator), d.b.FindOperator(d.o.Operator)
		switch {
		case opA != nil:
			want = opA.ID.String()
		case opB != nil:
			want = opB.ID.String()
		default:
			return nil, fmt.Errorf("statediff: operator %q is in neither snapshot", d.o.Operator)
		}
	}
	byID := map[string]*opPair{}
	var ids []string
	add := func(op *savepoint.OperatorState, first bool) {
		id := op.ID.String()
		if (want != "" && id != want) || !hasKeyed(op) {
			return
		}
		p := byID[id]
		if p == nil {
			p = &opPair{id: id}
			byID[id] = p
			ids = append(ids, id)
		}
		if first {
			p.a = op
		} else {
			p.b = op
		}
	}
	for _, op := range d.a.Meta.Operators {
		add(op, true)
	}
	for _, op := range d.b.Meta.Operators {
		add(op, false)
	}
	sort.Strings(ids)
	out := make([]opPair, len(ids))
	for i, id := range ids {
		out[i] = *byID[id]
	}
	return out, nil
}

// summaryOf returns the metadata summary of op (nil when absent).
func (d *differ) summaryOf(sp *savepoint.Savepoint, op *savepoint.OperatorState) *savepoint.OperatorSummary {
	if op == nil {
		return nil
	}
	if d.sums == nil {
		d.sums = map[*savepoint.Savepoint]*savepoint.Summary{}
	}
	sum := d.sums[sp]
	if sum == nil {
		sum = savepoint.Summarize(sp)
		d.sums[sp] = sum
	}
	for i, o := range sp.Meta.Operators {
		if o == op {
			return sum.Operators[i]
		}
	}
	return nil
}

func (d *differ) keyedBytes(sp *savepoint.Savepoint, op *savepoint.OperatorState) int64 {
	if s := d.summaryOf(sp, op); s != nil {
		return s.KeyedBytes
	}
	return 0
}

func (d *differ) operator(p opPair) error {
	for _, x := range []struct {
		sp *savepoint.Savepoint
		op *savepoint.OperatorState
	}{{d.a, p.a}, {d.b, p.b}} {
		if s := d.summaryOf(x.sp, x.op); s != nil && s.KeyedLayout == savepoint.LayoutNativeRocksDB {
			d.notes = append(d.notes, fmt.Sprintf("operator %s in %s: keyed state in the RocksDB native layout is not compared", p.id, x.sp.Name()))
			return nil
		}
		if s := d.summaryOf(x.sp, x.op); s != nil && s.KeyedLayout == savepoint.LayoutNativeHeap && x.sp.FormatType() == savepoint.FormatNative {
			d.notes = append(d.notes, fmt.Sprintf("operator %s in %s: keyed state in the heap backend's native layout is not compared", p.id, x.sp.Name()))
			return nil
		}
	}
	if p.a != nil && p.b != nil && p.a.MaxParallelism == p.b.MaxParallelism && !d.o.NoDigest {
		return d.byKeyGroups(p)
	}
	// Decoded entries take a few times their serialized size.
	need := 6 * (d.keyedBytes(d.a, p.a) + d.keyedBytes(d.b, p.b))
	passes := int((need + d.o.MemoryBytes - 1) / d.o.MemoryBytes)
	passes = max(1, min(passes, maxPasses))
	for pass := 0; pass < passes; pass++ {
		keep := func(kg int, id []byte) bool {
			return passes == 1 || int(maphash.Bytes(d.seed, id)%uint64(passes)) == pass
		}
		if err := d.pass(p, 0, -1, keep); err != nil {
			return err
		}
	}
	return nil
}

// byKeyGroups is the digest path: equal key groups are skipped, the others
// compared a few at a time.
func (d *differ) byKeyGroups(p opPair) error {
	da, err := digest.Compute(d.ctx, d.a, digest.Options{Operator: p.id, State: d.o.State, SkipNative: true})
	if err != nil {
		return err
	}
	db, err := digest.Compute(d.ctx, d.b, digest.Options{Operator: p.id, State: d.o.State, SkipNative: true})
	if err != nil {
		return err
	}
	if len(da.Groups) == 0 && len(db.Groups) == 0 && (d.keyedBytes(d.a, p.a) > 0 || d.keyedBytes(d.b, p.b) > 0) {
		// Nothing decoded although there is keyed data: a native layout
		// the digest skipped; the entry walk reports it.
		return d.pass(p, 0, -1, func(int, []byte) bool { return true })
	}
	type kgState struct{ equal, any bool }
	kgs := map[int]*kgState{}
	note := func(k digest.GroupKey, equal bool) {
		s := kgs[k.KeyGroup]
		if s == nil {
			s = &kgState{equal: true}
			kgs[k.KeyGroup] = s
		}
		s.any = true
		if !equal {
			s.equal = false
		}
	}
	for k, ga := range da.Groups {
		gb := db.Groups[k]
		note(k, gb != nil && *ga == *gb)
		sd := d.state(p.id, k.State)
		sd.EntriesA += ga.Entries
	}
	for k, gb := range db.Groups {
		if da.Groups[k] == nil {
			note(k, false)
		}
		d.state(p.id, k.State).EntriesB += gb.Entries
	}
	var differing []int
	for kg, s := range kgs {
		if s.equal {
			for k := range da.Groups {
				if k.KeyGroup == kg {
					d.state(p.id, k.State).KeyGroupsSkipped++
				}
			}
			continue
		}
		differing = append(differing, kg)
	}
	sort.Ints(differing)
	for len(differing) > 0 {
		n := min(len(differing), kgPerPass)
		chunk := differing[:n]
		differing = differing[n:]
		set := map[int]bool{}
		for _, kg := range chunk {
			set[kg] = true
		}
		keep := func(kg int, _ []byte) bool { return set[kg] }
		if err := d.passCounted(p, chunk[0], chunk[n-1], keep, false); err != nil {
			return err
		}
	}
	return nil
}

func (d *differ) state(op, state string) *StateDiff {
	k := stateKey{op, state}
	s := d.states[k]
	if s == nil {
		s = &StateDiff{Operator: op, State: state}
		d.states[k] = s
	}
	return s
}

func (d *differ) pass(p opPair, from, to int, keep func(kg int, id []byte) bool) error {
	return d.passCounted(p, from, to, keep, true)
}

// passCounted reads the entries keep selects from both sides and
// compares them. count adds the entries read to EntriesA/EntriesB.
func (d *differ) passCounted(p opPair, from, to int, keep func(kg int, id []byte) bool, count bool) error {
	ea, err := d.collect(d.a, p.a, p.id, from, to, keep, count, true)
	if err != nil {
		return err
	}
	eb, err := d.collect(d.b, p.b, p.id, from, to, keep, count, false)
	if err != nil {
		return err
	}
	// Sorted identities keep the examples the same from run to run.
	for _, k := range sortedKeys(ea) {
		ma := ea[k]
		sd := d.state(k.op, k.state)
		mb := eb[k]
		for _, id := range sortedIDs(ma) {
			ra := ma[id]
			rb, ok := mb[id]
			if !ok {
				sd.Removed++
				if len(sd.RemovedExamples) < d.o.Limit {
					sd.RemovedExamples = append(sd.RemovedExamples, ra.js)
				}
				continue
			}
			switch {
			case !bytes.Equal(ra.val, rb.val):
				sd.Changed++
				if len(sd.ChangedExamples) < d.o.Limit {
					sd.ChangedExamples = append(sd.ChangedExamples, Change{Before: ra.js, After: rb.js})
				}
			case !d.o.IgnoreTTL && !bytes.Equal(ra.ttl, rb.ttl):
				sd.TTLChanged++
				if len(sd.TTLChangedExamples) < d.o.Limit {
					sd.TTLChangedExamples = append(sd.TTLChangedExamples, Change{Before: ra.js, After: rb.js})
				}
			}
		}
	}
	for _, k := range sortedKeys(eb) {
		mb := eb[k]
		sd := d.state(k.op, k.state)
		ma := ea[k]
		for _, id := range sortedIDs(mb) {
			rb := mb[id]
			if _, ok := ma[id]; ok {
				continue
			}
			sd.Added++
			if len(sd.AddedExamples) < d.o.Limit {
				sd.AddedExamples = append(sd.AddedExamples, rb.js)
			}
		}
	}
	return nil
}

func sortedKeys(m map[stateKey]map[string]*rec) []stateKey {
	out := make([]stateKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].op != out[j].op {
			return out[i].op < out[j].op
		}
		return out[i].state < out[j].state
	})
	return out
}

func sortedIDs(m map[string]*rec) []string {
	out := make([]string, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// collect reads the selected entries of op (nil: none) in one snapshot.
func (d *differ) collect(sp *savepoint.Savepoint, op *savepoint.OperatorState, id string, from, to int, keep func(kg int, id []byte) bool, count, first bool) (map[stateKey]map[string]*rec, error) {
	out := map[stateKey]map[string]*rec{}
	if op == nil {
		return out, nil
	}
	so := savepoint.ScanOptions{Operator: id, State: d.o.State, KeyGroupFrom: from, KeyGroupTo: to, Mode: keyed.ModeDecode, ReuseValues: true}
	var idb []byte
	err := sp.WalkKeyed(d.ctx, so, func(e *savepoint.KeyedEntry) error {
		idb = identity(idb[:0], e)
		if !keep(e.KeyGroup, idb) {
			return nil
		}
		k := stateKey{id, e.State.Name}
		m := out[k]
		if m == nil {
			m = map[string]*rec{}
			out[k] = m
		}
		if count {
			if first {
				d.state(id, e.State.Name).EntriesA++
			} else {
				d.state(id, e.State.Name).EntriesB++
			}
		}
		if _, dup := m[string(idb)]; dup {
			return &keyed.Error{File: e.File, KeyGroup: e.KeyGroup, Offset: e.Offset, BlockPos: e.BlockPos,
				Err: fmt.Errorf("state %q holds the same key twice", e.State.Name)}
		}
		val, ttl := valueOf(e)
		js, err := EntryJSON(e)
		if err != nil {
			return err
		}
		m[string(idb)] = &rec{val: val, ttl: ttl, js: js}
		return nil
	})
	if errors.Is(err, savepoint.ErrNativeLayout) {
		d.notes = append(d.notes, fmt.Sprintf("operator %s in %s: keyed state in a native layout is not compared", id, sp.Name()))
		return map[stateKey]map[string]*rec{}, nil
	}
	return out, err
}

// identity appends the canonical encoding of what identifies an entry.
func identity(dst []byte, e *savepoint.KeyedEntry) []byte {
	if e.State.Type == keyed.PriorityQueue {
		return digest.AppendValue(dst, e.Value)
	}
	dst = digest.AppendValue(dst, e.Key)
	dst = digest.AppendValue(dst, e.Namespace)
	if e.State.Kind == "MAP" {
		dst = digest.AppendValue(dst, e.UserKey)
	}
	return dst
}

// valueOf returns the canonical encoding of an entry's value without TTL
// wrappers, and of its TTL timestamps (one per element for lists).
func valueOf(e *savepoint.KeyedEntry) (val, ttl []byte) {
	if e.State.Type == keyed.PriorityQueue {
		return nil, nil
	}
	v := e.Value
	if l, ok := v.(serde.List); ok && e.State.TTL {
		stripped := make(serde.List, len(l))
		for i, el := range l {
			if t, ok := el.(*serde.TTLValue); ok {
				stripped[i] = t.Value
				ttl = binary.BigEndian.AppendUint64(ttl, uint64(t.LastAccess))
			} else {
				stripped[i] = el
			}
		}
		return digest.AppendValue(nil, stripped), ttl
	}
	if t, ok := v.(*serde.TTLValue); ok {
		v = t.Value
	}
	if e.TTLTimestamp != nil {
		ttl = binary.BigEndian.AppendUint64(nil, uint64(*e.TTLTimestamp))
	}
	return digest.AppendValue(nil, v), ttl
}
