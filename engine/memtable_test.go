package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// memtableDB is one DB opened with the engine's column family options, the
// finger memtable or RocksDB's skip list.
type memtableDB struct {
	db   *grocksdb.DB
	opts *grocksdb.Options
	wo   *grocksdb.WriteOptions
}

func openMemtableDB(t *testing.T, dir string, skipList bool, writeBuffer int64) *memtableDB {
	t.Helper()
	opts, err := columnFamilyOptions(RocksOptions{WriteBufferSize: writeBuffer, MaxWriteBufferNumber: 4, SkipListMemTable: skipList}, KindValue, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.SetArenaBlockSize(96 << 10)
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		opts.Destroy()
		t.Fatal(err)
	}
	wo := grocksdb.NewDefaultWriteOptions()
	wo.DisableWAL(true)
	m := &memtableDB{db: db, opts: opts, wo: wo}
	t.Cleanup(func() {
		m.db.Close()
		m.opts.Destroy()
		m.wo.Destroy()
	})
	return m
}

func TestFingerMemtableOptions(t *testing.T) {
	finger, err := columnFamilyOptions(RocksOptions{WriteBufferSize: 64 << 20}, KindValue, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer finger.Destroy()
	skip, err := columnFamilyOptions(RocksOptions{WriteBufferSize: 64 << 20, SkipListMemTable: true}, KindValue, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer skip.Destroy()
	if !usesFingerMemtable(finger) || usesFingerMemtable(skip) {
		t.Fatalf("finger memtable set: default %v, SkipListMemTable %v", usesFingerMemtable(finger), usesFingerMemtable(skip))
	}
	// The memtable reaches RocksDB's arena through a declaration of its
	// allocator interface: the block size read through it must be the one
	// configured.
	m := openMemtableDB(t, t.TempDir(), false, 64<<20)
	if err := m.db.Put(m.wo, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := fingerBlockSize(); got != 96<<10 {
		t.Fatalf("arena block size seen by the finger memtable = %d, want %d", got, 96<<10)
	}
}

// TestFingerMemtableMatchesSkipList applies the same random writes (batches
// sorted and unsorted, puts and deletes, snapshots taken and released) to a
// DB on the finger memtable and one on RocksDB's skip list, and compares
// every read: point reads at each snapshot, full scans both ways, and seeks
// (Seek, SeekForPrev) followed by steps in both directions. The small write
// buffer variant flushes as it goes, so immutable memtables, flush
// iterators and SST reads are in the comparison too.
func TestFingerMemtableMatchesSkipList(t *testing.T) {
	for _, wb := range []int64{64 << 20, 64 << 10} {
		t.Run(fmt.Sprintf("writebuffer=%d", wb), func(t *testing.T) {
			dir := t.TempDir()
			dbs := []*memtableDB{
				openMemtableDB(t, filepath.Join(dir, "finger"), false, wb),
				openMemtableDB(t, filepath.Join(dir, "skiplist"), true, wb),
			}
			ins0 := fingerInserts()
			rng := rand.New(rand.NewPCG(11, uint64(wb)))
			keys := make([][]byte, 3000)
			for i := range keys {
				// Short keys that are often prefixes of one another.
				k := make([]byte, 1+rng.IntN(12))
				for j := range k {
					k[j] = byte('a' + rng.IntN(3))
				}
				keys[i] = k
			}
			type snap struct{ s [2]*grocksdb.Snapshot }
			var snaps []snap
			defer func() {
				for _, s := range snaps {
					dbs[0].db.ReleaseSnapshot(s.s[0])
					dbs[1].db.ReleaseSnapshot(s.s[1])
				}
			}()
			for round := 0; round < 600; round++ {
				n := 1 + rng.IntN(60)
				ops := make([]int, n)
				for i := range ops {
					ops[i] = rng.IntN(len(keys))
				}
				if rng.IntN(2) == 0 {
					slices.SortFunc(ops, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
				}
				val := binary.BigEndian.AppendUint32(nil, uint32(round))
				for _, d := range dbs {
					wb := grocksdb.NewWriteBatch()
					for i, k := range ops {
						if (k+i+round)%5 == 0 {
							wb.Delete(keys[k])
						} else {
							wb.Put(keys[k], append(val, keys[k]...))
						}
					}
					if err := d.db.Write(d.wo, wb); err != nil {
						t.Fatal(err)
					}
					wb.Destroy()
				}
				switch r := rng.IntN(20); {
				case r == 0 && len(snaps) < 6:
					snaps = append(snaps, snap{[2]*grocksdb.Snapshot{dbs[0].db.NewSnapshot(), dbs[1].db.NewSnapshot()}})
				case r == 1 && len(snaps) > 0:
					i := rng.IntN(len(snaps))
					dbs[0].db.ReleaseSnapshot(snaps[i].s[0])
					dbs[1].db.ReleaseSnapshot(snaps[i].s[1])
					snaps = slices.Delete(snaps, i, i+1)
				}
			}
			views := []func(i int) *grocksdb.ReadOptions{func(int) *grocksdb.ReadOptions { return grocksdb.NewDefaultReadOptions() }}
			for _, s := range snaps {
				views = append(views, func(i int) *grocksdb.ReadOptions {
					ro := grocksdb.NewDefaultReadOptions()
					ro.SetSnapshot(s.s[i])
					return ro
				})
			}
			for v, view := range views {
				ro := [2]*grocksdb.ReadOptions{view(0), view(1)}
				compareMemtableReads(t, fmt.Sprintf("view %d", v), dbs, ro, keys, rng)
				ro[0].Destroy()
				ro[1].Destroy()
			}
			if ins1 := fingerInserts(); wb < 1<<20 && ins1 == ins0 {
				t.Fatal("no finger memtable was freed after flushes")
			}
		})
	}
}

func compareMemtableReads(t *testing.T, view string, dbs []*memtableDB, ro [2]*grocksdb.ReadOptions, keys [][]byte, rng *rand.Rand) {
	t.Helper()
	for i := 0; i < 400; i++ {
		k := keys[rng.IntN(len(keys))]
		var got [2]string
		for j, d := range dbs {
			v, err := d.db.GetBytes(ro[j], k)
			if err != nil {
				t.Fatal(err)
			}
			got[j] = fmt.Sprintf("%q", v)
		}
		if got[0] != got[1] {
			t.Fatalf("%s: get %q: finger %s, skip list %s", view, k, got[0], got[1])
		}
	}
	its := [2]*grocksdb.Iterator{dbs[0].db.NewIterator(ro[0]), dbs[1].db.NewIterator(ro[1])}
	defer its[0].Close()
	defer its[1].Close()
	at := func(it *grocksdb.Iterator) string {
		if !it.Valid() {
			return "<end>"
		}
		return string(it.Key().Data()) + "=" + string(it.Value().Data())
	}
	scan := func(it *grocksdb.Iterator, forward bool) []string {
		var out []string
		if forward {
			for it.SeekToFirst(); it.Valid(); it.Next() {
				out = append(out, at(it))
			}
		} else {
			for it.SeekToLast(); it.Valid(); it.Prev() {
				out = append(out, at(it))
			}
		}
		return out
	}
	for _, forward := range []bool{true, false} {
		a, b := scan(its[0], forward), scan(its[1], forward)
		if !slices.Equal(a, b) {
			t.Fatalf("%s: scan (forward %v): finger %d entries, skip list %d", view, forward, len(a), len(b))
		}
	}
	for i := 0; i < 300; i++ {
		target := keys[rng.IntN(len(keys))]
		if rng.IntN(3) == 0 {
			target = append(slices.Clone(target), 'b')
		}
		forPrev := rng.IntN(2) == 0
		var trail [2][]string
		for j, it := range its {
			if forPrev {
				it.SeekForPrev(target)
			} else {
				it.Seek(target)
			}
			trail[j] = append(trail[j], at(it))
			for s := 0; s < 6 && it.Valid(); s++ {
				if (s+i)%3 == 0 {
					it.Prev()
				} else {
					it.Next()
				}
				trail[j] = append(trail[j], at(it))
			}
		}
		if !slices.Equal(trail[0], trail[1]) {
			t.Fatalf("%s: seek %q (for prev %v): finger %q, skip list %q", view, target, forPrev, trail[0], trail[1])
		}
	}
}

// TestFingerMemtableConcurrentReaders reads while one writer inserts: every
// key of a batch whose write returned must be found, and scans must stay in
// strictly increasing order (no half-linked node is ever visible).
func TestFingerMemtableConcurrentReaders(t *testing.T) {
	m := openMemtableDB(t, t.TempDir(), false, 64<<20)
	const batches, per = 300, 200
	key := func(b, i int) []byte {
		// Interleaved: batch b's keys land between earlier batches' keys.
		return binary.BigEndian.AppendUint32(nil, uint32(i*batches+b))
	}
	var done atomic.Int64
	done.Store(-1)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			ro := grocksdb.NewDefaultReadOptions()
			defer ro.Destroy()
			rng := rand.New(rand.NewPCG(uint64(r), 5))
			for iter := 0; ; iter++ {
				last := done.Load()
				if last >= 0 {
					b := rng.IntN(int(last) + 1)
					k := key(b, rng.IntN(per))
					v, err := m.db.GetBytes(ro, k)
					if err != nil || v == nil {
						errs <- fmt.Errorf("key %x of written batch %d not found (err %v)", k, b, err)
						return
					}
				}
				if iter%20 == 0 {
					it := m.db.NewIterator(ro)
					var prev []byte
					n := 0
					for it.SeekToFirst(); it.Valid(); it.Next() {
						k := slices.Clone(it.Key().Data())
						if prev != nil && bytes.Compare(prev, k) >= 0 {
							it.Close()
							errs <- fmt.Errorf("scan out of order: %x after %x", k, prev)
							return
						}
						prev = k
						n++
					}
					it.Close()
					if n < int(last+1)*per {
						errs <- fmt.Errorf("scan saw %d keys, %d batches written", n, last+1)
						return
					}
				}
				if last == batches-1 {
					return
				}
			}
		}(r)
	}
	for b := 0; b < batches; b++ {
		wb := grocksdb.NewWriteBatch()
		for i := 0; i < per; i++ {
			wb.Put(key(b, i), []byte("v"))
		}
		if err := m.db.Write(m.wo, wb); err != nil {
			t.Fatal(err)
		}
		wb.Destroy()
		done.Store(int64(b))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// BenchmarkMemtableInsert writes batches of 5,000 random keys into a
// memtable already holding 200,000, on the finger memtable and on RocksDB's
// skip list, sorted (as a bundle commit writes them) and unsorted (as
// single-key writes arrive).
func BenchmarkMemtableInsert(b *testing.B) {
	const setup, batch = 200_000, 5_000
	key := func(k int) []byte { return binary.BigEndian.AppendUint64([]byte{byte(k % 128)}, uint64(k)) }
	for _, skipList := range []bool{false, true} {
		for _, sorted := range []bool{true, false} {
			name := fmt.Sprintf("finger/sorted=%v", sorted)
			if skipList {
				name = fmt.Sprintf("skiplist/sorted=%v", sorted)
			}
			b.Run(name, func(b *testing.B) {
				opts, err := columnFamilyOptions(RocksOptions{WriteBufferSize: 256 << 20, SkipListMemTable: skipList}, KindValue, 0, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer opts.Destroy()
				db, err := grocksdb.OpenDb(opts, b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				wo := grocksdb.NewDefaultWriteOptions()
				wo.DisableWAL(true)
				defer wo.Destroy()
				wb := grocksdb.NewWriteBatch()
				defer wb.Destroy()
				for lo := 0; lo < setup; lo += batch {
					wb.Clear()
					for k := lo; k < lo+batch; k++ {
						wb.Put(key(k), []byte("12345678"))
					}
					if err := db.Write(wo, wb); err != nil {
						b.Fatal(err)
					}
				}
				rng := rand.New(rand.NewPCG(1, 2))
				keys := make([][]byte, batch)
				b.ResetTimer()
				for n := 0; n < b.N; n += batch {
					b.StopTimer()
					for i := range keys {
						keys[i] = key(rng.IntN(setup))
					}
					if sorted {
						slices.SortFunc(keys, bytes.Compare)
					}
					wb.Clear()
					for _, k := range keys {
						wb.Put(k, []byte("87654321"))
					}
					b.StartTimer()
					if err := db.Write(wo, wb); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
