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

	"github.com/sfstate/sfstate/s3"
)

func openWith(t *testing.T, dir string, o OpenOptions) (*Savepoint, error) {
	t.Helper()
	return OpenWith(context.Background(), mustLocal(t, dir), MetadataName, o)
}

func readAll(t *testing.T, sp *Savepoint, h *StreamHandle) string {
	t.Helper()
	obj, err := sp.OpenStream(context.Background(), h, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.NewSectionReader(obj, 0, obj.Size()))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMovedCheckpointReadsWithMap: a checkpoint whose absolute handles name
// its old location is refused (the message names --map with the mapping
// to use) and reads completely with that mapping.
func TestMovedCheckpointReadsWithMap(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	old := filepath.Join(base, "prod", "ck")
	writeNativeCheckpoint(t, filepath.Join(old, "job"), TagIncrementalKeyGroupsV2, "shared/a.sst", "taskowned/b.sst")
	moved := filepath.Join(base, "laptop", "copy")
	if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(old, moved); err != nil {
		t.Fatal(err)
	}
	chk := filepath.Join(moved, "job", "chk-7")
	sp, err := openWith(t, chk, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*IncrementalHandle)
	_, err = sp.Resolve(h.Shared[0].Handle)
	if !errors.Is(err, ErrPath) || !strings.Contains(err.Error(), "--map "+filepath.Join(old, "job")+"="+filepath.Join(moved, "job")) {
		t.Fatalf("moved checkpoint: %v, want ErrPath suggesting the mapping", err)
	}
	if probs, _ := Check(ctx, sp, CheckOptions{}); len(probs) == 0 || probs[0].Kind != ProblemPath {
		t.Fatalf("check without --map: %v", probs)
	}
	for _, m := range []PathMap{
		{From: "file:" + old, To: moved},
		{From: old + "/", To: "file://" + moved},
		{From: filepath.Join(old, "job", "shared"), To: filepath.Join(moved, "job", "shared")},
	} {
		sp, err := openWith(t, chk, OpenOptions{Map: []PathMap{m}})
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, sp, h.Shared[0].Handle); got != "0123456789" {
			t.Fatalf("%+v: read %q", m, got)
		}
	}
	sp, err = openWith(t, chk, OpenOptions{Map: []PathMap{{From: old, To: moved}}})
	if err != nil {
		t.Fatal(err)
	}
	if probs, stats := Check(ctx, sp, CheckOptions{}); len(probs) != 0 || stats.Files != 3 {
		t.Fatalf("check with --map: %v, %d files", probs, stats.Files)
	}
	// ParsePathMap accepts OLD=NEW and refuses ".." on either side.
	if m, err := ParsePathMap("s3a://prod/ck/=" + moved); err != nil || m.From != "s3://prod/ck" || m.To != moved {
		t.Fatalf("ParsePathMap: %+v %v", m, err)
	}
	for _, bad := range []string{"s3://prod", "=x", "x=", "s3://prod/../x=/tmp", "/a=/b/../c"} {
		if _, err := ParsePathMap(bad); err == nil {
			t.Errorf("ParsePathMap(%q) accepted", bad)
		}
	}
}

