//go:build cgo

package migrate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

const otherState = "orders"

// srcFixture is a native checkpoint (id 1) of two subtasks whose join
// state uses the bucket layout, beside an untouched value state.
type srcFixture struct {
	dir    string
	store  *s3.Local
	clock  *engine.Clock
	maxP   int
	ranges []keygroups.Range
}

func fixtureStates() []engine.StateDesc {
	return []engine.StateDesc{
		{Name: otherState, Kind: engine.KindValue},
		recordstore.StateDesc(recordstore.LayoutBucket, time.Hour),
	}
}

func makeSource(t testing.TB, seed uint64, corrupt func(be engine.Backend)) *srcFixture {
	return makeSourceN(t, seed, 10, corrupt)
}

// makeSourceN flushes every flushEvery bundles (more flushes, more files).
func makeSourceN(t testing.TB, seed uint64, flushEvery int, corrupt func(be engine.Backend)) *srcFixture {
	t.Helper()
	ctx := context.Background()
	f := &srcFixture{dir: filepath.Join(t.TempDir(), "src"), clock: engine.NewManualClock(5_000_000), maxP: 128,
		ranges: []keygroups.Range{{Start: 0, End: 63}, {Start: 64, End: 127}}}
	var err error
	if f.store, err = s3.NewLocal(f.dir); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var backends []engine.Backend
	for i, r := range f.ranges {
		be, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), fmt.Sprintf("db%d", i)), engine.Layout{MaxParallelism: f.maxP, Range: r},
			fixtureStates(), engine.RocksOptions{Clock: f.clock, WriteBufferSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Close() })
		js, err := recordstore.Open(recordstore.LayoutBucket, be, recordstore.Options{Clock: f.clock})
		if err != nil {
			t.Fatal(err)
		}
		for b := 0; b < 40; b++ {
			var probes []recordstore.Probe
			for len(probes) < 30 {
				k := testKey(t, int64(rng.IntN(300)))
				if !r.Contains(recordstore.KeyGroupOf(k, f.maxP)) {
					continue
				}
				probes = append(probes, recordstore.Probe{Side: recordstore.Side(rng.IntN(2)), Key: k, Row: testRow(int64(rng.IntN(30)), rng.IntN(40))})
			}
			if err := js.Begin(probes); err != nil {
				t.Fatal(err)
			}
			for _, p := range probes {
				d := int64(1 + rng.IntN(2))
				if rng.IntN(4) == 0 {
					d = -1
				}
				if _, err := js.Add(p.Side, p.Key, p.Row, d); err != nil {
					t.Fatal(err)
				}
			}
			if err := js.Commit(); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Duration(rng.IntN(50)) * time.Second)
			if b%flushEvery == flushEvery-1 { // several SST files per family
				if err := be.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		// the untouched state
		batch := be.NewBatch()
		for j := 0; j < 200; j++ {
			kg := r.Start + rng.IntN(r.End-r.Start+1)
			batch.Put(0, be.Layout().Key(nil, kg, []byte(fmt.Sprintf("order-%d-%d", i, j)), nil), []byte(fmt.Sprintf("\x00\x00\x00\x00\x00\x00\x00\x01value-%d", j)))
		}
		if err := batch.Commit(); err != nil {
			t.Fatal(err)
		}
		batch.Close()
		if corrupt != nil && i == 1 {
			corrupt(be)
		}
		backends = append(backends, be)
	}
	if _, err := checkpoint.New(f.store, checkpoint.Options{}).TakeSync(ctx, backends, 1); err != nil {
		t.Fatal(err)
	}
	return f
}

