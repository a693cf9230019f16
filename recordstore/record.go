//go:build cgo

package recordstore

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/sfstate/sfstate/engine"
)

// cacheEntryOverhead is what one cached row costs beyond its key bytes
// (slice header, counts, timestamp), charged to the pool with the bytes.
const cacheEntryOverhead = 48

// recordState is the record layout: one stored entry per distinct row (see
// AppendRecordKey, AppendRecordValue).
type recordState struct {
	common
	work     map[string]*rec // record key -> the bundle's view of it
	groups   map[string]*grp // group prefix -> the bundle's view of the group
	dirty    []*rec          // records to write at Commit
	res      *engine.Reservation
	cached   int64 // bytes of cache currently charged
	keys     [][]byte
	pending  []*rec
	visitGen uint64
	recs     []rec  // slab of the bundle's records
	grps     []grp  // slab of the bundle's groups
	karena   []byte // the bundle's record keys
	gp       []byte
}

// grp is what a bundle knows of one group (join key and side).
type grp struct {
	fresh    []*rec // work records absent from the store
	override int32  // work records present in the store, or blind
	left     int32  // visits the bundle's probes still make
	planned  bool   // the probes visit the group
	cache    *cgroup
}

type rec struct {
	key          []byte
	prefixLen    int
	count, assoc int64
	ts           int64
	stored       bool // an entry exists in the store (maybe expired)
	live         bool // ... and it is not expired: store scans visit it
	dirty        bool
	// blind: a row of a unique-row side, never read: an insert writes
	// count 1, a retraction deletes. Until written it does not overlay
	// the store; once written, store scans mark it seen so it is not
	// visited twice.
	blind bool
	seen  uint64
}

type cgroup struct {
	arena []byte
	ents  []centry
	bytes int64 // charged to the pool
}

type centry struct {
	off, n       int32 // record key in arena
	count, assoc int64
}

func newRecordState(c common) *recordState {
	return &recordState{
		common: c,
		work:   make(map[string]*rec),
		groups: make(map[string]*grp),
	}
}

// group returns the bundle's view of the group of prefix p, adding it.
func (s *recordState) group(p []byte) *grp {
	if g, ok := s.groups[string(p)]; ok {
		return g
	}
	if len(s.grps) == cap(s.grps) {
		s.grps = make([]grp, 0, max(64, 2*cap(s.grps)))
	}
	s.grps = append(s.grps, grp{})
	g := &s.grps[len(s.grps)-1]
	s.groups[string(p)] = g
	return g
}

func (s *recordState) Layout() Layout { return LayoutRecord }

func (s *recordState) newRec(key []byte, prefixLen int) *rec {
	if len(s.recs) == cap(s.recs) {
		s.recs = make([]rec, 0, max(64, 2*cap(s.recs)))
	}
	if cap(s.karena)-len(s.karena) < len(key) {
		s.karena = make([]byte, 0, max(64<<10, len(key)))
	}
	off := len(s.karena)
	s.karena = append(s.karena, key...)
	s.recs = append(s.recs, rec{key: s.karena[off:len(s.karena):len(s.karena)], prefixLen: prefixLen})
	r := &s.recs[len(s.recs)-1]
	s.work[string(r.key)] = r
	return r
}

func (s *recordState) Begin(probes []Probe) error {
	if err := s.begin(); err != nil {
		return err
	}
	s.keys, s.pending = s.keys[:0], s.pending[:0]
	for _, p := range probes {
		s.scratch = s.groupPrefix(s.scratch[:0], p.Side, p.Key)
		pl := len(s.scratch)
		// the join visits the opposite side's group of every probe: count
		// the visits, so that a group visited once is streamed, not cached
		s.scratch[s.width] ^= 1
		og := s.group(s.scratch)
		og.planned = true
		og.left++
		s.scratch[s.width] ^= 1
		s.scratch = append(s.scratch, p.Row...)
		if _, ok := s.work[string(s.scratch)]; ok {
			continue
		}
		r := s.newRec(s.scratch, pl)
		if s.opts.UniqueRows[p.Side&1] {
			// the side's rows are unique: the bundle knows an insert is
			// new, no point read
			r.blind = true
			s.stats.SkippedReads++
			g := s.group(s.scratch[:pl])
			g.override++
			g.fresh = append(g.fresh, r)
			continue
		}
		s.keys = append(s.keys, r.key)
		s.pending = append(s.pending, r)
	}
	return s.load(s.keys, s.pending)
}

