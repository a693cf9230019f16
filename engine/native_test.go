package engine

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
)

func TestTTLCompactionFilterDropsExpired(t *testing.T) {
	clock := NewManualClock(5_000_000)
	be, err := OpenRocksDB(filepath.Join(t.TempDir(), "db"), smallLayout, testStates, RocksOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	op := NewOperator(be, clock)
	s := mustState(t, op, "vttl") // 10 s
	keep := mustState(t, op, "v") // no TTL
	b := op.NewBundle()
	defer b.Close()
	begin(t, b)
	for i := 0; i < 100; i++ {
		_ = b.Put(s, s.Key(nil, i%128, []byte(fmt.Sprint(i)), nil), []byte("old"))
		_ = b.Put(keep, keep.Key(nil, i%128, []byte(fmt.Sprint(i)), nil), []byte("old"))
	}
	commit(t, b)
	clock.Advance(6 * time.Second)
	begin(t, b)
	for i := 0; i < 30; i++ {
		_ = b.Put(s, s.Key(nil, i%128, []byte(fmt.Sprint(i)), nil), []byte("new"))
	}
	commit(t, b)
	if err := be.Flush(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second) // first 70 keys now expired, 30 live
	raw := func(st *State) (n int) {
		if err := be.Scan(st.ID(), nil, nil, func(k, v []byte) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		return
	}
	if n := raw(s); n != 100 {
		t.Fatalf("before compaction %d raw entries, want 100", n)
	}
	before := ttlFilterDropped()
	db, cfs := be.(*rocksBackend).DB()
	for _, cf := range cfs {
		db.CompactRangeCF(cf, grocksdb.Range{})
	}
	if n := raw(s); n != 30 {
		t.Fatalf("after compaction %d raw entries, want 30", n)
	}
	if n := raw(keep); n != 100 {
		t.Fatalf("state without TTL lost entries: %d", n)
	}
	if d := ttlFilterDropped() - before; d != 70 {
		t.Fatalf("filter dropped %d, want 70", d)
	}
}

func TestSlotOptionsApplied(t *testing.T) {
	slot, err := NewSlotMemory(SlotConfig{ManagedMemory: 48 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Close()
	if got, want := slot.CacheCapacity(), int64(40<<20); got != want {
		t.Fatalf("cache capacity %d want %d", got, want)
	}
	if got, want := slot.WriteBufferCapacity(), int64(16<<20); got != want {
		t.Fatalf("wbm capacity %d want %d", got, want)
	}
	o := RocksOptions{Slot: slot, WriteBufferSize: 64 << 20}
	o.defaults()
	opts, err := columnFamilyOptions(o, 0, 0, slot.native, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	uses, arena, wbs := optionsUseSlot(opts, slot)
	if !uses {
		t.Fatal("options do not use the slot's cache and write-buffer manager")
	}
	// 1/8 of min(64 MiB, 16 MiB) = 2 MiB
	if got := arena; got != 2<<20 {
		t.Fatalf("arena block size %d", got)
	}
	if got := wbs; got != 64<<20 {
		t.Fatalf("write buffer size read through the shim: %d", got)
	}
	if opts.GetArenaBlockSize() != 2<<20 {
		t.Fatal("grocksdb disagrees with the shim on arena block size")
	}
}

func TestMemoryFormulas(t *testing.T) {
	m := int64(300 << 20)
	if CacheCapacity(m, 0.5) != 250<<20 || WriteBufferManagerCapacity(m, 0.5) != 100<<20 {
		t.Fatal("split formulas")
	}
	if a := ArenaBlockSize(64<<20, 100<<20); a != 8<<20 {
		t.Fatalf("arena %d", a)
	}
	if a := ArenaBlockSize(64<<20, 1000<<10); a != 131072 { // 128000 rounded up to 4 KiB
		t.Fatalf("arena aligned %d", a)
	}
	if a := ArenaBlockSize(1024, 0); a != 4096 {
		t.Fatalf("arena floor %d", a)
	}
}

func TestPoolReservations(t *testing.T) {
	p := NewPool(100)
	r1, ok := p.Reserve(60)
	if !ok {
		t.Fatal("reserve 60")
	}
	if _, ok := p.Reserve(41); ok {
		t.Fatal("over-reservation granted")
	}
	r2, ok := p.Reserve(40)
	if !ok || p.Used() != 100 {
		t.Fatal("exact fill refused")
	}
	if r2.Grow(1) {
		t.Fatal("grow past capacity")
	}
	r1.Shrink(10)
	if !r2.Grow(10) || r2.Size() != 50 {
		t.Fatal("grow after shrink")
	}
	r1.Release()
	r1.Release()
	r2.Release()
	if p.Used() != 0 || p.Peak() != 100 {
		t.Fatalf("used %d peak %d", p.Used(), p.Peak())
	}
	if _, ok := p.Reserve(-1); ok {
		t.Fatal("negative reservation")
	}
}

// TestNativeMemoryBoundedByOperatorCount writes the same volume through 1,
// 4 and 16 operators sharing one slot and checks that native memory stays
// within the slot's budget whatever the operator count. Every memtable that
// holds data owns at least one arena block, so the budget can only hold when
// (column families with data) x (arena block) fits the shared write-buffer
// capacity: the test configures 2 MiB write buffers (256 KiB arena blocks,
// 32 families = 8 MiB of floor) against an 8 MiB shared capacity.
func TestNativeMemoryBoundedByOperatorCount(t *testing.T) {
	const managed = 24 << 20
	const total = 12 << 20
	val := make([]byte, 1024)
	for _, n := range []int{1, 4, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			slot, err := NewSlotMemory(SlotConfig{ManagedMemory: managed})
			if err != nil {
				t.Fatal(err)
			}
			defer slot.Close()
			var bes []Backend
			defer func() {
				for _, be := range bes {
					be.Close()
				}
			}()
			states := []StateDesc{{Name: "a", Kind: KindValue}, {Name: "b", Kind: KindMap}}
			for i := 0; i < n; i++ {
				be, err := OpenRocksDB(filepath.Join(t.TempDir(), fmt.Sprint(i)), smallLayout, states, RocksOptions{Slot: slot, WriteBufferSize: 2 << 20})
				if err != nil {
					t.Fatal(err)
				}
				bes = append(bes, be)
			}
			per := total / len(val) / n
			peakCache, peakMem := int64(0), uint64(0)
			for round := 0; round < 4; round++ {
				for i, be := range bes {
					op := NewOperator(be, nil)
					b := op.NewBundle()
					_ = b.Begin(nil)
					for j := round * per / 4; j < (round+1)*per/4; j++ {
						st := op.States()[j%2]
						_ = b.Put(st, st.Key(nil, j%128, []byte(fmt.Sprint(i, j)), nil), val)
					}
					if err := b.Commit(); err != nil {
						t.Fatal(err)
					}
					b.Close()
				}
				var mem, readers uint64
				for _, be := range bes {
					m, ok := Property(be, "rocksdb.cur-size-all-mem-tables")
					if !ok {
						t.Fatal("memtable property unavailable")
					}
					r, _ := be.(*rocksBackend).Property("rocksdb.estimate-table-readers-mem")
					mem += m
					readers += r
				}
				if u := slot.CacheUsage(); u > peakCache {
					peakCache = u
				}
				if mem > peakMem {
					peakMem = mem
				}
				t.Logf("n=%d round %d: cache usage %d, memtables %d, table readers %d, wbm usage %d",
					n, round, slot.CacheUsage(), mem, readers, slot.WriteBufferUsage())
			}
			// Memtables are charged to the shared cache; the cache may exceed
			// its capacity only by what is pinned, never by a per-operator
			// amount.
			limit := slot.CacheCapacity() + slot.CacheCapacity()/8
			if peakCache > limit {
				t.Fatalf("cache usage %d above %d with %d operators", peakCache, limit, n)
			}
			if peakMem > uint64(2*slot.WriteBufferCapacity()) {
				t.Fatalf("memtables %d above twice the shared write-buffer capacity %d with %d operators",
					peakMem, slot.WriteBufferCapacity(), n)
			}
		})
	}
}
