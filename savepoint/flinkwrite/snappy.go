package flinkwrite

import (
	"encoding/binary"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/snappy"
)

// Snappy framing format as xerial's SnappyFramedOutputStream writes it for
// Flink's SnappyStreamCompressionDecorator (one framed stream per key-group
// block). Wire format: never change.
//
//	stream identifier: FF 06 00 00 73 4E 61 50 70 59 ("sNaPpY")
//	chunk:             u8 type, u24 little-endian length, payload
//	  0x00 compressed:   u32-LE masked CRC-32C of the uncompressed bytes, snappy block
//	  0x01 uncompressed: u32-LE masked CRC-32C, the bytes
//	masked crc = ((crc >> 15) | (crc << 17)) + 0xA282EAD8
const (
	snappyChunkCompressed   = 0x00
	snappyChunkUncompressed = 0x01
	snappyBlockSize         = 64 * 1024 // xerial DEFAULT_BLOCK_SIZE, used by Flink
	snappyMaskDelta         = 0xA282EAD8
	// snappyMinRatio: a block is stored compressed only when
	// compressed/raw <= 0.85 (xerial DEFAULT_MIN_COMPRESSION_RATIO).
	snappyMinRatio = 0.85
)

var snappyStreamHeader = []byte{0xFF, 0x06, 0x00, 0x00, 's', 'N', 'a', 'P', 'p', 'Y'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func maskedCRC32C(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + snappyMaskDelta
}

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
	return &snappyFramer{w: w, buf: make([]byte, 0, snappyBlockSize)}
}

func (f *snappyFramer) reset(w io.Writer) {
	f.w, f.buf, f.started = w, f.buf[:0], false
}

func (f *snappyFramer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), snappyBlockSize-len(f.buf))
		f.buf = append(f.buf, p[:k]...)
		p = p[k:]
		n += k
		if len(f.buf) == snappyBlockSize {
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
	_, err := f.w.Write(snappyStreamHeader)
	return err
}

func (f *snappyFramer) flushBlock() error {
	if err := f.header(); err != nil {
		return err
	}
	if len(f.buf) == 0 {
		return nil
	}
	crc := maskedCRC32C(f.buf)
	f.enc = snappy.Encode(f.enc[:cap(f.enc)], f.buf)
	typ, payload := byte(snappyChunkCompressed), f.enc
	if float64(len(f.enc))/float64(len(f.buf)) > snappyMinRatio {
		typ, payload = snappyChunkUncompressed, f.buf
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
