package errclass_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/javaser"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/native"
)

// decoderFailure is one real failure of a decoder of the module: the error,
// the sentinel it must still match, and the position it must carry (file
// "" and offset -1 when none is known to the layer that fails).
type decoderFailure struct {
	name     string
	err      error
	sentinel error
	file     string // "" = no position expected
	offset   int64
	fileSub  bool // file only needs to end with want file
}

// checkFailures asserts the error model on each failure: corrupt class,
// not unsupported, the package sentinel kept, and the position through
// errors.As.
func checkFailures(t *testing.T, fs []decoderFailure) {
	t.Helper()
	for _, f := range fs {
		t.Run(f.name, func(t *testing.T) {
			err := f.err
			if err == nil {
				t.Fatal("no error")
			}
			t.Logf("%v", err)
			if !errors.Is(err, errclass.ErrCorrupt) {
				t.Errorf("not errclass.ErrCorrupt: %v", err)
			}
			if errors.Is(err, errclass.ErrUnsupported) {
				t.Errorf("also errclass.ErrUnsupported: %v", err)
			}
			if f.sentinel != nil && !errors.Is(err, f.sentinel) {
				t.Errorf("does not match its package sentinel %q: %v", f.sentinel, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("message takes more than one line: %q", err)
			}
			var ce *errclass.CorruptionError
			if f.file == "" && f.offset < 0 {
				return
			}
			if !errors.As(err, &ce) {
				t.Fatalf("%T carries no *errclass.CorruptionError: %v", err, err)
			}
			okFile := ce.File == f.file || f.fileSub && strings.HasSuffix(ce.File, f.file)
			if !okFile || ce.Offset != f.offset {
				t.Errorf("position %q at %d, want %q at %d", ce.File, ce.Offset, f.file, f.offset)
			}
			if !errors.Is(ce, errclass.ErrCorrupt) {
				t.Errorf("the position's view is not corrupt: %v", ce)
			}
		})
	}
}

func TestDecoderFailuresAreCorrupt(t *testing.T) {
	var fs []decoderFailure

	// _metadata cut inside the checkpoint id (magic, version 3, 3 of 8
	// bytes): the read fails at offset 8.
	md := binary.BigEndian.AppendUint32(nil, savepoint.MetadataMagic)
	md = binary.BigEndian.AppendUint32(md, 3)
	_, err := savepoint.ParseMetadata(append(md, 0, 0, 0), "sp/_metadata")
	fs = append(fs, decoderFailure{name: "truncated _metadata", err: err, sentinel: savepoint.ErrFormat, file: "sp/_metadata", offset: 8})

	// A Java serialization stream with a wrong magic number, at file
	// offset 100: javaser knows the offset, not the file.
	_, err = javaser.Parse([]byte{0xAC, 0xED, 0x00, 0x06, 0x70}, 100)
	fs = append(fs, decoderFailure{name: "bad java stream", err: err, sentinel: javaser.ErrFormat, offset: 100})

	// A Snappy framed stream without its stream identifier.
	_, err = io.ReadAll(keyed.NewSnappyReader(bytes.NewReader([]byte{0x00, 0x05, 0x00, 0x00, 1, 2, 3, 4, 5}), 40))
	fs = append(fs, decoderFailure{name: "bad snappy frame", err: err, sentinel: keyed.ErrSnappy, offset: -1})

	// An object read against its recorded size and CRC-32C.
	_, err = io.ReadAll(s3.VerifyingReader(strings.NewReader("hello"), 5, 0x12345678))
	fs = append(fs, decoderFailure{name: "s3 integrity", err: err, sentinel: s3.ErrIntegrity, offset: -1})
	if err != nil && !errors.Is(err, s3.ErrPermanent) {
		t.Errorf("s3 integrity failure is no longer permanent: %v", err)
	}

	// A row value whose string field's length runs past the value's end
	// (rowcodec positions count bytes of the value, not of a file).
	codec, err := rowcodec.NewCodec(arrow.NewSchema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	v, err := codec.EncodeRow(nil, 0, []any{int64(1), "a longer string value"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = codec.DecodeRow(v[:len(v)-5])
	var de *rowcodec.DecodeError
	if err != nil && !errors.As(err, &de) {
		t.Errorf("rowcodec: %T is not a *rowcodec.DecodeError", err)
	}
	fs = append(fs, decoderFailure{name: "bad rowcodec value", err: err, sentinel: rowcodec.ErrCorrupt, offset: -1})

	fs = append(fs, keyedBlockFailures(t)...)
	fs = append(fs, nativeEntryFailure(t))
	fs = append(fs, cgoFailures(t)...)
	checkFailures(t, fs)
}

// copyFixture copies a fixture savepoint into a temporary directory.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src, err := s3.NewLocal(fixtures.Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CopyStore(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	return dir
}

func openDir(t *testing.T, dir string) *savepoint.Savepoint {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// firstKeyGroup finds the first non-empty key group of a canonical keyed
// handle: the file holding it and the block's offset.
func firstKeyGroup(t *testing.T, sp *savepoint.Savepoint) (key, name string, off int64) {
	t.Helper()
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
			if !ok || h.Delegate == nil {
				continue
			}
			loc, err := sp.Resolve(h.Delegate)
			if err != nil || loc.IsInline() {
				continue
			}
			for _, o := range h.Offsets {
				if o > 0 {
					return loc.Key, loc.Name, o
				}
			}
		}
	}
	t.Fatal("no non-empty key group in the fixture")
	return
}

// keyedBlockFailures damages the first key-group block of two real Flink
// savepoints: an uncompressed one (the block's state id points past the
// header's states) and a Snappy-compressed one (a flipped chunk byte fails
// the chunk's CRC).
func keyedBlockFailures(t *testing.T) []decoderFailure {
	fixtures.Require(t)
	var out []decoderFailure
	for _, c := range []struct {
		name, fixture string
		damage        func(b []byte, off int64)
		sentinel      error
	}{
		{"corrupt keyed block", "flink1.20-rocksdb-canonical-valuestate-timers",
			func(b []byte, off int64) { binary.BigEndian.PutUint16(b[off:], 0x7FFE) }, nil},
		{"bad snappy chunk in a keyed block", "flink1.19-rocksdb-canonical-snappy-compressed",
			func(b []byte, off int64) { b[off+10+8+3] ^= 0x01 }, keyed.ErrSnappy},
	} {
		dir := copyFixture(t, c.fixture)
		key, name, off := firstKeyGroup(t, openDir(t, dir))
		p := filepath.Join(dir, key)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c.damage(b, off)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		err = openDir(t, dir).WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1}, func(*savepoint.KeyedEntry) error { return nil })
		var ke *keyed.Error
		if err != nil && !errors.As(err, &ke) {
			t.Errorf("%s: %T is not a *keyed.Error: %v", c.name, err, err)
		}
		out = append(out, decoderFailure{name: c.name, err: err, sentinel: c.sentinel, file: name, offset: off})
	}
	return out
}

