package canonical

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"unicode/utf8"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// DefaultInlineThreshold is Flink's default state.storage.fs.memory-threshold:
// streams of at most this many bytes are inlined into `_metadata`.
const DefaultInlineThreshold = 20 << 10

// maxInlineThreshold is Flink's hard maximum for inline state (1 MiB).
const maxInlineThreshold = 1 << 20

// Subtask is one operator subtask's state to export.
type Subtask struct {
	// Index is the subtask index; the backend's key-group range must be
	// Flink's range of that index at the operator's parallelism.
	Index int
	// Operator wraps the backend (and the TTL clock: expired entries are
	// not exported).
	Operator *engine.Operator
	// Schema describes the backend's states, in declaration order.
	Schema *engine.Schema
}

// Operator is one operator to export.
type Operator struct {
	// UID is the operator's uid; its id is murmur3_x64_128 of the uid, as
	// Flink computes it. ID, when non-zero, is used instead. Metadata V5+
	// also records the uid itself.
	UID string
	// Name is the operator's name, recorded from metadata V5 on ("" =
	// none, as Flink writes an absent name).
	Name string
	ID   savepoint.OperatorID
	// Parallelism and MaxParallelism of the operator. Every subtask
	// 0..Parallelism-1 that has state must be listed once.
	Parallelism, MaxParallelism int
	Subtasks                    []Subtask
}

// ExportOptions tunes Export.
type ExportOptions struct {
	// Dir is the savepoint directory (key prefix) inside the store; the
	// metadata goes to Dir/_metadata.
	Dir string
	// CheckpointID recorded in the metadata (default 1).
	CheckpointID int64
	// InlineThreshold: streams of at most this many bytes are inlined
	// (default DefaultInlineThreshold; negative: never inline).
	InlineThreshold int
	// Compress writes Snappy-framed key-group blocks.
	Compress bool
	// FlinkVersion selects the metadata version the named release writes
	// (MetadataVersionFor): "" or "1.15" → V3 (read by every Flink
	// 1.15-2.x); "1.16" ... "1.20" → V4 with a CheckpointProperties
	// trailer describing a canonical savepoint; "2.0", "2.1", ..., "2.x" → V5
	// (V4 plus each operator's name and uid).
	FlinkVersion string
	// MetadataVersion, when non-zero, overrides FlinkVersion's choice:
	// 3, 4, 5 or 6 (6 = the V5 body under V6's number; savepoints carry
	// no channel state, the only part V6 changes). V7 is refused: Flink
	// never writes a savepoint as V7.
	MetadataVersion int
	// TempDir holds the staged stream files (default os.TempDir()).
	TempDir string
}

// Stats counts what Export or Import moved.
type Stats struct {
	Entries     int64
	Files       int // data files written (Export) or read (Import)
	Inline      int // inline streams
	StreamBytes int64
}

// modifiedUTF8Len is the length of s in Java's modified UTF-8 (the form
// DataOutput.writeUTF writes, limited to 65535 bytes).
func modifiedUTF8Len(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case r == 0:
			n += 2
		case r < 0x80:
			n++
		case r < 0x800:
			n += 2
		case r < 0x10000:
			n += 3
		default:
			n += 6 // surrogate pair, 3 bytes each
		}
	}
	return n
}

