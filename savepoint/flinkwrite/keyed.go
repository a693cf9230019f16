package flinkwrite

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// Keyed-state stream constants. Wire format: never change.
const (
	// keyedProxyVersion is KeyedBackendSerializationProxy's version.
	keyedProxyVersion = 6
	// metaFollowsFlag is set in the first key byte of the last entry before
	// a state switch or the end of a key group.
	metaFollowsFlag = 0x80
	// endOfKeyGroupMark ends a key-group block.
	endOfKeyGroupMark = 0xFFFF
	// maxStates: the state count is written as an i16, and state ids as u16
	// below the end mark.
	maxStates = math.MaxInt16
)

// BackendStateType is StateMetaInfoSnapshot.BackendStateType (its ordinal
// is written).
type BackendStateType int32

const (
	KeyValueState      BackendStateType = 0
	OperatorState      BackendStateType = 1
	BroadcastState     BackendStateType = 2
	PriorityQueueState BackendStateType = 3
	KeyValueV2State    BackendStateType = 4 // Flink 2.0+ async state API
)

// Keyed state kinds (the KEYED_STATE_TYPE option, StateDescriptor.Type).
const (
	KindValue       = "VALUE"
	KindList        = "LIST"
	KindReducing    = "REDUCING"
	KindFolding     = "FOLDING"
	KindAggregating = "AGGREGATING"
	KindMap         = "MAP"
)

// Option is one meta-info option (written as two writeUTF strings).
type Option struct{ Key, Value string }

// NamedSnapshot is one entry of a state's serializer map.
type NamedSnapshot struct {
	Key      string // VALUE_SERIALIZER, NAMESPACE_SERIALIZER, ...
	Snapshot Snapshot
}

// StateMetaInfo is one state of the header. Options and Serializers are
// written in the order given (Flink writes HashMap iteration order; the
// helpers below use the order Flink's maps produce).
type StateMetaInfo struct {
	Name        string
	Type        BackendStateType
	Options     []Option
	Serializers []NamedSnapshot
}

// KeyedStateMeta is the meta info of a key/value state of the given kind
// (KindValue, KindList, ...): serializers in Flink's order, VALUE_SERIALIZER
// then NAMESPACE_SERIALIZER. For LIST pass ListSnapshot(elem), for MAP
// MapSnapshot(userKey, userValue), for TTL state TtlSnapshot-wrapped values.
func KeyedStateMeta(name, kind string, namespace, value Snapshot) StateMetaInfo {
	return StateMetaInfo{
		Name:    name,
		Type:    KeyValueState,
		Options: []Option{{"KEYED_STATE_TYPE", kind}},
		Serializers: []NamedSnapshot{
			{"VALUE_SERIALIZER", value},
			{"NAMESPACE_SERIALIZER", namespace},
		},
	}
}

// TimerStateMeta is the meta info of a timer priority queue, named
// "_timer_state/event_<service>" or "_timer_state/processing_<service>",
// with element serializer TimerSnapshot(key, namespace).
func TimerStateMeta(name string, timer Snapshot) StateMetaInfo {
	return StateMetaInfo{
		Name:        name,
		Type:        PriorityQueueState,
		Serializers: []NamedSnapshot{{"VALUE_SERIALIZER", timer}},
	}
}

// Header is the KeyedBackendSerializationProxy that starts every keyed-state
// stream.
type Header struct {
	// Compressed: every key-group block is a Snappy framed stream.
	Compressed    bool
	KeySerializer Snapshot
	States        []StateMetaInfo

	// Raw, when set, is a complete header kept from a stream that was read
	// (the keyed reader's Header.Raw) and is written verbatim, except for
	// the compression flag (byte 4), which is set from Compressed.
	// KeySerializer and States are then ignored and RawNumStates gives the
	// number of states the raw header declares.
	Raw          []byte
	RawNumStates int
}

func (h Header) numStates() int {
	if h.Raw != nil {
		return h.RawNumStates
	}
	return len(h.States)
}

// AppendHeader appends the header bytes (proxy version 6).
func AppendHeader(b []byte, h Header) ([]byte, error) {
	if h.Raw != nil {
		if len(h.Raw) < 5 || binary.BigEndian.Uint32(h.Raw) != keyedProxyVersion || h.Raw[4] > 1 {
			return b, fmt.Errorf("%w: raw header is not a version %d keyed-state header", ErrSnapshot, keyedProxyVersion)
		}
		if h.RawNumStates < 0 || h.RawNumStates > maxStates {
			return b, fmt.Errorf("%w: raw header with %d states", ErrSnapshot, h.RawNumStates)
		}
		at := len(b)
		b = append(b, h.Raw...)
		b[at+4] = 0
		if h.Compressed {
			b[at+4] = 1
		}
		return b, nil
	}
	if len(h.States) > maxStates {
		return b, fmt.Errorf("%w: %d states (max %d)", ErrSnapshot, len(h.States), maxStates)
	}
	if h.KeySerializer == nil {
		return b, fmt.Errorf("%w: no key serializer", ErrSnapshot)
	}
	b = binary.BigEndian.AppendUint32(b, keyedProxyVersion)
	b = AppendBool(b, h.Compressed)
	b, err := AppendTopLevel(b, h.KeySerializer)
	if err != nil {
		return b, fmt.Errorf("key serializer: %w", err)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.States)))
	for _, s := range h.States {
		if b, err = appendMetaInfo(b, s); err != nil {
			return b, fmt.Errorf("state %q: %w", s.Name, err)
		}
	}
	return b, nil
}