// nativeEntryFailure decodes a RocksDB entry of a real native savepoint
// whose key is too short for its key-group prefix. (The entry lives in an
// SST that RocksDB reads; no file offset is known.)
func nativeEntryFailure(t *testing.T) decoderFailure {
	sp := openDir(t, fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	snap, err := native.Open(context.Background(), sp, savepoint.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range snap.Handles {
		if h.Header == nil || len(h.Header.States) == 0 {
			continue
		}
		dec, err := h.NewDecoder(int(h.Operator.MaxParallelism))
		if err != nil {
			t.Fatal(err)
		}
		err = dec.Decode(h.Header.States[0].Name, nil, []byte{1}, func(*keyed.Entry) error { return nil })
		return decoderFailure{name: "corrupt native SST entry", err: err, sentinel: native.ErrFormat, offset: -1}
	}
	t.Fatal("no native handle with states")
	return decoderFailure{}
}

// Valid input of a form not read is unsupported, never corrupt, and keeps
// its position.
func TestDecoderUnsupported(t *testing.T) {
	md := binary.BigEndian.AppendUint32(nil, savepoint.MetadataMagic)
	_, err := savepoint.ParseMetadata(binary.BigEndian.AppendUint32(md, 99), "sp/_metadata")
	if !errors.Is(err, errclass.ErrUnsupported) || !errors.Is(err, savepoint.ErrUnsupported) || errors.Is(err, errclass.ErrCorrupt) || errors.Is(err, savepoint.ErrFormat) {
		t.Errorf("metadata version 99: %v", err)
	}
	var ce *errclass.CorruptionError
	if !errors.As(err, &ce) || ce.File != "sp/_metadata" || ce.Offset != 4 {
		t.Errorf("metadata version 99: position %+v", ce)
	}
	if got, want := err.Error(), "sp/_metadata at offset 4: unsupported metadata version 99"; !strings.HasPrefix(got, want) {
		t.Errorf("message %q, want %q...", got, want)
	}
	// A row value of an unknown format version.
	v := make([]byte, rowcodec.TTLSize+2)
	v[rowcodec.TTLSize] = 0xEE
	err = rowcodec.SetKind(v, keygroups.Insert)
	if !errors.Is(err, errclass.ErrUnsupported) || !errors.Is(err, rowcodec.ErrVersion) || errors.Is(err, errclass.ErrCorrupt) {
		t.Errorf("row format version: %v", err)
	}
}
