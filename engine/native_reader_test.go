package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestReadNativeDirEngineLists reads an engine checkpoint whose list
// appends are still merge records (one flushed, later ones in the
// memtable at checkpoint time): families whose OPTIONS name the engine's
// list operator merge into the engine's list format, per-element
// timestamps included, not into comma-joined bytes.
func TestReadNativeDirEngineLists(t *testing.T) {
	dir := t.TempDir()
	clock := NewManualClock(1_000_000)
	be, err := OpenRocksDB(filepath.Join(dir, "db"), smallLayout, listStates, RocksOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	op := NewOperator(be, clock)
	lt, l := mustState(t, op, "lt"), mustState(t, op, "l")
	b := op.NewBundle()
	defer b.Close()
	k := lt.Key(nil, 1, []byte("a"), nil)
	for i := 0; i < 3; i++ {
		begin(t, b)
		addAll(t, b, lt, k, fmt.Sprint("x", i), fmt.Sprint("y", i))
		addAll(t, b, l, k, fmt.Sprint("p,", i))
		commit(t, b)
		if i == 0 {
			if err := be.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Second)
	}
	cp := filepath.Join(dir, "cp")
	if err := CreateNativeCheckpoint(be, cp); err != nil {
		t.Fatal(err)
	}
	fams, err := listMergeFamilies(cp)
	if err != nil {
		t.Fatal(err)
	}
	if !fams["lt"] || !fams["l"] || fams["default"] {
		t.Fatalf("list merge families %v", fams)
	}
	type elem struct {
		ts int64
		el string
	}
	got := map[string][]elem{}
	err = ReadNativeDir(cp, func(cf string, key, v []byte) error {
		if !bytes.Equal(key, k) {
			return fmt.Errorf("unexpected key %x in %s", key, cf)
		}
		if len(v) < TTLPrefix {
			return fmt.Errorf("%s: short value %x", cf, v)
		}
		pre := int64(binary.BigEndian.Uint64(v) &^ listFlag)
		return listElems(v[TTLPrefix:], isPerElement(v), pre, func(ts int64, el []byte) bool {
			got[cf] = append(got[cf], elem{ts, string(el)})
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	var wantT, wantL []elem
	for i := 0; i < 3; i++ {
		ts := int64(1_000_000 + 1000*i)
		wantT = append(wantT, elem{ts, fmt.Sprint("x", i)}, elem{ts, fmt.Sprint("y", i)})
		wantL = append(wantL, elem{1_002_000, fmt.Sprint("p,", i)})
	}
	if !slices.Equal(got["lt"], wantT) {
		t.Fatalf("TTL list: %v, want %v", got["lt"], wantT)
	}
	if !slices.Equal(got["l"], wantL) {
		t.Fatalf("list: %v, want %v", got["l"], wantL)
	}
}

func TestMergeOperatorID(t *testing.T) {
	for in, want := range map[string]string{
		"sfstate.list":                "sfstate.list",
		" {id=sfstate.list;x=1} ":     "sfstate.list",
		"{x=1; id=stringappendtest }": "stringappendtest",
		"nullptr":                     "nullptr",
		"{x=1}":                       "",
	} {
		if got := mergeOperatorID(in); got != want {
			t.Errorf("mergeOperatorID(%q) = %q, want %q", in, got, want)
		}
	}
	if got := unescapeOptionName(`a\"b\\c`); got != `a"b\c` {
		t.Errorf("unescape: %q", got)
	}
}

// TestLiveValue: the stored-value helpers for tools agree with what a
// state's ScanKeyGroups reports for per-element and whole-list values.
func TestLiveValue(t *testing.T) {
	per := binary.BigEndian.AppendUint64(nil, listPrefix(true, 5000))
	per = appendListElem(per, true, 1000, []byte("old"))
	per = appendListElem(per, true, 5000, []byte("new"))
	if ts, ok := StoredTimestamp(per); !ok || ts != 5000 {
		t.Fatalf("StoredTimestamp = %d, %v", ts, ok)
	}
	if _, ok := StoredTimestamp(per[:7]); ok {
		t.Fatal("short value accepted")
	}
	for _, c := range []struct {
		now   int64
		live  bool
		ts    int64
		elems []string
	}{{2000, true, 5000, []string{"old", "new"}}, {3000, true, 5000, []string{"new"}}, {7000, false, 0, nil}} {
		out, live, err := LiveValue([]byte("x"), KindList, 2*time.Second, per, c.now)
		if err != nil || live != c.live {
			t.Fatalf("now %d: live %v, %v", c.now, live, err)
		}
		if !live {
			continue
		}
		if out[0] != 'x' || int64(binary.BigEndian.Uint64(out[1:])) != c.ts {
			t.Fatalf("now %d: %x", c.now, out)
		}
		if got := publicElems(t, out[1+TTLPrefix:]); !slices.Equal(got, c.elems) {
			t.Fatalf("now %d: %v, want %v", c.now, got, c.elems)
		}
	}
	whole := binary.BigEndian.AppendUint64(nil, 1000)
	whole = appendListElem(whole, false, 0, []byte("w"))
	if out, live, err := LiveValue(nil, KindList, time.Second, whole, 1500); err != nil || !live || !bytes.Equal(out, whole) {
		t.Fatalf("whole list: %x %v %v", out, live, err)
	}
	if _, live, _ := LiveValue(nil, KindValue, time.Second, whole, 2000); live {
		t.Fatal("expired value live")
	}
	if _, _, err := LiveValue(nil, KindList, time.Second, append(per, 1), 2000); err == nil {
		t.Fatal("malformed list accepted")
	}
}