func treeHash(t testing.TB, dir string) string {
	t.Helper()
	var names []string
	sums := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		names = append(names, rel)
		sums[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		s := sums[n]
		fmt.Fprintf(h, "%s %x\n", n, s)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// restoredContent restores every subtask of checkpoint 1 in st and returns
// the join state's raw digest, its logical content and the other state.
func restoredContent(t testing.TB, st s3.Storage, f *srcFixture, l recordstore.Layout) (*Digest, []recordstore.LogicalGroup, map[string]string) {
	t.Helper()
	d := NewDigest()
	var groups []recordstore.LogicalGroup
	other := map[string]string{}
	for i, r := range f.ranges {
		be, _, err := checkpoint.Restore(context.Background(), st, 1, r, filepath.Join(t.TempDir(), fmt.Sprintf("r%d", i)), checkpoint.RestoreOptions{Rocks: engine.RocksOptions{Clock: f.clock}})
		if err != nil {
			t.Fatal(err)
		}
		var sd *Digest
		if l == recordstore.LayoutBucket {
			sd, err = DigestBuckets(be)
		} else {
			sd, err = DigestRecords(be)
			if _, e2 := StateID(be, recordstore.BucketStateName); e2 == nil {
				t.Fatal("migrated checkpoint still declares the bucket state")
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		d.Merge(sd)
		groups = append(groups, logical(t, l, be, f.clock)...)
		oid, err := StateID(be, otherState)
		if err != nil {
			t.Fatal(err)
		}
		be.Scan(oid, nil, nil, func(k, v []byte) bool { other[string(k)] = string(v); return true })
		be.Close()
	}
	return d, groups, other
}

func TestCheckpointMigration(t *testing.T) {
	ctx := context.Background()
	f := makeSource(t, 1, nil)
	before := treeHash(t, f.dir)
	for _, mode := range []WriteMode{WriteSST, WritePut} {
		t.Run(string(mode), func(t *testing.T) {
			dstDir := filepath.Join(t.TempDir(), "dst")
			dst, _ := s3.NewLocal(dstDir)
			rep, err := Checkpoint(ctx, f.store, dst, Options{Mode: mode, WorkDir: t.TempDir(), SSTTargetSize: 8 << 10, Parallel: 2})
			if err != nil {
				t.Fatal(err)
			}
			op := rep.Operators[0]
			if op.Rows == 0 || op.Buckets == 0 || len(op.Mismatches) != 0 {
				t.Fatalf("report: rows %d buckets %d mismatches %d", op.Rows, op.Buckets, len(op.Mismatches))
			}
			if mode == WriteSST && op.RecordFiles < 2 {
				t.Fatalf("SST writer should have rolled files: %d record files", op.RecordFiles)
			}
			if rep.FilesReferenced == 0 || rep.FilesCopied != 0 {
				t.Fatalf("untouched files: %d referenced, %d copied", rep.FilesReferenced, rep.FilesCopied)
			}
			if ids, _ := checkpoint.Completed(ctx, dst); !reflect.DeepEqual(ids, []int64{1}) {
				t.Fatalf("destination checkpoints %v", ids)
			}
			srcD, srcL, srcO := restoredContent(t, f.store, f, recordstore.LayoutBucket)
			dstD, dstL, dstO := restoredContent(t, dst, f, recordstore.LayoutRecord)
			if ms := Compare(srcD, dstD); len(ms) > 0 || srcD.Total().Rows == 0 {
				t.Fatalf("restored digests differ: %v", ms)
			}
			if ms := Compare(srcD, op.Source); len(ms) > 0 {
				t.Fatalf("reported source digest differs from the restored source: %v", ms[0])
			}
			if !reflect.DeepEqual(srcL, dstL) {
				t.Fatal("restored logical content differs")
			}
			if !reflect.DeepEqual(srcO, dstO) || len(srcO) == 0 {
				t.Fatal("untouched state differs")
			}
			// untouched SST files are hard links of the source objects
			m, err := checkpoint.ReadManifest(ctx, dst, 1)
			if err != nil {
				t.Fatal(err)
			}
			linked := 0
			for _, s := range m.Subtasks {
				for _, e := range s.Shared {
					if e.ColumnFamily != otherState {
						continue
					}
					a, err1 := os.Stat(filepath.Join(f.dir, e.Key))
					b, err2 := os.Stat(filepath.Join(dstDir, e.Key))
					if err1 != nil || err2 != nil || !os.SameFile(a, b) {
						t.Fatalf("%s is not carried by reference (%v %v)", e.Key, err1, err2)
					}
					linked++
				}
			}
			if linked == 0 {
				t.Fatal("no untouched SST file in the manifest")
			}
			// a rerun finds it complete and changes nothing
			h := treeHash(t, dstDir)
			rep2, err := Checkpoint(ctx, f.store, dst, Options{Mode: mode, WorkDir: t.TempDir()})
			if err != nil || !rep2.AlreadyComplete || treeHash(t, dstDir) != h {
				t.Fatalf("rerun: %v complete=%v", err, rep2 != nil && rep2.AlreadyComplete)
			}
			if ms := Compare(rep2.Operators[0].Source, op.Source); len(ms) > 0 {
				t.Fatal("rerun report differs")
			}
		})
	}
	if treeHash(t, f.dir) != before {
		t.Fatal("the source checkpoint changed")
	}
	// dry run writes nothing
	dstDir := filepath.Join(t.TempDir(), "dry")
	dst, _ := s3.NewLocal(dstDir)
	rep, err := Checkpoint(ctx, f.store, dst, Options{DryRun: true, WorkDir: t.TempDir()})
	if err != nil || rep.Operators[0].Rows == 0 {
		t.Fatalf("dry run: %v", err)
	}
	if objs, _ := dst.List(ctx, ""); len(objs) != 0 {
		t.Fatalf("dry run wrote %d objects", len(objs))
	}
}

// TestCheckpointResume injects a failure after every store write k, checks
// no `_metadata` is visible, reruns, and compares with a clean run.
func TestCheckpointResume(t *testing.T) {
	ctx := context.Background()
	f := makeSourceN(t, 2, 20, nil)
	before := treeHash(t, f.dir)
	cleanStore, _ := s3.NewLocal(filepath.Join(t.TempDir(), "clean"))
	clean, err := Checkpoint(ctx, f.store, cleanStore, Options{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cleanD, cleanL, cleanO := restoredContent(t, cleanStore, f, recordstore.LayoutRecord)
	finished := false
	k := 1
	for ; k < 200 && !finished; k++ {
		dst, _ := s3.NewLocal(filepath.Join(t.TempDir(), fmt.Sprintf("dst%d", k)))
		_, err := Checkpoint(ctx, f.store, dst, Options{WorkDir: t.TempDir(), failAfter: k})
		if err == nil {
			finished = true // k is past the last write
		} else {
			if !errors.Is(err, errInjected) {
				t.Fatalf("k=%d: %v", k, err)
			}
			if ids, _ := checkpoint.Completed(ctx, dst); len(ids) != 0 {
				t.Fatalf("k=%d: failed run left a complete checkpoint", k)
			}
			// sometimes a second crash a little later, then a clean rerun
			if k%4 != 0 {
			} else if _, err := Checkpoint(ctx, f.store, dst, Options{WorkDir: t.TempDir(), failAfter: 2}); err != nil && !errors.Is(err, errInjected) {
				t.Fatalf("k=%d second run: %v", k, err)
			}
			rep, err := Checkpoint(ctx, f.store, dst, Options{WorkDir: t.TempDir()})
			if err != nil {
				t.Fatalf("k=%d rerun: %v", k, err)
			}
			if ms := Compare(rep.Operators[0].Source, clean.Operators[0].Source); len(ms) > 0 {
				t.Fatalf("k=%d: reported digest differs", k)
			}
		}
		assertNoOrphans(t, dst)
		// the manifest has the clean run's states, ranges and untouched
		// files; every third crash point (and the last) is also restored
		// and compared row by row
		mc, err1 := checkpoint.ReadManifest(ctx, cleanStore, 1)
		md, err2 := checkpoint.ReadManifest(ctx, dst, 1)
		if err1 != nil || err2 != nil || !sameShape(mc, md) {
			t.Fatalf("k=%d: manifest differs from a clean run's (%v %v)", k, err1, err2)
		}
		if k%3 != 0 && !finished {
			continue
		}
		d, l, o := restoredContent(t, dst, f, recordstore.LayoutRecord)
		if ms := Compare(cleanD, d); len(ms) > 0 || !reflect.DeepEqual(cleanL, l) || !reflect.DeepEqual(cleanO, o) {
			t.Fatalf("k=%d: resumed result differs from a clean run", k)
		}
	}
	if !finished {
		t.Fatal("never ran to completion")
	}
	t.Logf("%d crash points", k)
	if treeHash(t, f.dir) != before {
		t.Fatal("the source checkpoint changed")
	}
}

func TestCheckpointCorruptSource(t *testing.T) {
	ctx := context.Background()
	t.Run("sst file", func(t *testing.T) {
		f := makeSource(t, 3, nil)
		m, err := checkpoint.ReadManifest(ctx, f.store, 1)
		if err != nil {
			t.Fatal(err)
		}
		var victim string
		for _, e := range m.Subtasks[0].Shared {
			if e.ColumnFamily == recordstore.BucketStateName {
				victim = e.Key
			}
		}
		p := filepath.Join(f.dir, victim)
		b, _ := os.ReadFile(p)
		b[len(b)/3] ^= 0x40
		os.Remove(p) // break the hard links the checkpoint made
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		dst, _ := s3.NewLocal(filepath.Join(t.TempDir(), "dst"))
		_, err = Checkpoint(ctx, f.store, dst, Options{WorkDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), victim) {
			t.Fatalf("want an error naming %s, got %v", victim, err)
		}
		if _, err := dst.Stat(ctx, checkpoint.MetadataKey(1)); !s3.IsNotExist(err) {
			t.Fatalf("destination has _metadata after a failed migration: %v", err)
		}
		// The same object downloaded (a store that is not a local
		// directory) fails the download's check.
		dst2, _ := s3.NewLocal(filepath.Join(t.TempDir(), "dst2"))
		_, err = Checkpoint(ctx, s3.WithCounters(f.store, &s3.Counters{}), dst2, Options{WorkDir: t.TempDir()})
		if !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), victim) {
			t.Fatalf("download: want checkpoint.ErrCorrupt naming %s, got %v", victim, err)
		}
		t.Logf("download: %v", err)
		if _, err := dst2.Stat(ctx, checkpoint.MetadataKey(1)); !s3.IsNotExist(err) {
			t.Fatalf("destination has _metadata after a failed migration: %v", err)
		}
	})
	t.Run("bucket value", func(t *testing.T) {
		f := makeSource(t, 4, func(be engine.Backend) {
			k := testKey(t, 7)
			for kg := 0; !be.Layout().Range.Contains(recordstore.KeyGroupOf(k, 128)); kg++ {
				k = testKey(t, int64(1000+kg))
			}
			bk := recordstore.AppendGroupPrefix(nil, 1, recordstore.KeyGroupOf(k, 128), recordstore.Left, k)
			v := recordstore.AppendBucketValue(nil, []recordstore.LogicalRow{{Row: []byte("x"), Count: 3, TS: 1}})
			v[len(v)-9] = 0 // association count byte → count 3, then the timestamp shifts: truncated
			b := be.NewBatch()
			b.Put(1, bk, v[:len(v)-2])
			b.Commit()
			b.Close()
		})
		dst, _ := s3.NewLocal(filepath.Join(t.TempDir(), "dst"))
		_, err := Checkpoint(ctx, f.store, dst, Options{WorkDir: t.TempDir()})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "offset") {
			t.Fatalf("want ErrCorrupt with an offset, got %v", err)
		}
		if ids, _ := checkpoint.Completed(ctx, dst); len(ids) != 0 {
			t.Fatal("destination has a complete checkpoint")
		}
	})
}

// TestCheckpointHugeBucket: a multiset far larger than the scan and write
// buffers (the pool grants almost nothing) is streamed in place.
func TestCheckpointHugeBucket(t *testing.T) {
	ctx := context.Background()
	src, _ := s3.NewLocal(filepath.Join(t.TempDir(), "src"))
	layout := engine.Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}
	be, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), "db"), layout, fixtureStates(), engine.RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	k := testKey(t, 1)
	var rows []recordstore.LogicalRow
	for i := 0; i < 6000; i++ {
		rows = append(rows, recordstore.LogicalRow{Row: testRow(int64(i), 100), Count: int64(1 + i%3), Assoc: int64(i % 2), TS: int64(1000 + i)})
	}
	sort.Slice(rows, func(a, b int) bool { return string(rows[a].Row) < string(rows[b].Row) })
	b := be.NewBatch()
	b.Put(1, recordstore.AppendGroupPrefix(nil, 1, recordstore.KeyGroupOf(k, 128), recordstore.Right, k), recordstore.AppendBucketValue(nil, rows))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := checkpoint.New(src, checkpoint.Options{}).TakeSync(ctx, []engine.Backend{be}, 1); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []WriteMode{WriteSST, WritePut} {
		dst, _ := s3.NewLocal(filepath.Join(t.TempDir(), string(mode)))
		pool := engine.NewPool(1 << 10)
		rep, err := Checkpoint(ctx, src, dst, Options{Mode: mode, WorkDir: t.TempDir(), Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Operators[0].Rows != 6000 || rep.Operators[0].BytesIn < 600_000 {
			t.Fatalf("%s: %d rows from %d bytes", mode, rep.Operators[0].Rows, rep.Operators[0].BytesIn)
		}
		if pool.Used() != 0 || pool.Peak() > 1<<10 {
			t.Fatalf("pool used %d peak %d", pool.Used(), pool.Peak())
		}
	}
}

// TestCheckpointHostileJournal: a journal entry pointing outside the
// checkpoint is refused, nothing is published.
func TestCheckpointHostileJournal(t *testing.T) {
	ctx := context.Background()
	f := makeSource(t, 5, nil)
	dst, _ := s3.NewLocal(filepath.Join(t.TempDir(), "dst"))
	if _, err := Checkpoint(ctx, f.store, dst, Options{WorkDir: t.TempDir(), failAfter: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	// forge: take the journal of subtask 0, point a file at another key,
	// and replay into a fresh destination
	rc, err := dst.Get(ctx, journalKey(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	forged := strings.Replace(string(b), `"key": "shared/`, `"key": "../escape/`, 1)
	if forged == string(b) {
		t.Fatal("journal has no shared key to forge")
	}
	dst2, _ := s3.NewLocal(filepath.Join(t.TempDir(), "dst2"))
	if err := dst2.Put(ctx, journalKey(1, 0), strings.NewReader(forged), int64(len(forged))); err != nil {
		t.Fatal(err)
	}
	_, err = Checkpoint(ctx, f.store, dst2, Options{WorkDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "journal") {
		t.Fatalf("want a journal error, got %v", err)
	}
	if ids, _ := checkpoint.Completed(ctx, dst2); len(ids) != 0 {
		t.Fatal("published from a forged journal")
	}
}

// TestCheckpointVerificationFails: a record altered on its way to the
// output (count, timestamp or association count) is caught before
// anything is published.
func TestCheckpointVerificationFails(t *testing.T) {
	ctx := context.Background()
	f := makeSource(t, 6, nil)
	for name, off := range map[string]int{"timestamp": 7, "count": 15, "assoc": 23} {
		t.Run(name, func(t *testing.T) {
			dst, _ := s3.NewLocal(filepath.Join(t.TempDir(), "dst"))
			n := 0
			rep, err := Checkpoint(ctx, f.store, dst, Options{WorkDir: t.TempDir(), tamper: func(k, v []byte) {
				if n++; n == 100 {
					v[off]++
				}
			}})
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("want ErrMismatch, got %v", err)
			}
			if rep == nil || len(rep.Operators) != 1 || len(rep.Operators[0].Mismatches) != 1 {
				t.Fatalf("report should name exactly one differing group: %+v", rep)
			}
			if _, err := dst.Stat(ctx, checkpoint.MetadataKey(1)); !s3.IsNotExist(err) {
				t.Fatal("_metadata written after a failed verification")
			}
		})
	}
}

// assertNoOrphans: every object of the destination is the manifest's, the
// manifest, `_metadata` or the journal.
func assertNoOrphans(t *testing.T, st s3.Storage) {
	t.Helper()
	ctx := context.Background()
	m, err := checkpoint.ReadManifest(ctx, st, 1)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{checkpoint.ManifestKey(1): true, checkpoint.MetadataKey(1): true, checkpoint.Dir(1) + "/" + savepoint.SumsName: true}
	for _, s := range m.Subtasks {
		for _, f := range s.Shared {
			used[f.Key] = true
		}
		for _, f := range s.Private {
			used[f.Key] = true
		}
	}
	objs, err := st.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if !used[o.Key] && !strings.HasPrefix(o.Key, journalPrefix(1)) {
			t.Fatalf("leftover object %s", o.Key)
		}
	}
}

// sameShape compares two manifests without the bytes of rewritten files:
// states, subtask ranges, untouched files (same keys, sizes, CRCs) and the
// number of entries per column family.
func sameShape(a, b *checkpoint.Manifest) bool {
	if !reflect.DeepEqual(a.States, b.States) || len(a.Subtasks) != len(b.Subtasks) {
		return false
	}
	for i := range a.Subtasks {
		sa, sb := a.Subtasks[i], b.Subtasks[i]
		if sa.Index != sb.Index || sa.StartKeyGroup != sb.StartKeyGroup || sa.EndKeyGroup != sb.EndKeyGroup || sa.BackendID != sb.BackendID {
			return false
		}
		entries := func(s checkpoint.Subtask) map[string]uint64 {
			m := map[string]uint64{}
			for _, f := range s.Shared {
				m[f.ColumnFamily] += f.Entries
				if !f.Uploaded {
					m[f.Key+"/"+fmt.Sprint(f.Size, f.CRC)]++
				}
			}
			return m
		}
		if !reflect.DeepEqual(entries(sa), entries(sb)) {
			return false
		}
	}
	return true
}
