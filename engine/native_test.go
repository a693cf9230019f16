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
	rb := be.(*rocksBackend)
	db, cfs := rb.db, rb.cfs
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

func TestWriteBufferShare(t *testing.T) {
	for _, c := range []struct {
		capacity int64
		families int
		want     int64
	}{
		{16 << 20, 1, 16 << 20}, {16 << 20, 2, 8 << 20}, {16 << 20, 3, 4 << 20}, {16 << 20, 32, 512 << 10},
		{22369621, 32, 512 << 10}, {22369621, 2, 8 << 20}, {1 << 20, 1000, 64 << 10}, {16 << 20, 0, 16 << 20},
	} {
		if got := WriteBufferShare(c.capacity, c.families); got != c.want {
			t.Errorf("WriteBufferShare(%d, %d) = %d, want %d", c.capacity, c.families, got, c.want)
		}
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
// 4 and 16 operators sharing one slot at the default (64 MiB) configured
// write buffer and checks that total native memory — block cache usage
// (memtables are charged to it) plus table readers — stays within the
// slot's managed memory M whatever the operator count. Each family's write
// buffer is its share of the slot's write-buffer capacity and its arena
// block an eighth of that, so the one arena block each non-empty memtable
// holds totals at most capacity/8 (with 64 MiB buffers and 1 MiB arena
// blocks, 32 families would hold 32 MiB > M).
func TestNativeMemoryBoundedByOperatorCount(t *testing.T) {
	const managed = 24 << 20
	const total = 12 << 20
	val := make([]byte, 1024)
	// summed over the instances (the block cache is the slot's: read once)
	props := []string{"rocksdb.cur-size-all-mem-tables", "rocksdb.size-all-mem-tables",
		"rocksdb.estimate-table-readers-mem", "rocksdb.num-immutable-mem-table"}
	peaks := map[int]int64{}
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
				be, err := OpenRocksDB(filepath.Join(t.TempDir(), fmt.Sprint(i)), smallLayout, states, RocksOptions{Slot: slot})
				if err != nil {
					t.Fatal(err)
				}
				bes = append(bes, be)
			}
			if f, want := slot.StateFamilies(), 2*n; f != want {
				t.Fatalf("slot counts %d state families, want %d", f, want)
			}
			share := slot.WriteBufferShare()
			if share > slot.WriteBufferCapacity()/int64(2*n) {
				t.Fatalf("write-buffer share %d above capacity %d / %d families", share, slot.WriteBufferCapacity(), 2*n)
			}
			per := total / len(val) / n
			peakTotal, peakMem := int64(0), uint64(0)
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
				sums := make([]uint64, len(props))
				for _, be := range bes {
					for k, p := range props {
						v, ok := Property(be, p)
						if !ok {
							t.Fatalf("property %s unavailable", p)
						}
						sums[k] += v
					}
				}
				mem, readers := sums[0], int64(sums[2])
				nativeTotal := slot.CacheUsage() + readers
				peakTotal = max(peakTotal, nativeTotal)
				peakMem = max(peakMem, mem)
				line := fmt.Sprintf("n=%d round %d: share %d, arena %d, total native %d (cache usage %d + table readers %d), wbm usage %d;",
					n, round, share, ArenaBlockSize(share, slot.WriteBufferCapacity()), nativeTotal, slot.CacheUsage(), readers, slot.WriteBufferUsage())
				for k, p := range props {
					line += fmt.Sprintf(" %s=%d", p, sums[k])
				}
				line += fmt.Sprintf(" rocksdb.block-cache-usage=%d rocksdb.block-cache-pinned-usage=%d", slot.CacheUsage(), slot.CachePinnedUsage())
				t.Log(line)
			}
			// The stated bound: the slot's managed memory, for any operator
			// count (Flink's promise for state.backend.rocksdb.memory.managed).
			if peakTotal > managed {
				t.Fatalf("total native memory %d above the slot's managed memory %d with %d operators", peakTotal, int64(managed), n)
			}
			if peakMem > uint64(2*slot.WriteBufferCapacity()) {
				t.Fatalf("memtables %d above twice the shared write-buffer capacity %d with %d operators",
					peakMem, slot.WriteBufferCapacity(), n)
			}
			peaks[n] = peakTotal
		})
	}
	t.Logf("peak total native memory by operator count: %v (bound %d)", peaks, int64(managed))
}