// load reads the stored values of recs with one batched lookup and files
// each record as overriding a stored entry or as fresh in its group.
func (s *recordState) load(keys [][]byte, recs []*rec) error {
	if len(keys) == 0 {
		return nil
	}
	s.stats.PointReads += int64(len(keys))
	var derr error
	err := s.kv.be.MultiGet(s.kv.st, keys, func(i int, v []byte, ok bool) {
		r := recs[i]
		if !ok {
			return
		}
		r.stored = true
		ts, c, a, off, err := DecodeRecordValue(v)
		if err != nil {
			if derr == nil {
				derr = fmt.Errorf("recordstore: record %x value offset %d: %w", keys[i], off, err)
			}
			return
		}
		if expired(ts, s.now, s.ttl) {
			s.stats.ExpiredSkips++
			return
		}
		r.count, r.assoc, r.ts, r.live = c, a, ts, true
	})
	if err != nil {
		return err
	}
	for _, r := range recs {
		g := s.group(r.key[:r.prefixLen])
		if r.live {
			g.override++
		} else {
			g.fresh = append(g.fresh, r)
		}
	}
	return derr
}

func (s *recordState) lookup(side Side, key, row []byte) (*rec, error) {
	if !s.active {
		return nil, errNoBundle
	}
	s.scratch = s.groupPrefix(s.scratch[:0], side, key)
	pl := len(s.scratch)
	s.scratch = append(s.scratch, row...)
	if r, ok := s.work[string(s.scratch)]; ok {
		return r, nil
	}
	r := s.newRec(s.scratch, pl)
	return r, s.load([][]byte{r.key}, []*rec{r})
}

func (s *recordState) Count(side Side, key, row []byte) (int64, error) {
	r, err := s.lookup(side, key, row)
	if err != nil {
		return 0, err
	}
	if r.blind && !r.dirty {
		// asked after all: read it (it stays filed as blind, so a
		// later write still overlays the store correctly)
		var c int64
		err := s.kv.be.MultiGet(s.kv.st, [][]byte{r.key}, func(_ int, v []byte, ok bool) {
			if !ok {
				return
			}
			if ts, n, _, _, err := DecodeRecordValue(v); err == nil && !expired(ts, s.now, s.ttl) {
				c = n
			}
		})
		s.stats.PointReads++
		return c, err
	}
	return r.count, nil
}

func (s *recordState) Add(side Side, key, row []byte, delta int64) (int64, error) {
	r, err := s.lookup(side, key, row)
	if err != nil {
		return 0, err
	}
	if r.blind {
		// unique rows: an insert is the only copy, a retraction removes it
		r.count = max(0, min(1, r.count+delta))
		if delta < 0 {
			r.count = 0
		}
		r.ts = s.now
		if !r.dirty {
			r.dirty = true
			s.dirty = append(s.dirty, r)
		}
		return r.count, nil
	}
	if r.count == 0 && delta <= 0 {
		return 0, nil
	}
	r.count += delta
	if r.count < 0 {
		r.count = 0
	}
	r.ts = s.now
	if !r.dirty {
		r.dirty = true
		s.dirty = append(s.dirty, r)
	}
	return r.count, nil
}

