package canonical

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// rawEntries lists every keyed entry (operator, subtask, key group, state
// name, key and value bytes) in walk order.
func rawEntries(t *testing.T, sp *savepoint.Savepoint) []string {
	t.Helper()
	var out []string
	err := sp.WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeRaw}, func(e *savepoint.KeyedEntry) error {
		out = append(out, e.Operator.ID.String()+"/"+string(rune(e.Subtask))+"/"+string(rune(e.KeyGroup))+"/"+e.State.Name+"/"+string(e.KeyBytes)+"/"+string(e.ValueBytes))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRewriteFixtures: reading every canonical fixture (uncompressed and
// Snappy-compressed, metadata V3 and V4) and writing it back gives
// byte-identical keyed streams, inline blobs and metadata.
func TestRewriteFixtures(t *testing.T) {
	sps := fixtureSavepoints(t)
	dirs := map[string]string{}
	for _, f := range fixtures.All(t) {
		dirs[f.Name] = f.Dir
	}
	if len(sps) < 10 {
		t.Fatalf("only %d canonical fixtures", len(sps))
	}
	sawCompressed := false
	for name, sp := range sps {
		sawCompressed = checkRewrite(t, name, dirs[name], sp) || sawCompressed
	}
	if !sawCompressed {
		t.Error("no compressed fixture among the canonical fixtures")
	}
}

// TestRewriteMoreFixtures: the canonical savepoints of the additional
// fixtures come back byte for byte too, among them one whose state has a
// serializer snapshot no reader knows (its header is kept as read).
func TestRewriteMoreFixtures(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"flink1.16-rocksdb-canonical-user-serializer", "sql-rocksdb-canonical-cep-match", "sql-rocksdb-canonical-async-calc"} {
		dir := fixtures.MorePath(t, name, "savepoint")
		sp, err := savepoint.Open(ctx, mustLocalStore(t, dir), savepoint.MetadataName)
		if err != nil {
			t.Fatal(err)
		}
		checkRewrite(t, name, dir, sp)
	}
}

func mustLocalStore(t *testing.T, dir string) s3.Storage {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// checkRewrite rewrites sp (read from dir) and checks that the copy is
// byte-identical; it reports whether sp has compressed keyed streams.
func checkRewrite(t *testing.T, name, dir string, sp *savepoint.Savepoint) (sawCompressed bool) {
	t.Helper()
	ctx := context.Background()
	dirs := map[string]string{name: dir}
	{
		out := t.TempDir()
		dst, err := s3.NewLocal(out)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Rewrite(ctx, sp, dst, RewriteOptions{Dir: "copy", TempDir: t.TempDir()}); err != nil {
			t.Errorf("%s: rewrite: %v", name, err)
			return false
		}
		cp, err := savepoint.Open(ctx, dst, "copy/_metadata")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_ = sp.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeRaw}, func(e *savepoint.KeyedEntry) error {
			sawCompressed = sawCompressed || e.Header.Compressed
			return savepoint.StopWalk
		})
		if a, b := rawEntries(t, sp), rawEntries(t, cp); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: %d entries read back, %d in the original (or different bytes)", name, len(b), len(a))
		}
		orig, _ := os.ReadFile(filepath.Join(dirs[name], "_metadata"))
		copyMD, _ := os.ReadFile(filepath.Join(out, "copy", "_metadata"))
		if len(orig) == 0 || !bytes.Equal(orig, copyMD) {
			t.Errorf("%s: _metadata differs (%d vs %d bytes)", name, len(orig), len(copyMD))
		}
		// Every keyed stream (file or inline blob) is identical.
		streams := 0
		for i, op := range sp.Meta.Operators {
			for j, st := range op.Subtasks {
				cst := cp.Meta.Operators[i].Subtasks[j]
				for k, kh := range []savepoint.KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
					h, ok := kh.(*savepoint.KeyGroupsHandle)
					if !ok {
						continue
					}
					ch := []savepoint.KeyedHandle{cst.ManagedKeyed, cst.RawKeyed}[k].(*savepoint.KeyGroupsHandle)
					var a, b []byte
					switch h.Delegate.Tag {
					case savepoint.TagRelativeFile:
						a, _ = os.ReadFile(filepath.Join(dirs[name], h.Delegate.Path))
						b, _ = os.ReadFile(filepath.Join(out, "copy", ch.Delegate.Path))
					case savepoint.TagByteStream:
						a, b = h.Delegate.Data, ch.Delegate.Data
					default:
						t.Errorf("%s: keyed delegate tag %d", name, h.Delegate.Tag)
					}
					streams++
					if len(a) == 0 || !bytes.Equal(a, b) {
						t.Errorf("%s: keyed stream %s%s differs (%d vs %d bytes)", name, h.Delegate.Path, h.Delegate.Name, len(a), len(b))
					}
					if !reflect.DeepEqual(h.Offsets, ch.Offsets) {
						t.Errorf("%s: key-group offsets of %s%s differ", name, h.Delegate.Path, h.Delegate.Name)
					}
				}
			}
		}
		if streams == 0 && len(rawEntries(t, sp)) > 0 {
			t.Errorf("%s: entries but no keyed stream compared", name)
		}
	}
	return sawCompressed
}