func appendMetaInfo(b []byte, s StateMetaInfo) ([]byte, error) {
	e := binfmt.Encbuf{B: b}
	if err := e.PutUTF(s.Name); err != nil {
		return b, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	e.PutI32(int32(s.Type))
	e.PutI32(int32(len(s.Options)))
	for _, o := range s.Options {
		if err := e.PutUTF(o.Key); err != nil {
			return b, fmt.Errorf("%w: %v", ErrSnapshot, err)
		}
		if err := e.PutUTF(o.Value); err != nil {
			return b, fmt.Errorf("%w: %v", ErrSnapshot, err)
		}
	}
	e.PutI32(int32(len(s.Serializers)))
	for _, n := range s.Serializers {
		if err := e.PutUTF(n.Key); err != nil {
			return b, fmt.Errorf("%w: %v", ErrSnapshot, err)
		}
		var err error
		if e.B, err = AppendTopLevel(e.B, n.Snapshot); err != nil {
			return b, fmt.Errorf("serializer %s: %w", n.Key, err)
		}
	}
	return e.B, nil
}

// Errors of the staged keyed-state writer.
var (
	// ErrOrder: a key group or state was written out of order.
	ErrOrder = errors.New("flinkwrite: entry out of order")
	// ErrClosed: the writer was used after Close.
	ErrClosed = errors.New("flinkwrite: writer closed")
	// ErrBroken: the writer refuses all calls after a failure.
	ErrBroken = errors.New("flinkwrite: writer unusable after earlier error")
)

// KeyedWriter writes one keyed-state stream (a canonical savepoint's keyed
// file or inline blob): the header, then one block per non-empty key group
// in ascending order. Entries are given one at a time; inside a key group
// the entries of one state must be contiguous (states may come in any
// order, but a state cannot be resumed once another started). The writer
// keeps one entry back so it can set the 0x80 "meta data follows" flag on
// the last entry before each state switch and key-group end.
//
// A KeyedWriter is not safe for concurrent use. After any error every
// further call fails with ErrBroken; after Close, with ErrClosed.
type KeyedWriter struct {
	bw        *bufio.Writer
	out       *countingWriter
	framer    *snappyFramer
	block     io.Writer // out, or framer while compressing
	rng       keygroups.Range
	prefixLen int
	numStates int
	offsets   []int64

	group   int // current key group, -1 before the first entry
	state   int // current state id in the group
	seen    []uint64
	pending []byte // the held-back entry: i32 len, key, i32 len, value
	pendKey int    // offset of the held-back key's first byte in pending
	hasPend bool
	raw     bool // the current key group was written by AddRawBlock

	err    error
	closed bool
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// NewKeyedWriter writes h to w and returns a writer for the key groups of
// rng. maxParallelism fixes the key-group prefix width that every key must
// start with (checked on Add).
func NewKeyedWriter(w io.Writer, h Header, rng keygroups.Range, maxParallelism int) (*KeyedWriter, error) {
	if maxParallelism < 1 || maxParallelism > 32768 {
		return nil, fmt.Errorf("%w: max parallelism %d", ErrValue, maxParallelism)
	}
	if rng.Start < 0 || rng.End < rng.Start || rng.End >= maxParallelism {
		return nil, fmt.Errorf("%w: key-group range [%d, %d] for max parallelism %d", ErrValue, rng.Start, rng.End, maxParallelism)
	}
	hdr, err := AppendHeader(nil, h)
	if err != nil {
		return nil, err
	}
	kw := &KeyedWriter{
		bw:        bufio.NewWriterSize(w, 64<<10),
		rng:       rng,
		prefixLen: keygroups.PrefixWidth(maxParallelism),
		numStates: h.numStates(),
		offsets:   make([]int64, rng.Len()),
		group:     -1,
		seen:      make([]uint64, (h.numStates()+63)/64),
	}
	kw.out = &countingWriter{w: kw.bw}
	kw.block = kw.out
	if h.Compressed {
		kw.framer = newSnappyFramer(kw.out)
	}
	if _, err := kw.out.Write(hdr); err != nil {
		return nil, err
	}
	return kw, nil
}

func (w *KeyedWriter) check() error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return errors.Join(ErrBroken, w.err)
	}
	return nil
}

func (w *KeyedWriter) fail(err error) error {
	w.err = err
	return err
}

