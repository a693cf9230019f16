package flinkwrite

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// snappyStreamID is the stream-identifier chunk every Snappy framed block
// starts with (wire format).
var snappyStreamID = []byte{0xFF, 0x06, 0x00, 0x00, 's', 'N', 'a', 'P', 'p', 'Y'}

// AddRawBlock appends raw, a complete pre-encoded block of key group kg
// (for a compressed stream the Snappy framed bytes, else the plain block
// from the first state id to the end-of-key-group mark), verbatim. It
// follows the ordering rules of Add: key groups ascend, and a key group is
// written either by AddRawBlock once or by Add, never both. The writer
// checks only the block's ends (stream identifier, or first state id and
// end mark); decoding the block is the caller's job.
func (w *KeyedWriter) AddRawBlock(kg int, raw []byte) error {
	return w.AddRawBlockFrom(kg, bytes.NewReader(raw), int64(len(raw)))
}

// AddRawBlockFrom is AddRawBlock for a block of n bytes read from r, so a
// large block need not be held in memory. r must yield exactly n bytes;
// a short read breaks the writer.
func (w *KeyedWriter) AddRawBlockFrom(kg int, r io.Reader, n int64) error {
	if err := w.check(); err != nil {
		return err
	}
	if !w.rng.Contains(kg) {
		return w.fail(fmt.Errorf("%w: key group %d outside range [%d, %d]", ErrOrder, kg, w.rng.Start, w.rng.End))
	}
	if kg <= w.group {
		return w.fail(fmt.Errorf("%w: raw block of key group %d after key group %d", ErrOrder, kg, w.group))
	}
	minLen := int64(2 + 4 + w.prefixLen + 4 + 2)
	if w.framer != nil {
		minLen = int64(len(snappyStreamID)) + 4
	}
	if n < minLen {
		return w.fail(fmt.Errorf("%w: raw block of key group %d has %d bytes", ErrValue, kg, n))
	}
	if w.group >= 0 {
		if err := w.endGroup(); err != nil {
			return w.fail(err)
		}
	}
	w.group, w.state, w.raw = kg, 0, true
	w.offsets[kg-w.rng.Start] = w.out.n
	// The first bytes are checked before anything is written.
	var head [16]byte
	h := head[:len(snappyStreamID)]
	if w.framer == nil {
		h = head[:2]
	}
	if _, err := io.ReadFull(r, h); err != nil {
		return w.fail(fmt.Errorf("raw block of key group %d: %w", kg, err))
	}
	if w.framer != nil && !bytes.Equal(h, snappyStreamID) {
		return w.fail(fmt.Errorf("%w: raw block of key group %d does not start with the Snappy stream identifier", ErrValue, kg))
	}
	if w.framer == nil {
		if id := int(binary.BigEndian.Uint16(h)); id >= w.numStates {
			return w.fail(fmt.Errorf("%w: raw block of key group %d starts with state id %d, header has %d states", ErrValue, kg, id, w.numStates))
		}
	}
	if _, err := w.out.Write(h); err != nil {
		return w.fail(err)
	}
	rest := n - int64(len(h))
	var tail tailKeeper
	m, err := io.Copy(io.MultiWriter(w.out, &tail), io.LimitReader(r, rest))
	if err == nil && m != rest {
		err = fmt.Errorf("%w: raw block of key group %d: %d of %d bytes", io.ErrUnexpectedEOF, kg, m+int64(len(h)), n)
	}
	if err != nil {
		return w.fail(err)
	}
	if w.framer == nil && binary.BigEndian.Uint16(tail.last[:]) != endOfKeyGroupMark {
		return w.fail(fmt.Errorf("%w: raw block of key group %d does not end with the end-of-key-group mark", ErrValue, kg))
	}
	return nil
}

// tailKeeper remembers the last two bytes written to it.
type tailKeeper struct{ last [2]byte }

func (t *tailKeeper) Write(p []byte) (int, error) {
	switch {
	case len(p) >= 2:
		copy(t.last[:], p[len(p)-2:])
	case len(p) == 1:
		t.last[0], t.last[1] = t.last[1], p[0]
	}
	return len(p), nil
}
