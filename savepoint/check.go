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

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
	"golang.org/x/sync/errgroup"
)

// Problem kinds reported by Check.
const (
	ProblemPath      = "path"      // handle path outside the savepoint or hostile
	ProblemMissing   = "missing"   // referenced file does not exist
	ProblemSize      = "size"      // file size differs from the recorded size
	ProblemRead      = "read"      // file could not be read
	ProblemRange     = "range"     // key-group range invalid or overlapping
	ProblemOffset    = "offset"    // offset outside the file or not ascending
	ProblemHeader    = "header"    // keyed or operator state header unreadable
	ProblemBlock     = "block"     // key-group block malformed
	ProblemKeyGroup  = "key-group" // key stored in the wrong key group
	ProblemNative    = "native"    // native layout; data not verified
	ProblemStructure = "structure" // metadata-level inconsistency
	ProblemOpState   = "operator"  // operator-state data malformed
)

// Problem is one defect found by Check. File and Offset say where; Offset is
// -1 when the problem is not at a byte position.
type Problem struct {
	Kind     string `json:"kind"`
	File     string `json:"file"`
	Offset   int64  `json:"offset"`
	Operator string `json:"operator,omitempty"`
	Subtask  int    `json:"subtask"`
	KeyGroup int    `json:"keyGroup"`
	Message  string `json:"message"`
	// Unsupported: the data is valid as far as it was read but uses a form
	// this module does not decode (an unknown serializer snapshot class, a
	// legacy layout); nothing is known to be wrong with it.
	Unsupported bool `json:"unsupported,omitempty"`
}

func (p Problem) String() string {
	s := p.File
	if p.Offset >= 0 {
		s += fmt.Sprintf(" at offset %d", p.Offset)
	}
	s += ": "
	if p.Operator != "" {
		s += fmt.Sprintf("operator %s subtask %d: ", p.Operator, p.Subtask)
	}
	if p.KeyGroup >= 0 {
		s += fmt.Sprintf("key group %d: ", p.KeyGroup)
	}
	return s + p.Message
}

// CheckOptions tunes Check.
type CheckOptions struct {
	// MaxProblems stops the check after this many problems (0 = 1000).
	MaxProblems int
	// SkipData checks metadata and files only, without decoding blocks.
	SkipData bool
	// ReadAhead is the range-read buffer per open file (0 = default).
	ReadAhead int
	// Progress is advanced per key group read.
	Progress Progress
	// Concurrency is the number of handles checked at once (default 4).
	Concurrency int
	// Sums says which content the sums file (SumsName) is checked against.
	Sums SumsOptions
}

// CheckStats says how much Check verified.
type CheckStats struct {
	Files          int   `json:"files"`
	KeyGroups      int   `json:"keyGroups"`
	Entries        int64 `json:"entries"`
	KeysVerified   int64 `json:"keysVerified"`
	KeysUnverified int64 `json:"keysUnverified"`
	// NativeHandles counts keyed handles in a native layout: their files
	// were checked, their data was not decoded.
	NativeHandles int `json:"nativeHandles"`
	// Operator-state streams whose elements were decoded / not decoded.
	OperatorStatesVerified   int `json:"operatorStatesVerified"`
	OperatorStatesUnverified int `json:"operatorStatesUnverified"`
	// Sums is set when the snapshot has a sums file.
	Sums *SumsStats `json:"sums,omitempty"`
}

type checker struct {
	ctx   context.Context
	sp    *Savepoint
	o     CheckOptions
	probs []Problem
	stats CheckStats
	sizes map[string]int64 // stat cache by key; -1 = missing
	// starts holds, per keyed stream, every non-zero key-group offset of
	// all handles using it, sorted (read-only once the jobs run).
	starts map[string][]int64
	mu     sync.Mutex // guards probs, stats, sizes and progress
}