// Add appends one entry of state stateID (its index in the header) in key
// group kg. key must be the complete state key (key-group prefix first,
// see StateKey and AppendTimerKey); value the complete value bytes (empty
// for timers). The writer copies both.
func (w *KeyedWriter) Add(kg, stateID int, key, value []byte) error {
	if err := w.check(); err != nil {
		return err
	}
	if !w.rng.Contains(kg) {
		return w.fail(fmt.Errorf("%w: key group %d outside range [%d, %d]", ErrOrder, kg, w.rng.Start, w.rng.End))
	}
	if stateID < 0 || stateID >= w.numStates {
		return w.fail(fmt.Errorf("%w: state id %d, header has %d states", ErrValue, stateID, w.numStates))
	}
	prefix, err := keygroups.ReadPrefix(key, w.prefixLen)
	if err != nil {
		return w.fail(fmt.Errorf("%w: key of %d bytes has no key-group prefix", ErrValue, len(key)))
	}
	if prefix != kg {
		return w.fail(fmt.Errorf("%w: key prefix says key group %d, entry is for %d", ErrValue, prefix, kg))
	}
	if len(key) > math.MaxInt32 || len(value) > math.MaxInt32 {
		return w.fail(fmt.Errorf("%w: entry of %d+%d bytes", ErrValue, len(key), len(value)))
	}
	switch {
	case kg < w.group:
		return w.fail(fmt.Errorf("%w: key group %d after %d", ErrOrder, kg, w.group))
	case kg == w.group && w.raw:
		return w.fail(fmt.Errorf("%w: entry for key group %d after its raw block", ErrOrder, kg))
	case kg > w.group:
		if w.group >= 0 {
			if err := w.endGroup(); err != nil {
				return w.fail(err)
			}
		}
		if err := w.startGroup(kg, stateID); err != nil {
			return w.fail(err)
		}
	case stateID != w.state:
		if w.seen[stateID/64]&(1<<(stateID%64)) != 0 {
			return w.fail(fmt.Errorf("%w: state %d resumed in key group %d after state %d", ErrOrder, stateID, kg, w.state))
		}
		if err := w.flushFlagged(uint16(stateID)); err != nil {
			return w.fail(err)
		}
		w.state = stateID
		w.seen[stateID/64] |= 1 << (stateID % 64)
	default:
		if err := w.writePending(); err != nil {
			return w.fail(err)
		}
	}
	p := w.pending[:0]
	p = binary.BigEndian.AppendUint32(p, uint32(len(key)))
	w.pendKey = len(p)
	p = append(p, key...)
	p = binary.BigEndian.AppendUint32(p, uint32(len(value)))
	w.pending = append(p, value...)
	w.hasPend = true
	return nil
}

// writePending writes the held-back entry unflagged: the next entry
// belongs to the same state and key group.
func (w *KeyedWriter) writePending() error {
	if !w.hasPend {
		return nil
	}
	w.hasPend = false
	_, err := w.block.Write(w.pending)
	return err
}

// flushFlagged writes the held-back entry with the 0x80 flag followed by
// mark: the next state's id or the end-of-key-group mark.
func (w *KeyedWriter) flushFlagged(mark uint16) error {
	if !w.hasPend {
		return fmt.Errorf("%w: no entry to flag", ErrOrder)
	}
	w.hasPend = false
	w.pending[w.pendKey] |= metaFollowsFlag
	w.pending = binary.BigEndian.AppendUint16(w.pending, mark)
	_, err := w.block.Write(w.pending)
	return err
}

func (w *KeyedWriter) startGroup(kg, stateID int) error {
	w.group, w.state = kg, stateID
	clear(w.seen)
	w.seen[stateID/64] |= 1 << (stateID % 64)
	w.offsets[kg-w.rng.Start] = w.out.n
	w.block = w.out
	if w.framer != nil {
		w.framer.reset(w.out)
		w.block = w.framer
	}
	var id [2]byte
	binary.BigEndian.PutUint16(id[:], uint16(stateID))
	_, err := w.block.Write(id[:])
	return err
}

func (w *KeyedWriter) endGroup() error {
	if w.raw {
		w.raw = false
		return nil
	}
	if err := w.flushFlagged(endOfKeyGroupMark); err != nil {
		return err
	}
	if w.framer != nil {
		if err := w.framer.Close(); err != nil {
			return err
		}
		w.block = w.out
	}
	return nil
}

// Offsets returns, after Close, the offset of each key group's block in the
// stream (index i = key group rng.Start+i), 0 for key groups without
// entries: the offsets of the savepoint's KeyGroupsStateHandle.
func (w *KeyedWriter) Offsets() []int64 { return append([]int64(nil), w.offsets...) }

// Size is the number of bytes written so far.
func (w *KeyedWriter) Size() int64 { return w.out.n }

// Close ends the last key group and flushes the stream. It does not close
// the underlying writer.
func (w *KeyedWriter) Close() error {
	if err := w.check(); err != nil {
		return err
	}
	if w.group >= 0 {
		if err := w.endGroup(); err != nil {
			return w.fail(err)
		}
	}
	if err := w.bw.Flush(); err != nil {
		return w.fail(err)
	}
	w.closed = true
	return nil
}
