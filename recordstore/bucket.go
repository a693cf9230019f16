//go:build cgo

package recordstore

import (
	"bytes"
	"fmt"
	"sort"
)

// bucketState is the legacy layout: one value per (key group, side,
// equality key) holding the whole multiset (see AppendBucketValue). Every
// bundle hydrates both sides' buckets of every probed key with one batched
// read and rewrites each touched bucket whole.
type bucketState struct {
	common
	groups map[string]*bgroup
	keys   [][]byte
	list   []*bgroup
}

type bgroup struct {
	prefix  []byte
	rows    []LogicalRow // live rows; sorted by payload until an insert
	idx     map[string]int32
	sorted  bool
	existed bool
	dirty   bool
}

func (s *bucketState) Layout() Layout { return LayoutBucket }

func (s *bucketState) Begin(probes []Probe) error {
	if err := s.begin(); err != nil {
		return err
	}
	if s.groups == nil {
		s.groups = make(map[string]*bgroup)
	}
	s.keys, s.list = s.keys[:0], s.list[:0]
	for _, p := range probes {
		for _, side := range [2]Side{p.Side, p.Side.Other()} {
			s.scratch = s.groupPrefix(s.scratch[:0], side, p.Key)
			if _, ok := s.groups[string(s.scratch)]; ok {
				continue
			}
			g := &bgroup{prefix: append([]byte(nil), s.scratch...), sorted: true}
			s.groups[string(g.prefix)] = g
			s.list = append(s.list, g)
			s.keys = append(s.keys, g.prefix)
		}
	}
	return s.hydrate(s.keys, s.list)
}

func (s *bucketState) hydrate(keys [][]byte, gs []*bgroup) error {
	if len(keys) == 0 {
		return nil
	}
	s.stats.PointReads += int64(len(keys))
	var derr error
	err := s.kv.be.MultiGet(s.kv.st, keys, func(i int, v []byte, ok bool) {
		if !ok || derr != nil {
			return
		}
		g := gs[i]
		g.existed = true
		own := append([]byte(nil), v...)
		if off, err := DecodeBucketValue(own, func(r LogicalRow) error {
			if expired(r.TS, s.now, s.ttl) {
				s.stats.ExpiredSkips++
				g.dirty = true // rewrite without it
				return nil
			}
			g.rows = append(g.rows, r)
			return nil
		}); err != nil {
			derr = fmt.Errorf("recordstore: bucket %x offset %d: %w", keys[i], off, err)
		}
	})
	if err != nil {
		return err
	}
	return derr
}

func (s *bucketState) group(side Side, key []byte) (*bgroup, error) {
	if !s.active {
		return nil, errNoBundle
	}
	s.scratch = s.groupPrefix(s.scratch[:0], side, key)
	if g, ok := s.groups[string(s.scratch)]; ok {
		return g, nil
	}
	g := &bgroup{prefix: append([]byte(nil), s.scratch...), sorted: true}
	s.groups[string(g.prefix)] = g
	s.list = append(s.list, g)
	return g, s.hydrate([][]byte{g.prefix}, []*bgroup{g})
}

// find returns the index of row. Small groups search the sorted rows; a
// group that grows past a few rows gets a hash index (inserts append and
// the rows are sorted again only when the bucket is encoded).
func (g *bgroup) find(row []byte) (int, bool) {
	if g.idx == nil && g.sorted && len(g.rows) <= 8 {
		i := sort.Search(len(g.rows), func(i int) bool { return bytes.Compare(g.rows[i].Row, row) >= 0 })
		return i, i < len(g.rows) && bytes.Equal(g.rows[i].Row, row)
	}
	if g.idx == nil {
		g.idx = make(map[string]int32, len(g.rows))
		for i := range g.rows {
			g.idx[string(g.rows[i].Row)] = int32(i)
		}
	}
	i, ok := g.idx[string(row)]
	return int(i), ok
}

func (s *bucketState) Count(side Side, key, row []byte) (int64, error) {
	g, err := s.group(side, key)
	if err != nil {
		return 0, err
	}
	if i, ok := g.find(row); ok {
		return g.rows[i].Count, nil
	}
	return 0, nil
}

func (s *bucketState) Visit(side Side, key []byte, fn func(row []byte, count int64) error) error {
	g, err := s.group(side, key)
	if err != nil {
		return err
	}
	for i := range g.rows {
		if err := fn(g.rows[i].Row, g.rows[i].Count); err != nil {
			return err
		}
	}
	return nil
}

