package keyed

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/snappy"

	"github.com/sfstate/sfstate/errclass"
)

// Snappy framing format (what xerial's SnappyFramedOutputStream writes and
// Flink's SnappyStreamCompressionDecorator uses per key-group block):
//
//	stream identifier: FF 06 00 00 "sNaPpY"
//	chunk: u8 type, u24 little-endian length, payload
//	  0x00 compressed:   u32-LE masked CRC-32C of the uncompressed data, snappy block
//	  0x01 uncompressed: u32-LE masked CRC-32C, raw bytes
//	  0x02..0x7F reserved (error), 0x80..0xFE skippable
//
// The constants below are part of that wire format.
const (
	chunkCompressed   = 0x00
	chunkUncompressed = 0x01
	chunkPadding      = 0xFE
	chunkStreamID     = 0xFF
	maxBlockSize      = 65536
	crcMaskDelta      = 0xA282EAD8
)

var streamID = []byte("sNaPpY")

// ErrSnappy marks malformed Snappy framing or a checksum mismatch.
var ErrSnappy = errclass.New(errclass.ErrCorrupt, "keyed: bad snappy frame")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, crcTable)
	return (c>>15 | c<<17) + crcMaskDelta
}

// SnappyReader decodes a Snappy framed stream. It verifies every chunk's
// masked CRC-32C and never allocates more than one maximum-size block
// (64 KiB) of output plus its compressed input.
type SnappyReader struct {
	r      io.Reader
	base   int64 // absolute offset of the stream start (for errors)
	pos    int64 // bytes consumed from r
	out    []byte
	outPos int
	in     []byte
	seenID bool
	err    error
}

// NewSnappyReader returns a reader decoding the framed stream r, whose
// first byte sits at absolute offset base.
func NewSnappyReader(r io.Reader, base int64) *SnappyReader {
	return &SnappyReader{r: r, base: base}
}

// Reset reuses the reader (and its buffers) for a new stream.
func (s *SnappyReader) Reset(r io.Reader, base int64) {
	s.r, s.base, s.pos, s.outPos, s.seenID, s.err = r, base, 0, 0, false, nil
	s.out = s.out[:0]
}

// InputOffset returns the absolute offset of the next compressed byte.
func (s *SnappyReader) InputOffset() int64 { return s.base + s.pos }

func (s *SnappyReader) fail(at int64, format string, args ...any) error {
	s.err = fmt.Errorf("%w at offset %d: %s", ErrSnappy, at, fmt.Sprintf(format, args...))
	return s.err
}

func (s *SnappyReader) readFull(b []byte) error {
	n, err := io.ReadFull(s.r, b)
	s.pos += int64(n)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return s.fail(s.base+s.pos, "stream truncated")
	}
	if err != nil {
		s.err = err
	}
	return err
}

// Read implements io.Reader.
func (s *SnappyReader) Read(p []byte) (int, error) {
	for s.outPos >= len(s.out) {
		if s.err != nil {
			return 0, s.err
		}
		if err := s.chunk(); err != nil {
			if err == io.EOF {
				return 0, io.EOF
			}
			return 0, err
		}
	}
	n := copy(p, s.out[s.outPos:])
	s.outPos += n
	return n, nil
}

// chunk reads chunks until one produces output (or the stream ends).
func (s *SnappyReader) chunk() error {
	var hdr [4]byte
	at := s.base + s.pos
	n, err := io.ReadFull(s.r, hdr[:])
	s.pos += int64(n)
	if err == io.EOF && n == 0 {
		s.err = io.EOF
		return io.EOF
	}
	if err != nil {
		if err == io.ErrUnexpectedEOF {
			return s.fail(at, "truncated chunk header")
		}
		s.err = err
		return err
	}
	typ := hdr[0]
	length := int(hdr[1]) | int(hdr[2])<<8 | int(hdr[3])<<16
	if !s.seenID && typ != chunkStreamID {
		return s.fail(at, "stream does not start with the sNaPpY identifier (chunk type 0x%02x)", typ)
	}
	switch {
	case typ == chunkStreamID:
		if length != len(streamID) {
			return s.fail(at, "stream identifier length %d", length)
		}
		var id [6]byte
		if err := s.readFull(id[:]); err != nil {
			return err
		}
		if !bytes.Equal(id[:], streamID) {
			return s.fail(at, "bad stream identifier %q", id[:])
		}
		s.seenID = true
		s.out = s.out[:0]
		s.outPos = 0
		return nil
	case typ == chunkCompressed || typ == chunkUncompressed:
		if length < 4 || length > 4+snappy.MaxEncodedLen(maxBlockSize) {
			return s.fail(at, "chunk length %d out of range", length)
		}
		if cap(s.in) < length {
			s.in = make([]byte, length)
		}
		in := s.in[:length]
		if err := s.readFull(in); err != nil {
			return err
		}
		want := binary.LittleEndian.Uint32(in)
		payload := in[4:]
		if typ == chunkCompressed {
			n, err := snappy.DecodedLen(payload)
			if err != nil || n > maxBlockSize {
				return s.fail(at, "compressed chunk decodes to %d bytes (max %d): %v", n, maxBlockSize, err)
			}
			if cap(s.out) < n {
				s.out = make([]byte, n)
			}
			out, err := snappy.Decode(s.out[:n], payload)
			if err != nil {
				return s.fail(at, "snappy block: %v", err)
			}
			s.out = out
		} else {
			if len(payload) > maxBlockSize {
				return s.fail(at, "uncompressed chunk of %d bytes", len(payload))
			}
			s.out = append(s.out[:0], payload...)
		}
		if got := maskedCRC(s.out); got != want {
			return s.fail(at, "checksum mismatch (stored %08x, computed %08x)", want, got)
		}
		s.outPos = 0
		return nil
	case typ >= 0x02 && typ <= 0x7F:
		return s.fail(at, "reserved unskippable chunk type 0x%02x", typ)
	default: // 0x80..0xFE skippable (incl. padding)
		if _, err := io.CopyN(io.Discard, s.r, int64(length)); err != nil {
			return s.fail(at, "truncated skippable chunk")
		}
		s.pos += int64(length)
		s.out = s.out[:0]
		s.outPos = 0
		return nil
	}
}

// AppendSnappyFramed appends data as one Snappy framed stream (stream
// identifier plus chunks of at most 64 KiB), using a compressed chunk when
// it saves at least 12.5 % like xerial's writer, else an uncompressed one.
// It exists for tests and writers that must produce Flink-compatible
// compressed key-group blocks.
func AppendSnappyFramed(dst, data []byte) []byte {
	dst = append(dst, chunkStreamID, 6, 0, 0)
	dst = append(dst, streamID...)
	for len(data) > 0 {
		n := min(len(data), maxBlockSize)
		block := data[:n]
		data = data[n:]
		crc := maskedCRC(block)
		enc := snappy.Encode(nil, block)
		typ := byte(chunkCompressed)
		payload := enc
		if float64(len(enc)) > 0.85*float64(len(block)) {
			typ, payload = chunkUncompressed, block
		}
		l := len(payload) + 4
		dst = append(dst, typ, byte(l), byte(l>>8), byte(l>>16))
		dst = binary.LittleEndian.AppendUint32(dst, crc)
		dst = append(dst, payload...)
	}
	return dst
}
