package engine

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Flink's defaults for state.backend.rocksdb.memory.*.
const (
	DefaultWriteBufferRatio  = 0.5
	DefaultHighPrioPoolRatio = 0.1
	arenaAlign               = 4 << 10
)

// SlotConfig sizes the native memory of one task slot.
type SlotConfig struct {
	// ManagedMemory is M, the slot's managed memory in bytes for RocksDB.
	ManagedMemory int64
	// WriteBufferRatio is r (state.backend.rocksdb.memory.write-buffer-ratio);
	// zero means 0.5.
	WriteBufferRatio float64
	// HighPrioPoolRatio (state.backend.rocksdb.memory.high-prio-pool-ratio);
	// zero means 0.1.
	HighPrioPoolRatio float64
	// PoolBytes is the capacity of the slot's reservation pool for Go-side
	// caches; zero means ManagedMemory/4.
	PoolBytes int64
}

// CacheCapacity is Flink's block-cache capacity, (3 - r)·M/3.
func CacheCapacity(m int64, r float64) int64 { return int64((3 - r) * float64(m) / 3) }

// WriteBufferManagerCapacity is Flink's write-buffer-manager capacity,
// 2·M·r/3.
func WriteBufferManagerCapacity(m int64, r float64) int64 { return int64(2 * float64(m) * r / 3) }

// ArenaBlockSize is one eighth of the smaller of the configured write
// buffer and the shared write-buffer capacity, rounded up to 4 KiB, so an
// oversized configured buffer cannot crowd out a small slot's cache.
func ArenaBlockSize(writeBuffer, wbmCapacity int64) int64 {
	m := writeBuffer
	if wbmCapacity > 0 && wbmCapacity < m {
		m = wbmCapacity
	}
	a := m / 8
	if a < arenaAlign {
		return arenaAlign
	}
	return (a + arenaAlign - 1) / arenaAlign * arenaAlign
}

// minWriteBufferShare is the smallest per-family write buffer a slot's
// share hands out (RocksDB's own floor for write_buffer_size is 64 KiB).
const minWriteBufferShare = 64 << 10

// WriteBufferShare is each column family's share of a slot's shared
// write-buffer capacity when families state column families are open in
// the slot: capacity / families rounded down to a power of two, at least
// 64 KiB. A family's write buffer is the smaller of its configured size and
// this share, and its arena block one eighth of that (ArenaBlockSize): the
// active memtables of all families then fit the shared capacity, and the
// one arena block every non-empty memtable holds totals at most
// capacity/8 however many operators share the slot. The power-of-two steps
// keep resizing rare: open instances are resized only when the share halves.
func WriteBufferShare(wbmCapacity int64, families int) int64 {
	if families < 1 {
		families = 1
	}
	sh := wbmCapacity / int64(families)
	if sh <= minWriteBufferShare {
		return minWriteBufferShare
	}
	p := int64(minWriteBufferShare)
	for p*2 <= sh {
		p *= 2
	}
	return p
}

// slotMember is one RocksDB instance using the slot: its state families
// (the default family holds no data and is not counted) and the write
// buffer it was configured with.
type slotMember struct {
	db         *C.rocksdb_t
	cfs        []*C.rocksdb_column_family_handle_t
	configured int64
	applied    int64
	// retire is set when the share shrank: the active memtables were
	// created with a larger arena block, and the member flushes them after
	// its next write so that its memtables follow the new share.
	retire atomic.Bool
}

// SlotMemory is the native memory shared by every RocksDB instance of one
// slot: one LRU block cache (with a high-priority pool for index and filter
// blocks) and one write-buffer manager whose memtables are charged to that
// cache; plus a reservation pool for Go-side caches. Total native memory is
// bounded by the cache capacity whatever the number of operators.
type SlotMemory struct {
	cfg       SlotConfig
	mu        sync.Mutex
	native    *C.sfs_slot_memory_t
	cacheCap  int64
	wbmCap    int64
	pool      *Pool
	users     int
	closeWant bool
	families  int                  // state column families of the open members
	members   map[*slotMember]bool // joined instances
}

