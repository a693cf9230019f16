package rescale

import (
	"fmt"
	"sort"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// ErrUnsupported marks input the rescaler refuses: mixed handle kinds,
// overlapping key-group ranges, finished subtasks of a keyed operator, key
// types it cannot hash.
var ErrUnsupported = errclass.New(errclass.ErrUnsupported, "rescale: unsupported input")

// OperatorKind classifies an operator by its keyed handles.
type OperatorKind int

const (
	// KindNonKeyed operators have no keyed handle; they are copied as is
	// (Flink repartitions operator state itself).
	KindNonKeyed OperatorKind = iota
	// KindCanonical operators hold key-groups handles (tags 3, 7, 12).
	KindCanonical
	// KindNative operators hold incremental RocksDB handles (tags 5, 11).
	KindNative
)

func (k OperatorKind) String() string {
	switch k {
	case KindCanonical:
		return "canonical"
	case KindNative:
		return "native"
	}
	return "non-keyed"
}

// Classify reports the kind of an operator's keyed handles; mixing canonical
// and native handles is refused.
func Classify(op *savepoint.OperatorState) (OperatorKind, error) {
	kind := KindNonKeyed
	for _, st := range op.Subtasks {
		for _, h := range []savepoint.KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
			if h == nil {
				continue
			}
			k := KindCanonical
			switch h.(type) {
			case *savepoint.KeyGroupsHandle:
			case *savepoint.IncrementalHandle:
				k = KindNative
			default:
				return 0, fmt.Errorf("%w: operator %s subtask %d: keyed handle tag %d", ErrUnsupported, op.ID, st.Index, h.HandleTag())
			}
			if kind != KindNonKeyed && kind != k {
				return 0, fmt.Errorf("%w: operator %s mixes canonical and native keyed handles", ErrUnsupported, op.ID)
			}
			kind = k
		}
	}
	return kind, nil
}

// LayoutParallelism returns the parallelism K written into the rescaled
// `_metadata` of an operator: the smallest multiple of newP (at most
// maxP) whose standard key-group ranges have a boundary at every boundary in
// bounds (each a first key group of some range, or maxP). Every standard
// range of K then lies inside exactly one old handle and one new subtask, so
// one view handle per layout subtask expresses the split with no data
// copied, and the `_metadata` stays a consistent Flink layout: restoring it
// at K takes each subtask's handle as is, restoring at any other
// parallelism intersects (Flink's StateAssignmentOperation).
func LayoutParallelism(maxP, newP int, bounds []int) (int, error) {
	if err := keygroups.CheckParallelism(maxP, newP); err != nil {
		return 0, fmt.Errorf("rescale: parallelism %d with max parallelism %d: %w", newP, maxP, err)
	}
	for k := newP; k <= maxP; k += newP {
		if hasBounds(maxP, k, bounds) {
			return k, nil
		}
	}
	// maxP itself (one key group per subtask) always has every boundary.
	return maxP, nil
}

func hasBounds(maxP, k int, bounds []int) bool {
	for _, b := range bounds {
		if b <= 0 || b >= maxP {
			continue
		}
		// b is a range start of parallelism k iff the subtask owning b
		// starts there.
		i := keygroups.SubtaskForKeyGroup(maxP, k, b)
		if keygroups.RangeForSubtask(maxP, k, i).Start != b {
			return false
		}
	}
	return true
}

// oldHandle is one keyed handle of the source with the subtask it came from.
type oldHandle struct {
	subtask int
	h       *savepoint.KeyGroupsHandle
	r       keygroups.Range
}

func collectCanonical(op *savepoint.OperatorState, raw bool) ([]oldHandle, error) {
	var hs []oldHandle
	for _, st := range op.Subtasks {
		kh := st.ManagedKeyed
		if raw {
			kh = st.RawKeyed
		}
		if kh == nil {
			continue
		}
		h, ok := kh.(*savepoint.KeyGroupsHandle)
		if !ok {
			return nil, fmt.Errorf("%w: operator %s subtask %d: not a key-groups handle", ErrUnsupported, op.ID, st.Index)
		}
		s, e := h.KeyGroupRange()
		if e < s {
			continue
		}
		if s < 0 || e >= int(op.MaxParallelism) {
			return nil, fmt.Errorf("%w: operator %s subtask %d: key-group range [%d, %d] outside max parallelism %d",
				savepoint.ErrFormat, op.ID, st.Index, s, e, op.MaxParallelism)
		}
		hs = append(hs, oldHandle{subtask: st.Index, h: h, r: keygroups.Range{Start: s, End: e}})
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].r.Start < hs[j].r.Start })
	for i := 1; i < len(hs); i++ {
		if hs[i].r.Start <= hs[i-1].r.End {
			return nil, fmt.Errorf("%w: operator %s: key-group ranges %v (subtask %d) and %v (subtask %d) overlap",
				ErrUnsupported, op.ID, hs[i-1].r, hs[i-1].subtask, hs[i].r, hs[i].subtask)
		}
	}
	return hs, nil
}

