package savepoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
)

// openFixture opens a fixture through a Local store rooted at the fixtures
// directory.
func openFixture(t testing.TB, name string) *Savepoint {
	t.Helper()
	root := fixtures.Require(t)
	st, err := s3.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(root, filepath.Join(fixtureDir(t, name), MetadataName))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := Open(context.Background(), st, filepath.ToSlash(rel))
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// allStreams lists every stream handle of the metadata.
func allStreams(md *Metadata) []*StreamHandle {
	var out []*StreamHandle
	for _, op := range md.Operators {
		for _, st := range op.Subtasks {
			for _, oh := range []*OperatorHandle{st.ManagedOperator, st.RawOperator} {
				if oh != nil && oh.Delegate != nil {
					out = append(out, oh.Delegate)
				}
			}
			for _, kh := range []KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
				switch h := kh.(type) {
				case *KeyGroupsHandle:
					if h.Delegate != nil {
						out = append(out, h.Delegate)
					}
				case *IncrementalHandle:
					if h.Meta != nil {
						out = append(out, h.Meta)
					}
					for _, ns := range append(append([]NamedStream(nil), h.Shared...), h.Private...) {
						if ns.Handle != nil {
							out = append(out, ns.Handle)
						}
					}
				}
			}
		}
	}
	return out
}

