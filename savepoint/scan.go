package savepoint

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// ErrNativeLayout is returned when keyed entries of a native (non-canonical)
// snapshot are requested; only their sizes and files can be listed.
var ErrNativeLayout = errclass.New(errclass.ErrUnsupported, "savepoint: keyed state is in a native (non-canonical) layout and cannot be decoded")

// Progress receives scan progress (key groups read). *progress.Bar fits.
type Progress interface {
	Add(n int64)
	SetTotal(total int64)
}

// ScanOptions selects what WalkKeyed and ScanSummary read.
type ScanOptions struct {
	// Operator selects one operator by id (hex), uid or name ("" = all).
	Operator string
	// State selects one keyed state by name ("" = all).
	State string
	// KeyGroupFrom..KeyGroupTo (inclusive) limits key groups; KeyGroupTo <
	// KeyGroupFrom means all.
	KeyGroupFrom, KeyGroupTo int
	// TTLMillis and NowMillis: with TTLMillis > 0, entries whose TTL
	// last-access time is before NowMillis-TTLMillis count as expired.
	TTLMillis, NowMillis int64
	// Mode is the entry decoding depth (default keyed.ModeDecode).
	Mode keyed.Mode
	// ReuseValues decodes values into recycled memory: the decoded Key,
	// Namespace, UserKey and Value of an entry are then valid only during
	// its callback (see keyed.ReadOptions.ReuseValues). Full decodes then
	// allocate nothing per entry.
	ReuseValues bool
	// SkipNative skips native handles instead of failing with
	// ErrNativeLayout.
	SkipNative bool
	// ReadAhead is the range-read buffer per open file (0 = default).
	ReadAhead int
	// Concurrency > 1 reads that many subtask files at once. WalkKeyed
	// then calls fn from several goroutines (one call at a time) and
	// entries of different subtasks interleave; leave it 0 when order
	// matters.
	Concurrency int
	// Workers > 1 decodes the key groups of each keyed file with that many
	// goroutines, each reading through its own range reader (see
	// DefaultWorkers). Entries still reach fn in the sequential order, on
	// the walking goroutine, and decoded values stay valid after the
	// callback unless ReuseValues is set; memory stays bounded (a few MiB
	// per worker).
	Workers int
	// Progress, when set, is told the number of key groups to read and
	// advanced per key group.
	Progress Progress
	// KeyType is the key serializer used for changelog handles whose
	// savepoint does not tell it (see ParseKeyType); nil: such keys stay
	// raw bytes.
	KeyType *serde.Snapshot

	headersOnly bool
}

func (o *ScanOptions) keyGroupSelected(kg int) bool {
	if o.headersOnly {
		return false
	}
	return o.KeyGroupTo < o.KeyGroupFrom || (kg >= o.KeyGroupFrom && kg <= o.KeyGroupTo)
}

// FindOperator finds an operator by hex id, uid or name.
func (sp *Savepoint) FindOperator(sel string) *OperatorState {
	for _, op := range sp.Meta.Operators {
		if op.ID.String() == strings.ToLower(sel) || (op.UID != "" && op.UID == sel) || (op.Name != "" && op.Name == sel) {
			return op
		}
	}
	if sel != "" {
		// A uid that is not stored in the metadata (V3/V4) still maps to
		// its id.
		id := OperatorIDFromUID(sel)
		for _, op := range sp.Meta.Operators {
			if op.ID == id {
				return op
			}
		}
	}
	return nil
}

// KeyedEntry is one entry handed to a WalkKeyed callback. The embedded
// *keyed.Entry's byte slices are valid only during the callback.
type KeyedEntry struct {
	Operator *OperatorState
	Subtask  int
	// File names the stream the entry was read from.
	File   string
	Header *keyed.Header
	*keyed.Entry
}

