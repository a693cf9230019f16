package checkpoint

import (
	"context"
	"testing"

	"github.com/sfstate/sfstate/engine"
)

// TestScaleInImportsWithoutCopy: restoring 3→2 from key-group files
// imports the files of both overlapping old subtasks into one directory
// (no key copied) and is exact, including data flushed after compaction
// and deletes; the restored subtasks, checkpointed again, rescale 2→3 and
// 2→1 the same way, because their clip left no file reaching into other
// subtasks' key groups.
func TestScaleInImportsWithoutCopy(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newClusterWith(t, 3, engine.OpenRocksDBKeyGroupFiles)
	c.write(0, 2000, "a", false)
	compactAll(t, c)
	c.write(1700, 2300, "b", true)
	if _, err := New(st, Options{}).TakeSync(ctx, c.backends, 1); err != nil {
		t.Fatal(err)
	}
	restored, stats := restoreAll(t, st, 1, 2, RestoreOptions{KeyGroupFiles: true})
	checkRestored(t, c.want, restored)
	for i, s := range stats {
		if s.KeysCopied != 0 || s.Imported != s.Handles {
			t.Errorf("subtask %d of 2: %d handles, %d imported, %d keys copied", i, s.Handles, s.Imported, s.KeysCopied)
		}
	}
	st2 := localStore(t)
	if _, err := New(st2, Options{}).TakeSync(ctx, restored, 1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{3, 1} {
		again, stats := restoreAll(t, st2, 1, p, RestoreOptions{KeyGroupFiles: true})
		checkRestored(t, c.want, again)
		for i, s := range stats {
			if s.KeysCopied != 0 {
				t.Errorf("2→%d, subtask %d: %d keys copied (%d handles, %d imported)", p, i, s.KeysCopied, s.Handles, s.Imported)
			}
		}
	}
}

// TestScaleInFallsBackOnOverlappingFiles: when a file of one old subtask
// reaches into another's key groups (a range tombstone written outside its
// own range and never compacted), the files are not imported together and
// the restore copies keys instead, still exactly.
func TestScaleInFallsBackOnOverlappingFiles(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newClusterWith(t, 3, engine.OpenRocksDBKeyGroupFiles)
	c.write(0, 1500, "a", false)
	compactAll(t, c)
	b0 := c.backends[0]
	l1 := c.backends[1].Layout()
	lo, hi := b0.Layout().RangeBounds(l1.Range.Start, l1.Range.End)
	if err := b0.DeleteRange(0, lo, hi); err != nil { // deletes nothing of b0's
		t.Fatal(err)
	}
	if err := b0.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(st, Options{}).TakeSync(ctx, c.backends, 1); err != nil {
		t.Fatal(err)
	}
	restored, stats := restoreAll(t, st, 1, 2, RestoreOptions{KeyGroupFiles: true})
	checkRestored(t, c.want, restored)
	if stats[0].Handles < 2 || stats[0].KeysCopied == 0 {
		t.Errorf("subtask 0 of 2: %+v; want the copying path", *stats[0])
	}
}