// View cuts a key-groups handle down to r (which must lie inside it): the
// offsets of r's key groups, the same delegate stream. This is
// KeyGroupsStateHandle.getIntersection.
func View(h *savepoint.KeyGroupsHandle, r keygroups.Range) *savepoint.KeyGroupsHandle {
	s, _ := h.KeyGroupRange()
	offs := make([]int64, r.Len())
	copy(offs, h.Offsets[r.Start-s:r.End-s+1])
	return &savepoint.KeyGroupsHandle{Tag: h.Tag, StartKeyGroup: int32(r.Start), Offsets: offs, Delegate: h.Delegate, StateHandleID: h.StateHandleID}
}

// viewInline is View for a handle whose stream is inline in `_metadata`:
// instead of repeating the whole stream in every view, the view's stream is
// the header followed by just the blocks of r, copied byte for byte, with
// offsets moved accordingly. Streams whose blocks are not laid out back to
// back in key-group order are kept whole.
func viewInline(h *savepoint.KeyGroupsHandle, r keygroups.Range) *savepoint.KeyGroupsHandle {
	v := View(h, r)
	d := h.Delegate
	if d == nil || d.Tag != savepoint.TagByteStream {
		return v
	}
	_, hdrLen, err := keyed.ParseHeader(d.Data, d.Name)
	if err != nil {
		return v
	}
	// Offsets must ascend across the whole handle so that a block ends
	// where the next non-empty one starts.
	prev := int64(hdrLen) - 1
	for _, o := range h.Offsets {
		if o == 0 {
			continue
		}
		if o <= prev || o >= int64(len(d.Data)) {
			return v
		}
		prev = o
	}
	s, _ := h.KeyGroupRange()
	first, end := int64(0), int64(len(d.Data))
	for kg := r.Start; kg <= r.End; kg++ {
		if o := h.Offsets[kg-s]; o != 0 && first == 0 {
			first = o
		}
	}
	for kg := r.End + 1; kg-s < len(h.Offsets); kg++ {
		if o := h.Offsets[kg-s]; o != 0 {
			end = o
			break
		}
	}
	data := make([]byte, 0, hdrLen+int(max(0, end-first)))
	data = append(data, d.Data[:hdrLen]...)
	if first != 0 {
		data = append(data, d.Data[first:end]...)
	}
	shift := first - int64(hdrLen)
	for i, o := range v.Offsets {
		if o != 0 {
			v.Offsets[i] = o - shift
		}
	}
	nd := *d
	nd.Data = data
	nd.Name = fmt.Sprintf("%s-kg%d-%d", d.Name, r.Start, r.End)
	v.Delegate = &nd
	return v
}