// TestRewriteCorruptCompressedBlock: a flipped byte inside a Snappy frame
// of the compressed fixture fails Rewrite with an error naming the file,
// and no _metadata is written.
func TestRewriteCorruptCompressedBlock(t *testing.T) {
	ctx := context.Background()
	srcDir := fixtures.Path(t, "flink1.19-rocksdb-canonical-snappy-compressed")
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(srcDir)); err != nil {
		t.Fatal(err)
	}
	store, _ := s3.NewLocal(dir)
	sp, err := savepoint.Open(ctx, store, "_metadata")
	if err != nil {
		t.Fatal(err)
	}
	// The largest compressed block of a keyed file.
	var file string
	var off, end int64
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
			if !ok || h.Delegate.Tag != savepoint.TagRelativeFile {
				continue
			}
			fi, err := os.Stat(filepath.Join(dir, h.Delegate.Path))
			if err != nil {
				t.Fatal(err)
			}
			var offs []int64
			for _, o := range h.Offsets {
				if o > 0 {
					offs = append(offs, o)
				}
			}
			offs = append(offs, fi.Size())
			for i := 0; i+1 < len(offs); i++ {
				if offs[i+1]-offs[i] > end-off {
					file, off, end = h.Delegate.Path, offs[i], offs[i+1]
				}
			}
		}
	}
	if file == "" || end-off < 24 {
		t.Fatalf("no compressed block found (largest %d bytes)", end-off)
	}
	p := filepath.Join(dir, file)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[off+4:off+10]) != "sNaPpY" {
		t.Fatalf("block at %d does not start a Snappy stream", off)
	}
	// Past the stream identifier (10 bytes) and the first chunk's header
	// and checksum (8 bytes): a payload byte.
	at := off + 10 + 8 + (end-off-18)/2
	b[at] ^= 0x5A
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dst, _ := s3.NewLocal(t.TempDir())
	_, err = Rewrite(ctx, sp, dst, RewriteOptions{Dir: "copy", TempDir: t.TempDir()})
	if err == nil {
		t.Fatalf("corrupt byte at %d of %s not detected", at, file)
	}
	if !strings.Contains(err.Error(), file) {
		t.Errorf("error does not name the file %s: %v", file, err)
	}
	if !errors.Is(err, errclass.ErrCorrupt) {
		t.Errorf("error is not errclass.ErrCorrupt: %v", err)
	}
	if f, o := errclass.Position(err); !strings.Contains(f, file) || o < off || o >= end {
		t.Errorf("position %q at %d, want %s in block [%d, %d): %v", f, o, file, off, end, err)
	}
	if _, err := dst.Stat(ctx, "copy/_metadata"); !s3.IsNotExist(err) {
		t.Fatalf("metadata written after failure: %v", err)
	}
}

