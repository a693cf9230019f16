// Package statediff compares the keyed state of two snapshots of one job
// entry by entry: per operator and state the entries only in the first
// (removed), only in the second (added), and under the same key with a
// different value (changed) or only a different TTL timestamp (TTL
// changes, reported apart).
//
// Entries are matched by their identity — key, namespace and, for MAP
// states, user key; the whole element for timers — never by key group or
// file, so the snapshots may differ in format (Flink with either backend,
// sfstate's writers), parallelism and max parallelism. Where a state's
// serializers are the same on both sides (the usual case) entries are
// compared by the bytes those serializers wrote: the identity is the
// composite key without its key-group prefix, the value its serialized
// bytes, the TTL timestamp cut out of them; only values whose bytes
// differ and whose serializers may write one value in several ways (rows,
// POJOs, Kryo, maps, TTL list elements) are decoded and compared in the
// canonical encoding of savepoint/digest, so equal logical values compare
// equal whatever bytes they were written as. A state whose serializers
// differ between the sides is compared by decoded values throughout, and a
// note says so. JSON is rendered only for the examples kept (see
// compact.go).
//
// Each comparison is a sort-merge: both sides' entries are sorted by state
// and identity and the two sorted streams are walked together once. When
// an operator has the same max parallelism on both sides, per-key-group
// digests (a seeded hash of every entry's bytes, summed per state and key
// group) are computed first and only key groups whose digests differ are
// read again, a bounded number of key groups per pass; otherwise one pass
// reads every entry. Memory is bounded by Options.MemoryBytes (half per
// side): entries beyond it are sorted into runs spilled to a scratch
// directory (s3.ScratchPrefix + "diff-*" under Options.TempDir) and read
// back through a k-way merge (see spill.go), so one huge key group or a
// huge operator needs disk, not memory, and gives the same result as in
// memory. The scratch directory is removed when Diff returns, also on
// errors and cancellation.
package statediff

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// DefaultMemoryBytes is the default budget of the entries one comparison
// holds in memory.
const DefaultMemoryBytes = 256 << 20

// kgPerPass bounds the key groups read again in one pass of the digest
// path.
const kgPerPass = 64

// scratchPattern names the spill directory (os.MkdirTemp pattern).
const scratchPattern = s3.ScratchPrefix + "diff-*"

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
	// MemoryBytes bounds the entries held in memory (their serialized
	// bytes and about 110 bytes of bookkeeping each), half per side
	// (DefaultMemoryBytes when 0); beyond it sorted runs are spilled to
	// disk.
	MemoryBytes int64
	// TempDir is where the spill directory is created ("" =
	// os.TempDir()).
	TempDir string
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
	// Notes name the operators not compared and the states compared by
	// decoded values because their serializers differ between the sides.
	Notes []string `json:"notes,omitempty"`
	// SpilledBytes and SpilledRuns count the sorted runs written to disk
	// (0 when everything fit into Options.MemoryBytes).
	SpilledBytes int64 `json:"spilledBytes,omitempty,string"`
	SpilledRuns  int   `json:"spilledRuns,omitempty"`
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