// handleLayout tells how the data of a key-groups handle is laid out.
func (sp *Savepoint) handleLayout(h KeyedHandle) string {
	switch h.HandleTag() {
	case TagSavepointKeyGroups:
		return LayoutCanonical
	case TagKeyGroups, TagKeyGroupsV2:
		switch sp.FormatType() {
		case FormatCanonical:
			return LayoutCanonical
		case FormatNative:
			return LayoutNativeHeap
		}
		// Checkpoints and V3 files: a Flink 1.15 RocksDB full checkpoint
		// used the canonical layout, heap checkpoints the native one. The
		// caller probes the first block.
		return ""
	case TagIncrementalKeyGroups, TagIncrementalKeyGroupsV2:
		return LayoutNativeRocksDB
	}
	return ""
}

// keyedFile is one opened keyed-state stream with its parsed header.
type keyedFile struct {
	obj    *Object
	header *keyed.Header
	hdrLen int64
	name   string
}

// openKeyed opens the stream of h and parses its header, or takes both
// the stream's size and the header from the savepoint's header cache when
// the stream was opened before (see headercache.go): a cached stream is
// then read only where its key groups are.
func (sp *Savepoint) openKeyed(ctx context.Context, h *KeyGroupsHandle, readAhead int) (*keyedFile, error) {
	loc, err := sp.Resolve(h.Delegate)
	if err != nil {
		return nil, err
	}
	var cache *headerCache
	var k headerKey
	if !loc.IsInline() {
		cache = sp.headers()
		k = headerKey{store: sp.StoreOf(loc).String(), key: loc.Key, start: loc.Start, size: loc.Size, end: keyedHeaderEnd(h)}
		if c := cache.get(k); c != nil {
			obj := sp.objectOfSize(ctx, loc, c.size, readAhead)
			return &keyedFile{obj: obj, header: c.header, hdrLen: c.hdrLen, name: loc.Name}, nil
		}
	}
	obj, err := sp.OpenLocation(ctx, loc, readAhead)
	if err != nil {
		return nil, err
	}
	name := obj.Loc.Name
	hdr, n, err := keyed.ReadHeaderWithin(io.NewSectionReader(obj, 0, obj.Size()), name, keyedHeaderEndIn(h, obj.Size()))
	if err != nil {
		return nil, err
	}
	if cache != nil {
		cache.put(&cachedHeader{k: k, size: obj.Size(), header: hdr, hdrLen: n})
	}
	return &keyedFile{obj: obj, header: hdr, hdrLen: n, name: name}, nil
}

// keyedHeaderEnd is where the header of h's stream ends: its first
// non-zero key-group offset (0 when there is none). The header parser uses
// it to step over serializer snapshots it cannot read.
func keyedHeaderEnd(h *KeyGroupsHandle) int64 {
	var end int64
	for _, off := range h.Offsets {
		if off > 0 && (end == 0 || off < end) {
			end = off
		}
	}
	return end
}

// keyedHeaderEndIn is keyedHeaderEnd for h's stream of size bytes: a
// stream none of whose key groups holds data is its header alone (the
// canonical writers write nothing after it), so the header ends at size.
// Where that is wrong (a file shared by several handles), the bounded
// parse fails and the header is parsed without the end.
func keyedHeaderEndIn(h *KeyGroupsHandle, size int64) int64 {
	if end := keyedHeaderEnd(h); end > 0 {
		return end
	}
	return size
}

// operatorHeaderEnd is the smallest state offset of an operator state
// handle (0 when there is none): the header ends there.
// OperatorHeaderEnd returns the smallest positive offset of the states of
// oh: where the operator-state header of its stream ends at the latest
// (see keyed.ReadOperatorHeaderWithin), 0 when no state has one.
func OperatorHeaderEnd(oh *OperatorHandle) int64 { return operatorHeaderEnd(oh) }

func operatorHeaderEnd(oh *OperatorHandle) int64 {
	var end int64
	for _, m := range oh.States {
		for _, off := range m.Offsets {
			if off > 0 && (end == 0 || off < end) {
				end = off
			}
		}
	}
	return end
}