// Export writes the operators' keyed state as a canonical savepoint into
// store under o.Dir: one keyed-state stream per subtask (a relative file,
// or inline when small), entries in key-group order straight from the
// backends' range scans (memory does not grow with state size), and
// `_metadata` last, with PutIfAbsent, after every data file is confirmed.
// It returns the metadata written. The backends must not be written while
// Export runs (Backend.Scan's contract): the states of a subtask are
// scanned concurrently and merged by key group. Every operator, subtask
// and schema is validated before the first byte is written; if a later step
// fails, `_metadata` is not written (data files already uploaded stay, as
// with every publish in package s3).
func Export(ctx context.Context, ops []Operator, store s3.Storage, o ExportOptions) (*savepoint.Metadata, Stats, error) {
	var stats Stats
	if o.CheckpointID == 0 {
		o.CheckpointID = 1
	}
	if o.InlineThreshold == 0 {
		o.InlineThreshold = DefaultInlineThreshold
	}
	if o.InlineThreshold > maxInlineThreshold {
		return nil, stats, fmt.Errorf("canonical: inline threshold %d above Flink's maximum %d", o.InlineThreshold, maxInlineThreshold)
	}
	md := &savepoint.Metadata{CheckpointID: o.CheckpointID}
	var err error
	if md.Version, err = MetadataVersionFor(o.FlinkVersion); err != nil {
		return nil, stats, err
	}
	if o.MetadataVersion != 0 {
		if o.MetadataVersion < 3 || o.MetadataVersion > 6 {
			return nil, stats, fmt.Errorf("canonical: metadata version %d cannot be written for a savepoint (3-6)", o.MetadataVersion)
		}
		md.Version = o.MetadataVersion
	}
	if md.Version >= 4 {
		if md.Trailer, err = savepointTrailer(); err != nil {
			return nil, stats, err
		}
	}
	// Validate everything before the first byte is written.
	seen := map[savepoint.OperatorID]bool{}
	for i := range ops {
		op := &ops[i]
		if op.ID == (savepoint.OperatorID{}) {
			if op.UID == "" {
				return nil, stats, fmt.Errorf("canonical: operator %d has neither uid nor id", i)
			}
			op.ID = savepoint.OperatorIDFromUID(op.UID)
		}
		if seen[op.ID] {
			return nil, stats, fmt.Errorf("canonical: operator %s listed twice", op.ID)
		}
		if md.Version >= 5 {
			for _, s := range []string{op.Name, op.UID} {
				if !utf8.ValidString(s) {
					return nil, stats, fmt.Errorf("canonical: operator %s: name or uid %q is not valid UTF-8", op.ID, s)
				}
				if n := modifiedUTF8Len(s); n > 65535 {
					return nil, stats, fmt.Errorf("canonical: operator %s: name or uid of %d bytes in modified UTF-8 (at most 65535)", op.ID, n)
				}
			}
		}
		seen[op.ID] = true
		if err := keygroups.CheckParallelism(op.MaxParallelism, op.Parallelism); err != nil {
			return nil, stats, fmt.Errorf("canonical: operator %s: %w", op.ID, err)
		}
		idx := map[int]bool{}
		for _, st := range op.Subtasks {
			if st.Index < 0 || st.Index >= op.Parallelism || idx[st.Index] {
				return nil, stats, fmt.Errorf("canonical: operator %s: subtask index %d invalid or repeated", op.ID, st.Index)
			}
			idx[st.Index] = true
			l := st.Operator.Layout()
			want := keygroups.RangeForSubtask(op.MaxParallelism, op.Parallelism, st.Index)
			if l.MaxParallelism != op.MaxParallelism || l.Range.Start != want.Start || l.Range.End != want.End {
				return nil, stats, fmt.Errorf("canonical: operator %s subtask %d: backend layout (max parallelism %d, key groups %d-%d) is not Flink's (%d, %d-%d)",
					op.ID, st.Index, l.MaxParallelism, l.Range.Start, l.Range.End, op.MaxParallelism, want.Start, want.End)
			}
			if st.Schema == nil {
				return nil, stats, fmt.Errorf("canonical: operator %s subtask %d: no schema", op.ID, st.Index)
			}
			if err := st.Schema.Validate(); err != nil {
				return nil, stats, fmt.Errorf("canonical: operator %s subtask %d: %w", op.ID, st.Index, err)
			}
			if err := st.Schema.Matches(st.Operator.Backend().States()); err != nil {
				return nil, stats, fmt.Errorf("canonical: operator %s subtask %d: %w", op.ID, st.Index, err)
			}
		}
	}
	var written []s3.Written
	for i := range ops {
		op := &ops[i]
		os := &savepoint.OperatorState{ID: op.ID, Parallelism: int32(op.Parallelism), MaxParallelism: int32(op.MaxParallelism)}
		if md.Version >= 5 {
			os.Name, os.UID = op.Name, op.UID
		}
		for _, st := range op.Subtasks {
			if err := ctx.Err(); err != nil {
				return nil, stats, err
			}
			h, w, n, err := exportSubtask(ctx, store, o, op, st)
			if err != nil {
				return nil, stats, fmt.Errorf("canonical: operator %s subtask %d: %w", op.ID, st.Index, err)
			}
			stats.Entries += n
			stats.StreamBytes += h.Delegate.Len()
			if w != nil {
				written = append(written, *w)
				stats.Files++
			} else {
				stats.Inline++
			}
			os.Subtasks = append(os.Subtasks, &savepoint.SubtaskState{Index: st.Index, ManagedKeyed: h})
		}
		md.Operators = append(md.Operators, os)
	}
	b, err := savepoint.EncodeMetadata(md)
	if err != nil {
		return nil, stats, err
	}
	if err := savepoint.CommitMetadata(ctx, store, written, path.Join(o.Dir, s3.MetadataName), b); err != nil {
		return nil, stats, err
	}
	return md, stats, nil
}

