package savepoint

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/s3"
)

// writeNativeCheckpoint lays out a native checkpoint the way Flink's
// incremental checkpoints (and the engine's) do: <root>/shared/<sst>,
// <root>/chk-7/{task-0/MANIFEST, _metadata}; the shared files are
// referenced with absolute handles sharedPaths (relative to root, joined
// to "file:"+root), the private file relatively. tag is the keyed handle tag.
func writeNativeCheckpoint(t *testing.T, root string, tag byte, sharedPaths ...string) {
	t.Helper()
	for _, f := range []string{"shared/a.sst", "taskowned/b.sst", "chk-7/task-0/MANIFEST", "outside.sst", "chk-6/c.sst"} {
		p := filepath.Join(root, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := &IncrementalHandle{Tag: tag, CheckpointID: 7, BackendID: "00000000-0000-4000-8000-000000000000",
		StartKeyGroup: 0, NumKeyGroups: 128, CheckpointedSize: 10,
		Meta:          &StreamHandle{Tag: TagByteStream, Name: "meta", Data: []byte{1, 2, 3}},
		StateHandleID: "00000000-0000-4000-8000-000000000001"}
	for i, sp := range sharedPaths {
		h.Shared = append(h.Shared, NamedStream{Name: string(rune('a'+i)) + ".sst", Handle: &StreamHandle{Tag: TagFile, Path: "file:" + root + "/" + sp, Size: 10}})
	}
	h.Private = []NamedStream{{Name: "MANIFEST", Handle: &StreamHandle{Tag: TagRelativeFile, Path: "task-0/MANIFEST", Size: 10}}}
	op := &OperatorState{ID: OperatorID{1}, Parallelism: 1, MaxParallelism: 128,
		Subtasks: []*SubtaskState{{Index: 0, ManagedKeyed: h}}}
	b, err := EncodeMetadata(&Metadata{Version: 3, CheckpointID: 7, Operators: []*OperatorState{op}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "chk-7", MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointSharedFiles: incremental (tag 11) handles of a checkpoint in
// <root>/chk-N may reference <root>/shared/ and <root>/taskowned/, whether
// the store is rooted at the checkpoint root or at chk-N.
func TestCheckpointSharedFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeNativeCheckpoint(t, root, TagIncrementalKeyGroupsV2, "shared/a.sst", "taskowned/b.sst")
	opens := map[string]func() *Savepoint{
		"root store": func() *Savepoint {
			sp, err := Open(ctx, mustLocal(t, root), "chk-7/"+MetadataName)
			if err != nil {
				t.Fatal(err)
			}
			return sp
		},
		"chk store": func() *Savepoint { return openDir(t, filepath.Join(root, "chk-7")) },
	}
	for name, open := range opens {
		sp := open()
		probs, stats := Check(ctx, sp, CheckOptions{})
		if len(probs) != 0 {
			t.Errorf("%s: %v", name, probs)
		}
		if stats.Files != 3 {
			t.Errorf("%s: %d files checked, want 3 (2 shared + 1 private)", name, stats.Files)
		}
		h := sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*IncrementalHandle)
		loc, err := sp.ResolveIncremental(h.Shared[0].Handle)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		obj, err := sp.OpenLocation(ctx, loc, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := io.ReadAll(io.NewSectionReader(obj, 0, obj.Size()))
		if string(b) != "0123456789" || !strings.HasSuffix(loc.Name, "shared/a.sst") {
			t.Errorf("%s: read %q from %s", name, b, loc.Name)
		}
		// Every handle may name the job's shared directories (Flink's
		// file-merging checkpoints keep segment files of operator and full
		// keyed state there): plain Resolve agrees.
		if l2, err := sp.Resolve(h.Shared[0].Handle); err != nil || l2.Name != loc.Name {
			t.Errorf("%s: Resolve: %+v %v, want %s", name, l2, err, loc.Name)
		}
	}
}

// TestCheckpointSharedFilesHostile: everything but the sibling shared
// directories stays refused, as do other handle tags and metadata outside a
// chk-N directory.
func TestCheckpointSharedFilesHostile(t *testing.T) {
	ctx := context.Background()
	bad := []string{
		"shared/../outside.sst",
		"shared/../../etc/passwd",
		"shared/./a.sst",
		"shared//a.sst",
		"shared/",
		"outside.sst",
		"chk-6/c.sst",
		"sharedx/a.sst",
		"shared%2F..%2Foutside.sst",
		"taskowned/../chk-6/c.sst",
	}
	for _, p := range bad {
		root := t.TempDir()
		writeNativeCheckpoint(t, root, TagIncrementalKeyGroupsV2, p)
		sp := openDir(t, filepath.Join(root, "chk-7"))
		h := sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*IncrementalHandle)
		if _, err := sp.ResolveIncremental(h.Shared[0].Handle); !errors.Is(err, ErrPath) {
			t.Errorf("%s: err %v, want ErrPath", p, err)
		}
		probs, _ := Check(ctx, sp, CheckOptions{})
		if len(probs) == 0 || probs[0].Kind != ProblemPath {
			t.Errorf("%s: check problems %v, want a path problem", p, probs)
		}
	}
	// The old incremental handle (tag 5) reads the same shared directory.
	root := t.TempDir()
	writeNativeCheckpoint(t, root, TagIncrementalKeyGroups, "shared/a.sst")
	probs, _ := Check(ctx, openDir(t, filepath.Join(root, "chk-7")), CheckOptions{})
	if len(probs) != 0 {
		t.Errorf("tag 5: problems %v", probs)
	}
	// `_metadata` outside a chk-N directory: no exception either.
	root = t.TempDir()
	writeNativeCheckpoint(t, root, TagIncrementalKeyGroupsV2, "shared/a.sst")
	if err := os.Rename(filepath.Join(root, "chk-7"), filepath.Join(root, "savepoint-7")); err != nil {
		t.Fatal(err)
	}
	probs, _ = Check(ctx, openDir(t, filepath.Join(root, "savepoint-7")), CheckOptions{})
	if len(probs) == 0 || probs[0].Kind != ProblemPath {
		t.Errorf("savepoint dir: problems %v, want a path problem", probs)
	}
	// A store holding the checkpoint root (here in memory): shared files
	// of this root resolve in the same store, other roots do not.
	mem := s3.NewMem()
	sp := &Savepoint{Store: mem, Dir: "job/chk-7", MetadataKey: "job/chk-7/" + MetadataName}
	loc, err := sp.ResolveIncremental(&StreamHandle{Tag: TagFile, Path: "mem:/job/shared/a.sst", Size: 1})
	if err != nil || loc.Key != "job/shared/a.sst" || loc.Store != nil {
		t.Errorf("mem store: %+v %v", loc, err)
	}
	for _, p := range []string{"mem:/other/shared/a.sst", "mem:/job/chk-6/shared/a.sst", "mem:/shared/a.sst"} {
		if _, err := sp.ResolveIncremental(&StreamHandle{Tag: TagFile, Path: p, Size: 1}); !errors.Is(err, ErrPath) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := sp.ResolveIncremental(&StreamHandle{Tag: TagRelativeFile, Path: "../shared/a.sst", Size: 1}); !errors.Is(err, ErrPath) {
		t.Errorf("relative ..: %v", err)
	}
}