// probeNativeHeap reports whether the first non-empty key group of h is in
// the heap backend's own layout rather than the canonical one (both use
// handle tag 12 in checkpoints). A heap key group starts with its i32
// key-group id; when it does, the block is parsed both ways (each check
// fails fast on the other layout) and the layout that reads it whole wins.
// When neither does, the id decides (the read then reports the damage).
func probeNativeHeap(f *keyedFile, h *KeyGroupsHandle, maxParallelism int) bool {
	ends := blockEnds(h)
	for i, off := range h.Offsets {
		if off == 0 {
			continue
		}
		var b [4]byte
		if _, err := f.obj.ReadAt(b[:], off); err != nil && err != io.EOF {
			return false
		}
		kg := int(h.StartKeyGroup) + i
		if int(int32(binary.BigEndian.Uint32(b[:]))) != kg {
			return false
		}
		end := ends.after(off)
		if end == 0 || end > f.obj.Size() {
			end = f.obj.Size()
		}
		parses := func(heap bool) bool {
			var br keyed.BlockReader
			o := keyed.ReadOptions{MaxParallelism: maxParallelism, Mode: keyed.ModeValidate, End: end, Heap: heap}
			return br.Read(f.obj, f.obj.Size(), f.name, f.header, kg, off, o, func(*keyed.Entry) error { return nil }) == nil
		}
		if parses(true) {
			return true
		}
		return !parses(false)
	}
	return false
}

// WalkKeyed decodes the keyed entries selected by o and calls fn for each,
// in metadata order (operator, subtask) and ascending key group. Native
// handles fail with ErrNativeLayout unless o.SkipNative.
func (sp *Savepoint) WalkKeyed(ctx context.Context, o ScanOptions, fn func(*KeyedEntry) error) error {
	return sp.walkKeyed(ctx, o, nil, fn)
}

