//go:build cgo

package restore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// rewriteFixture copies a fixture savepoint into a temporary directory and
// rewrites its `_metadata` with edit (the files stay byte for byte).
func rewriteFixture(t *testing.T, name string, edit func(md *savepoint.Metadata)) *savepoint.Savepoint {
	t.Helper()
	src := fixtures.Path(t, name)
	if _, err := os.Stat(filepath.Join(src, savepoint.MetadataName)); err != nil {
		src = filepath.Join(src, "savepoint")
	}
	dir := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == savepoint.MetadataName {
			md, err := savepoint.ParseMetadata(b, e.Name())
			if err != nil {
				t.Fatal(err)
			}
			edit(md)
			if b, err = savepoint.EncodeMetadata(md); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), store, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// retag sets the tag of every key-groups handle to tag and returns how
// many it changed.
func retag(md *savepoint.Metadata, tag byte) int {
	n := 0
	for _, op := range md.Operators {
		for _, st := range op.Subtasks {
			if h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok {
				h.Tag = tag
				n++
			}
		}
	}
	return n
}

// asV3 is the `_metadata` of a Flink 1.11 savepoint (and of checkpoints
// before V4): version 3, no CheckpointProperties, so neither the tag nor
// the format type tells the layout.
func asV3(tag byte) func(md *savepoint.Metadata) {
	return func(md *savepoint.Metadata) {
		md.Version = 3
		md.Trailer = nil
		retag(md, tag)
	}
}

// TestVerifyTag3Canonical: a RocksDB savepoint with tag-3 key-groups
// handles in the canonical layout (as Flink 1.11 wrote them: metadata V3,
// no format type) restores and verifies on both backends, as the reader
// decodes it; the same with V4 metadata whose properties carry no format
// type (a checkpoint).
func TestVerifyTag3Canonical(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"flink1.20-rocksdb-canonical-valuestate-timers", "sql-rocksdb-canonical-join-mapstate"} {
		t.Run(name, func(t *testing.T) {
			sp := rewriteFixture(t, name, asV3(savepoint.TagKeyGroups))
			for _, op := range sp.Meta.Operators {
				for _, st := range op.Subtasks {
					if st.ManagedKeyed == nil {
						continue
					}
					if tag := st.ManagedKeyed.HandleTag(); tag != savepoint.TagKeyGroups {
						t.Fatalf("handle tag %d after the rewrite", tag)
					}
					if l, err := sp.KeyedLayout(ctx, st.ManagedKeyed, int(op.MaxParallelism)); err != nil || l != savepoint.LayoutCanonical {
						t.Fatalf("operator %s subtask %d: layout %q, %v", op.ID, st.Index, l, err)
					}
				}
			}
			run := func(sp *savepoint.Savepoint) *verify.Report {
				r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{}, TempDir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				if !r.OK {
					t.Fatalf("verification failed:\n%s", strings.Join(r.Failures(), "\n"))
				}
				if r.Digest.Total("", "").Entries == 0 {
					t.Fatal("no entries digested")
				}
				return r
			}
			r3 := run(sp)
			// V4 with checkpoint-like properties: no format type.
			sp4 := rewriteFixture(t, name, func(md *savepoint.Metadata) { retag(md, savepoint.TagKeyGroups) })
			sp4.Props = &savepoint.Properties{Class: sp4.Props.Class, SnapshotClass: "org.apache.flink.runtime.checkpoint.CheckpointType"}
			r4 := run(sp4)
			if d := verify.Compare(r3.Digest, r4.Digest); len(d) != 0 {
				t.Fatalf("V3 and V4 rewrites digest differently: %v", d[0])
			}
		})
	}
}

// TestVerifyTag3NativeHeap: the probe still tells the heap backend's
// native layout apart (a tag-12 handle of a V3 file without format type):
// the restore reads it in the heap layout, as the digest does, and the
// result equals the unmodified NATIVE savepoint's digest.
func TestVerifyTag3NativeHeap(t *testing.T) {
	ctx := context.Background()
	name := "flink1.20-hashmap-NATIVE-for-contrast"
	sp := rewriteFixture(t, name, asV3(savepoint.TagKeyGroupsV2))
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			if st.ManagedKeyed == nil {
				continue
			}
			if l, err := sp.KeyedLayout(ctx, st.ManagedKeyed, int(op.MaxParallelism)); err != nil || l != savepoint.LayoutNativeHeap {
				t.Fatalf("operator %s subtask %d: layout %q, %v", op.ID, st.Index, l, err)
			}
		}
	}
	r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Fatalf("verification failed:\n%s", strings.Join(r.Failures(), "\n"))
	}
	orig, err := savepoint.Open(ctx, mustLocal(t, fixtures.Path(t, name)), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	want, err := verify.ComputeDigest(ctx, orig, verify.DigestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want.Total("", "").Entries == 0 {
		t.Fatal("no entries")
	}
	for _, tr := range r.Targets {
		if d := verify.Compare(want, tr.Digest); len(d) != 0 {
			t.Fatalf("%s: restored digest differs from the NATIVE savepoint's: %v", tr.Name, d[0])
		}
	}
}

// TestVerifyOperatorStateOnly: a savepoint with operator state only (the
// fixture without its keyed handles) has nothing for a backend to restore:
// targets are skipped with the reason, not failed.
func TestVerifyOperatorStateOnly(t *testing.T) {
	sp := rewriteFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers", func(md *savepoint.Metadata) {
		for _, op := range md.Operators {
			for _, st := range op.Subtasks {
				st.ManagedKeyed = nil
			}
		}
	})
	r, err := verify.Run(context.Background(), sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || len(r.Targets) != 4 {
		t.Fatalf("ok %v, %d targets: %v", r.OK, len(r.Targets), r.Failures())
	}
	var tab strings.Builder
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	for _, tr := range r.Targets {
		if tr.Skipped == "" || !strings.Contains(tab.String(), "NOTE "+tr.Name+": not restored") {
			t.Fatalf("%s: not marked skipped:\n%s", tr.Name, tab.String())
		}
	}
}