// exportSubtask stages one subtask's stream in a temporary file, then
// uploads it (or inlines it). w is nil for inline streams.
func exportSubtask(ctx context.Context, store s3.Storage, o ExportOptions, op *Operator, st Subtask) (*savepoint.KeyGroupsHandle, *s3.Written, int64, error) {
	f, err := os.CreateTemp(o.TempDir, s3.ScratchPrefix+"export-*")
	if err != nil {
		return nil, nil, 0, err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	offsets, n, err := WriteStream(ctx, bw, st.Operator, st.Schema, o.Compress)
	if err != nil {
		return nil, nil, 0, err
	}
	if err := bw.Flush(); err != nil {
		return nil, nil, 0, err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, nil, 0, err
	}
	l := st.Operator.Layout()
	h := &savepoint.KeyGroupsHandle{Tag: savepoint.TagSavepointKeyGroups, StartKeyGroup: int32(l.Range.Start), Offsets: offsets}
	name := savepoint.NewUUID()
	if o.InlineThreshold >= 0 && size <= int64(o.InlineThreshold) {
		data := make([]byte, size)
		if _, err := f.ReadAt(data, 0); err != nil {
			return nil, nil, 0, err
		}
		h.Delegate = &savepoint.StreamHandle{Tag: savepoint.TagByteStream, Name: name, Data: data}
		return h, nil, n, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, 0, err
	}
	w, err := s3.PutHashed(ctx, store, path.Join(o.Dir, name), f, size)
	if err != nil {
		return nil, nil, 0, err
	}
	h.Delegate = &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: name, Size: size}
	return h, &w, n, nil
}

