package s3

import (
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/sfstate/sfstate/errclass"
)

// Castagnoli is the CRC-32C table used for every object checksum.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrIntegrity marks a size or checksum mismatch found while reading: a
// permanent error (retrying reads the same bytes) of class
// errclass.ErrCorrupt.
var ErrIntegrity = errclass.Mark(errclass.ErrCorrupt, fmt.Errorf("%w: integrity check failed", ErrPermanent))

// CRC32C returns the CRC-32C of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, Castagnoli) }

// HashingReader counts and checksums (CRC-32C) the bytes read through it.
type HashingReader struct {
	r io.Reader
	h hash.Hash32
	n int64
}

// NewHashingReader wraps r.
func NewHashingReader(r io.Reader) *HashingReader {
	return &HashingReader{r: r, h: crc32.New(Castagnoli)}
}

func (h *HashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// Size returns the number of bytes read so far.
func (h *HashingReader) Size() int64 { return h.n }

// Sum returns the CRC-32C of the bytes read so far.
func (h *HashingReader) Sum() uint32 { return h.h.Sum32() }

// HashingWriter counts and checksums the bytes written through it. A nil
// destination only hashes.
type HashingWriter struct {
	w io.Writer
	h hash.Hash32
	n int64
}

// NewHashingWriter wraps w (which may be nil).
func NewHashingWriter(w io.Writer) *HashingWriter {
	return &HashingWriter{w: w, h: crc32.New(Castagnoli)}
}

func (h *HashingWriter) Write(p []byte) (int, error) {
	n := len(p)
	var err error
	if h.w != nil {
		n, err = h.w.Write(p)
	}
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// Size returns the number of bytes written so far.
func (h *HashingWriter) Size() int64 { return h.n }

// Sum returns the CRC-32C of the bytes written so far.
func (h *HashingWriter) Sum() uint32 { return h.h.Sum32() }

// verifyingReader checks size and CRC-32C when the stream ends.
type verifyingReader struct {
	r    io.Reader
	h    hash.Hash32
	n    int64
	size int64
	crc  uint32
	err  error
}

// VerifyingReader returns a reader that yields r's bytes and, instead of
// io.EOF, returns an error wrapping ErrIntegrity when the stream is shorter
// or longer than size or its CRC-32C differs from crc. It never returns more
// than size bytes. Use it for every full read of an object whose size and
// checksum a manifest recorded.
func VerifyingReader(r io.Reader, size int64, crc uint32) io.Reader {
	return &verifyingReader{r: r, h: crc32.New(Castagnoli), size: size, crc: crc}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if rem := v.size - v.n; int64(len(p)) > rem {
		if rem > 0 {
			p = p[:rem]
		} else {
			// At the expected end: the source must be exhausted too.
			var one [1]byte
			p = one[:]
			n, err := io.ReadFull(v.r, p)
			if n > 0 {
				v.err = fmt.Errorf("%w: object longer than the expected %d bytes", ErrIntegrity, v.size)
				return 0, v.err
			}
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				return 0, err
			}
			if sum := v.h.Sum32(); sum != v.crc {
				v.err = fmt.Errorf("%w: crc32c %08x, expected %08x (%d bytes)", ErrIntegrity, sum, v.crc, v.size)
				return 0, v.err
			}
			v.err = io.EOF
			return 0, io.EOF
		}
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF {
		if v.n < v.size {
			v.err = fmt.Errorf("%w: object truncated: %d bytes, expected %d", ErrIntegrity, v.n, v.size)
			return n, v.err
		}
		err = nil // checked on the next call
	}
	return n, err
}
