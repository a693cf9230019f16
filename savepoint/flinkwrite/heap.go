package flinkwrite

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/sfstate/sfstate/keygroups"
)

// HeapWriter writes one keyed-state stream in the heap (hashmap) backend's
// own key-group layout, the layout of that backend's checkpoints and NATIVE
// savepoints (HeapSnapshotStrategy): the KeyedBackendSerializationProxy
// header, then every key group of the range, empty ones included:
//
//	i32 keyGroupId                       (never compressed)
//	per state of the header, in StateOrder (default: by id):
//	  [own Snappy framed stream when Header.Compressed]
//	  i16 stateId, i32 n
//	  key/value state: n times namespace, key, whole state value
//	  priority queue:  n times the element (see AppendTimerElement)
//
// Entries are not length-prefixed; the state value is the serializer's own
// output of the whole value (AppendListSerializer for LIST state,
// AppendMapSerializer for MAP state, AppendTtlValue wrappers for TTL). The
// entries of one key group are buffered until the key group ends (key
// groups must ascend; inside one, states may interleave). Offsets gives the
// KeyGroupsStateHandle offsets (tag 12, none 0). Errors leave the writer
// broken, as with KeyedWriter. A HeapWriter is not safe for concurrent use.
type HeapWriter struct {
	bw        *bufio.Writer
	out       *countingWriter
	framer    *snappyFramer
	rng       keygroups.Range
	numStates int
	order     []int
	offsets   []int64

	group  int // current key group, -1 before the first entry
	next   int // next key group to write
	bufs   [][]byte
	counts []int64

	err    error
	closed bool
}

// NewHeapWriter writes h to w and returns a writer for the key groups of
// rng (maxParallelism bounds the range).
func NewHeapWriter(w io.Writer, h Header, rng keygroups.Range, maxParallelism int) (*HeapWriter, error) {
	if maxParallelism < 1 || maxParallelism > 32768 {
		return nil, fmt.Errorf("%w: max parallelism %d", ErrValue, maxParallelism)
	}
	if rng.Start < 0 || rng.End < rng.Start || rng.End >= maxParallelism {
		return nil, fmt.Errorf("%w: key-group range [%d, %d] for max parallelism %d", ErrValue, rng.Start, rng.End, maxParallelism)
	}
	n := h.numStates()
	if n == 0 {
		return nil, fmt.Errorf("%w: a heap keyed stream needs at least one state", ErrValue)
	}
	hdr, err := AppendHeader(nil, h)
	if err != nil {
		return nil, err
	}
	hw := &HeapWriter{
		bw:        bufio.NewWriterSize(w, 64<<10),
		rng:       rng,
		numStates: n,
		offsets:   make([]int64, rng.Len()),
		group:     -1,
		next:      rng.Start,
		bufs:      make([][]byte, n),
		counts:    make([]int64, n),
	}
	hw.order = make([]int, n)
	for i := range hw.order {
		hw.order[i] = i
	}
	hw.out = &countingWriter{w: hw.bw}
	if h.Compressed {
		hw.framer = newSnappyFramer(hw.out)
	}
	if _, err := hw.out.Write(hdr); err != nil {
		return nil, err
	}
	return hw, nil
}

// SetStateOrder sets the order in which every key group lists the state
// streams (a permutation of the state ids). Flink writes the iteration
// order of its state map, which the reader must not assume; the default is
// ascending ids.
func (w *HeapWriter) SetStateOrder(order []int) error {
	if err := w.check(); err != nil {
		return err
	}
	if w.group >= 0 || w.next != w.rng.Start {
		return w.fail(fmt.Errorf("%w: state order set after the first entry", ErrOrder))
	}
	if len(order) != w.numStates {
		return w.fail(fmt.Errorf("%w: state order of %d ids for %d states", ErrValue, len(order), w.numStates))
	}
	seen := make([]bool, w.numStates)
	for _, id := range order {
		if id < 0 || id >= w.numStates || seen[id] {
			return w.fail(fmt.Errorf("%w: state order %v is not a permutation", ErrValue, order))
		}
		seen[id] = true
	}
	w.order = append(w.order[:0], order...)
	return nil
}

func (w *HeapWriter) check() error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return errors.Join(ErrBroken, w.err)
	}
	return nil
}

func (w *HeapWriter) fail(err error) error {
	w.err = err
	return err
}

