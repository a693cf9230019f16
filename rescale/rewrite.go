package rescale

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sort"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// MaxRewriteBytes bounds the key and value bytes a re-key holds in memory
// per operator (entries of one new key group may come from any old one).
const MaxRewriteBytes = 1 << 30

// rewriter rewrites canonical keyed operators into new files: re-keyed into
// a new max parallelism and/or merged to one file per new subtask.
type rewriter struct {
	ctx     context.Context
	req     Request
	res     *Result
	own     map[*savepoint.StreamHandle]bool
	written []s3.Written
	checks  []func() error
}

func newRewriter(ctx context.Context, req Request, res *Result, own map[*savepoint.StreamHandle]bool) *rewriter {
	return &rewriter{ctx: ctx, req: req, res: res, own: own}
}

// srcStream is one keyed handle being rewritten: a key-groups handle
// (canonical or heap layout) read here, or a native handle whose entries
// a NativeSource decodes.
type srcStream struct {
	h   *savepoint.KeyGroupsHandle
	obj *savepoint.Object
	hdr *keyed.Header
	// name names the stream (or the native handle's meta state).
	name string
	// heap: the stream is in the heap backend's key-group layout.
	heap bool
	// native, when set, yields the entries instead of h.
	native *NativeHandle
	// subtask is the source subtask the handle belongs to.
	subtask int
}

// NativeHandle is one native (incremental RocksDB) keyed handle as a
// NativeSource opens it: its meta-state header, and a walk that calls fn
// for every entry in the canonical shape (KeyBytes with the key-group
// prefix, ValueBytes as a canonical savepoint holds them; decoded parts
// set as keyed.ModeDecode gives them). Entries need not come in order and
// are valid only during fn.
type NativeHandle struct {
	Subtask int
	Header  *keyed.Header
	// Name names the handle in messages (e.g. its meta-state stream).
	Name string
	Walk func(ctx context.Context, fn func(*keyed.Entry) error) error
	// Skipped, when set, reports after Walk how many entries it left out
	// because their key group lies outside the handle's range (RocksDB
	// instances keep such entries after a rescale until compaction; the
	// subtask owning the key group holds its own copy).
	Skipped func() int64
}

// NativeSource opens the native keyed handles of one operator of src
// (Options.Canonical). Package convert provides one backed by RocksDB.
type NativeSource func(ctx context.Context, src *savepoint.Savepoint, op *savepoint.OperatorState) ([]*NativeHandle, error)

type rwEntry struct {
	kg, state int
	key, val  []byte
}

// unifiedHeader picks the header declaring the most states and maps every
// stream's state ids onto it by name; streams whose states are not all in
// it (or differ in kind) are refused.
func unifiedHeader(op *savepoint.OperatorState, ss []*srcStream) (*keyed.Header, [][]int, error) {
	var base *keyed.Header
	for _, s := range ss {
		if base == nil || len(s.hdr.States) > len(base.States) {
			base = s.hdr
		}
	}
	maps := make([][]int, len(ss))
	for i, s := range ss {
		maps[i] = make([]int, len(s.hdr.States))
		for j, st := range s.hdr.States {
			b := base.State(st.Name)
			if b == nil || b.Kind != st.Kind || b.Type != st.Type {
				return nil, nil, fmt.Errorf("%w: operator %s: state %q of %s is not declared alike in every file; files cannot be merged (rescale without --merge-files/--max-parallelism instead)",
					ErrUnsupported, op.ID, st.Name, s.name)
			}
			maps[i][j] = b.ID
		}
	}
	return base, maps, nil
}

// keyHash returns the Java hashCode of an entry's key.
func keyHash(rowKey bool, e *keyed.Entry) (int32, error) {
	if rowKey {
		b := e.KeyPart
		if e.State.Type == keyed.PriorityQueue {
			if len(b) < 8 {
				return 0, fmt.Errorf("timer element of %d bytes", len(b))
			}
			b = b[8:]
		}
		if len(b) < 4 {
			return 0, fmt.Errorf("row key of %d bytes", len(b))
		}
		n := binary.BigEndian.Uint32(b)
		if int64(n) > int64(len(b)-4) {
			return 0, fmt.Errorf("row key length %d exceeds %d bytes", n, len(b)-4)
		}
		return keygroups.HashRow(b[4 : 4+n]), nil
	}
	return javaHashCode(e.Key, 0)
}

