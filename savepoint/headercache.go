package savepoint

import (
	"container/list"
	"sync"

	"github.com/sfstate/sfstate/savepoint/keyed"
)

// Keyed-stream header cache.
//
// Readers open one keyed stream several times: a diff reads the headers to
// plan, walks the entries for key-group digests and walks them again for
// each pass of the comparison; a summary reads the headers before it scans;
// a digest lists the states before it walks. Each open of a stored stream
// asked the store for the object's size (Stat) and read and parsed the
// header from the stream's start (a ranged GET on S3). A Savepoint
// therefore keeps the headers it parsed, with the stream's size: opening a
// cached stream again costs no request until its key groups are read.
//
// Entries are keyed by the stream (store, object key, start and recorded
// size) and by the header end the parse was bounded by (the first
// key-group offset of the handle, which decides how unreadable serializer
// snapshots are stepped over; see keyed.ParseHeaderWithin). Inline streams
// are not cached (their bytes are in the metadata). The cache is scoped to
// one Savepoint value (copies of the value share it) and bounded: the
// estimated memory of the headers held stays below headerCacheBudget, the
// least recently used header is dropped first, and a header larger than
// the budget is not kept. Cached headers are shared by every reader of the
// savepoint and never modified.

// headerCacheBudget bounds the estimated memory of the headers one
// Savepoint keeps (a variable so tests can shrink it).
var headerCacheBudget int64 = 64 << 20

// headerCost estimates the memory of a parsed header from its encoded
// length: the raw bytes it keeps plus the parsed meta infos, serializer
// snapshots and decoders, measured at up to about 6.5 times the encoded
// length on the fixtures' headers.
func headerCost(hdrLen int64) int64 { return 8*hdrLen + 1024 }

// headerKey identifies a parsed keyed-stream header.
type headerKey struct {
	store, key  string
	start, size int64
	// end is the handle's header end (keyedHeaderEnd), 0 when unknown.
	end int64
}

// cachedHeader is one cached header with its stream's size.
type cachedHeader struct {
	k      headerKey
	size   int64
	header *keyed.Header
	hdrLen int64
	cost   int64
}

type headerCache struct {
	mu     sync.Mutex
	budget int64
	used   int64
	lru    list.List // of *cachedHeader, most recent first
	items  map[headerKey]*list.Element
	// hits and misses count look-ups (for tests).
	hits, misses int64
}

// cacheInit guards the lazy creation of Savepoint.hdrs for values not made
// by OpenWith.
var cacheInit sync.Mutex

// headers returns the savepoint's header cache.
func (sp *Savepoint) headers() *headerCache {
	cacheInit.Lock()
	defer cacheInit.Unlock()
	if sp.hdrs == nil {
		sp.hdrs = newHeaderCache(headerCacheBudget)
	}
	return sp.hdrs
}

func newHeaderCache(budget int64) *headerCache {
	return &headerCache{budget: budget, items: map[headerKey]*list.Element{}}
}

func (c *headerCache) get(k headerKey) *cachedHeader {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		c.misses++
		return nil
	}
	c.hits++
	c.lru.MoveToFront(el)
	return el.Value.(*cachedHeader)
}

func (c *headerCache) put(e *cachedHeader) {
	e.cost = headerCost(e.hdrLen)
	if e.cost > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[e.k]; ok {
		// Parsed twice at once (parallel walks): keep the first.
		c.lru.MoveToFront(el)
		return
	}
	for c.used+e.cost > c.budget {
		old := c.lru.Back()
		o := old.Value.(*cachedHeader)
		c.lru.Remove(old)
		delete(c.items, o.k)
		c.used -= o.cost
	}
	c.items[e.k] = c.lru.PushFront(e)
	c.used += e.cost
}

// held returns the number of headers held and their estimated memory.
func (c *headerCache) held() (n int, used int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items), c.used
}

// counts returns the look-ups that found a header and those that did not.
func (c *headerCache) counts() (hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}