// stat updates the statistics under the lock.
func (c *checker) stat(f func(s *CheckStats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

var errTooMany = errors.New("too many problems")

func (c *checker) add(p Problem) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probs = append(c.probs, p)
	if len(c.probs) >= c.o.MaxProblems {
		return errTooMany
	}
	return nil
}

// Check verifies a savepoint's structure and returns every problem found:
// referenced files exist with their recorded sizes and lie inside the
// savepoint; key-group ranges lie within max parallelism and do not
// overlap; key-group offsets lie inside their files, after the header, in
// ascending order; every key-group block decodes completely; every key's
// stored key group equals the key group its hash assigns (for key types
// whose Java hashCode is known); operator-state offsets lie inside their
// files. An empty result means the savepoint is structurally sound.
func Check(ctx context.Context, sp *Savepoint, o CheckOptions) ([]Problem, CheckStats) {
	if o.MaxProblems <= 0 {
		o.MaxProblems = 1000
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	c := &checker{ctx: ctx, sp: sp, o: o, sizes: map[string]int64{}}
	if err := c.run(); !errors.Is(err, errTooMany) {
		_ = c.checkSums()
	}
	if c.o.Concurrency > 1 {
		SortProblems(c.probs)
	}
	return c.probs, c.stats
}

func (c *checker) run() error {
	md := c.sp.Meta
	metaName := c.sp.Name()
	var jobs []func() error
	if c.o.Progress != nil {
		var total int64
		for _, op := range md.Operators {
			for _, st := range ReadableSubtasks(op) {
				if h, ok := st.ManagedKeyed.(*KeyGroupsHandle); ok {
					for _, off := range h.Offsets {
						if off != 0 {
							total++
						}
					}
				}
			}
		}
		c.o.Progress.SetTotal(total)
	}
	for _, op := range md.Operators {
		opID := op.ID.String()
		if !op.FullyFinished && op.MaxParallelism <= 0 && len(op.Subtasks) > 0 {
			if err := c.add(Problem{Kind: ProblemStructure, File: metaName, Offset: -1, Operator: opID, KeyGroup: -1, Message: fmt.Sprintf("max parallelism %d", op.MaxParallelism)}); err != nil {
				return err
			}
		}
		covered := map[int]int{} // key group -> subtask
		for _, st := range op.Subtasks {
			if err := c.ctx.Err(); err != nil {
				return err
			}
			for _, oh := range []*OperatorHandle{st.ManagedOperator, st.RawOperator} {
				if oh != nil {
					jobs = append(jobs, func() error { return c.checkOperatorHandle(op, st, oh) })
				}
			}
			for i, kh := range []KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
				if kh == nil {
					continue
				}
				start, end := kh.KeyGroupRange()
				if end >= start && (start < 0 || end >= int(op.MaxParallelism)) {
					if err := c.add(Problem{Kind: ProblemRange, File: metaName, Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: -1,
						Message: fmt.Sprintf("key-group range [%d, %d] outside max parallelism %d", start, end, op.MaxParallelism)}); err != nil {
						return err
					}
				}
				if i == 0 {
					for kg := start; kg <= end; kg++ {
						if prev, dup := covered[kg]; dup {
							if err := c.add(Problem{Kind: ProblemRange, File: metaName, Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: kg,
								Message: fmt.Sprintf("key group also covered by subtask %d", prev)}); err != nil {
								return err
							}
							break
						}
						covered[kg] = st.Index
					}
				}
				raw := i == 1
				jobs = append(jobs, func() error { return c.checkKeyed(op, st, kh, raw) })
			}
		}
	}
	c.starts = keyedBlockStarts(md)
	// File and data checks, one job per handle.
	if c.o.Concurrency <= 1 {
		for _, j := range jobs {
			if err := c.ctx.Err(); err != nil {
				return err
			}
			if err := j(); err != nil {
				return err
			}
		}
		return nil
	}
	g, gctx := errgroup.WithContext(c.ctx)
	g.SetLimit(c.o.Concurrency)
	for _, j := range jobs {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			return j()
		})
	}
	return g.Wait()
}

