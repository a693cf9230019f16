package canonical

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

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

// TestRewriteFixtures: reading every canonical fixture and writing it back
// gives byte-identical keyed streams and metadata (compressed blocks:
// identical entries and a metadata model that differs only in offsets and
// sizes).
func TestRewriteFixtures(t *testing.T) {
	ctx := context.Background()
	sps := fixtureSavepoints(t)
	dirs := map[string]string{}
	for _, f := range fixtures.All(t) {
		dirs[f.Name] = f.Dir
	}
	if len(sps) < 10 {
		t.Fatalf("only %d canonical fixtures", len(sps))
	}
	for name, sp := range sps {
		out := t.TempDir()
		dst, err := s3.NewLocal(out)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Rewrite(ctx, sp, dst, RewriteOptions{Dir: "copy", TempDir: t.TempDir()}); err != nil {
			t.Errorf("%s: rewrite: %v", name, err)
			continue
		}
		cp, err := savepoint.Open(ctx, dst, "copy/_metadata")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		compressed := false
		_ = sp.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeRaw}, func(e *savepoint.KeyedEntry) error {
			compressed = compressed || e.Header.Compressed
			return savepoint.StopWalk
		})
		if a, b := rawEntries(t, sp), rawEntries(t, cp); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: %d entries read back, %d in the original (or different bytes)", name, len(b), len(a))
		}
		orig, _ := os.ReadFile(filepath.Join(dirs[name], "_metadata"))
		copyMD, _ := os.ReadFile(filepath.Join(out, "copy", "_metadata"))
		if !compressed {
			if !bytes.Equal(orig, copyMD) {
				t.Errorf("%s: _metadata differs (%d vs %d bytes)", name, len(orig), len(copyMD))
			}
			// Every data file the savepoint references is identical.
			for _, op := range sp.Meta.Operators {
				for _, st := range op.Subtasks {
					h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
					if !ok || h.Delegate.Tag != savepoint.TagRelativeFile {
						continue
					}
					a, _ := os.ReadFile(filepath.Join(dirs[name], h.Delegate.Path))
					b, _ := os.ReadFile(filepath.Join(out, "copy", h.Delegate.Path))
					if len(a) == 0 || !bytes.Equal(a, b) {
						t.Errorf("%s: keyed stream %s differs", name, h.Delegate.Path)
					}
				}
			}
			continue
		}
		// Compressed: same model up to offsets and sizes.
		strip := func(md *savepoint.Metadata) *savepoint.Metadata {
			b, _ := savepoint.EncodeMetadata(md)
			m, _ := savepoint.ParseMetadata(b, "x")
			for _, op := range m.Operators {
				for _, st := range op.Subtasks {
					if h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok {
						for i, o := range h.Offsets {
							h.Offsets[i] = min(o, 1)
						}
						h.Delegate.Size = 0
					}
				}
			}
			return m
		}
		if !reflect.DeepEqual(strip(sp.Meta), strip(cp.Meta)) {
			t.Errorf("%s: metadata model differs beyond offsets and sizes", name)
		}
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
