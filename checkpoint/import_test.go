package checkpoint

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
)

// importBound bounds every import and restore in these tests: a stuck
// native call fails the test instead of hanging the suite.
const importBound = 60 * time.Second

func bounded(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(importBound):
		t.Fatalf("%s did not finish within %v", what, importBound)
	}
}

// TestImportManyKeyGroupFiles imports the SST files of a range of key
// groups from a checkpoint taken with key-group files (tens of adjacent,
// non-overlapping compacted files plus flush files over every key group)
// into a fresh directory, opens it as a backend, clips and writes to it.
// No imported file may land on level 0 when the files fit the levels
// above it: piled onto level 0 they pushed the restored backend past its
// write-stall triggers, and its first writes waited on a compaction of
// everything just imported.
func TestImportManyKeyGroupFiles(t *testing.T) {
	t.Run("compacted", func(t *testing.T) { testImportMany(t, false) })
	t.Run("compacted+flushed", func(t *testing.T) { testImportMany(t, true) })
}

func testImportMany(t *testing.T, flushed bool) {
	c := newClusterWith(t, 1, engine.OpenRocksDBKeyGroupFiles)
	c.write(0, 8000, "a", false)
	compactAll(t, c)
	if flushed {
		c.write(7000, 7600, "b", false) // flush files over every key group
	}
	cp := filepath.Join(t.TempDir(), "cp")
	if err := engine.CreateNativeCheckpoint(c.backends[0], cp); err != nil {
		t.Fatal(err)
	}
	all, err := engine.ListSSTFiles(cp)
	if err != nil {
		t.Fatal(err)
	}
	rng := keygroups.Range{Start: 43, End: 127}
	layout := engine.Layout{MaxParallelism: testMaxPar, Range: rng}
	lo, hi := layout.RangeBounds(rng.Start, rng.End)
	var files []engine.SSTFile
	l0, l1 := 0, 0
	for _, f := range all {
		if string(f.Largest) < string(lo) || string(f.Smallest) >= string(hi) {
			continue
		}
		files = append(files, f)
		if f.Level == 0 {
			l0++
		} else {
			l1++
		}
	}
	if l1 < 40 || (l0 == 0) == flushed {
		t.Fatalf("checkpoint has %d compacted and %d flushed files in range; the test needs many of both", l1, l0)
	}
	dir := filepath.Join(t.TempDir(), "imported")
	bounded(t, "import", func() error { return engine.ImportSSTFilesContext(context.Background(), dir, cp, files) })
	got, err := engine.ListSSTFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	levels := map[int]int{}
	for _, f := range got {
		levels[f.Level]++
	}
	if len(got) != len(files) || levels[0] != 0 {
		t.Fatalf("imported %d of %d files, per level %v: want none on level 0", len(got), len(files), levels)
	}
	var b engine.Backend
	bounded(t, "open, clip and write", func() error {
		var err error
		if b, err = engine.OpenRocksDBKeyGroupFiles(dir, layout, testStates, engine.RocksOptions{}); err != nil {
			return err
		}
		if err := clip(b, layout); err != nil {
			return err
		}
		bt := b.NewBatch()
		defer bt.Close()
		for k := range c.want[0] {
			kg, _ := layout.KeyGroupOf([]byte(k))
			if rng.Contains(kg) {
				bt.Put(0, []byte(k), []byte("new"))
			}
		}
		if err := bt.Commit(); err != nil {
			return err
		}
		return b.Flush()
	})
	defer b.Close()
	want := map[int]map[string]string{0: {}, 1: {}}
	for st, m := range c.want {
		for k, v := range m {
			if kg, _ := layout.KeyGroupOf([]byte(k)); rng.Contains(kg) {
				if st == 0 {
					v = "new"
				}
				want[st][k] = v
			}
		}
	}
	checkRestored(t, want, []engine.Backend{b})
}

// TestImportTimeoutFallsBack: an import that does not finish within
// engine.ImportTimeout is abandoned, and the subtask is restored from all
// its files instead, exactly.
func TestImportTimeoutFallsBack(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newClusterWith(t, 2, engine.OpenRocksDBKeyGroupFiles)
	c.write(0, 3000, "a", false)
	compactAll(t, c)
	if _, err := New(st, Options{}).TakeSync(ctx, c.backends, 1); err != nil {
		t.Fatal(err)
	}
	err := engine.ImportSSTFilesContext(canceled(), filepath.Join(t.TempDir(), "x"), t.TempDir(), []engine.SSTFile{{Name: "1.sst", ColumnFamily: "counts"}})
	if !errors.Is(err, engine.ErrImportStalled) {
		t.Fatalf("import under a canceled context: %v, want ErrImportStalled", err)
	}
	old := engine.ImportTimeout
	engine.ImportTimeout = time.Nanosecond
	defer func() { engine.ImportTimeout = old }()
	restored, stats := restoreAll(t, st, 1, 3, RestoreOptions{KeyGroupFiles: true})
	checkRestored(t, c.want, restored)
	abandoned := 0
	for _, s := range stats {
		abandoned += s.ImportsAbandoned
		if s.Imported != 0 {
			t.Errorf("imported %d subtasks with a 1 ns import bound", s.Imported)
		}
	}
	if abandoned == 0 {
		t.Fatal("no import was abandoned")
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
