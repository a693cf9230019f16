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