// broadcastOnly returns h restricted to its broadcast-mode states (nil when
// it has none). Broadcast state is identical on every subtask, so each
// layout subtask may carry it; split and union states must appear once.
func broadcastOnly(h *savepoint.OperatorHandle) *savepoint.OperatorHandle {
	if h == nil {
		return nil
	}
	var keep []savepoint.OperatorStateMeta
	for _, m := range h.States {
		if m.Mode == savepoint.ModeBroadcast {
			keep = append(keep, m)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	c := *h
	c.States = keep
	return &c
}

// LayoutStats describes one rescaled operator.
type LayoutStats struct {
	Operator          string `json:"operator"`
	Kind              string `json:"kind"`
	OldParallelism    int    `json:"oldParallelism"`
	NewParallelism    int    `json:"newParallelism"`
	LayoutParallelism int    `json:"layoutParallelism"`
	MaxParallelism    int    `json:"maxParallelism"`
	OldHandles        int    `json:"oldHandles"`
	NewHandles        int    `json:"newHandles"`
	// Note says why the operator did not get the requested parallelism or
	// max parallelism (e.g. Flink pins it at max parallelism 1).
	Note string `json:"note,omitempty"`
}

// CanonicalViews rewrites a canonical keyed operator for restore at newP
// without touching its files: it returns a copy whose subtasks are the
// standard ranges of LayoutParallelism, each holding a view (offset
// sub-range) of the one old handle containing it. Operator-state handles of
// an old subtask go to the first layout subtask inside its old range
// (broadcast-mode states to every one of them). The input is not modified.
func CanonicalViews(op *savepoint.OperatorState, newP int) (*savepoint.OperatorState, LayoutStats, error) {
	maxP := int(op.MaxParallelism)
	stats := LayoutStats{Operator: op.ID.String(), Kind: KindCanonical.String(), OldParallelism: int(op.Parallelism), NewParallelism: newP, MaxParallelism: maxP}
	if err := keygroups.CheckParallelism(maxP, newP); err != nil {
		return nil, stats, fmt.Errorf("rescale: operator %s: parallelism %d with max parallelism %d: %w", op.ID, newP, maxP, err)
	}
	oldP := int(op.Parallelism)
	if err := keygroups.CheckParallelism(maxP, oldP); err != nil {
		return nil, stats, fmt.Errorf("%w: operator %s: parallelism %d, max parallelism %d: %v", savepoint.ErrFormat, op.ID, oldP, maxP, err)
	}
	if op.FullyFinished {
		return nil, stats, fmt.Errorf("%w: operator %s is fully finished", ErrUnsupported, op.ID)
	}
	managed, err := collectCanonical(op, false)
	if err != nil {
		return nil, stats, err
	}
	raw, err := collectCanonical(op, true)
	if err != nil {
		return nil, stats, err
	}
	stats.OldHandles = len(managed) + len(raw)
	var bounds []int
	for _, r := range keygroups.Ranges(maxP, oldP) {
		bounds = append(bounds, r.Start)
	}
	for _, hs := range [][]oldHandle{managed, raw} {
		for _, h := range hs {
			bounds = append(bounds, h.r.Start, h.r.End+1)
		}
	}
	for _, st := range op.Subtasks {
		if st.Finished {
			return nil, stats, fmt.Errorf("%w: operator %s: subtask %d is finished; rescaling partly finished keyed operators is not supported", ErrUnsupported, op.ID, st.Index)
		}
		if st.Index < 0 || st.Index >= oldP {
			return nil, stats, fmt.Errorf("%w: operator %s: subtask index %d outside parallelism %d", savepoint.ErrFormat, op.ID, st.Index, oldP)
		}
		if len(st.InputChannels) > 0 || len(st.OutputChannels) > 0 {
			return nil, stats, fmt.Errorf("%w: operator %s subtask %d holds unaligned-checkpoint channel state", ErrUnsupported, op.ID, st.Index)
		}
	}
	k, err := LayoutParallelism(maxP, newP, bounds)
	if err != nil {
		return nil, stats, err
	}
	stats.LayoutParallelism = k

	out := *op
	out.Parallelism = int32(k)
	out.Subtasks = nil
	find := func(hs []oldHandle, r keygroups.Range) *savepoint.KeyGroupsHandle {
		i := sort.Search(len(hs), func(i int) bool { return hs[i].r.End >= r.Start })
		if i < len(hs) && hs[i].r.Start <= r.Start && r.End <= hs[i].r.End {
			return viewInline(hs[i].h, r)
		}
		return nil
	}
	firstOf := make(map[int]int) // old subtask -> first layout subtask in its range
	for _, st := range op.Subtasks {
		firstOf[st.Index] = -1
	}
	for i := 0; i < k; i++ {
		r := keygroups.RangeForSubtask(maxP, k, i)
		ns := &savepoint.SubtaskState{Index: i}
		if v := find(managed, r); v != nil {
			ns.ManagedKeyed = v
			stats.NewHandles++
		}
		if v := find(raw, r); v != nil {
			ns.RawKeyed = v
			stats.NewHandles++
		}
		o := keygroups.SubtaskForKeyGroup(maxP, oldP, r.Start)
		if old := op.Subtask(o); old != nil {
			if firstOf[o] < 0 {
				firstOf[o] = i
				ns.ManagedOperator, ns.RawOperator = old.ManagedOperator, old.RawOperator
			} else {
				ns.ManagedOperator, ns.RawOperator = broadcastOnly(old.ManagedOperator), broadcastOnly(old.RawOperator)
			}
		}
		if ns.ManagedKeyed != nil || ns.RawKeyed != nil || ns.ManagedOperator != nil || ns.RawOperator != nil {
			out.Subtasks = append(out.Subtasks, ns)
		}
	}
	return &out, stats, nil
}

// Assign returns the keyed handles Flink hands new subtask i when it
// restores op at parallelism p (StateAssignmentOperation): with p equal to
// the recorded parallelism, subtask i's own handle; otherwise every handle
// intersected with i's range — a view for key-groups handles, the whole
// handle for incremental ones. raw selects the raw keyed handles.
func Assign(op *savepoint.OperatorState, p, i int, raw bool) []savepoint.KeyedHandle {
	pick := func(st *savepoint.SubtaskState) savepoint.KeyedHandle {
		if raw {
			return st.RawKeyed
		}
		return st.ManagedKeyed
	}
	if p == int(op.Parallelism) {
		if st := op.Subtask(i); st != nil && pick(st) != nil {
			return []savepoint.KeyedHandle{pick(st)}
		}
		return nil
	}
	r := keygroups.RangeForSubtask(int(op.MaxParallelism), p, i)
	var out []savepoint.KeyedHandle
	for _, st := range op.Subtasks {
		kh := pick(st)
		if kh == nil {
			continue
		}
		s, e := kh.KeyGroupRange()
		x := r.Intersect(keygroups.Range{Start: s, End: e})
		if x.IsEmpty() {
			continue
		}
		switch h := kh.(type) {
		case *savepoint.KeyGroupsHandle:
			out = append(out, View(h, x))
		default:
			out = append(out, kh)
		}
	}
	return out
}
