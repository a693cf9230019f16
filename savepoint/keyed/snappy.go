package keyed

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/klauspost/compress/snappy"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// streamID is the payload of the stream identifier chunk (the framing is
// documented at binfmt's Snappy constants).
var streamID = binfmt.SnappyStreamHeader[4:]

// ErrSnappy marks malformed Snappy framing or a checksum mismatch.
var ErrSnappy = errclass.New(errclass.ErrCorrupt, "keyed: bad snappy frame")

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
	if !s.seenID && typ != binfmt.SnappyChunkStreamID {
		return s.fail(at, "stream does not start with the sNaPpY identifier (chunk type 0x%02x)", typ)
	}
	switch {
	case typ == binfmt.SnappyChunkStreamID:
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
	case typ == binfmt.SnappyChunkCompressed || typ == binfmt.SnappyChunkUncompressed:
		if length < 4 || length > 4+snappy.MaxEncodedLen(binfmt.SnappyBlockSize) {
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
		if typ == binfmt.SnappyChunkCompressed {
			n, err := snappy.DecodedLen(payload)
			if err != nil || n > binfmt.SnappyBlockSize {
				return s.fail(at, "compressed chunk decodes to %d bytes (max %d): %v", n, binfmt.SnappyBlockSize, err)
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
			if len(payload) > binfmt.SnappyBlockSize {
				return s.fail(at, "uncompressed chunk of %d bytes", len(payload))
			}
			s.out = append(s.out[:0], payload...)
		}
		if got := binfmt.SnappyMaskedCRC(s.out); got != want {
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