// NewSlotMemory creates a slot's shared cache, write-buffer manager and pool.
func NewSlotMemory(cfg SlotConfig) (*SlotMemory, error) {
	if cfg.ManagedMemory <= 0 {
		return nil, fmt.Errorf("engine: managed memory %d must be positive", cfg.ManagedMemory)
	}
	if cfg.WriteBufferRatio == 0 {
		cfg.WriteBufferRatio = DefaultWriteBufferRatio
	}
	if cfg.HighPrioPoolRatio == 0 {
		cfg.HighPrioPoolRatio = DefaultHighPrioPoolRatio
	}
	if cfg.WriteBufferRatio <= 0 || cfg.WriteBufferRatio >= 1 {
		return nil, fmt.Errorf("engine: write-buffer ratio %v out of (0, 1)", cfg.WriteBufferRatio)
	}
	if cfg.HighPrioPoolRatio < 0 || cfg.HighPrioPoolRatio >= 1 {
		return nil, fmt.Errorf("engine: high-priority pool ratio %v out of [0, 1)", cfg.HighPrioPoolRatio)
	}
	if cfg.PoolBytes == 0 {
		cfg.PoolBytes = cfg.ManagedMemory / 4
	}
	s := &SlotMemory{
		cfg:      cfg,
		cacheCap: CacheCapacity(cfg.ManagedMemory, cfg.WriteBufferRatio),
		wbmCap:   WriteBufferManagerCapacity(cfg.ManagedMemory, cfg.WriteBufferRatio),
		pool:     NewPool(cfg.PoolBytes),
	}
	s.native = C.sfs_slot_memory_new(C.size_t(s.cacheCap), C.double(cfg.HighPrioPoolRatio), C.size_t(s.wbmCap))
	if s.native == nil {
		return nil, errors.New("engine: cannot create the slot's block cache")
	}
	return s, nil
}

// Config returns the configuration with defaults applied.
func (s *SlotMemory) Config() SlotConfig { return s.cfg }

// CacheCapacity is the shared block cache's capacity in bytes.
func (s *SlotMemory) CacheCapacity() int64 { return s.cacheCap }

// WriteBufferCapacity is the shared write-buffer manager's capacity.
func (s *SlotMemory) WriteBufferCapacity() int64 { return s.wbmCap }

// Pool is the slot's reservation pool.
func (s *SlotMemory) Pool() *Pool { return s.pool }

// CacheUsage is the bytes charged to the shared cache, memtables included.
func (s *SlotMemory) CacheUsage() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.native == nil {
		return 0
	}
	return int64(C.sfs_slot_memory_cache_usage(s.native))
}

// CachePinnedUsage is the bytes of cache entries currently pinned.
func (s *SlotMemory) CachePinnedUsage() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.native == nil {
		return 0
	}
	return int64(C.sfs_slot_memory_cache_pinned_usage(s.native))
}

// WriteBufferUsage is the memtable memory the write-buffer manager tracks.
func (s *SlotMemory) WriteBufferUsage() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.native == nil {
		return 0
	}
	return int64(C.sfs_slot_memory_wbm_usage(s.native))
}

func (s *SlotMemory) acquire() (*C.sfs_slot_memory_t, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.native == nil || s.closeWant {
		return nil, errors.New("engine: slot memory closed")
	}
	s.users++
	return s.native, nil
}

func (s *SlotMemory) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users--
	if s.users == 0 && s.closeWant && s.native != nil {
		C.sfs_slot_memory_free(s.native)
		s.native = nil
	}
}

// join counts m's families into the slot and returns m's write buffer
// under the new share; the other members are resized when m registers
// (its DB open) or leaves.
func (s *SlotMemory) join(m *slotMember, families int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members == nil {
		s.members = map[*slotMember]bool{}
	}
	s.families += families
	s.members[m] = true
	m.applied = min(m.configured, WriteBufferShare(s.wbmCap, s.families))
	return m.applied
}

// register records m's open DB and resizes every member to the current
// share.
func (s *SlotMemory) register(m *slotMember, db *C.rocksdb_t, cfs []*C.rocksdb_column_family_handle_t) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m.db, m.cfs = db, cfs
	return s.rebalanceLocked()
}

// leave removes m (before its DB closes). The others keep their current
// write buffers (shrinking is what bounds memory; growing them back would
// cost an options rewrite per family); instances opened later get the
// larger share.
func (s *SlotMemory) leave(m *slotMember, families int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.members[m] {
		return
	}
	delete(s.members, m)
	s.families -= families
	m.db, m.cfs = nil, nil
}