func (s *bucketState) Add(side Side, key, row []byte, delta int64) (int64, error) {
	g, err := s.group(side, key)
	if err != nil {
		return 0, err
	}
	i, ok := g.find(row)
	if !ok {
		if delta <= 0 {
			return 0, nil
		}
		r := LogicalRow{Row: append([]byte(nil), row...), Count: delta, TS: s.now}
		g.dirty = true
		if g.idx == nil {
			g.rows = append(g.rows, LogicalRow{})
			copy(g.rows[i+1:], g.rows[i:])
			g.rows[i] = r
			return delta, nil
		}
		g.idx[string(r.Row)] = int32(len(g.rows))
		g.rows = append(g.rows, r)
		g.sorted = false
		return delta, nil
	}
	r := &g.rows[i]
	r.Count += delta
	g.dirty = true
	if r.Count <= 0 {
		if g.idx != nil {
			// swap-remove keeps the index cheap; order is restored at encode
			last := len(g.rows) - 1
			delete(g.idx, string(r.Row))
			if i != last {
				g.rows[i] = g.rows[last]
				g.idx[string(g.rows[i].Row)] = int32(i)
			}
			g.rows = g.rows[:last]
			g.sorted = false
		} else {
			g.rows = append(g.rows[:i], g.rows[i+1:]...)
		}
		return 0, nil
	}
	r.TS = s.now
	return r.Count, nil
}

func (s *bucketState) Commit() error {
	if !s.active {
		return errNoBundle
	}
	b := s.kv.be.NewBatch()
	defer b.Close()
	for _, g := range s.list {
		if !g.dirty {
			continue
		}
		if len(g.rows) == 0 {
			if g.existed {
				b.Delete(s.kv.st, g.prefix)
			}
			continue
		}
		if !g.sorted {
			sortRows(g.rows)
		}
		s.scratch = AppendBucketValue(s.scratch[:0], g.rows)
		b.Put(s.kv.st, g.prefix, s.scratch)
	}
	s.stats.Writes += int64(b.Len())
	err := b.Commit()
	s.end()
	return err
}

func (s *bucketState) Abort() { s.end() }

func (s *bucketState) end() {
	clear(s.groups)
	s.list = s.list[:0]
	s.active = false
	s.kv.endBundle()
}

func (s *bucketState) Logical(fn func(g *LogicalGroup) error) error {
	now := s.opts.Clock.Now()
	var g LogicalGroup
	var ferr error
	err := s.kv.scanAll(func(k, v []byte) bool {
		kg, side, key, rest, off, err := DecodeGroupKey(k, s.width)
		if err == nil && len(rest) != 0 {
			off, err = len(k)-len(rest), fmt.Errorf("%w: %d bytes after the equality key of a bucket key", ErrCorrupt, len(rest))
		}
		if err != nil {
			ferr = fmt.Errorf("recordstore: bucket key %x offset %d: %w", k, off, err)
			return false
		}
		g = LogicalGroup{KeyGroup: kg, Side: side, Key: append([]byte(nil), key...), Rows: g.Rows[:0]}
		if off, err := DecodeBucketValue(v, func(r LogicalRow) error {
			if expired(r.TS, now, s.ttl) {
				return nil
			}
			r.Row = append([]byte(nil), r.Row...)
			g.Rows = append(g.Rows, r)
			return nil
		}); err != nil {
			ferr = fmt.Errorf("recordstore: bucket %x value offset %d: %w", k, off, err)
			return false
		}
		if len(g.Rows) == 0 {
			return true
		}
		ferr = fn(&g)
		return ferr == nil
	})
	if err != nil {
		return err
	}
	return ferr
}

func (s *bucketState) Check() ([]Problem, error) {
	var probs []Problem
	err := s.kv.scanAll(func(k, v []byte) bool {
		_, _, _, rest, ok, p := s.checkKey(k, probs)
		probs = p
		if !ok {
			return true
		}
		if len(rest) != 0 {
			probs = append(probs, Problem{Key: append([]byte(nil), k...), Offset: len(k) - len(rest), InKey: true,
				Msg: fmt.Sprintf("%d bytes after the equality key of a bucket key", len(rest))})
		}
		if off, err := DecodeBucketValue(v, func(r LogicalRow) error {
			if s.opts.RowValidator != nil {
				if err := s.opts.RowValidator(r.Row); err != nil {
					return fmt.Errorf("row payload: %w", err)
				}
			}
			return nil
		}); err != nil {
			probs = append(probs, Problem{Key: append([]byte(nil), k...), Offset: off, Msg: err.Error()})
		}
		return true
	})
	return probs, err
}
