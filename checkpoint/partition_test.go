package checkpoint

import (
	"context"
	"testing"

	"github.com/sfstate/sfstate/engine"
)

// TestKeyGroupFilesRestoreFetchesOnlyOverlap: with key-group partitioned
// SST files a rescaled restore downloads only its key groups' files (plus
// flush files spanning all key groups) and imports them; the result is
// exact, and writes after the restore shadow the imported data.
func TestKeyGroupFilesRestoreFetchesOnlyOverlap(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newClusterWith(t, 2, engine.OpenRocksDBKeyGroupFiles)
	c.write(0, 6000, "a", false)
	compactAll(t, c)
	c.write(5000, 6500, "b", true) // level-0 files over every key group
	c.write(6500, 7000, "c", false)
	res, err := New(st, Options{}).TakeSync(ctx, c.backends, 1)
	if err != nil {
		t.Fatal(err)
	}
	perKG := 0
	for _, s := range res.Manifest.Subtasks {
		for _, f := range s.Shared {
			if f.FirstKeyGroup == f.LastKeyGroup {
				perKG++
			}
		}
	}
	if perKG < 64 {
		t.Fatalf("only %d single-key-group SST files after compaction with the partitioner", perKG)
	}
	restored, stats := restoreAll(t, st, 1, 3, RestoreOptions{KeyGroupFiles: true})
	checkRestored(t, c.want, restored)
	var skipped, imported int
	for i, s := range stats {
		t.Logf("subtask %d: %+v", i, *s)
		skipped += s.FilesSkipped
		imported += s.Imported
	}
	if skipped == 0 || imported == 0 {
		t.Fatalf("rescaled restore skipped %d files, imported %d subtasks", skipped, imported)
	}
	full, fstats := restoreAll(t, st, 1, 3, RestoreOptions{WholeHandles: true})
	checkRestored(t, c.want, full)
	var a, b int64
	for i := range stats {
		a += stats[i].BytesDownloaded
		b += fstats[i].BytesDownloaded
	}
	t.Logf("2→3 restore downloads %d B with key-group files vs %d B whole handles", a, b)
	if a >= b {
		t.Errorf("partial restore downloaded %d B, whole-handle restore %d B", a, b)
	}

	// Writes after an imported restore win over the imported data, also
	// after reopening.
	r0 := restored[1]
	l := r0.Layout()
	bt := r0.NewBatch()
	n := 0
	for k := range c.want[0] {
		kg, _ := l.KeyGroupOf([]byte(k))
		if l.Range.Contains(kg) {
			bt.Put(0, []byte(k), []byte("after-restore"))
			n++
		}
	}
	if err := bt.Commit(); err != nil {
		t.Fatal(err)
	}
	bt.Close()
	if err := r0.Flush(); err != nil {
		t.Fatal(err)
	}
	dir, _ := engine.NativeDir(r0)
	r0.Close()
	re, err := engine.OpenRocksDB(dir, l, testStates, engine.RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	seen := 0
	if err := re.Scan(0, nil, nil, func(k, v []byte) bool {
		seen++
		if string(v) != "after-restore" {
			t.Errorf("key %x reads %q after reopen, want the post-restore write", k, v)
			return false
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if seen != n || n == 0 {
		t.Errorf("reopened: %d entries, wrote %d", seen, n)
	}
}
