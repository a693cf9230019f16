package flinkwrite

import (
	"encoding/binary"
	"io"

	"github.com/klauspost/compress/snappy"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// The framing (binfmt's Snappy constants) is documented in binfmt.
const (
	// snappyMinRatio: a block is stored compressed only when
	// compressed/raw <= 0.85 (xerial DEFAULT_MIN_COMPRESSION_RATIO).
	snappyMinRatio = 0.85
)

// snappyFramer buffers up to one 64 KiB block and writes framed chunks to w.
// The stream identifier is written by the first Write or by Close, so an
// opened framer always produces a valid (possibly empty) stream.
type snappyFramer struct {
	w       io.Writer
	buf     []byte
	enc     []byte
	started bool
}

func newSnappyFramer(w io.Writer) *snappyFramer {
	return &snappyFramer{w: w, buf: make([]byte, 0, binfmt.SnappyBlockSize)}
}

func (f *snappyFramer) reset(w io.Writer) {
	f.w, f.buf, f.started = w, f.buf[:0], false
}

func (f *snappyFramer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), binfmt.SnappyBlockSize-len(f.buf))
		f.buf = append(f.buf, p[:k]...)
		p = p[k:]
		n += k
		if len(f.buf) == binfmt.SnappyBlockSize {
			if err := f.flushBlock(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (f *snappyFramer) header() error {
	if f.started {
		return nil
	}
	f.started = true
	_, err := f.w.Write(binfmt.SnappyStreamHeader)
	return err
}

func (f *snappyFramer) flushBlock() error {
	if err := f.header(); err != nil {
		return err
	}
	if len(f.buf) == 0 {
		return nil
	}
	crc := binfmt.SnappyMaskedCRC(f.buf)
	f.enc = snappy.Encode(f.enc[:cap(f.enc)], f.buf)
	typ, payload := byte(binfmt.SnappyChunkCompressed), f.enc
	if float64(len(f.enc))/float64(len(f.buf)) > snappyMinRatio {
		typ, payload = binfmt.SnappyChunkUncompressed, f.buf
	}
	var hdr [8]byte
	l := len(payload) + 4
	hdr[0], hdr[1], hdr[2], hdr[3] = typ, byte(l), byte(l>>8), byte(l>>16)
	binary.LittleEndian.PutUint32(hdr[4:], crc)
	if _, err := f.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := f.w.Write(payload); err != nil {
		return err
	}
	f.buf = f.buf[:0]
	return nil
}

// Close writes any buffered bytes as a final chunk; it does not close w.
func (f *snappyFramer) Close() error { return f.flushBlock() }

// AppendSnappyFramed appends data as one complete Snappy framed stream, the
// way Flink compresses one key-group block.
func AppendSnappyFramed(dst, data []byte) []byte {
	w := &sliceWriter{b: dst}
	f := newSnappyFramer(w)
	_, _ = f.Write(data) // a sliceWriter never fails
	_ = f.Close()
	return w.b
}

type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}