// WriteStream writes the canonical keyed-state stream of one backend
// (header from the schema, then every live entry, key group by key group
// and state by state) to w. It returns the per-key-group offsets (0 for
// empty key groups) and the number of entries.
func WriteStream(ctx context.Context, w io.Writer, op *engine.Operator, schema *engine.Schema, compress bool) ([]int64, int64, error) {
	if err := schema.Matches(op.Backend().States()); err != nil {
		return nil, 0, err
	}
	hdr, err := schema.FlinkHeader(compress)
	if err != nil {
		return nil, 0, err
	}
	l := op.Layout()
	kw, err := flinkwrite.NewKeyedWriter(w, hdr, keygroups.Range{Start: l.Range.Start, End: l.Range.End}, l.MaxParallelism)
	if err != nil {
		return nil, 0, err
	}
	codecs := make([]*stateCodec, len(schema.States))
	joins := make([]*joinCodec, len(schema.States))
	flinkIDs := make([]int, len(schema.States))
	id := 0
	for i, s := range schema.States {
		flinkIDs[i] = id
		if s.Join != nil {
			if joins[i], err = newJoinCodec(schema.Key, s); err != nil {
				return nil, 0, err
			}
			id += 2
			continue
		}
		if codecs[i], err = newStateCodec(schema.Key, s); err != nil {
			return nil, 0, err
		}
		id++
	}
	width := l.Width()
	// One streaming scan per state over the whole key-group range, merged
	// by key group: the writer needs every state of a key group before the
	// next key group, and one scan per state (instead of one per state and
	// key group) keeps the cost linear on every backend.
	done := make(chan struct{})
	curs := make([]*cursor, len(op.States()))
	for i, s := range op.States() {
		if joins[i] != nil {
			curs[i] = startCursor(s.Desc().Name, joinScan(op, schema.States[i], l), done)
		} else {
			// Lists of TTL states scan with each element's own time.
			codecs[i].timedList = timedList(s.Desc())
			curs[i] = startCursor(s.Desc().Name, stateScan(s, l), done)
		}
	}
	defer func() {
		close(done)
		for _, c := range curs {
			c.drain()
		}
	}()
	var kbuf, vbuf []byte
	var n int64
	for {
		kg := -1
		for _, c := range curs {
			if k, ok := c.peekKG(); ok && (kg < 0 || k < kg) {
				kg = k
			}
		}
		for _, c := range curs {
			if c.eof && c.err != nil {
				return nil, 0, fmt.Errorf("state %q: %w", c.name, c.err)
			}
		}
		if kg < 0 {
			break
		}
		if n&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
		}
		for i, c := range curs {
			cd, jc := codecs[i], joins[i]
			for {
				it, ok := c.next(kg)
				if !ok {
					break
				}
				stateID := flinkIDs[i]
				if jc != nil {
					if kbuf, vbuf, err = jc.flinkEntry(kbuf[:0], vbuf[:0], kg, width, it); err != nil {
						return nil, 0, fmt.Errorf("state %q key group %d: %w", c.name, kg, err)
					}
					stateID += int(it.side)
				} else {
					if cd.s.Kind == engine.KindList && len(it.payload) == 0 {
						continue // Flink never writes empty lists
					}
					_, key, ns, rest, err := op.DecodeKey(it.stored)
					if err != nil {
						return nil, 0, err
					}
					if kbuf, err = cd.flinkKey(kbuf[:0], kg, width, key, ns, rest); err != nil {
						return nil, 0, fmt.Errorf("state %q key group %d: %w", cd.s.Name, kg, err)
					}
					if vbuf, err = cd.flinkValue(vbuf[:0], it.ts, it.payload); err != nil {
						return nil, 0, fmt.Errorf("state %q key group %d: %w", cd.s.Name, kg, err)
					}
				}
				if err = kw.Add(kg, stateID, kbuf, vbuf); err != nil {
					return nil, 0, err
				}
				n++
			}
		}
	}
	if err := kw.Close(); err != nil {
		return nil, 0, err
	}
	return kw.Offsets(), n, nil
}

// scanItem is one live entry copied out of a range scan.
type scanItem struct {
	kg      int
	ts      int64
	stored  []byte // stored key; join records: the join key
	payload []byte // payload; join records: the compact row
	side    uint8  // join records: 0 left, 1 right
	count   int64  // join records: the row's count
	assoc   int64  // join records: the row's association count (outer sides)
}

// scanBatch carries up to scanBatchLen entries in one arena.
type scanBatch struct {
	items []scanItem
	arena []byte
}

const (
	scanBatchLen   = 512
	scanBatchBytes = 256 << 10
)

// cursor streams one state's live entries from a background range scan in
// batches (at most two batches in flight per state).
type cursor struct {
	name string
	ch   chan *scanBatch
	free chan *scanBatch
	cur  *scanBatch
	pos  int
	eof  bool
	err  error // set by the producer before ch is closed
}

// emitFunc hands one entry to a cursor; false stops the scan.
type emitFunc func(kg int, ts int64, a, b []byte, side uint8, count, assoc int64) bool