func javaHashCode(v serde.Value, depth int) (int32, error) {
	if depth > 16 {
		return 0, fmt.Errorf("key nested too deeply")
	}
	switch x := v.(type) {
	case int32:
		return keygroups.HashInt(x), nil
	case int64:
		return keygroups.HashLong(x), nil
	case int16:
		return int32(x), nil
	case int8:
		return int32(x), nil
	case bool:
		return keygroups.HashBool(x), nil
	case float32:
		return keygroups.HashFloat(x), nil
	case float64:
		return keygroups.HashDouble(x), nil
	case string:
		return keygroups.HashString(x), nil
	case serde.Char:
		return int32(x), nil
	case serde.Tuple:
		hs := make([]int32, len(x))
		for i, f := range x {
			h, err := javaHashCode(f, depth+1)
			if err != nil {
				return 0, err
			}
			hs[i] = h
		}
		return keygroups.HashTuple(hs...), nil
	}
	return 0, fmt.Errorf("key type %T has no known Java hashCode (supported: SQL key rows, primitives, String, Tuples)", v)
}

// operator rewrites op for parallelism n and max parallelism newMaxP. A
// KindNative operator's entries come from Request.Native; their digest is
// taken while reading, as the source cannot be read back without it.
func (w *rewriter) operator(op *savepoint.OperatorState, n, newMaxP int, kind OperatorKind) (*savepoint.OperatorState, LayoutStats, error) {
	ctx := w.ctx
	oldMaxP := int(op.MaxParallelism)
	stats := LayoutStats{Operator: op.ID.String(), Kind: kind.String(), OldParallelism: int(op.Parallelism), NewParallelism: n, MaxParallelism: newMaxP}
	if err := keygroups.CheckParallelism(newMaxP, n); err != nil {
		return nil, stats, fmt.Errorf("rescale: operator %s: parallelism %d with max parallelism %d: %w", op.ID, n, newMaxP, err)
	}
	if op.FullyFinished {
		return nil, stats, fmt.Errorf("%w: operator %s is fully finished", ErrUnsupported, op.ID)
	}
	hasOpState := false
	for _, st := range op.Subtasks {
		if st.Finished || st.RawKeyed != nil || len(st.InputChannels) > 0 || len(st.OutputChannels) > 0 {
			return nil, stats, fmt.Errorf("%w: operator %s subtask %d: finished, raw keyed or channel state cannot be rewritten", ErrUnsupported, op.ID, st.Index)
		}
		hasOpState = hasOpState || st.ManagedOperator != nil || st.RawOperator != nil
	}
	// Operator-state handles stay on their subtask index: the layout needs
	// at least as many subtasks as the source had.
	k := n
	if hasOpState {
		for k < int(op.Parallelism) {
			k += n
		}
		if k > newMaxP {
			return nil, stats, fmt.Errorf("%w: operator %s has operator state on %d subtasks; no multiple of %d up to max parallelism %d holds them", ErrUnsupported, op.ID, op.Parallelism, n, newMaxP)
		}
	}
	stats.LayoutParallelism = k

	// Open every source stream and unify the headers.
	var ss []*srcStream
	var want *digest.Digest
	if kind == KindNative {
		if w.req.Native == nil {
			return nil, stats, fmt.Errorf("%w: operator %s holds native (incremental RocksDB) handles; rewriting them needs RocksDB support", ErrUnsupported, op.ID)
		}
		nhs, err := w.req.Native(ctx, w.req.Src, op)
		if err != nil {
			return nil, stats, err
		}
		for _, nh := range nhs {
			ss = append(ss, &srcStream{hdr: nh.Header, name: nh.Name, native: nh, subtask: nh.Subtask})
		}
		want = digest.New()
	} else {
		hs, err := collectCanonical(op, false)
		if err != nil {
			return nil, stats, err
		}
		for _, h := range hs {
			obj, err := w.req.Src.OpenStream(ctx, h.h.Delegate, 0)
			if err != nil {
				return nil, stats, err
			}
			hdr, _, err := keyed.ReadHeader(io.NewSectionReader(obj, 0, obj.Size()), obj.Loc.Name)
			if err != nil {
				return nil, stats, err
			}
			layout, err := w.req.Src.KeyedLayout(ctx, h.h, oldMaxP)
			if err != nil {
				return nil, stats, err
			}
			// Heap-layout files (hashmap checkpoints and NATIVE savepoints)
			// read as canonical entries; the output is canonical.
			ss = append(ss, &srcStream{h: h.h, obj: obj, hdr: hdr, name: obj.Loc.Name, heap: layout == savepoint.LayoutNativeHeap, subtask: h.subtask})
		}
	}
	stats.OldHandles = len(ss)
	out := *op
	out.Parallelism = int32(k)
	out.MaxParallelism = int32(newMaxP)
	out.Subtasks = nil
	if len(ss) == 0 {
		return &out, stats, nil
	}
	base, idmap, err := unifiedHeader(op, ss)
	if err != nil {
		return nil, stats, err
	}
	rowKey := base.KeySerializer != nil && (base.KeySerializer.Class == serde.ClassRowData || base.KeySerializer.Class == serde.ClassBinaryRow)
	oldW, newW := keygroups.PrefixWidth(oldMaxP), keygroups.PrefixWidth(newMaxP)
	rekey := newMaxP != oldMaxP
	mode := keyed.ModeRaw
	if rekey {
		mode = keyed.ModeDecode
		if rowKey {
			mode = keyed.ModeSplit
		}
	}
	// Read every entry, placed in its new key group. from[t] is the one
	// source stream subtask t's entries come from (-1 none yet, -2 more).
	byTask := make([][]rwEntry, k)
	from := make([]int, k)
	for t := range from {
		from[t] = -1
	}
	var held int64
	place := func(i int, s *srcStream, kg int, e *keyed.Entry) error {
		nkg := kg
		if rekey {
			h, err := keyHash(rowKey, e)
			if err != nil {
				return fmt.Errorf("%w: %s key group %d offset %d: %v", ErrUnsupported, s.name, kg, e.Offset, err)
			}
			nkg = keygroups.KeyGroupFor(h, newMaxP)
		}
		if len(e.KeyBytes) < oldW {
			return fmt.Errorf("%w: %s key group %d offset %d: key shorter than its prefix", savepoint.ErrFormat, s.name, kg, e.Offset)
		}
		held += int64(len(e.KeyBytes) + len(e.ValueBytes))
		if held > MaxRewriteBytes {
			return fmt.Errorf("%w: operator %s: more than %d bytes of entries to rewrite in memory", ErrUnsupported, op.ID, MaxRewriteBytes)
		}
		key := keygroups.AppendPrefix(make([]byte, 0, newW+len(e.KeyBytes)-oldW), nkg, newW)
		key = append(key, e.KeyBytes[oldW:]...)
		t := keygroups.SubtaskForKeyGroup(newMaxP, k, nkg)
		byTask[t] = append(byTask[t], rwEntry{kg: nkg, state: idmap[i][e.State.ID], key: key, val: append([]byte(nil), e.ValueBytes...)})
		if from[t] == -1 {
			from[t] = i
		} else if from[t] != i {
			from[t] = -2
		}
		return nil
	}
	var skipped int64
	for i, s := range ss {
		if s.native != nil {
			err := s.native.Walk(ctx, func(e *keyed.Entry) error {
				if e.KeyGroup < 0 || e.KeyGroup >= oldMaxP || e.State == nil || e.State.ID < 0 || e.State.ID >= len(idmap[i]) {
					return fmt.Errorf("%w: %s: entry of key group %d outside max parallelism %d or of an undeclared state", savepoint.ErrFormat, s.name, e.KeyGroup, oldMaxP)
				}
				want.AddKeyed(op.ID.String(), e)
				return place(i, s, e.KeyGroup, e)
			})
			if err != nil {
				return nil, stats, err
			}
			if s.native.Skipped != nil {
				skipped += s.native.Skipped()
			}
			continue
		}
		st, en := s.h.KeyGroupRange()
		for kg := st; kg <= en; kg++ {
			off := s.h.Offset(kg)
			if off == 0 {
				continue
			}
			err := keyed.ReadKeyGroupWith(s.obj, s.obj.Size(), s.obj.Loc.Name, s.hdr, kg, off, keyed.ReadOptions{MaxParallelism: oldMaxP, Mode: mode, Heap: s.heap}, func(e *keyed.Entry) error {
				return place(i, s, kg, e)
			})
			if err != nil {
				return nil, stats, err
			}
		}
	}
	if skipped > 0 {
		stats.Note = fmt.Sprintf("%d entries outside their native handle's key-group range skipped (another subtask holds them)", skipped)
	}
	// Write one stream per layout subtask. A conversion (Canonical) keeps
	// each subtask's own header (the same serializer snapshots and state
	// order as its source file; ids mapped back) and writes no keyed file
	// for a subtask that had none.
	unified := flinkwrite.Header{Compressed: base.Compressed, Raw: base.Raw, RawNumStates: len(base.States)}
	bySubtask := map[int]int{}
	for i, s := range ss {
		bySubtask[s.subtask] = i
	}
	var subtasks []*savepoint.SubtaskState
	for t := 0; t < k; t++ {
		if err := ctx.Err(); err != nil {
			return nil, stats, err
		}
		r := keygroups.RangeForSubtask(newMaxP, k, t)
		es := byTask[t]
		hdr := unified
		if w.req.Canonical && !rekey {
			i, ok := bySubtask[t]
			if !ok && len(es) == 0 {
				subtasks = append(subtasks, &savepoint.SubtaskState{Index: t})
				continue
			}
			if ok && (from[t] == -1 || from[t] == i) {
				s := ss[i]
				hdr = flinkwrite.Header{Compressed: s.hdr.Compressed, Raw: s.hdr.Raw, RawNumStates: len(s.hdr.States)}
				back := make(map[int]int, len(idmap[i]))
				for own, u := range idmap[i] {
					back[u] = own
				}
				for j := range es {
					es[j].state = back[es[j].state]
				}
			}
		}
		sort.SliceStable(es, func(a, b int) bool {
			if es[a].kg != es[b].kg {
				return es[a].kg < es[b].kg
			}
			if es[a].state != es[b].state {
				return es[a].state < es[b].state
			}
			return bytes.Compare(es[a].key, es[b].key) < 0
		})
		var buf bytes.Buffer
		kw, err := flinkwrite.NewKeyedWriter(&buf, hdr, r, newMaxP)
		if err != nil {
			return nil, stats, err
		}
		for _, e := range es {
			if err := kw.Add(e.kg, e.state, e.key, e.val); err != nil {
				return nil, stats, fmt.Errorf("rescale: operator %s: %w", op.ID, err)
			}
		}
		if err := kw.Close(); err != nil {
			return nil, stats, err
		}
		byTask[t] = nil
		name := fmt.Sprintf("keyed-%s-%d-of-%d", op.ID, t, k)
		wr, err := s3.PutHashed(ctx, w.req.Dst, name, bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			return nil, stats, fmt.Errorf("rescale: writing %s: %w", name, err)
		}
		if w.req.Progress != nil {
			w.req.Progress.Add(wr.Size)
		}
		w.written = append(w.written, wr)
		w.res.RewrittenBytes += wr.Size
		w.res.NewFiles++
		d := &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: name, Size: wr.Size}
		w.own[d] = true
		ns := &savepoint.SubtaskState{Index: t, ManagedKeyed: &savepoint.KeyGroupsHandle{Tag: savepoint.TagSavepointKeyGroups, StartKeyGroup: int32(r.Start), Offsets: kw.Offsets(), Delegate: d}}
		stats.NewHandles++
		subtasks = append(subtasks, ns)
	}
	// Operator state: old subtask o's handles on layout subtask o,
	// broadcast states on every subtask.
	if hasOpState {
		var bcast *savepoint.SubtaskState
		for _, st := range op.Subtasks {
			if bcast == nil && (broadcastOnly(st.ManagedOperator) != nil || broadcastOnly(st.RawOperator) != nil) {
				bcast = st
			}
		}
		for _, ns := range subtasks {
			if old := op.Subtask(ns.Index); old != nil {
				ns.ManagedOperator, ns.RawOperator = old.ManagedOperator, old.RawOperator
			} else if bcast != nil {
				ns.ManagedOperator, ns.RawOperator = broadcastOnly(bcast.ManagedOperator), broadcastOnly(bcast.RawOperator)
			}
		}
	}
	for _, ns := range subtasks {
		if ns.ManagedKeyed != nil || ns.ManagedOperator != nil || ns.RawOperator != nil {
			out.Subtasks = append(out.Subtasks, ns)
		}
	}
	w.checks = append(w.checks, func() error { return w.verify(op, &out, want) })
	return &out, stats, nil
}