func TestOpenResolvesEveryFixtureHandle(t *testing.T) {
	ctx := context.Background()
	for _, name := range allFixtures(t) {
		sp := openFixture(t, name)
		n := 0
		for _, h := range allStreams(sp.Meta) {
			obj, err := sp.OpenStream(ctx, h, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if h.Tag == TagRelativeFile && obj.Size() != h.Size {
				t.Fatalf("%s: %s is %d bytes, handle records %d", name, h.Path, obj.Size(), h.Size)
			}
			all, err := io.ReadAll(io.NewSectionReader(obj, 0, obj.Size()))
			if err != nil {
				t.Fatal(err)
			}
			if h.Tag == TagRelativeFile {
				want, err := os.ReadFile(filepath.Join(fixtureDir(t, name), h.Path))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(all, want) {
					t.Fatalf("%s: %s content differs", name, h.Path)
				}
			}
			n++
		}
		if n == 0 {
			t.Fatalf("%s: no stream handles", name)
		}
		if strings.Contains(name, "NATIVE") != (sp.FormatType() == FormatNative) {
			t.Fatalf("%s: format type %q", name, sp.FormatType())
		}
	}
}

func TestRangeReaderAt(t *testing.T) {
	ctx := context.Background()
	st := s3.NewMem()
	data := make([]byte, 10000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := st.Put(ctx, "obj", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	r := NewRangeReaderAt(ctx, st, "obj", 100, 9000, 512)
	buf := make([]byte, 300)
	// Sequential small reads are served from the read-ahead buffer.
	for off := int64(0); off < 3000; off += 300 {
		n, err := r.ReadAt(buf, off)
		if err != nil || n != 300 || !bytes.Equal(buf, data[100+off:100+off+300]) {
			t.Fatalf("at %d: n=%d err=%v", off, n, err)
		}
	}
	if r.Requests > 7 {
		t.Fatalf("%d range requests for 3000 bytes with 512-byte read-ahead", r.Requests)
	}
	// A big read bypasses the buffer; a read past the end returns EOF.
	big := make([]byte, 4000)
	if n, err := r.ReadAt(big, 4000); err != nil || n != 4000 || !bytes.Equal(big, data[4100:8100]) {
		t.Fatalf("big read n=%d err=%v", n, err)
	}
	n, err := r.ReadAt(buf, 8900)
	if err != io.EOF || n != 100 || !bytes.Equal(buf[:100], data[9000:9100]) {
		t.Fatalf("tail read n=%d err=%v", n, err)
	}
	if len(r.buf) > 512 {
		t.Fatalf("buffer grew to %d", len(r.buf))
	}
}

// hostileSavepoint writes a one-operator V3 savepoint whose keyed handle
// delegate is h into a Mem store under dir "sp".
func hostileSavepoint(t *testing.T, h *StreamHandle) *Savepoint {
	t.Helper()
	md := &Metadata{Version: 3, CheckpointID: 1, Operators: []*OperatorState{{
		Parallelism: 1, MaxParallelism: 4,
		Subtasks: []*SubtaskState{{Index: 0, ManagedKeyed: &KeyGroupsHandle{Tag: TagSavepointKeyGroups, Offsets: []int64{0, 0, 0, 0}, Delegate: h}}},
	}}}
	b, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := s3.NewMem()
	for _, k := range []string{"sp/_metadata", "secret", "sp/data", "other/data"} {
		v := b
		if k != "sp/_metadata" {
			v = []byte("payload of " + k)
		}
		if err := st.Put(ctx, k, bytes.NewReader(v), int64(len(v))); err != nil {
			t.Fatal(err)
		}
	}
	sp, err := Open(ctx, st, "sp/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func TestResolveRefusesHostilePaths(t *testing.T) {
	ctx := context.Background()
	bad := []*StreamHandle{
		{Tag: TagRelativeFile, Path: "../secret", Size: 5},
		{Tag: TagRelativeFile, Path: "a/../../secret", Size: 5},
		{Tag: TagRelativeFile, Path: "/secret", Size: 5},
		{Tag: TagRelativeFile, Path: "", Size: 5},
		{Tag: TagFile, Path: "file:/etc/passwd", Size: 5},
		{Tag: TagFile, Path: "mem:/other/data", Size: 5},
		{Tag: TagFile, Path: "mem:/sp/../secret", Size: 5},
		{Tag: TagFile, Path: "mem:/spx/data", Size: 5},
		{Tag: TagSegmentFile, Path: "/tmp/x", Size: 5},
	}
	for _, h := range bad {
		sp := hostileSavepoint(t, h)
		_, err := sp.OpenStream(ctx, sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*KeyGroupsHandle).Delegate, 0)
		if !errors.Is(err, ErrPath) {
			t.Errorf("%+v: err %v, want ErrPath", h, err)
		}
	}
	good := []*StreamHandle{
		{Tag: TagRelativeFile, Path: "data", Size: 15},
		{Tag: TagFile, Path: "mem:/sp/data", Size: 15},
	}
	for _, h := range good {
		sp := hostileSavepoint(t, h)
		obj, err := sp.OpenStream(ctx, h, 0)
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		b, _ := io.ReadAll(io.NewSectionReader(obj, 0, obj.Size()))
		if string(b) != "payload of sp/data" {
			t.Fatalf("read %q", b)
		}
	}
}

func TestResolveAbsoluteFileURIInsideLocalSavepoint(t *testing.T) {
	dir := t.TempDir()
	sp := &Savepoint{Store: mustLocal(t, dir), Dir: "sp-1", MetadataKey: "sp-1/_metadata"}
	for _, p := range []string{"file:" + dir + "/sp-1/f", "file://" + dir + "/sp-1/f", dir + "/sp-1/f"} {
		loc, err := sp.Resolve(&StreamHandle{Tag: TagFile, Path: p, Size: 1})
		if err != nil || loc.Key != "sp-1/f" {
			t.Fatalf("%s: %v %q", p, err, loc.Key)
		}
	}
	if _, err := sp.Resolve(&StreamHandle{Tag: TagFile, Path: "file:" + dir + "/sp-2/f"}); !errors.Is(err, ErrPath) {
		t.Fatalf("sibling directory accepted: %v", err)
	}
}

func mustLocal(t testing.TB, dir string) *s3.Local {
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestWriteMetadataThenOpen(t *testing.T) {
	ctx := context.Background()
	md, err := ParseMetadata(readFixtureMetadata(t, fixtureUDF), "x")
	if err != nil {
		t.Fatal(err)
	}
	st := s3.NewMem()
	if err := WriteMetadata(ctx, st, "sp/_metadata", md, true); err != nil {
		t.Fatal(err)
	}
	if err := WriteMetadata(ctx, st, "sp/_metadata", md, true); !s3.IsExist(err) {
		t.Fatalf("second put-if-absent: %v", err)
	}
	sp, err := Open(ctx, st, "sp/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	if len(sp.Meta.Operators) != len(md.Operators) || sp.FormatType() != FormatCanonical {
		t.Fatal("reopened metadata differs")
	}
}