// startCursor runs scan in a goroutine and streams what it emits.
func startCursor(name string, scan func(emit emitFunc) error, done <-chan struct{}) *cursor {
	c := &cursor{name: name, ch: make(chan *scanBatch, 1), free: make(chan *scanBatch, 3)}
	for i := 0; i < 3; i++ {
		c.free <- &scanBatch{}
	}
	go func() {
		var perr error
		defer func() {
			c.err = perr
			close(c.ch)
		}()
		var b *scanBatch
		get := func() bool {
			select {
			case b = <-c.free:
				b.items, b.arena = b.items[:0], b.arena[:0]
				return true
			case <-done:
				return false
			}
		}
		send := func() bool {
			select {
			case c.ch <- b:
				b = nil
				return true
			case <-done:
				return false
			}
		}
		if !get() {
			return
		}
		stopped := false
		err := scan(func(kg int, ts int64, x, y []byte, side uint8, count, assoc int64) bool {
			if len(b.items) >= scanBatchLen || len(b.arena) >= scanBatchBytes {
				if !send() || !get() {
					stopped = true
					return false
				}
			}
			at := len(b.arena)
			b.arena = append(b.arena, x...)
			b.arena = append(b.arena, y...)
			b.items = append(b.items, scanItem{kg: kg, ts: ts, side: side, count: count, assoc: assoc,
				stored: b.arena[at : at+len(x) : at+len(x)], payload: b.arena[at+len(x):]})
			return true
		})
		if perr == nil && !stopped {
			perr = err
		}
		if perr == nil && !stopped && len(b.items) > 0 {
			send()
		}
	}()
	return c
}

// stateScan scans one engine state's live entries (lists of TTL states
// in the per-element encoding, see timedList).
func stateScan(s *engine.State, l engine.Layout) func(emitFunc) error {
	want := timedList(s.Desc())
	return func(emit emitFunc) error {
		var kerr error
		err := s.ScanKeyGroupsTimed(l.Range.Start, l.Range.End, func(stored []byte, ts int64, payload []byte, timed bool) bool {
			if timed != want {
				kerr = fmt.Errorf("state %q: per-element list encoding %v, expected %v", s.Desc().Name, timed, want)
				return false
			}
			kg, err := l.KeyGroupOf(stored)
			if err != nil {
				kerr = err
				return false
			}
			return emit(kg, ts, stored, payload, 0, 0, 0)
		})
		if err == nil {
			err = kerr
		}
		return err
	}
}

// timedList reports whether ScanKeyGroupsTimed reports the state's lists
// with per-element times (lists of states with a TTL of at least 1 ms).
func timedList(d engine.StateDesc) bool {
	return d.Kind == engine.KindList && d.TTL.Milliseconds() > 0
}

// fill makes cur hold an unread item; false at the end of the scan.
func (c *cursor) fill() bool {
	for c.cur == nil || c.pos >= len(c.cur.items) {
		if c.eof {
			return false
		}
		if c.cur != nil {
			c.free <- c.cur
			c.cur = nil
		}
		b, ok := <-c.ch
		if !ok {
			c.eof = true
			return false
		}
		// The arena may have grown while the batch was filled; re-slice
		// the items onto the final arena.
		off := 0
		for i := range b.items {
			it := &b.items[i]
			kl, pl := len(it.stored), len(it.payload)
			it.stored = b.arena[off : off+kl : off+kl]
			it.payload = b.arena[off+kl : off+kl+pl : off+kl+pl]
			off += kl + pl
		}
		c.cur, c.pos = b, 0
	}
	return true
}

func (c *cursor) peekKG() (int, bool) {
	if !c.fill() {
		return 0, false
	}
	return c.cur.items[c.pos].kg, true
}

// next returns the next item if it belongs to key group kg.
func (c *cursor) next(kg int) (scanItem, bool) {
	if !c.fill() || c.cur.items[c.pos].kg != kg {
		return scanItem{}, false
	}
	it := c.cur.items[c.pos]
	c.pos++
	return it, true
}

// drain waits for the producer to stop (after done is closed).
func (c *cursor) drain() {
	for range c.ch {
	}
}