// verify compares the logical content of a rewritten operator with the
// source: per state, the entry count and the order-independent digest.
// want is the source's digest when it was taken while reading (native
// handles); otherwise the source is read again.
func (w *rewriter) verify(src, dst *savepoint.OperatorState, want *digest.Digest) error {
	ctx := w.ctx
	if want == nil {
		var err error
		want, err = digest.Compute(ctx, w.req.Src, digest.Options{Operator: src.ID.String()})
		if err != nil {
			return fmt.Errorf("rescale: digest of source operator %s: %w", src.ID, err)
		}
	}
	sp := &savepoint.Savepoint{Store: w.req.Dst, MetadataKey: savepoint.MetadataName, Meta: &savepoint.Metadata{Version: 3, Operators: []*savepoint.OperatorState{dst}}}
	got, err := digest.Compute(ctx, sp, digest.Options{})
	if err != nil {
		return fmt.Errorf("rescale: reading back rewritten operator %s: %w", src.ID, err)
	}
	states := map[string]bool{}
	for _, k := range want.Keys() {
		states[k.State] = true
	}
	for _, k := range got.Keys() {
		states[k.State] = true
	}
	id := src.ID.String()
	for s := range states {
		a, b := want.Total(id, s), got.Total(id, s)
		if a.Entries != b.Entries || a.Hash != b.Hash || a.TTLEntries != b.TTLEntries {
			return fmt.Errorf("rescale: operator %s state %q changed in rewriting: %d entries before, %d after (digests %x / %x); nothing published",
				id, s, a.Entries, b.Entries, a.Hash, b.Hash)
		}
		w.res.Entries += a.Entries
	}
	return nil
}

func (w *rewriter) finish() error {
	for _, c := range w.checks {
		if err := c(); err != nil {
			return err
		}
	}
	w.res.Verified = len(w.checks) > 0
	return nil
}