// fileSize stats a resolved file once.
func (c *checker) fileSize(loc Location) (int64, error) {
	ck := loc.Key
	if loc.Store != nil {
		ck = loc.Name // another store: key by full name
	}
	c.mu.Lock()
	n, ok := c.sizes[ck]
	c.mu.Unlock()
	if ok {
		if n < 0 {
			return -1, s3.ErrNotExist
		}
		return n, nil
	}
	info, err := c.sp.StoreOf(loc).Stat(c.ctx, loc.Key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if s3.IsNotExist(err) {
			c.sizes[ck] = -1
		}
		return -1, err
	}
	if _, ok := c.sizes[ck]; !ok {
		c.stats.Files++
	}
	c.sizes[ck] = info.Size
	return info.Size, nil
}

// checkStream resolves h and checks the file exists with its recorded size.
// It returns the stream length, or -1 when the stream is unusable (a
// problem was recorded).
func (c *checker) checkStream(op *OperatorState, st *SubtaskState, h *StreamHandle) (Location, int64, error) {
	return c.checkStreamIn(op, st, h, false)
}

// checkStreamIn is checkStream; incremental selects ResolveIncremental
// (streams of tag-11 incremental handles, which may live in the checkpoint root's
// shared directories).
func (c *checker) checkStreamIn(op *OperatorState, st *SubtaskState, h *StreamHandle, incremental bool) (Location, int64, error) {
	opID := op.ID.String()
	resolve := c.sp.Resolve
	if incremental {
		resolve = c.sp.ResolveIncremental
	}
	loc, err := resolve(h)
	if err != nil {
		kind := ProblemPath
		if !errors.Is(err, ErrPath) {
			kind = ProblemStructure
		}
		msg := strings.Replace(err.Error(), c.sp.Name()+": ", "", 1)
		return loc, -1, c.add(Problem{Kind: kind, File: c.sp.Name(), Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: -1, Message: msg})
	}
	if loc.IsInline() {
		return loc, int64(len(loc.Inline)), nil
	}
	size, err := c.fileSize(loc)
	if err != nil {
		kind := ProblemRead
		msg := err.Error()
		if s3.IsNotExist(err) {
			kind, msg = ProblemMissing, "referenced file does not exist"
		}
		return loc, -1, c.add(Problem{Kind: kind, File: loc.Name, Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: -1, Message: msg})
	}
	if loc.Segment {
		if loc.Start+loc.Size > size {
			return loc, -1, c.add(Problem{Kind: ProblemSize, File: loc.Name, Offset: loc.Start, Operator: opID, Subtask: st.Index, KeyGroup: -1,
				Message: fmt.Sprintf("segment of %d bytes exceeds the file's %d bytes", loc.Size, size)})
		}
		return loc, loc.Size, nil
	}
	if loc.Size >= 0 && loc.Size != size {
		return loc, -1, c.add(Problem{Kind: ProblemSize, File: loc.Name, Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: -1,
			Message: fmt.Sprintf("file is %d bytes, metadata records %d", size, loc.Size)})
	}
	return loc, size, nil
}