// Add appends one entry of key/value state stateID in key group kg: the
// serialized namespace, key and whole state value. The writer copies them.
func (w *HeapWriter) Add(kg, stateID int, namespace, key, value []byte) error {
	if err := w.enter(kg, stateID); err != nil {
		return err
	}
	b := append(w.bufs[stateID], namespace...)
	b = append(b, key...)
	w.bufs[stateID] = append(b, value...)
	w.counts[stateID]++
	return nil
}

// AddElement appends one element of priority-queue state stateID in key
// group kg (for timers AppendTimerElement's bytes).
func (w *HeapWriter) AddElement(kg, stateID int, element []byte) error {
	if err := w.enter(kg, stateID); err != nil {
		return err
	}
	w.bufs[stateID] = append(w.bufs[stateID], element...)
	w.counts[stateID]++
	return nil
}

// enter checks an entry's key group and state and ends the key groups
// before kg.
func (w *HeapWriter) enter(kg, stateID int) error {
	if err := w.check(); err != nil {
		return err
	}
	if !w.rng.Contains(kg) {
		return w.fail(fmt.Errorf("%w: key group %d outside range [%d, %d]", ErrOrder, kg, w.rng.Start, w.rng.End))
	}
	if stateID < 0 || stateID >= w.numStates {
		return w.fail(fmt.Errorf("%w: state id %d, header has %d states", ErrValue, stateID, w.numStates))
	}
	if kg < w.group {
		return w.fail(fmt.Errorf("%w: key group %d after %d", ErrOrder, kg, w.group))
	}
	if w.counts[stateID] == math.MaxInt32 {
		return w.fail(fmt.Errorf("%w: more than %d entries of state %d in key group %d", ErrValue, math.MaxInt32, stateID, kg))
	}
	if kg > w.group {
		if err := w.flushUpTo(kg); err != nil {
			return w.fail(err)
		}
		w.group = kg
	}
	return nil
}

// flushUpTo writes the buffered key group and every empty one before kg.
func (w *HeapWriter) flushUpTo(kg int) error {
	for w.next < kg {
		if err := w.writeGroup(w.next); err != nil {
			return err
		}
		w.next++
	}
	return nil
}

// writeGroup writes key group kg from the buffers (empty unless kg is the
// current key group) and clears them.
func (w *HeapWriter) writeGroup(kg int) error {
	w.offsets[kg-w.rng.Start] = w.out.n
	var b [6]byte
	binary.BigEndian.PutUint32(b[:4], uint32(kg))
	if _, err := w.out.Write(b[:4]); err != nil {
		return err
	}
	for _, id := range w.order {
		var dst io.Writer = w.out
		if w.framer != nil {
			w.framer.reset(w.out)
			dst = w.framer
		}
		binary.BigEndian.PutUint16(b[:2], uint16(id))
		binary.BigEndian.PutUint32(b[2:], uint32(w.counts[id]))
		if _, err := dst.Write(b[:6]); err != nil {
			return err
		}
		if _, err := dst.Write(w.bufs[id]); err != nil {
			return err
		}
		if w.framer != nil {
			if err := w.framer.Close(); err != nil {
				return err
			}
		}
		w.bufs[id], w.counts[id] = w.bufs[id][:0], 0
	}
	return nil
}

// Offsets returns, after Close, the offset of every key group of the range
// (index i = key group rng.Start+i).
func (w *HeapWriter) Offsets() []int64 { return append([]int64(nil), w.offsets...) }

// Size is the number of bytes written so far.
func (w *HeapWriter) Size() int64 { return w.out.n }

// Close writes the buffered key group and the empty ones up to the end of
// the range, and flushes the stream. It does not close the underlying
// writer.
func (w *HeapWriter) Close() error {
	if err := w.check(); err != nil {
		return err
	}
	if err := w.flushUpTo(w.rng.End + 1); err != nil {
		return w.fail(err)
	}
	if err := w.bw.Flush(); err != nil {
		return w.fail(err)
	}
	w.closed = true
	return nil
}

// AppendTimerElement appends a timer as TimerSerializer writes it (the
// heap layout's priority-queue element): i64 timestamp with the sign bit
// flipped, serialized key, serialized namespace.
func AppendTimerElement(b []byte, timestamp int64, key, namespace []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(timestamp)^(1<<63))
	b = append(b, key...)
	return append(b, namespace...)
}