// Diff compares the keyed state of a and b.
func Diff(ctx context.Context, a, b *savepoint.Savepoint, o Options) (res *Result, err error) {
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = DefaultMemoryBytes
	}
	d := &differ{ctx: ctx, a: a, b: b, o: o, states: map[stateKey]*StateDiff{}, scratch: &scratch{parent: o.TempDir},
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
	defer func() {
		if rerr := d.scratch.remove(); rerr != nil && err == nil {
			res, err = nil, fmt.Errorf("statediff: remove spill directory: %w", rerr)
		}
	}()
	ops, err := d.operators()
	if err != nil {
		return nil, err
	}
	for _, p := range ops {
		if err := d.operator(p); err != nil {
			return nil, err
		}
	}
	res = &Result{Equal: true, Notes: d.notes, Incomplete: d.incomplete, SpilledBytes: d.scratch.Bytes, SpilledRuns: d.scratch.Runs}
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
	ctx     context.Context
	a, b    *savepoint.Savepoint
	o       Options
	scratch *scratch
	states  map[stateKey]*StateDiff
	notes   []string
	// incomplete: some keyed state was not compared (notes say which).
	incomplete bool
	sums       map[*savepoint.Savepoint]*savepoint.Summary
	// seeds of the key-group digests (one Diff hashes both sides).
	seeds [2]maphash.Seed
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
			d.incomplete = true
			return nil
		}
		if s := d.summaryOf(x.sp, x.op); s != nil && s.KeyedLayout == savepoint.LayoutNativeHeap && x.sp.FormatType() == savepoint.FormatNative {
			d.notes = append(d.notes, fmt.Sprintf("operator %s in %s: keyed state in the heap backend's native layout is not compared", p.id, x.sp.Name()))
			d.incomplete = true
			return nil
		}
	}
	plan, err := d.planOperator(p)
	if err != nil {
		return err
	}
	if p.a != nil && p.b != nil && p.a.MaxParallelism == p.b.MaxParallelism && !d.o.NoDigest {
		return d.byKeyGroups(p, plan)
	}
	// One pass over everything; the sorters spill what does not fit.
	return d.pass(p, plan, 0, -1, nil)
}