func (c *checker) checkOperatorHandle(op *OperatorState, st *SubtaskState, oh *OperatorHandle) error {
	if oh.Delegate == nil {
		return nil
	}
	loc, size, err := c.checkStream(op, st, oh.Delegate)
	if err != nil || size < 0 {
		return err
	}
	offsetsOK := true
	for _, m := range oh.States {
		prev := int64(-1)
		for _, off := range m.Offsets {
			if off < 0 || off >= size {
				offsetsOK = false
				if err := c.add(Problem{Kind: ProblemOffset, File: loc.Name, Offset: off, Operator: op.ID.String(), Subtask: st.Index, KeyGroup: -1,
					Message: fmt.Sprintf("operator state %q offset outside the %d-byte stream", m.Name, size)}); err != nil {
					return err
				}
				break
			}
			if off <= prev && m.Mode != ModeBroadcast {
				offsetsOK = false
				if err := c.add(Problem{Kind: ProblemOffset, File: loc.Name, Offset: off, Operator: op.ID.String(), Subtask: st.Index, KeyGroup: -1,
					Message: fmt.Sprintf("operator state %q offsets not ascending (%d after %d)", m.Name, off, prev)}); err != nil {
					return err
				}
				break
			}
			prev = off
		}
	}
	if !offsetsOK || c.o.SkipData || oh.Delegate.Tag == TagEmptySegmentFile || size == 0 {
		return nil
	}
	// Decode every element: the header must parse and each element must
	// be consumed exactly by its serializer.
	obj, err := c.sp.OpenLocation(c.ctx, loc, c.o.ReadAhead)
	if err != nil {
		return c.add(Problem{Kind: ProblemRead, File: loc.Name, Offset: -1, Operator: op.ID.String(), Subtask: st.Index, KeyGroup: -1, Message: err.Error()})
	}
	hdr, _, err := keyed.ReadOperatorHeaderWithin(io.NewSectionReader(obj, 0, obj.Size()), loc.Name, operatorHeaderEnd(oh))
	if err != nil {
		return c.add(problemFromErr(ProblemOpState, loc.Name, op.ID.String(), st.Index, err))
	}
	// Compressed operator state (proxy v6 flag) is one Snappy framed
	// stream flushed at every offset; keyed.ReadOperatorStates decodes each
	// element from its chunk boundary, so both forms are verified.
	c.stat(func(s *CheckStats) { s.OperatorStatesVerified++ })
	refs := make([]keyed.OperatorStateRef, 0, len(oh.States))
	for _, m := range oh.States {
		refs = append(refs, keyed.OperatorStateRef{Name: m.Name, Mode: int(m.Mode), Offsets: m.Offsets})
	}
	err = keyed.ReadOperatorStates(obj, obj.Size(), loc.Name, hdr, refs, keyed.ModeDecode, func(*keyed.OperatorEntry) error { return nil })
	if err != nil {
		return c.add(problemFromErr(ProblemOpState, loc.Name, op.ID.String(), st.Index, err))
	}
	return nil
}

func (c *checker) checkKeyed(op *OperatorState, st *SubtaskState, kh KeyedHandle, raw bool) error {
	opID := op.ID.String()
	switch h := kh.(type) {
	case *ChangelogHandle:
		return c.checkChangelog(op, st, h, raw)
	case *IncrementalHandle:
		c.stat(func(s *CheckStats) { s.NativeHandles++ })
		for _, s := range []*StreamHandle{h.Meta} {
			if s != nil {
				if _, _, err := c.checkStreamIn(op, st, s, h.Tag == TagIncrementalKeyGroupsV2); err != nil {
					return err
				}
			}
		}
		for _, ns := range append(append([]NamedStream(nil), h.Shared...), h.Private...) {
			if ns.Handle != nil {
				if _, _, err := c.checkStreamIn(op, st, ns.Handle, h.Tag == TagIncrementalKeyGroupsV2); err != nil {
					return err
				}
			}
		}
		return nil
	case *KeyGroupsHandle:
		if h.Delegate == nil {
			return c.add(Problem{Kind: ProblemStructure, File: c.sp.Name(), Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: -1, Message: "key-groups handle without data stream"})
		}
		loc, size, err := c.checkStream(op, st, h.Delegate)
		if err != nil || size < 0 {
			return err
		}
		// Offsets must be inside the stream and ascending.
		prev := int64(0)
		offsetsOK := true
		for i, off := range h.Offsets {
			if off == 0 {
				continue
			}
			kg := int(h.StartKeyGroup) + i
			if off >= size {
				offsetsOK = false
				if err := c.add(Problem{Kind: ProblemOffset, File: loc.Name, Offset: off, Operator: opID, Subtask: st.Index, KeyGroup: kg,
					Message: fmt.Sprintf("offset beyond the end of the %d-byte stream", size)}); err != nil {
					return err
				}
				continue
			}
			if off <= prev {
				offsetsOK = false
				if err := c.add(Problem{Kind: ProblemOffset, File: loc.Name, Offset: off, Operator: opID, Subtask: st.Index, KeyGroup: kg,
					Message: fmt.Sprintf("offset not after the previous key group's offset %d", prev)}); err != nil {
					return err
				}
			}
			prev = off
		}
		if raw || c.o.SkipData {
			// Raw keyed state is user-defined bytes.
			return nil
		}
		return c.checkKeyedData(op, st, h, loc, size, offsetsOK)
	}
	return nil
}