// TestRewriteFailsOnNative: native savepoints are refused without writing
// metadata.
func TestRewriteFailsOnNative(t *testing.T) {
	for _, f := range fixtures.All(t) {
		if f.Name != "flink1.20-rocksdb-NATIVE-incremental-for-contrast" {
			continue
		}
		st, _ := s3.NewLocal(f.Dir)
		sp, err := savepoint.Open(context.Background(), st, "_metadata")
		if err != nil {
			t.Fatal(err)
		}
		dst, _ := s3.NewLocal(t.TempDir())
		if _, err := Rewrite(context.Background(), sp, dst, RewriteOptions{Dir: "x"}); err == nil {
			t.Fatal("native savepoint rewritten")
		}
		if _, err := dst.Stat(context.Background(), "x/_metadata"); !s3.IsNotExist(err) {
			t.Fatalf("metadata written after failure: %v", err)
		}
	}
}

// TestRewriteSharedFile: view handles of a rescaled savepoint share one
// keyed file; each is rewritten into a file of its own.
func TestRewriteSharedFile(t *testing.T) {
	ctx := context.Background()
	op, _ := genOperator(t, "heap", 128, 1, 400)
	dir := t.TempDir()
	store, _ := s3.NewLocal(dir)
	md, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "a", InlineThreshold: -1, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h := md.Operators[0].Subtasks[0].ManagedKeyed.(*savepoint.KeyGroupsHandle)
	// Two views at parallelism 2 over the one file.
	views := *md
	o := *md.Operators[0]
	o.Parallelism = 2
	o.Subtasks = nil
	for i := 0; i < 2; i++ {
		lo, hi := i*64, i*64+63
		v := &savepoint.KeyGroupsHandle{Tag: h.Tag, StartKeyGroup: int32(lo), Offsets: h.Offsets[lo : hi+1], Delegate: h.Delegate}
		o.Subtasks = append(o.Subtasks, &savepoint.SubtaskState{Index: i, ManagedKeyed: v})
	}
	views.Operators = []*savepoint.OperatorState{&o}
	b, err := savepoint.EncodeMetadata(&views)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, "a/_metadata.views", bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "a", "_metadata.views"), filepath.Join(dir, "a", "_metadata")); err != nil {
		t.Fatal(err)
	}
	src, err := savepoint.Open(ctx, store, "a/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Rewrite(ctx, src, store, RewriteOptions{Dir: "b", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	cp, err := savepoint.Open(ctx, store, "b/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	p0 := cp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*savepoint.KeyGroupsHandle).Delegate.Path
	p1 := cp.Meta.Operators[0].Subtasks[1].ManagedKeyed.(*savepoint.KeyGroupsHandle).Delegate.Path
	if p0 == p1 {
		t.Fatalf("both views rewritten into %s", p0)
	}
	if a, b := rawEntries(t, src), rawEntries(t, cp); !reflect.DeepEqual(a, b) || len(a) == 0 {
		t.Fatalf("%d entries in the views, %d after rewrite", len(a), len(b))
	}
	if probs, _ := savepoint.Check(ctx, cp, savepoint.CheckOptions{}); len(probs) != 0 {
		t.Fatal(probs)
	}
}

// snappyChunk frames data as one uncompressed Snappy chunk (type 0x01,
// masked CRC-32C), or with a wrong checksum when bad.
func snappyChunk(data []byte, bad bool) []byte {
	c := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	c = (c>>15 | c<<17) + 0xA282EAD8
	if bad {
		c++
	}
	n := len(data) + 4
	b := []byte{0x01, byte(n), byte(n >> 8), byte(n >> 16)}
	b = binary.LittleEndian.AppendUint32(b, c)
	return append(b, data...)
}

// copySnappyFixture copies the compressed fixture into a temporary
// directory and returns it with the first relative keyed file.
func copySnappyFixture(t *testing.T) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fixtures.Path(t, "flink1.19-rocksdb-canonical-snappy-compressed"))); err != nil {
		t.Fatal(err)
	}
	store, _ := s3.NewLocal(dir)
	sp, err := savepoint.Open(context.Background(), store, "_metadata")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			if h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok && h.Delegate.Tag == savepoint.TagRelativeFile {
				return dir, h.Delegate.Path
			}
		}
	}
	t.Fatal("no relative keyed file")
	return "", ""
}