// TestRootsStayRefused: mappings and allowed roots do not open ".."
// escapes, sibling prefixes or anything outside them.
func TestRootsStayRefused(t *testing.T) {
	base := t.TempDir()
	sp := filepath.Join(base, "sp")
	allowed := filepath.Join(base, "allowed")
	for _, f := range []string{"sp/x", "allowed/f", "allowedx/f", "secret"} {
		p := filepath.Join(base, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("bytes of "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeMeta := func(paths ...string) {
		var ops []*OperatorState
		for i, p := range paths {
			ops = append(ops, &OperatorState{ID: OperatorID{byte(i + 1)}, Parallelism: 1, MaxParallelism: 128,
				Subtasks: []*SubtaskState{{Index: 0, ManagedOperator: &OperatorHandle{Tag: 4, Delegate: &StreamHandle{Tag: TagFile, Path: p, Size: 5}}}}})
		}
		b, err := EncodeMetadata(&Metadata{Version: 3, CheckpointID: 1, Operators: ops})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sp, MetadataName), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := OpenOptions{AllowRoots: []string{allowed}, Map: []PathMap{{From: "s3://prod/data", To: allowed}}}
	cases := []struct {
		path string
		ok   bool
	}{
		{"file:" + allowed + "/f", true},
		{"s3://prod/data/f", true},
		{"file:" + sp + "/x", true},
		{"file:" + allowed + "/../secret", false},
		{"file:" + allowed + "/%2E%2E/secret", false},
		{"s3://prod/data/../../secret", false},
		{"s3://prod/datax/f", false},
		{"file:" + base + "/allowedx/f", false},
		{"file:" + base + "/secret", false},
		{"file:" + sp + "/../secret", false},
		{"file:" + allowed, false},
		{"hdfs://nn/data/f", false},
	}
	for _, c := range cases {
		writeMeta(c.path)
		spv, err := openWith(t, sp, o)
		if err != nil {
			t.Fatal(err)
		}
		h := spv.Meta.Operators[0].Subtasks[0].ManagedOperator.Delegate
		_, err = spv.Resolve(h)
		if c.ok != (err == nil) {
			t.Errorf("%s: err %v, want ok=%v", c.path, err, c.ok)
		}
		if err != nil && (!errors.Is(err, ErrPath) || (!strings.Contains(err.Error(), "--") && !strings.Contains(err.Error(), `".." segment`))) {
			t.Errorf("%s: %v, want ErrPath naming a flag", c.path, err)
		}
	}
	// Without the options only the savepoint's own file reads.
	writeMeta("file:"+allowed+"/f", "file:"+sp+"/x")
	spv, err := openWith(t, sp, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spv.Resolve(spv.Meta.Operators[0].Subtasks[0].ManagedOperator.Delegate); !errors.Is(err, ErrPath) || !strings.Contains(err.Error(), "--allow-root") {
		t.Errorf("foreign root without options: %v", err)
	}
	if got := readAll(t, spv, spv.Meta.Operators[1].Subtasks[0].ManagedOperator.Delegate); got != "bytes of sp/x" {
		t.Errorf("own file: %q", got)
	}
	if _, err := NormalizeRoot("/a/../b"); err == nil {
		t.Error("NormalizeRoot accepted ..")
	}
}

// TestRecordedSources: a savepoint whose handles point into another
// savepoint reads by default when SourcesName records it; a recorded
// source without `_metadata`, or the file system root, is not followed.
func TestRecordedSources(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	dst := filepath.Join(base, "dst")
	nometa := filepath.Join(base, "nometa")
	for _, f := range []string{"src/f", "nometa/f"} {
		p := filepath.Join(base, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("bytes of "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(dst, 0o755)
	write := func(dir, file string, paths ...string) {
		var ops []*OperatorState
		for i, p := range paths {
			ops = append(ops, &OperatorState{ID: OperatorID{byte(i + 1)}, Parallelism: 1, MaxParallelism: 128,
				Subtasks: []*SubtaskState{{Index: 0, ManagedOperator: &OperatorHandle{Tag: 4, Delegate: &StreamHandle{Tag: TagFile, Path: p, Size: 14}}}}})
		}
		b, err := EncodeMetadata(&Metadata{Version: 3, CheckpointID: 1, Operators: ops})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(src, MetadataName, "file:"+src+"/f")
	write(dst, MetadataName, "file:"+src+"/f")
	// No record: refused.
	sp, err := openWith(t, dst, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := sp.Meta.Operators[0].Subtasks[0].ManagedOperator.Delegate
	if _, err := sp.Resolve(h); !errors.Is(err, ErrPath) {
		t.Fatalf("unrecorded source: %v", err)
	}
	rec, err := EncodeSources([]string{"file:" + src, "file:" + src})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, SourcesName), rec, 0o644); err != nil {
		t.Fatal(err)
	}
	var cnt s3.Counters
	sp, err = OpenWith(ctx, s3.WithCounters(mustLocal(t, dst), &cnt), MetadataName, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, sp, h); got != "bytes of src/f" {
		t.Fatalf("recorded source: %q", got)
	}
	if s := sp.Sources(); len(s) != 1 || s[0] != "file:"+src {
		t.Fatalf("sources %v", s)
	}
	if probs, stats := Check(ctx, sp, CheckOptions{SkipData: true}); len(probs) != 0 || stats.Files != 1 {
		t.Fatalf("check: %v (%d files)", probs, stats.Files)
	}
	// A savepoint that needs no record does not read it.
	var cnt2 s3.Counters
	if _, err := OpenWith(ctx, s3.WithCounters(mustLocal(t, src), &cnt2), MetadataName, OpenOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := cnt2.Requests(s3.OpGet) + cnt2.Requests(s3.OpStat); n != 2 {
		t.Fatalf("%d requests opening a self-contained savepoint, want 2 (stat and get of _metadata)", n)
	}
	// Hostile records: a directory without _metadata, the root, "..".
	for _, bad := range []string{"file:" + nometa, "file:/", "file:" + src + "/../nometa", "hdfs://x/y"} {
		write(dst, MetadataName, "file:"+nometa+"/f")
		rec, _ := EncodeSources([]string{bad})
		os.WriteFile(filepath.Join(dst, SourcesName), rec, 0o644)
		sp, err := openWith(t, dst, OpenOptions{})
		if err != nil {
			t.Fatalf("%s: %v", bad, err)
		}
		if _, err := sp.Resolve(sp.Meta.Operators[0].Subtasks[0].ManagedOperator.Delegate); !errors.Is(err, ErrPath) {
			t.Errorf("record %s: %v, want ErrPath", bad, err)
		}
	}
	// A corrupt record is a format error naming the file.
	os.WriteFile(filepath.Join(dst, SourcesName), []byte(`{"format":"x"}`), 0o644)
	if _, err := openWith(t, dst, OpenOptions{}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), SourcesName) {
		t.Errorf("corrupt record: %v", err)
	}
	os.WriteFile(filepath.Join(dst, SourcesName), bytes.Repeat([]byte(" "), maxSourcesSize+1), 0o644)
	if _, err := openWith(t, dst, OpenOptions{}); !errors.Is(err, ErrFormat) {
		t.Errorf("oversized record: %v", err)
	}
}

// FuzzResolveAbsolute: whatever absolute path a handle carries, a resolved
// location lies below an allowed root and its key has no "..", "." or
// empty segment; a refusal is ErrPath; nothing panics.
func FuzzResolveAbsolute(f *testing.F) {
	base := f.TempDir()
	for _, d := range []string{"allowed/a", "mapped/ck/job/shared"} {
		os.MkdirAll(filepath.Join(base, d), 0o755)
	}
	for _, s := range []string{"mem:/r/job/chk-7/x", "mem:/r/job/shared/a", "mem:/r/job/taskowned/b", "mem:/r/job/shared/../chk-6/x",
		"s3://prod/ck/job/shared/x", "s3://prod/ck/job/chk-7/%2e%2e/x", "mem:/r/job/chk-7//x", "file:" + base + "/allowed/a/b",
		base + "/allowedx/a", "file://" + base + "/mapped/x", "s3://prod/ckx/a", "/etc/passwd"} {
		f.Add(s)
	}
	sp := &Savepoint{Store: s3.NewMem(), Dir: "r/job/chk-7", MetadataKey: "r/job/chk-7/" + MetadataName, Meta: &Metadata{}}
	o := OpenOptions{AllowRoots: []string{base + "/allowed"}, Map: []PathMap{{From: "s3://prod/ck", To: base + "/mapped"}}}
	if err := sp.setPolicy(context.Background(), o); err != nil {
		f.Fatal(err)
	}
	roots := []string{"mem:/r/job/chk-7/", "mem:/r/job/shared/", "mem:/r/job/taskowned/", "file:" + base + "/allowed/", "file:" + base + "/mapped/"}
	f.Fuzz(func(t *testing.T, p string) {
		loc, err := sp.Resolve(&StreamHandle{Tag: TagFile, Path: p, Size: 1})
		if err != nil {
			if !errors.Is(err, ErrPath) && !s3.IsNotExist(err) {
				t.Fatalf("%q: %v is neither ErrPath nor a missing directory", p, err)
			}
			return
		}
		for _, seg := range strings.Split(loc.Key, "/") {
			if seg == ".." || seg == "." || seg == "" {
				t.Fatalf("%q resolved to key %q", p, loc.Key)
			}
		}
		u, ok := sp.URI(loc), false
		for _, r := range roots {
			ok = ok || strings.HasPrefix(u, r)
		}
		if !ok {
			t.Fatalf("%q resolved to %s, outside every root", p, u)
		}
	})
}
