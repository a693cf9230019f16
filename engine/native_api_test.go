package engine

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
)

// nativeEntry is entry i of the native API tests: keys in byte order,
// values of varying size, entry 37 larger than the scan buffers used.
func nativeEntry(i int) (k, v []byte) {
	k = []byte(fmt.Sprintf("k%05d", i))
	v = bytes.Repeat([]byte{byte(i)}, 1+i%13*40)
	if i == 37 {
		v = bytes.Repeat([]byte{7}, 100<<10)
	}
	return k, v
}

// TestNativeDB writes SST files with SSTWriter (entries and frames, two
// files), ingests them into a bulk-loading NativeDB next to batch-written
// entries, checkpoints it and reads the checkpoint back read-only with
// Scan and Iter at buffer sizes that cut batches between entries and force
// the in-place path of an entry larger than the buffer.
func TestNativeDB(t *testing.T) {
	dir := t.TempDir()
	const n = 400
	w := NewSSTWriter(SSTOptions{Compression: CompressionLZ4, BlockSize: 16 << 10})
	defer w.Close()
	var files []string
	f := NewFrames(1 << 10)
	for part := 0; part < 2; part++ {
		p := filepath.Join(dir, fmt.Sprintf("%d.sst", part))
		if err := w.Open(p); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
		for i := part * n / 2; i < (part+1)*n/2; i++ {
			k, v := nativeEntry(i)
			if i%2 == 0 {
				if err := w.Put(k, v); err != nil {
					t.Fatal(err)
				}
				continue
			}
			f.Reset()
			f.AddJoined(k[:3], k[3:], v)
			if f.Len() != 1 || f.Size() != 8+len(k)+len(v) {
				t.Fatalf("frames: %d entries, %d bytes", f.Len(), f.Size())
			}
			if err := w.PutFrames(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	// out of order: the writer refuses
	if err := w.Open(filepath.Join(dir, "bad.sst")); err != nil {
		t.Fatal(err)
	}
	if err := w.Put([]byte("b"), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Put([]byte("a"), nil); err == nil {
		t.Fatal("SST writer took a key out of order")
	}

	db, err := OpenNativeBulk(filepath.Join(dir, "db"), []string{"recs", "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ingest("recs", files, true); err != nil {
		t.Fatal(err)
	}
	b, err := db.NewBatch("other")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		b.Put([]byte{byte(i)}, []byte("x"))
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Flush("other"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.NewBatch("absent"); err == nil {
		t.Fatal("batch into an absent family")
	}
	snap := filepath.Join(dir, "snap")
	if err := db.Checkpoint(snap); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db.Close()
	if err := db.Checkpoint(filepath.Join(dir, "snap2")); !errors.Is(err, ErrClosed) {
		t.Fatalf("checkpoint of a closed database: %v", err)
	}

	rd, err := OpenNativeReadOnly(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := rd.NewBatch("recs"); err == nil {
		t.Fatal("batch into a read-only database")
	}
	for _, buf := range []int{1, 300, 4 << 10, 1 << 20} {
		i := 0
		check := func(k, v []byte) error {
			wk, wv := nativeEntry(i)
			if !bytes.Equal(k, wk) || !bytes.Equal(v, wv) {
				return fmt.Errorf("entry %d: %q (%d bytes), want %q (%d bytes)", i, k, len(v), wk, len(wv))
			}
			i++
			return nil
		}
		if err := rd.Scan("recs", buf, check); err != nil {
			t.Fatalf("scan, buffer %d: %v", buf, err)
		}
		if i != n {
			t.Fatalf("scan, buffer %d: %d entries, want %d", buf, i, n)
		}
		i = 0
		it := rd.Iter("recs", buf)
		for {
			k, v, ok, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if err := check(k, v); err != nil {
				t.Fatalf("iter, buffer %d: %v", buf, err)
			}
		}
		it.Close()
		it.Close()
		if i != n {
			t.Fatalf("iter, buffer %d: %d entries, want %d", buf, i, n)
		}
	}
	// bounded scans: [k00100, k00250) at buffer sizes around the entries
	for _, buf := range []int{1, 4 << 10} {
		lo, _ := nativeEntry(100)
		hi, _ := nativeEntry(250)
		i := 100
		err := rd.ScanWith("recs", ScanOptions{Lower: lo, Upper: hi, SkipChecksums: true, BufSize: buf}, func(k, v []byte) error {
			wk, wv := nativeEntry(i)
			if !bytes.Equal(k, wk) || !bytes.Equal(v, wv) {
				return fmt.Errorf("entry %d: %q, want %q", i, k, wk)
			}
			i++
			return nil
		})
		if err != nil || i != 250 {
			t.Fatalf("bounded scan, buffer %d: %v, ended at %d", buf, err, i)
		}
	}
	if fams := rd.Families(); fmt.Sprint(fams) != "[default recs other]" {
		t.Fatalf("families %v", fams)
	}
	stop := errors.New("stop")
	seen := 0
	if err := rd.Scan("recs", 4<<10, func(k, v []byte) error { seen++; return stop }); err != stop || seen != 1 {
		t.Fatalf("scan stopped by its callback: %v after %d entries", err, seen)
	}
	others := 0
	if err := rd.Scan("other", 64, func(k, v []byte) error { others++; return nil }); err != nil || others != 10 {
		t.Fatalf("batch-written family: %d entries, %v", others, err)
	}
	if err := rd.Scan("absent", 64, func(k, v []byte) error { return errors.New("entry in an absent family") }); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := rd.Iter("absent", 64).Next(); ok || err != nil {
		t.Fatalf("absent family: ok=%v err=%v", ok, err)
	}
	rd.Close()

	// the same checkpoint opened as an import of engine files
	imp, err := OpenNativeImport(snap)
	if err != nil {
		t.Fatal(err)
	}
	entries := 0
	if err := imp.ScanWith("recs", ScanOptions{SkipChecksums: true}, func(k, v []byte) error { entries++; return nil }); err != nil || entries != n {
		t.Fatalf("import scan: %d entries, %v", entries, err)
	}
	imp.Close()
	if _, err := OpenNativeImport(filepath.Join(dir, "none")); err == nil {
		t.Fatal("import of a missing directory opened")
	}
}

// TestNativeOf: a RocksDB backend has native access (ingest and options of
// a state, refused for an unknown state and once closed), the heap backend
// has none.
func TestNativeOf(t *testing.T) {
	layout := Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}
	states := []StateDesc{{Name: "a", Kind: KindValue}, {Name: "b", Kind: KindValue}}
	heap, err := OpenHeap(layout, states)
	if err != nil {
		t.Fatal(err)
	}
	defer heap.Close()
	if _, ok := NativeOf(heap); ok {
		t.Fatal("heap backend with native access")
	}
	be, err := OpenRocksDB(t.TempDir(), layout, states, RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	nat, ok := NativeOf(be)
	if !ok {
		t.Fatal("RocksDB backend without native access")
	}
	p := filepath.Join(t.TempDir(), "x.sst")
	w := NewSSTWriter(SSTOptions{Compression: CompressionNone})
	defer w.Close()
	if err := w.Open(p); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := w.Put([]byte{'k', byte(i)}, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := nat.Ingest(1, []string{p}, true); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := be.Scan(1, nil, nil, func(k, v []byte) bool { got = append(got, fmt.Sprintf("%x=%x", k, v)); return true }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[6b00=00 6b01=01 6b02=02 6b03=03 6b04=04]" {
		t.Fatalf("ingested state b: %v", got)
	}
	if n := 0; be.Scan(0, nil, nil, func(k, v []byte) bool { n++; return true }) != nil || n != 0 {
		t.Fatal("ingest into b wrote into a")
	}
	if err := nat.SetOptions(0, []string{"compression"}, []string{"kNoCompression"}); err != nil {
		t.Fatal(err)
	}
	if err := nat.SetOptions(0, []string{"no_such_option"}, []string{"1"}); err == nil {
		t.Fatal("unknown option accepted")
	}
	if _, err := nat.NewPrefixCursor(2); err == nil {
		t.Fatal("cursor over an undeclared state")
	}
	be.Close()
	if _, err := nat.NewPrefixCursor(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("cursor of a closed backend: %v", err)
	}
	if err := nat.Ingest(0, []string{p}, true); !errors.Is(err, ErrClosed) {
		t.Fatalf("ingest into a closed backend: %v", err)
	}
}