func (c *checker) checkKeyedData(op *OperatorState, st *SubtaskState, h *KeyGroupsHandle, loc Location, size int64, offsetsOK bool) error {
	opID := op.ID.String()
	obj, err := c.sp.OpenLocation(c.ctx, loc, c.o.ReadAhead)
	if err != nil {
		return c.add(Problem{Kind: ProblemRead, File: loc.Name, Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: -1, Message: err.Error()})
	}
	hdr, hdrLen, err := keyed.ReadHeaderWithin(io.NewSectionReader(obj, 0, obj.Size()), loc.Name, keyedHeaderEndIn(h, obj.Size()))
	if err != nil {
		return c.add(problemFromErr(ProblemHeader, loc.Name, opID, st.Index, err))
	}
	layout := c.sp.handleLayout(h)
	f := &keyedFile{obj: obj, header: hdr, hdrLen: hdrLen, name: loc.Name}
	layout = fileLayout(layout, f, h, int(op.MaxParallelism))
	for i, off := range h.Offsets {
		if off != 0 && off < hdrLen {
			if err := c.add(Problem{Kind: ProblemOffset, File: loc.Name, Offset: off, Operator: opID, Subtask: st.Index, KeyGroup: int(h.StartKeyGroup) + i,
				Message: fmt.Sprintf("offset inside the %d-byte header", hdrLen)}); err != nil {
				return err
			}
			offsetsOK = false
		}
	}
	if !offsetsOK {
		return nil
	}
	hasher := newKeyHasher(hdr.KeySerializer)
	var br keyed.BlockReader
	ropts := keyed.ReadOptions{MaxParallelism: int(op.MaxParallelism), Mode: keyed.ModeDecode, Heap: layout == LayoutNativeHeap}
	if hasher.raw {
		// Keys hash on their bytes: validate every key, namespace and
		// value without building values.
		ropts.Mode = keyed.ModeValidate
	}
	for i, off := range h.Offsets {
		if off == 0 {
			continue
		}
		if err := c.ctx.Err(); err != nil {
			return err
		}
		kg := int(h.StartKeyGroup) + i
		// The block must end where the next block of the same stream
		// starts (in any handle: rescaled views share files), or at the
		// end of the stream.
		ropts.End = c.blockEnd(h.Delegate, off, size)
		var addErr error
		var entries, verified, unverified int64
		err := br.Read(obj, size, loc.Name, hdr, kg, off, ropts, func(e *keyed.Entry) error {
			entries++
			want, ok := hasher.keyGroup(e, int(op.MaxParallelism))
			if !ok {
				unverified++
				return nil
			}
			verified++
			if want != e.KeyGroup {
				addErr = c.add(Problem{Kind: ProblemKeyGroup, File: loc.Name, Offset: e.Offset, Operator: opID, Subtask: st.Index, KeyGroup: e.KeyGroup,
					Message: fmt.Sprintf("state %q: key %s hashes to key group %d", e.State.Name, keyString(e.Key), want)})
				return addErr
			}
			return nil
		})
		c.mu.Lock()
		c.stats.KeyGroups++
		c.stats.Entries += entries
		c.stats.KeysVerified += verified
		c.stats.KeysUnverified += unverified
		if c.o.Progress != nil {
			c.o.Progress.Add(1)
		}
		c.mu.Unlock()
		if addErr != nil {
			return addErr
		}
		if err != nil {
			if err := c.add(problemFromErr(ProblemBlock, loc.Name, opID, st.Index, err)); err != nil {
				return err
			}
		}
	}
	return nil
}