// walkKeyed also reports every opened header to onHeader (may be nil).
func (sp *Savepoint) walkKeyed(ctx context.Context, o ScanOptions, onHeader func(op *OperatorState, subtask int, f *keyedFile, layout string), fn func(*KeyedEntry) error) error {
	var ops []*OperatorState
	if o.Operator != "" {
		op := sp.FindOperator(o.Operator)
		if op == nil {
			return fmt.Errorf("savepoint: %s: operator %q not found", sp.Name(), o.Operator)
		}
		ops = []*OperatorState{op}
	} else {
		ops = sp.Meta.Operators
	}
	type task struct {
		op *OperatorState
		st *SubtaskState
	}
	var tasks []task
	var total int64
	for _, op := range ops {
		for _, st := range op.Subtasks {
			if st.ManagedKeyed == nil {
				continue
			}
			tasks = append(tasks, task{op, st})
			if h, ok := st.ManagedKeyed.(*KeyGroupsHandle); ok {
				for i, off := range h.Offsets {
					if off != 0 && o.keyGroupSelected(int(h.StartKeyGroup)+i) {
						total++
					}
				}
			}
		}
	}
	var mu sync.Mutex // serializes onHeader, fn and progress in parallel walks
	if o.Progress != nil {
		o.Progress.SetTotal(total)
	}
	conc := o.Concurrency
	if conc <= 1 || len(tasks) <= 1 {
		var br keyed.BlockReader
		for _, t := range tasks {
			if err := sp.walkSubtask(ctx, o, t.op, t.st, &br, nil, onHeader, fn); err != nil {
				return err
			}
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for _, t := range tasks {
		g.Go(func() error {
			var br keyed.BlockReader
			return sp.walkSubtask(gctx, o, t.op, t.st, &br, &mu, onHeader, fn)
		})
	}
	return g.Wait()
}

// walkSubtask walks one subtask's managed keyed handle. With mu set, the
// callbacks and progress run under it (parallel walks).
func (sp *Savepoint) walkSubtask(ctx context.Context, o ScanOptions, op *OperatorState, st *SubtaskState, br *keyed.BlockReader, mu *sync.Mutex,
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
	if err := ctx.Err(); err != nil {
		return err
	}
	if ch, ok := st.ManagedKeyed.(*ChangelogHandle); ok {
		return sp.walkChangelog(ctx, o, op, st, ch, br, mu, onHeader, fn)
	}
	layout := sp.handleLayout(st.ManagedKeyed)
	h, ok := st.ManagedKeyed.(*KeyGroupsHandle)
	if !ok || layout == LayoutNativeRocksDB {
		if onHeader != nil {
			lock()
			onHeader(op, st.Index, nil, LayoutNativeRocksDB)
			unlock()
		}
		if o.SkipNative {
			return nil
		}
		return fmt.Errorf("%w: %s: operator %s subtask %d has a RocksDB native handle (tag %d)", ErrNativeLayout, sp.Name(), op.ID, st.Index, st.ManagedKeyed.HandleTag())
	}
	f, err := sp.openKeyed(ctx, h, o.ReadAhead)
	if err != nil {
		return err
	}
	layout = fileLayout(layout, f, h, int(op.MaxParallelism))
	if onHeader != nil {
		lock()
		onHeader(op, st.Index, f, layout)
		unlock()
	}
	if o.State != "" && f.header.State(o.State) == nil {
		return nil
	}
	ke := &KeyedEntry{Operator: op, Subtask: st.Index, File: f.name, Header: f.header}
	ropts := keyed.ReadOptions{MaxParallelism: int(op.MaxParallelism), Mode: o.Mode, ReuseValues: o.ReuseValues, Heap: layout == LayoutNativeHeap}
	if o.Workers > 1 {
		var kgs []int
		var offs []int64
		for i, off := range h.Offsets {
			if kg := int(h.StartKeyGroup) + i; off != 0 && o.keyGroupSelected(kg) {
				kgs, offs = append(kgs, kg), append(offs, off)
			}
		}
		if len(kgs) > 1 {
			return sp.walkParallel(ctx, o, f, h, kgs, offs, o.Workers, ropts, ke, lock, unlock, fn)
		}
	}
	ends := blockEnds(h)
	for i, off := range h.Offsets {
		kg := int(h.StartKeyGroup) + i
		if off == 0 || !o.keyGroupSelected(kg) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		ropts.ExpectedEnd = ends.after(off)
		err := br.Read(f.obj, f.obj.Size(), f.name, f.header, kg, off, ropts, func(e *keyed.Entry) error {
			if o.State != "" && e.State.Name != o.State {
				return nil
			}
			ke.Entry = e
			lock()
			defer unlock()
			return fn(ke)
		})
		if err != nil {
			return err
		}
		if o.Progress != nil {
			lock()
			o.Progress.Add(1)
			unlock()
		}
	}
	return nil
}

// blockOffsets are the sorted block offsets of a key-groups handle.
type blockOffsets []int64

func blockEnds(h *KeyGroupsHandle) blockOffsets {
	out := make(blockOffsets, 0, len(h.Offsets))
	for _, off := range h.Offsets {
		if off > 0 {
			out = append(out, off)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// after returns the first block offset past off (where off's block is
// expected to end), 0 when none.
func (b blockOffsets) after(off int64) int64 {
	i := sort.Search(len(b), func(i int) bool { return b[i] > off })
	if i == len(b) {
		return 0
	}
	return b[i]
}

// errStop ends a walk early without error.
var errStop = errors.New("stop")

// IsStop reports whether err is the sentinel a callback returns to stop a
// walk early (see StopWalk).
func IsStop(err error) bool { return errors.Is(err, errStop) }

// StopWalk is returned by a WalkKeyed callback to end the walk; WalkKeyed
// then returns it, and IsStop recognizes it.
var StopWalk = errStop

// StateKind names a keyed state's kind for reports: VALUE, LIST, MAP,
// REDUCING, AGGREGATING, ... for key/value states, TIMERS for timer
// queues ("_timer_state/..."), PRIORITY_QUEUE for other queues.
func StateKind(m *keyed.StateMeta) string { return kindOf(m) }

func kindOf(m *keyed.StateMeta) string {
	if m.Type == keyed.PriorityQueue {
		if strings.HasPrefix(m.Name, "_timer_state/") {
			return "TIMERS"
		}
		return "PRIORITY_QUEUE"
	}
	if m.Kind != "" {
		return m.Kind
	}
	return m.Type.String()
}

// SetStateTypes fills the type columns of s (key, namespace, user key and
// value types, TTL wrappers removed) from a state's meta info and the key
// serializer of its header.
func SetStateTypes(s *StateSummary, key *serde.Snapshot, m *keyed.StateMeta) {
	s.KeyType = typeString(key)
	s.ValueType = typeString(m.Value)
	if m.Type != keyed.PriorityQueue {
		s.NamespaceType = typeString(m.Namespace)
	}
	switch kindOf(m) {
	case "LIST":
		if m.Element != nil {
			s.ValueType = "LIST<" + typeString(m.Element) + ">"
		}
	case "MAP":
		s.UserKeyType = typeString(m.UserKey)
		if m.UserValue != nil {
			s.ValueType = typeString(m.UserValue)
		}
	}
	if m.TTL {
		s.ValueType = stripTTL(s.ValueType)
	}
}

func typeString(s *serde.Snapshot) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// summaryColumns lets ScanSummary read TTL statistics with ScanColumns
// where every selected state is columnar (tests compare both paths).
var summaryColumns = true

// stateAcc accumulates one state's statistics in ScanSummary.
type stateAcc struct {
	s   *StateSummary
	kgs map[int]int64
}

// ScanSummary reads the keyed state selected by o and fills per-state types
// and statistics of sum (made by Summarize for the same savepoint). Native
// handles are skipped (their header, when readable, still lists the
// states). o.Workers 0 means DefaultWorkers here (1 reads sequentially).
func ScanSummary(ctx context.Context, sp *Savepoint, sum *Summary, o ScanOptions) error {
	if err := scanChangelogFiles(ctx, sp, sum, o); err != nil {
		return err
	}
	o.SkipNative = true
	if o.Workers == 0 {
		// The statistics do not depend on the order of entries, and the
		// callback keeps no entry: decode with every core.
		o.Workers = DefaultWorkers()
	}
	if o.NowMillis == 0 {
		o.NowMillis = time.Now().UnixMilli()
	}
	sum.TTLMillis, sum.NowMillis = o.TTLMillis, o.NowMillis
	byOp := map[*OperatorState]*OperatorSummary{}
	for i, op := range sp.Meta.Operators {
		byOp[op] = sum.Operators[i]
	}
	states := map[*OperatorSummary]map[string]*stateAcc{}
	opKG := map[*OperatorSummary]map[int]int64{}
	opKGTotal := map[*OperatorSummary]int{}
	needTTL := false
	columnar := true // every selected state of every canonical file
	onHeader := func(op *OperatorState, subtask int, f *keyedFile, layout string) {
		os := byOp[op]
		if f == nil {
			return
		}
		if layout == LayoutCanonical {
			for _, m := range f.header.States {
				if (o.State == "" || m.Name == o.State) && !m.Columnar() {
					columnar = false
				}
			}
		} else {
			// Heap-layout files decode entry by entry only.
			columnar = false
		}
		if states[os] == nil {
			states[os] = map[string]*stateAcc{}
			opKG[os] = map[int]int64{}
		}
		switch h := op.Subtask(subtask).ManagedKeyed.(type) {
		case *KeyGroupsHandle:
			opKGTotal[os] += len(h.Offsets)
		case *ChangelogHandle:
			if layout == LayoutChangelog {
				opKGTotal[os] += int(h.NumKeyGroups)
			}
		}
		if layout == LayoutCanonical && os.KeyedLayout == LayoutNativeHeap {
			// Metadata alone could not tell (tag 12 without a savepoint
			// format); the block probe found the canonical layout.
			os.KeyedLayout = LayoutCanonical
		} else if layout == LayoutNativeHeap && os.KeyedLayout == LayoutCanonical {
			os.KeyedLayout = LayoutNativeHeap
		}
		for _, m := range f.header.States {
			if o.State != "" && m.Name != o.State {
				continue
			}
			if states[os][m.Name] != nil {
				continue
			}
			s := &StateSummary{Name: m.Name, Kind: kindOf(m), TTL: m.TTL, Partial: m.Partial}
			SetStateTypes(s, f.header.KeySerializer, m)
			if m.TTL {
				needTTL = true
			}
			states[os][m.Name] = &stateAcc{s: s, kgs: map[int]int64{}}
			os.KeyedStates = append(os.KeyedStates, s)
		}
	}
	// Headers first (cheap), so the decode mode can depend on TTL.
	probe := o
	probe.Progress, probe.headersOnly = nil, true
	if err := sp.walkKeyed(ctx, probe, onHeader, func(*KeyedEntry) error { return nil }); err != nil {
		return err
	}
	if needTTL && columnar && summaryColumns {
		// TTL timestamps from typed column batches: every entry checked as
		// by a full decode, no per-entry hand-off.
		err := sp.ScanColumns(ctx, o, func(b *ColumnBatch) error {
			os := byOp[b.Operator]
			acc := states[os][b.State.Name]
			if acc == nil {
				return nil
			}
			s := acc.s
			n := int64(b.Len())
			s.Entries += n
			s.Bytes += b.Bytes
			acc.kgs[b.KeyGroup] += n
			opKG[os][b.KeyGroup] += n
			for _, ts := range b.Values.TTL {
				s.TTLEntries++
				if s.TTLOldest == nil || ts < *s.TTLOldest {
					v := ts
					s.TTLOldest = &v
				}
				if s.TTLNewest == nil || ts > *s.TTLNewest {
					v := ts
					s.TTLNewest = &v
				}
				s.addAge(sum.NowMillis - ts)
				if o.TTLMillis > 0 && ts+o.TTLMillis <= o.NowMillis {
					s.Expired++
				}
			}
			return nil
		}, nil)
		if err != nil {
			return err
		}
		return finishSummary(ctx, sp, sum, o, states, opKG, opKGTotal)
	}
	mode := keyed.ModeRaw
	if needTTL {
		// Validation yields the TTL timestamps without building values.
		mode = keyed.ModeValidate
	}
	o.Mode = mode
	err := sp.walkKeyed(ctx, o, nil, func(e *KeyedEntry) error {
		os := byOp[e.Operator]
		acc := states[os][e.State.Name]
		if acc == nil {
			return nil
		}
		s := acc.s
		s.Entries++
		s.Bytes += int64(len(e.KeyBytes) + len(e.ValueBytes))
		acc.kgs[e.KeyGroup]++
		opKG[os][e.KeyGroup]++
		if e.TTLTimestamp != nil {
			ts := *e.TTLTimestamp
			s.TTLEntries++
			if s.TTLOldest == nil || ts < *s.TTLOldest {
				s.TTLOldest = &ts
			}
			if s.TTLNewest == nil || ts > *s.TTLNewest {
				v := ts
				s.TTLNewest = &v
			}
			s.addAge(sum.NowMillis - ts)
			if o.TTLMillis > 0 && ts+o.TTLMillis <= o.NowMillis {
				s.Expired++
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return finishSummary(ctx, sp, sum, o, states, opKG, opKGTotal)
}

// finishSummary completes ScanSummary from the accumulated statistics.
func finishSummary(ctx context.Context, sp *Savepoint, sum *Summary, o ScanOptions, states map[*OperatorSummary]map[string]*stateAcc,
	opKG map[*OperatorSummary]map[int]int64, opKGTotal map[*OperatorSummary]int) error {
	for os, m := range states {
		for _, acc := range m {
			acc.s.KeyGroups = NewKeyGroupDist(acc.kgs, opKGTotal[os])
		}
		os.KeyGroups = NewKeyGroupDist(opKG[os], opKGTotal[os])
		sort.SliceStable(os.KeyedStates, func(i, j int) bool { return os.KeyedStates[i].Name < os.KeyedStates[j].Name })
	}
	if err := scanOperatorStateTypes(ctx, sp, sum, o); err != nil {
		return err
	}
	inferFormat(sp, sum, true)
	sum.Scanned = true
	return nil
}

// scanOperatorStateTypes reads the header of one operator-state stream per
// operator to name the element types of its states.
func scanOperatorStateTypes(ctx context.Context, sp *Savepoint, sum *Summary, o ScanOptions) error {
	for i, op := range sp.Meta.Operators {
		os := sum.Operators[i]
		if len(os.OperatorStates) == 0 || (o.Operator != "" && sp.FindOperator(o.Operator) != op) {
			continue
		}
		missing := func() bool {
			for _, x := range os.OperatorStates {
				if x.Type == "" {
					return true
				}
			}
			return false
		}
		for _, st := range op.Subtasks {
			if !missing() {
				break
			}
			oh := st.ManagedOperator
			if oh == nil || oh.Delegate == nil || oh.Delegate.Tag == TagEmptySegmentFile {
				continue
			}
			obj, err := sp.OpenStream(ctx, oh.Delegate, o.ReadAhead)
			if err != nil {
				return err
			}
			if obj.Size() == 0 {
				continue
			}
			hdr, _, err := keyed.ReadOperatorHeaderWithin(io.NewSectionReader(obj, 0, obj.Size()), obj.Loc.Name, operatorHeaderEnd(oh))
			if err != nil {
				return err
			}
			for _, x := range os.OperatorStates {
				m := hdr.State(x.Name)
				if x.Type != "" || m == nil {
					continue
				}
				x.Partial = m.Partial
				if m.Type == keyed.Broadcast {
					x.Type = "MAP<" + typeString(m.Key) + ", " + typeString(m.Value) + ">"
					x.MapEntries = -1
					for _, sm := range oh.States {
						if sm.Name != x.Name || len(sm.Offsets) != 1 {
							continue
						}
						var b [4]byte
						if !hdr.Compressed {
							if _, err := obj.ReadAt(b[:], sm.Offsets[0]); err == nil {
								x.MapEntries = int(int32(binary.BigEndian.Uint32(b[:])))
							}
							continue
						}
						refs := make([]keyed.OperatorStateRef, 0, len(oh.States))
						for _, s := range oh.States {
							refs = append(refs, keyed.OperatorStateRef{Name: s.Name, Mode: int(s.Mode), Offsets: s.Offsets})
						}
						if r, err := keyed.ReadOperatorRegion(obj, obj.Size(), obj.Loc.Name, hdr, refs, sm.Offsets[0]); err == nil && len(r) >= 4 {
							x.MapEntries = int(int32(binary.BigEndian.Uint32(r)))
						}
					}
				} else {
					x.Type = typeString(m.Value)
				}
			}
		}
	}
	return nil
}

// stripTTL removes the TTL<...> wrapper from a type string (TTL is
// reported separately).
func stripTTL(t string) string {
	if strings.HasPrefix(t, "TTL<") && strings.HasSuffix(t, ">") {
		return t[4 : len(t)-1]
	}
	if strings.HasPrefix(t, "LIST<TTL<") && strings.HasSuffix(t, ">>") {
		return "LIST<" + t[9:len(t)-2] + ">"
	}
	return t
}

// fileLayout is layout when the handle already told it, else what the
// keyed file's blocks show: the hashmap backend's native layout or the
// canonical one.
func fileLayout(layout string, f *keyedFile, h *KeyGroupsHandle, maxParallelism int) string {
	if layout != "" {
		return layout
	}
	if probeNativeHeap(f, h, maxParallelism) {
		return LayoutNativeHeap
	}
	return LayoutCanonical
}