// byKeyGroups is the digest path: equal key groups are skipped, the others
// compared a few at a time.
func (d *differ) byKeyGroups(p opPair, plan *opPlan) error {
	da, err := d.digestSide(d.a, p.a, p.id, plan)
	if err != nil {
		return err
	}
	db, err := d.digestSide(d.b, p.b, p.id, plan)
	if err != nil {
		return err
	}
	if len(da) == 0 && len(db) == 0 && (d.keyedBytes(d.a, p.a) > 0 || d.keyedBytes(d.b, p.b) > 0) {
		// Nothing decoded although there is keyed data: a native layout
		// the digest skipped; the entry walk reports it.
		return d.pass(p, plan, 0, -1, nil)
	}
	differs := map[int32]bool{} // key group -> some state differs
	for k, ga := range da {
		gb := db[k]
		if gb == nil || *ga != *gb {
			differs[k.kg] = true
		} else if !differs[k.kg] {
			differs[k.kg] = false
		}
		d.state(p.id, plan.states[k.state].name).EntriesA += ga.n
	}
	for k, gb := range db {
		if da[k] == nil {
			differs[k.kg] = true
		} else if !differs[k.kg] {
			differs[k.kg] = false
		}
		d.state(p.id, plan.states[k.state].name).EntriesB += gb.n
	}
	for k := range da {
		if !differs[k.kg] {
			d.state(p.id, plan.states[k.state].name).KeyGroupsSkipped++
		}
	}
	var differing []int
	for kg, diff := range differs {
		if diff {
			differing = append(differing, int(kg))
		}
	}
	sort.Ints(differing)
	maxP := max(p.a.MaxParallelism, p.b.MaxParallelism)
	for len(differing) > 0 {
		n := min(len(differing), kgPerPass)
		chunk := differing[:n]
		differing = differing[n:]
		keep := make([]bool, maxP)
		for _, kg := range chunk {
			if kg >= 0 && kg < len(keep) {
				keep[kg] = true
			}
		}
		// The digests tell how many entries each side will hold.
		var hint [2]int64
		for i, dg := range []map[groupKey]*groupSum{da, db} {
			for k, g := range dg {
				if int(k.kg) < len(keep) && keep[k.kg] {
					hint[i] += g.n
				}
			}
		}
		if err := d.passCounted(p, plan, chunk[0], chunk[n-1], keep, false, hint); err != nil {
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

func (d *differ) pass(p opPair, plan *opPlan, from, to int, keep []bool) error {
	return d.passCounted(p, plan, from, to, keep, true, [2]int64{})
}

// passCounted reads the entries of the key groups keep selects (nil: all)
// from both sides, sorts each side by state and identity (spilling sorted
// runs to disk beyond half of Options.MemoryBytes per side) and compares
// the two sorted streams in one merge. count adds the entries read to
// EntriesA/EntriesB; hint is the number of entries expected on each side
// (0: unknown).
func (d *differ) passCounted(p opPair, plan *opPlan, from, to int, keep []bool, count bool, hint [2]int64) error {
	xa, xb := newSide(p.a), newSide(p.b)
	sa, err := d.collect(d.a, p.a, p.id, plan, xa, from, to, keep, count, true, hint[0])
	if err != nil {
		return err
	}
	sb, err := d.collect(d.b, p.b, p.id, plan, xb, from, to, keep, count, false, hint[1])
	if err != nil {
		return err
	}
	ia, err := sa.sorted()
	if err != nil {
		return err
	}
	defer ia.close()
	ib, err := sb.sorted()
	if err != nil {
		return err
	}
	defer ib.close()
	return d.merge(p.id, plan, ia, ib, xa, xb)
}

// merge compares two sorted streams of one operator's entries. Both are
// in (state, identity) order, so the examples come out in that order,
// whether the streams were held in memory or merged from spilled runs.
func (d *differ) merge(op string, plan *opPlan, ia, ib recIter, xa, xb *side) error {
	sds := make([]*StateDiff, len(plan.states))
	stateOf := func(i int32) *StateDiff {
		if sds[i] == nil {
			sds[i] = d.state(op, plan.states[i].name)
		}
		return sds[i]
	}
	var prevA, prevB *rec
	next := func(it recIter, x *side, prev **rec) (*rec, error) {
		r, err := it.next()
		if err != nil || r == nil {
			return nil, err
		}
		if int(r.state) >= len(plan.states) || int(r.file) >= len(x.files) {
			return nil, fmt.Errorf("statediff: spilled entry of unknown state %d or file %d", r.state, r.file)
		}
		if *prev != nil && recLess(*prev, r) == 0 {
			return nil, &keyed.Error{File: x.files[r.file], KeyGroup: int(r.kg), Offset: r.offset, BlockPos: r.bpos,
				Err: fmt.Errorf("state %q holds the same key twice", plan.states[r.state].name)}
		}
		*prev = r
		return r, nil
	}
	ra, err := next(ia, xa, &prevA)
	if err != nil {
		return err
	}
	rb, err := next(ib, xb, &prevB)
	if err != nil {
		return err
	}
	limit := d.o.Limit
	for n := 0; ra != nil || rb != nil; n++ {
		if n%4096 == 0 {
			if err := d.ctx.Err(); err != nil {
				return err
			}
		}
		c := 0
		switch {
		case ra == nil:
			c = 1
		case rb == nil:
			c = -1
		default:
			c = recLess(ra, rb)
		}
		switch {
		case c < 0:
			s := stateOf(ra.state)
			s.Removed++
			if len(s.RemovedExamples) < limit {
				js, err := xa.render(plan.states[ra.state], ra)
				if err != nil {
					return err
				}
				s.RemovedExamples = append(s.RemovedExamples, js)
			}
		case c > 0:
			s := stateOf(rb.state)
			s.Added++
			if len(s.AddedExamples) < limit {
				js, err := xb.render(plan.states[rb.state], rb)
				if err != nil {
					return err
				}
				s.AddedExamples = append(s.AddedExamples, js)
			}
		default:
			sp := plan.states[ra.state]
			what, err := d.compare(sp, ra, rb, xa, xb)
			if err != nil {
				return err
			}
			var ex *[]Change
			s := stateOf(ra.state)
			switch what {
			case changed:
				s.Changed++
				ex = &s.ChangedExamples
			case ttlOnly:
				if !d.o.IgnoreTTL {
					s.TTLChanged++
					ex = &s.TTLChangedExamples
				}
			}
			if ex != nil && len(*ex) < limit {
				before, err := xa.render(sp, ra)
				if err != nil {
					return err
				}
				after, err := xb.render(sp, rb)
				if err != nil {
					return err
				}
				*ex = append(*ex, Change{Before: before, After: after})
			}
		}
		if c <= 0 {
			if ra, err = next(ia, xa, &prevA); err != nil {
				return err
			}
		}
		if c >= 0 {
			if rb, err = next(ib, xb, &prevB); err != nil {
				return err
			}
		}
	}
	return nil
}

// compare classifies two entries of one identity: same, changed or
// ttlOnly.
func (d *differ) compare(sp *statePlan, ra, rb *rec, xa, xb *side) (int, error) {
	if sp.canonical {
		switch {
		case !bytes.Equal(ra.val, rb.val):
			return changed, nil
		case !bytes.Equal(ra.ttl, rb.ttl):
			return ttlOnly, nil
		}
		return same, nil
	}
	return valueDiff(sp, ra.val, rb.val, func() (int, error) {
		va, ta, err := xa.canonicalValue(sp, ra)
		if err != nil {
			return 0, err
		}
		vb, tb, err := xb.canonicalValue(sp, rb)
		if err != nil {
			return 0, err
		}
		switch {
		case !bytes.Equal(va, vb):
			return changed, nil
		case !bytes.Equal(ta, tb):
			return ttlOnly, nil
		}
		return same, nil
	})
}

// collect reads the selected entries of op (nil: none) in one snapshot
// into a sorter holding at most half of Options.MemoryBytes.
func (d *differ) collect(sp *savepoint.Savepoint, op *savepoint.OperatorState, id string, plan *opPlan, x *side, from, to int, keep []bool, count, first bool, hint int64) (*sorter, error) {
	out := newSorter(d.scratch, d.o.MemoryBytes/2, x)
	out.reserve(hint)
	if op == nil {
		return out, nil
	}
	prefix := keygroups.PrefixWidth(int(op.MaxParallelism))
	so := savepoint.ScanOptions{Operator: id, State: d.o.State, KeyGroupFrom: from, KeyGroupTo: to, Mode: plan.mode, ReuseValues: true}
	var lastMeta *keyed.StateMeta
	var st int32
	var sp1 *statePlan
	var sd *StateDiff
	var r rec
	err := sp.WalkKeyed(d.ctx, so, func(e *savepoint.KeyedEntry) error {
		if keep != nil && (e.KeyGroup < 0 || e.KeyGroup >= len(keep) || !keep[e.KeyGroup]) {
			return nil
		}
		if e.State != lastMeta {
			i, err := plan.state(e.State.Name)
			if err != nil {
				return err
			}
			st, sp1, lastMeta = i, plan.states[i], e.State
			if count {
				sd = d.state(id, sp1.name)
			}
		}
		if count {
			if first {
				sd.EntriesA++
			} else {
				sd.EntriesB++
			}
		}
		r = rec{state: st, file: int32(x.fileIndex(e.File, e.Header)), kg: int32(e.KeyGroup), offset: e.Offset, bpos: e.BlockPos}
		if sp1.canonical {
			js, err := EntryJSON(e)
			if err != nil {
				return err
			}
			r.id = identity(nil, e)
			r.val, r.ttl = valueOf(e)
			r.js = js
		} else {
			if len(e.KeyBytes) < prefix {
				return fmt.Errorf("statediff: %s: key group %d: key shorter than its key-group prefix", e.File, e.KeyGroup)
			}
			r.id, r.val = e.KeyBytes[prefix:], e.ValueBytes
		}
		return out.add(&r)
	})
	if errors.Is(err, savepoint.ErrNativeLayout) {
		d.notes = append(d.notes, fmt.Sprintf("operator %s in %s: keyed state in a native layout is not compared", id, sp.Name()))
		d.incomplete = true
		return newSorter(d.scratch, d.o.MemoryBytes/2, x), nil
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
