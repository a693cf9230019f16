//go:build cgo

package migrate

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
)

// OnlineStats count the work of a MigratingJoinState.
type OnlineStats struct {
	Lookups      int64 // bucket keys looked up
	KeysMigrated int64 // bucket entries converted and deleted
	RowsMigrated int64
	Batches      int64 // migration batches committed
	PoolRefusals int64 // reservations refused (batch committed early)
	Done         bool  // no bucket entry is left
}

// MigratingJoinState is a record-layout join state restored from a
// checkpoint that may still hold bucket entries (both recordstore states
// declared on the backend). The first bundle that touches a join key
// converts that key's buckets, both sides, into records and deletes them
// in one atomic batch committed at Begin, before the bundle reads
// anything; until then the key's content lives in its bucket, and Logical
// shows both layouts merged, so a canonical savepoint taken mid-migration
// equals one taken before it. The bytes of the buckets being converted are
// reserved from the pool; a refused reservation commits what was converted
// so far (whole buckets: a bucket's records and its deletion always share
// a batch, however large the bucket).
//
// Every key a bundle touches must be among the probes given to Begin (the
// recordstore.Join driver does so): an unprobed key still in the bucket
// layout is an error rather than silently missing rows.
type MigratingJoinState struct {
	recordstore.JoinState
	be      engine.Backend
	bst     int
	width   int
	maxP    int
	pool    *engine.Pool
	clock   *engine.Clock
	ttl     int64
	left    bool  // bucket entries may remain
	checked int64 // KeysMigrated at the last checkLeft
	stats   OnlineStats
	conv    Converter
	probed  map[string]bool // group prefixes checked in the open bundle
	scr     []byte
}

// NewMigratingJoinState opens the record layout on be (which must declare
// both recordstore.BucketStateName and recordstore.RecordStateName) and
// migrates keys as they are touched. opts.Pool also bounds the migration.
func NewMigratingJoinState(be engine.Backend, opts recordstore.Options) (*MigratingJoinState, error) {
	bst, err := StateID(be, recordstore.BucketStateName)
	if err != nil {
		return nil, err
	}
	js, err := recordstore.Open(recordstore.LayoutRecord, be, opts)
	if err != nil {
		return nil, err
	}
	clock := opts.Clock
	if clock == nil {
		clock = engine.SystemClock()
	}
	m := &MigratingJoinState{JoinState: js, be: be, bst: bst, width: be.Layout().Width(), maxP: be.Layout().MaxParallelism,
		pool: opts.Pool, clock: clock, ttl: be.States()[bst].TTL.Milliseconds(), probed: map[string]bool{}}
	m.conv.Width = m.width
	if err := m.checkLeft(); err != nil {
		return nil, err
	}
	return m, nil
}

// checkLeft looks for any remaining bucket entry.
func (m *MigratingJoinState) checkLeft() error {
	m.left = false
	err := m.be.Scan(m.bst, nil, nil, func(k, v []byte) bool { m.left = true; return false })
	m.stats.Done = !m.left
	return err
}

// OnlineStats returns the migration counters.
func (m *MigratingJoinState) OnlineStats() OnlineStats { return m.stats }

// Begin migrates the buckets of every probed key (both sides), then opens
// the record state's bundle.
func (m *MigratingJoinState) Begin(probes []recordstore.Probe) error {
	clear(m.probed)
	if m.left {
		if err := m.migrate(probes); err != nil {
			return err
		}
	}
	return m.JoinState.Begin(probes)
}