// TestRewriteTrailingFrames: a compressed block whose extent holds frames
// past its end-of-key-group mark is not copied verbatim: valid extra
// frames make Rewrite write the block's entries again, a frame with a bad
// checksum fails it.
func TestRewriteTrailingFrames(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []bool{false, true} {
		dir, file := copySnappyFixture(t)
		p := filepath.Join(dir, file)
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// The last block runs to the end of the file.
		if err := os.WriteFile(p, append(slices.Clone(orig), snappyChunk([]byte("trailing"), bad)...), 0o644); err != nil {
			t.Fatal(err)
		}
		store, _ := s3.NewLocal(dir)
		sp, err := savepoint.Open(ctx, store, "_metadata")
		if err != nil {
			t.Fatal(err)
		}
		_, err = Rewrite(ctx, sp, store, RewriteOptions{Dir: "copy", TempDir: t.TempDir()})
		_, statErr := store.Stat(ctx, "copy/_metadata")
		if bad {
			if err == nil || !strings.Contains(err.Error(), file) || !errors.Is(err, keyed.ErrSnappy) {
				t.Fatalf("bad trailing frame: %v", err)
			}
			if !s3.IsNotExist(statErr) {
				t.Fatalf("metadata written after failure: %v", statErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		cp, err := savepoint.Open(ctx, store, "copy/_metadata")
		if err != nil {
			t.Fatal(err)
		}
		if a, b := rawEntries(t, sp), rawEntries(t, cp); !reflect.DeepEqual(a, b) || len(a) == 0 {
			t.Fatalf("%d entries in the source, %d in the copy", len(a), len(b))
		}
		got, _ := os.ReadFile(filepath.Join(dir, "copy", file))
		// Written again, the block has no trailing frame (Snappy may well
		// reproduce the original compressed bytes).
		if len(got) == 0 || len(got) >= len(orig)+len(snappyChunk([]byte("trailing"), false)) {
			t.Fatalf("block with trailing frames copied verbatim or lost (%d bytes, original %d)", len(got), len(orig))
		}
		if probs, _ := savepoint.Check(ctx, cp, savepoint.CheckOptions{}); len(probs) != 0 {
			t.Fatal(probs)
		}
	}
}

// TestRewriteStreamedBlocks: blocks too large to buffer are checked and
// copied straight from the source, with the same result.
func TestRewriteStreamedBlocks(t *testing.T) {
	defer func(n int64) { maxBufferedBlock = n }(maxBufferedBlock)
	maxBufferedBlock = 0
	ctx := context.Background()
	dir, file := copySnappyFixture(t)
	store, _ := s3.NewLocal(dir)
	sp, err := savepoint.Open(ctx, store, "_metadata")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Rewrite(ctx, sp, store, RewriteOptions{Dir: "copy", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"_metadata", file} {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := os.ReadFile(filepath.Join(dir, "copy", name))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs (%d vs %d bytes)", name, len(a), len(b))
		}
	}
}

// TestRewriteTrailingBytesPlain: bytes after the last block of an
// uncompressed stream are not copied; the block's entries are written
// again and the copy is a clean stream.
func TestRewriteTrailingBytesPlain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers"))); err != nil {
		t.Fatal(err)
	}
	store, _ := s3.NewLocal(dir)
	sp, err := savepoint.Open(ctx, store, "_metadata")
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			if h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok && h.Delegate.Tag == savepoint.TagRelativeFile && file == "" {
				file = h.Delegate.Path
			}
		}
	}
	if file == "" {
		t.Fatal("no relative keyed file")
	}
	p := filepath.Join(dir, file)
	orig, _ := os.ReadFile(p)
	if err := os.WriteFile(p, append(slices.Clone(orig), "junk"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if sp, err = savepoint.Open(ctx, store, "_metadata"); err != nil {
		t.Fatal(err)
	}
	if _, err := Rewrite(ctx, sp, store, RewriteOptions{Dir: "copy", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "copy", file))
	if !bytes.Equal(got, orig) {
		t.Fatalf("copy of %s: %d bytes, want the %d bytes without the junk", file, len(got), len(orig))
	}
}
