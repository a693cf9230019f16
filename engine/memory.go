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