func keyString(v serde.Value) string {
	s := fmt.Sprint(v)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// problemFromErr turns a keyed reader error into a Problem keeping its
// file, key group and offset.
func problemFromErr(kind, file, opID string, subtask int, err error) Problem {
	p := Problem{Kind: kind, File: file, Offset: -1, Operator: opID, Subtask: subtask, KeyGroup: -1, Message: err.Error(),
		Unsupported: errors.Is(err, errclass.ErrUnsupported)}
	var ke *keyed.Error
	if errors.As(err, &ke) {
		if ke.File != "" {
			p.File = ke.File
		}
		p.Offset, p.KeyGroup = ke.Offset, ke.KeyGroup
		p.Message = ke.Err.Error()
		if ke.BlockPos >= 0 && ke.KeyGroup >= 0 {
			p.Message = fmt.Sprintf("(block byte %d) %s", ke.BlockPos, p.Message)
		}
	}
	return p
}

// keyHasher recomputes key groups from keys.
type keyHasher struct {
	// raw: hash the serialized key bytes (BinaryRowData keys).
	raw bool
	// ok: the key type's hashCode is known.
	ok bool
}

func newKeyHasher(s *serde.Snapshot) keyHasher {
	if s == nil {
		return keyHasher{}
	}
	switch s.Class {
	case serde.ClassRowData, serde.ClassBinaryRow:
		return keyHasher{raw: true, ok: true}
	}
	return keyHasher{ok: true}
}

// keyGroup returns the key group the key of e hashes to, and whether the
// key type is supported.
func (k keyHasher) keyGroup(e *keyed.Entry, maxParallelism int) (int, bool) {
	if !k.ok {
		return 0, false
	}
	if k.raw {
		b := e.KeyPart
		if e.State.Type == keyed.PriorityQueue {
			// A timer element: i64 timestamp, then the key.
			if len(b) < 8 {
				return 0, false
			}
			b = b[8:]
		}
		if len(b) < 4 {
			return 0, false
		}
		n := int(binary.BigEndian.Uint32(b))
		if n < 0 || 4+n > len(b) {
			return 0, false
		}
		return keygroups.KeyGroupFor(keygroups.HashRow(b[4:4+n]), maxParallelism), true
	}
	h, ok := javaHash(e.Key, 0)
	if !ok {
		return 0, false
	}
	return keygroups.KeyGroupFor(h, maxParallelism), true
}

// javaHash returns the Java hashCode of a decoded key value.
func javaHash(v serde.Value, depth int) (int32, bool) {
	if depth > 16 {
		return 0, false
	}
	switch x := v.(type) {
	case nil:
		return 0, true
	case int32:
		return keygroups.HashInt(x), true
	case int64:
		return keygroups.HashLong(x), true
	case int16:
		return int32(x), true
	case int8:
		return int32(x), true
	case bool:
		return keygroups.HashBool(x), true
	case float32:
		return keygroups.HashFloat(x), true
	case float64:
		return keygroups.HashDouble(x), true
	case string:
		return keygroups.HashString(x), true
	case serde.Char:
		return int32(x), true
	case serde.Tuple:
		hs := make([]int32, len(x))
		for i, f := range x {
			h, ok := javaHash(f, depth+1)
			if !ok {
				return 0, false
			}
			hs[i] = h
		}
		return keygroups.HashTuple(hs...), true
	}
	return 0, false
}

// SortProblems orders problems by file, offset.
func SortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].File != ps[j].File {
			return ps[i].File < ps[j].File
		}
		return ps[i].Offset < ps[j].Offset
	})
}

// streamID identifies a stream across handles.
func streamID(h *StreamHandle) string {
	if h.Tag == TagByteStream {
		return fmt.Sprintf("inline:%s:%d:%p", h.Name, len(h.Data), h.Data)
	}
	return fmt.Sprintf("%d:%s:%d", h.Tag, h.Path, h.StartPos)
}

func keyedBlockStarts(md *Metadata) map[string][]int64 {
	out := map[string][]int64{}
	for _, op := range md.Operators {
		for _, st := range ReadableSubtasks(op) {
			h, ok := st.ManagedKeyed.(*KeyGroupsHandle)
			if !ok || h.Delegate == nil {
				continue
			}
			id := streamID(h.Delegate)
			for _, off := range h.Offsets {
				if off != 0 {
					out[id] = append(out[id], off)
				}
			}
		}
	}
	for id, offs := range out {
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		out[id] = offs
	}
	return out
}

// blockEnd returns the first block start after off in h's stream, or size.
func (c *checker) blockEnd(h *StreamHandle, off, size int64) int64 {
	offs := c.starts[streamID(h)]
	i := sort.Search(len(offs), func(i int) bool { return offs[i] > off })
	if i < len(offs) && offs[i] <= size {
		return offs[i]
	}
	return size
}
