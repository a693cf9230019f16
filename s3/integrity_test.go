package s3_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/sfstate/sfstate/s3"
)

func TestVerifyingReader(t *testing.T) {
	data := detBytes(1, 10000)
	crc := s3.CRC32C(data)
	read := func(r io.Reader) ([]byte, error) { return io.ReadAll(r) }

	got, err := read(s3.VerifyingReader(iotest.HalfReader(bytes.NewReader(data)), int64(len(data)), crc))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("good stream: %d bytes, %v", len(got), err)
	}
	if _, err := read(s3.VerifyingReader(bytes.NewReader(data[:9999]), 10000, crc)); !errors.Is(err, s3.ErrIntegrity) || !s3.IsPermanent(err) {
		t.Fatalf("short stream: %v", err)
	}
	if _, err := read(s3.VerifyingReader(bytes.NewReader(append(data, 1)), 10000, crc)); !errors.Is(err, s3.ErrIntegrity) {
		t.Fatalf("long stream: %v", err)
	}
	bad := append([]byte(nil), data...)
	bad[5000] ^= 1
	if _, err := read(s3.VerifyingReader(bytes.NewReader(bad), 10000, crc)); !errors.Is(err, s3.ErrIntegrity) {
		t.Fatalf("flipped bit: %v", err)
	}
	if _, err := read(s3.VerifyingReader(bytes.NewReader(nil), 0, 0)); err != nil {
		t.Fatalf("empty: %v", err)
	}

	w := s3.NewHashingWriter(io.Discard)
	w.Write(data[:3])
	w.Write(data[3:])
	if w.Sum() != crc || w.Size() != int64(len(data)) {
		t.Fatalf("hashing writer: %08x/%d", w.Sum(), w.Size())
	}
	h := s3.NewHashingReader(bytes.NewReader(data))
	io.Copy(io.Discard, h)
	if h.Sum() != crc || h.Size() != int64(len(data)) {
		t.Fatalf("hashing reader: %08x/%d", h.Sum(), h.Size())
	}
}
