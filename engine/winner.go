package engine

import (
	"container/list"
)

// WinnerCache keeps decoded Top-1 winners of one state across bundles for
// the append-only Top-1 path. It holds clean values only (each equals what
// the backend stores: entries are admitted after their write has been
// committed), is bounded by a reservation on the slot's pool, and eviction
// never writes. Keys created by the bundle that admits them bypass
// admission: a fresh unique key enters only when it is seen again. A
// WinnerCache is not safe for concurrent use.
type WinnerCache struct {
	res     *Reservation
	pool    *Pool
	limit   int64
	lru     *list.List
	items   map[string]*list.Element
	hits    int64
	misses  int64
	evicted int64
}

type winner struct {
	key  string
	val  []byte
	ts   int64
	size int64
}

const winnerOverhead = 96

// NewWinnerCache returns a cache using at most limit bytes of pool (fewer
// when the pool cannot provide them; the cache then simply holds less).
func NewWinnerCache(pool *Pool, limit int64) *WinnerCache {
	res, _ := pool.Reserve(0)
	return &WinnerCache{res: res, pool: pool, limit: limit, lru: list.New(), items: map[string]*list.Element{}}
}

// Len is the number of cached winners.
func (c *WinnerCache) Len() int { return len(c.items) }

// Bytes is the memory the cache has reserved.
func (c *WinnerCache) Bytes() int64 { return c.res.Size() }

// Stats returns hits, misses and evictions.
func (c *WinnerCache) Stats() (hits, misses, evicted int64) { return c.hits, c.misses, c.evicted }

func (c *WinnerCache) get(key []byte) (*winner, bool) {
	el, ok := c.items[string(key)]
	if !ok {
		c.misses++
		return nil, false
	}
	c.hits++
	c.lru.MoveToFront(el)
	return el.Value.(*winner), true
}

func (c *WinnerCache) remove(key string) {
	if el, ok := c.items[key]; ok {
		w := el.Value.(*winner)
		c.lru.Remove(el)
		delete(c.items, key)
		c.res.Shrink(w.size)
	}
}

func (c *WinnerCache) evictOne() bool {
	el := c.lru.Back()
	if el == nil {
		return false
	}
	c.remove(el.Value.(*winner).key)
	c.evicted++
	return true
}

// admit stores a clean value; it gives up (caching nothing) when the value
// cannot fit in the cache's bound even after evicting everything else.
func (c *WinnerCache) admit(key string, val []byte, ts int64) {
	c.remove(key)
	size := int64(len(key)+len(val)) + winnerOverhead
	if size > c.limit {
		return
	}
	for c.res.Size()+size > c.limit || !c.res.Grow(size) {
		if !c.evictOne() {
			return // the pool itself is short: go without
		}
	}
	w := &winner{key: key, val: append([]byte(nil), val...), ts: ts, size: size}
	c.items[key] = c.lru.PushFront(w)
}

// Release drops every winner and returns the reservation.
func (c *WinnerCache) Release() {
	c.lru.Init()
	clear(c.items)
	c.res.Release()
	c.res, _ = c.pool.Reserve(0)
}