// Visit iterates the group from the bundle cache, or from the store
// (caching it when the pool grants the bytes), then the group's records
// created in this bundle.
func (s *recordState) Visit(side Side, key []byte, fn func(row []byte, count int64) error) error {
	if !s.active {
		return errNoBundle
	}
	s.gp = s.groupPrefix(s.gp[:0], side, key)
	p := s.gp
	pl := len(p)
	g := s.groups[string(p)]
	ov := g != nil && g.override > 0
	s.visitGen++
	gen := s.visitGen
	emit := func(k []byte, count int64) error {
		if ov {
			if r, ok := s.work[string(k)]; ok && (!r.blind || r.dirty) {
				count = r.count
				r.seen = gen
			}
		}
		if count <= 0 {
			return nil
		}
		return fn(k[pl:], count)
	}
	// visits still planned after this one: none means the group is not
	// worth caching (or keeping cached); unplanned visits (a caller that
	// did not probe) keep the group cached
	keep := true
	if g != nil && g.planned {
		g.left = max(0, g.left-1)
		keep = g.left > 0
	}
	if g != nil && g.cache != nil {
		cg := g.cache
		s.stats.CacheHits++
		for _, e := range cg.ents {
			if err := emit(cg.arena[e.off:e.off+e.n], e.count); err != nil {
				return err
			}
		}
		if !keep {
			g.cache = nil
			s.unreserve(cg.bytes)
		}
	} else if err := s.scanGroup(p, keep, emit); err != nil {
		return err
	}
	if g == nil {
		return nil
	}
	for _, r := range g.fresh {
		if r.count > 0 && r.seen != gen {
			if err := fn(r.key[pl:], r.count); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanGroup iterates the stored records of prefix p, skipping expired ones
// before anything is copied, and caches them (when cache is set) while
// reservations hold.
func (s *recordState) scanGroup(p []byte, cache bool, emit func(k []byte, count int64) error) error {
	s.stats.GroupScans++
	var cg *cgroup
	var took int64
	if s.opts.Pool != nil {
		if cache {
			cg = &cgroup{}
		} else {
			s.stats.SingleVisits++
		}
	}
	var ferr error
	err := s.kv.prefix(p, func(k, v []byte) bool {
		ts, ok := recordTS(v)
		if ok && expired(ts, s.now, s.ttl) {
			s.stats.ExpiredSkips++
			return true
		}
		_, c, a, off, err := DecodeRecordValue(v)
		if err != nil {
			ferr = fmt.Errorf("recordstore: record %x value offset %d: %w", k, off, err)
			return false
		}
		if cg != nil {
			need := int64(len(k)) + cacheEntryOverhead
			if s.reserve(need) {
				took += need
				cg.ents = append(cg.ents, centry{off: int32(len(cg.arena)), n: int32(len(k)), count: c, assoc: a})
				cg.arena = append(cg.arena, k...)
			} else {
				// give the group up: lazy from here on, bounded chunks
				s.unreserve(took)
				cg, took = nil, 0
				s.stats.LazyVisits++
			}
		}
		if ferr = emit(k, c); ferr != nil {
			return false
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		s.unreserve(took)
		return err
	}
	if cg != nil {
		cg.bytes = took
		s.group(p).cache = cg
	}
	return nil
}

// reserve charges n cache bytes to the pool (within the allowance). When
// the pool refuses, the pressure handler drains pending output and the
// same record is retried once.
func (s *recordState) reserve(n int64) bool {
	if a := s.opts.CacheAllowance; a > 0 && s.cached+n > a {
		return false
	}
	if s.res == nil {
		if r, ok := s.opts.Pool.Reserve(0); ok {
			s.res = r
		} else {
			return false
		}
	}
	if s.res.Grow(n) {
		s.cached += n
		s.stats.CachePeak = max(s.stats.CachePeak, s.cached)
		return true
	}
	if s.pressure == nil {
		return false
	}
	s.stats.PressureCalls++
	if err := s.pressure(); err != nil {
		return false
	}
	if s.res.Grow(n) {
		s.cached += n
		s.stats.CachePeak = max(s.stats.CachePeak, s.cached)
		return true
	}
	return false
}

func (s *recordState) unreserve(n int64) {
	if n > 0 {
		s.res.Shrink(n)
		s.cached -= n
	}
}

func (s *recordState) Commit() error {
	if !s.active {
		return errNoBundle
	}
	b := s.kv.be.NewBatch()
	defer b.Close()
	// in key order: consecutive memtable inserts then share most of their
	// skip-list search path (warm in the CPU cache)
	slices.SortFunc(s.dirty, func(a, b *rec) int { return bytes.Compare(a.key, b.key) })
	for _, r := range s.dirty {
		if r.count > 0 {
			s.scratch = AppendRecordValue(s.scratch[:0], r.ts, r.count, r.assoc)
			b.Put(s.kv.st, r.key, s.scratch)
		} else if r.stored || r.blind {
			b.Delete(s.kv.st, r.key)
		}
	}
	s.stats.Writes += int64(b.Len())
	var err error
	if b.Len() > 0 {
		err = b.Commit()
	}
	s.end()
	return err
}

func (s *recordState) Abort() { s.end() }

// end releases the bundle: cache reservations go back to the pool.
func (s *recordState) end() {
	clear(s.work)
	clear(s.groups)
	s.dirty = s.dirty[:0]
	// the slabs are reused: nothing refers to their entries any more
	clear(s.recs)
	clear(s.grps)
	s.recs, s.grps, s.karena = s.recs[:0], s.grps[:0], s.karena[:0]
	if s.res != nil {
		s.res.Release()
		s.res = nil
	}
	s.cached = 0
	s.active = false
	s.kv.endBundle()
}

func (s *recordState) Logical(fn func(g *LogicalGroup) error) error {
	now := s.opts.Clock.Now()
	var g LogicalGroup
	var cur []byte // prefix of g
	var ferr error
	flush := func() bool {
		if len(g.Rows) > 0 {
			ferr = fn(&g)
		}
		g.Rows = g.Rows[:0]
		return ferr == nil
	}
	err := s.kv.scanAll(func(k, v []byte) bool {
		kg, side, key, row, off, err := DecodeGroupKey(k, s.width)
		if err != nil {
			ferr = fmt.Errorf("recordstore: record key %x offset %d: %w", k, off, err)
			return false
		}
		ts, c, a, off, err := DecodeRecordValue(v)
		if err != nil {
			ferr = fmt.Errorf("recordstore: record %x value offset %d: %w", k, off, err)
			return false
		}
		p := k[:len(k)-len(row)]
		if cur == nil || string(cur) != string(p) {
			if !flush() {
				return false
			}
			cur = append(cur[:0], p...)
			g.KeyGroup, g.Side, g.Key = kg, side, append([]byte(nil), key...)
		}
		if expired(ts, now, s.ttl) {
			return true
		}
		g.Rows = append(g.Rows, LogicalRow{Row: append([]byte(nil), row...), Count: c, Assoc: a, TS: ts})
		return true
	})
	if err != nil {
		return err
	}
	if ferr != nil {
		return ferr
	}
	flush()
	return ferr
}

func (s *recordState) Check() ([]Problem, error) {
	var probs []Problem
	err := s.kv.scanAll(func(k, v []byte) bool {
		_, _, _, row, ok, p := s.checkKey(k, probs)
		probs = p
		if !ok {
			return true
		}
		if _, _, _, off, err := DecodeRecordValue(v); err != nil {
			probs = append(probs, Problem{Key: append([]byte(nil), k...), Offset: off, Msg: err.Error()})
		}
		if s.opts.RowValidator != nil {
			if err := s.opts.RowValidator(row); err != nil {
				probs = append(probs, Problem{Key: append([]byte(nil), k...), Offset: len(k) - len(row), InKey: true,
					Msg: fmt.Sprintf("row payload: %v", err)})
			}
		}
		return true
	})
	return probs, err
}
