package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// TestReadNativeDirMergesListOperands writes Flink-style list merge
// operands that no compaction has folded and reads them back joined with
// ',' as Flink's list state reads them.
func TestReadNativeDirMergesListOperands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	// Options carrying a Go merge operator are never destroyed (see
	// nativeReadOptions).
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	opts.SetCreateIfMissingColumnFamilies(true)
	opts.SetMergeOperator(listAppendMerge{})
	db, cfs, err := grocksdb.OpenDbColumnFamilies(opts, dir, []string{"default", "lst", "val"}, []*grocksdb.Options{opts, opts, opts})
	if err != nil {
		t.Fatal(err)
	}
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(db.MergeCF(wo, cfs[1], []byte("k1"), []byte("a")))
	must(db.MergeCF(wo, cfs[1], []byte("k1"), []byte("b")))
	must(db.PutCF(wo, cfs[1], []byte("k2"), []byte("x")))
	fo := grocksdb.NewDefaultFlushOptions()
	must(db.FlushCF(cfs[1], fo))
	must(db.MergeCF(wo, cfs[1], []byte("k2"), []byte("y")))
	must(db.PutCF(wo, cfs[2], []byte("v"), []byte("1")))
	must(db.FlushCF(cfs[1], fo))
	must(db.FlushCF(cfs[2], fo))
	fo.Destroy()
	for _, h := range cfs {
		h.Destroy()
	}
	db.Close()

	got := map[string]string{}
	err = ReadNativeDir(dir, func(cf string, k, v []byte) error {
		got[cf+"/"+string(k)] = string(v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"lst/k1": "a,b", "lst/k2": "x,y", "val/v": "1"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("got %v, want %v", got, want)
		}
	}

	n := 0
	if err := ReadNativeDir(dir, func(string, []byte, []byte) error { n++; return ErrStopRead }); err != nil || n != 1 {
		t.Fatalf("stop: %d entries, %v", n, err)
	}
	boom := errors.New("boom")
	if err := ReadNativeDir(dir, func(string, []byte, []byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("callback error: %v", err)
	}
}

func TestReadNativeDirErrors(t *testing.T) {
	if err := ReadNativeDir(filepath.Join(t.TempDir(), "missing"), func(string, []byte, []byte) error { return nil }); err == nil {
		t.Fatal("missing directory accepted")
	}
	empty := t.TempDir()
	if err := ReadNativeDir(empty, func(string, []byte, []byte) error { return nil }); err == nil || !strings.Contains(err.Error(), empty) {
		t.Fatalf("directory without CURRENT: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("reading created files: %v", ents)
	}
}