func (m *MigratingJoinState) migrate(probes []recordstore.Probe) error {
	var keys [][]byte
	for _, p := range probes {
		kg := recordstore.KeyGroupOf(p.Key, m.maxP)
		for _, side := range [2]recordstore.Side{recordstore.Left, recordstore.Right} {
			m.scr = recordstore.AppendGroupPrefix(m.scr[:0], m.width, kg, side, p.Key)
			if m.probed[string(m.scr)] {
				continue
			}
			k := append([]byte(nil), m.scr...)
			m.probed[string(k)] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	m.stats.Lookups += int64(len(keys))
	// copy found buckets out of the read callback under a reservation
	type found struct{ k, v []byte }
	var hits []found
	var res *engine.Reservation
	if m.pool != nil {
		res, _ = m.pool.Reserve(0)
	}
	defer res.Release()
	b := m.be.NewBatch()
	defer b.Close()
	commit := func() error {
		if b.Len() == 0 {
			return nil
		}
		if err := b.Commit(); err != nil {
			return fmt.Errorf("migrate: online batch: %w", err)
		}
		m.stats.Batches++
		res.Shrink(res.Size())
		return nil
	}
	convert := func(f found) error {
		n := int64(0)
		_, err := m.conv.ConvertBucket(f.k, f.v, func(_ *Bucket, _ *recordstore.LogicalRow, rk, rv []byte) error {
			b.Put(m.stOf(recordstore.RecordStateName), rk, rv)
			n++
			return nil
		})
		if err != nil {
			return fmt.Errorf("migrate: online: %w", err)
		}
		b.Delete(m.bst, f.k)
		m.stats.KeysMigrated++
		m.stats.RowsMigrated += n
		return nil
	}
	var ferr error
	err := m.be.MultiGet(m.bst, keys, func(i int, v []byte, ok bool) {
		if !ok || ferr != nil {
			return
		}
		hits = append(hits, found{keys[i], append([]byte(nil), v...)})
	})
	if err != nil {
		return err
	}
	for _, f := range hits {
		need := int64(2*len(f.v) + 64)
		if res != nil && !res.Grow(need) {
			m.stats.PoolRefusals++
			if err := commit(); err != nil {
				return err
			}
			res.Grow(need) // a single bucket always proceeds
		}
		if err := convert(f); err != nil {
			return err
		}
	}
	if err := commit(); err != nil {
		return err
	}
	if m.stats.KeysMigrated-m.checked >= 1024 {
		// now and then: has the last bucket gone? (then lookups stop)
		m.checked = m.stats.KeysMigrated
		return m.checkLeft()
	}
	return ferr
}

func (m *MigratingJoinState) stOf(name string) int {
	id, _ := StateID(m.be, name)
	return id
}

// Sweep migrates up to maxKeys buckets that no bundle touched yet (for
// finishing a migration between bundles, e.g. when idle). It must not run
// inside a bundle. It returns the buckets migrated; OnlineStats().Done
// tells when none is left.
func (m *MigratingJoinState) Sweep(maxKeys int) (int, error) {
	if !m.left || maxKeys <= 0 {
		return 0, nil
	}
	var probes []recordstore.Probe
	var ferr error
	err := m.be.Scan(m.bst, nil, nil, func(k, v []byte) bool {
		b, off, err := DecodeBucketKey(k, m.width)
		if err != nil {
			ferr = fmt.Errorf("migrate: bucket key %x offset %d: %w", k, off, err)
			return false
		}
		probes = append(probes, recordstore.Probe{Side: b.Side, Key: append([]byte(nil), b.Key...)})
		return len(probes) < maxKeys
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return 0, err
	}
	before := m.stats.KeysMigrated
	clear(m.probed)
	if err := m.migrate(probes); err != nil {
		return int(m.stats.KeysMigrated - before), err
	}
	clear(m.probed)
	if len(probes) < maxKeys {
		err = m.checkLeft()
	}
	return int(m.stats.KeysMigrated - before), err
}

// guard fails for a key the bundle did not probe that still has a bucket.
func (m *MigratingJoinState) guard(side recordstore.Side, key []byte) error {
	if !m.left {
		return nil
	}
	m.scr = recordstore.AppendGroupPrefix(m.scr[:0], m.width, recordstore.KeyGroupOf(key, m.maxP), side, key)
	if m.probed[string(m.scr)] {
		return nil
	}
	var has bool
	if err := m.be.MultiGet(m.bst, [][]byte{m.scr}, func(_ int, _ []byte, ok bool) { has = ok }); err != nil {
		return err
	}
	if has {
		return fmt.Errorf("migrate: join key %x (%s) still in the bucket layout was not probed at Begin", key, side)
	}
	m.probed[string(m.scr)] = true
	return nil
}

// Count is the record state's Count after the key's migration.
func (m *MigratingJoinState) Count(side recordstore.Side, key, row []byte) (int64, error) {
	if err := m.guard(side, key); err != nil {
		return 0, err
	}
	return m.JoinState.Count(side, key, row)
}

// Visit is the record state's Visit after the key's migration.
func (m *MigratingJoinState) Visit(side recordstore.Side, key []byte, fn func(row []byte, count int64) error) error {
	if err := m.guard(side, key); err != nil {
		return err
	}
	return m.JoinState.Visit(side, key, fn)
}

// Add is the record state's Add after the key's migration.
func (m *MigratingJoinState) Add(side recordstore.Side, key, row []byte, delta int64) (int64, error) {
	if err := m.guard(side, key); err != nil {
		return 0, err
	}
	return m.JoinState.Add(side, key, row, delta)
}

// Logical visits the logical content of both layouts merged in key order:
// migrated keys from the records, the others from their buckets. The
// result does not depend on how far the migration got.
func (m *MigratingJoinState) Logical(fn func(g *recordstore.LogicalGroup) error) error {
	if !m.left {
		return m.JoinState.Logical(fn)
	}
	// the buckets stream from a second reader, one group at a time, and
	// interleave with the records by group prefix
	bs, err := recordstore.Open(recordstore.LayoutBucket, m.be, recordstore.Options{Clock: m.clock})
	if err != nil {
		return err
	}
	type item struct {
		prefix []byte
		g      recordstore.LogicalGroup
	}
	ch := make(chan *item)
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		errc <- bs.Logical(func(g *recordstore.LogicalGroup) error {
			c := &item{prefix: recordstore.AppendGroupPrefix(nil, m.width, g.KeyGroup, g.Side, g.Key),
				g: recordstore.LogicalGroup{KeyGroup: g.KeyGroup, Side: g.Side, Key: append([]byte(nil), g.Key...), Rows: append([]recordstore.LogicalRow(nil), g.Rows...)}}
			for i := range c.g.Rows {
				c.g.Rows[i].Row = append([]byte(nil), c.g.Rows[i].Row...)
			}
			select {
			case ch <- c:
				return nil
			case <-stop:
				return errStopped
			}
		})
	}()
	finish := func(err error) error {
		close(stop)
		for range ch {
		}
		if berr := <-errc; err == nil && berr != errStopped {
			err = berr
		}
		return err
	}
	next, ok := <-ch
	var p []byte
	err = m.JoinState.Logical(func(g *recordstore.LogicalGroup) error {
		p = recordstore.AppendGroupPrefix(p[:0], m.width, g.KeyGroup, g.Side, g.Key)
		for ok && bytes.Compare(next.prefix, p) < 0 {
			if err := fn(&next.g); err != nil {
				return err
			}
			next, ok = <-ch
		}
		return fn(g)
	})
	for err == nil && ok {
		err = fn(&next.g)
		next, ok = <-ch
	}
	return finish(err)
}

var errStopped = errors.New("stopped")

// Layout is recordstore.LayoutRecord.
func (m *MigratingJoinState) Layout() recordstore.Layout { return recordstore.LayoutRecord }