// rebalanceLocked shrinks every member's write buffers to the current
// share (RocksDB's SetOptions: from each family's next memtable on; the
// member retires its current memtables after its next write).
func (s *SlotMemory) rebalanceLocked() error {
	share := WriteBufferShare(s.wbmCap, s.families)
	var first error
	for m := range s.members {
		if m.db == nil || len(m.cfs) == 0 {
			continue
		}
		wb := min(m.configured, share)
		if wb >= m.applied {
			continue
		}
		arena := ArenaBlockSize(wb, s.wbmCap)
		if err := cError(C.sfs_set_write_buffer(m.db, &m.cfs[0], C.size_t(len(m.cfs)), C.size_t(wb), C.size_t(arena))); err != nil {
			if first == nil {
				first = fmt.Errorf("engine: resizing write buffers to %d: %w", wb, err)
			}
			continue
		}
		m.retire.Store(true)
		m.applied = wb
	}
	return first
}

// StateFamilies is the number of state column families of the RocksDB
// instances open in the slot.
func (s *SlotMemory) StateFamilies() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.families
}

// WriteBufferShare is the per-family write buffer for the families open now
// (see the package function).
func (s *SlotMemory) WriteBufferShare() int64 {
	return WriteBufferShare(s.wbmCap, s.StateFamilies())
}

// Close frees the native cache and write-buffer manager once the last
// backend using them has closed.
func (s *SlotMemory) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeWant = true
	if s.users == 0 && s.native != nil {
		C.sfs_slot_memory_free(s.native)
		s.native = nil
	}
}

// Pool hands out byte reservations against a fixed capacity. A reservation
// that cannot be had is a normal outcome: the caller goes without (evicts,
// falls back to a lazy path), never blocks.
type Pool struct {
	capacity int64
	used     atomic.Int64
	peak     atomic.Int64
}

// NewPool returns a pool of capacity bytes.
func NewPool(capacity int64) *Pool {
	if capacity < 0 {
		capacity = 0
	}
	return &Pool{capacity: capacity}
}

// Capacity is the pool's size in bytes.
func (p *Pool) Capacity() int64 { return p.capacity }

// Used is the bytes currently reserved.
func (p *Pool) Used() int64 { return p.used.Load() }

// Peak is the highest Used seen.
func (p *Pool) Peak() int64 { return p.peak.Load() }

func (p *Pool) take(n int64) bool {
	for {
		u := p.used.Load()
		if n > p.capacity-u {
			return false
		}
		if p.used.CompareAndSwap(u, u+n) {
			for {
				pk := p.peak.Load()
				if u+n <= pk || p.peak.CompareAndSwap(pk, u+n) {
					return true
				}
			}
		}
	}
}

// Reserve takes n bytes. ok is false (and the reservation nil) when the pool
// cannot hold them.
func (p *Pool) Reserve(n int64) (*Reservation, bool) {
	if n < 0 || !p.take(n) {
		return nil, false
	}
	return &Reservation{pool: p, n: n}, true
}

// Reservation is a claim on pool bytes. It is not safe for concurrent use.
type Reservation struct {
	pool *Pool
	n    int64
}

// Size is the bytes currently held.
func (r *Reservation) Size() int64 {
	if r == nil {
		return 0
	}
	return r.n
}

// Grow adds n bytes to the reservation; false (and no change) when the pool
// cannot hold them.
func (r *Reservation) Grow(n int64) bool {
	if r == nil || r.pool == nil || n < 0 {
		return false
	}
	if !r.pool.take(n) {
		return false
	}
	r.n += n
	return true
}

// Shrink returns n bytes (at most what is held) to the pool.
func (r *Reservation) Shrink(n int64) {
	if r == nil || r.pool == nil || n <= 0 {
		return
	}
	if n > r.n {
		n = r.n
	}
	r.n -= n
	r.pool.used.Add(-n)
}

// Release returns everything; the reservation is then empty and released
// again is a no-op.
func (r *Reservation) Release() {
	if r == nil || r.pool == nil {
		return
	}
	r.pool.used.Add(-r.n)
	r.n = 0
	r.pool = nil
}
