//go:build cgo

package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
)

// OnlineStats count the work of a MigratingJoinState.
type OnlineStats struct {
	Lookups      int64 // bucket keys looked up
	KeysMigrated int64 // bucket entries converted and deleted
	RowsMigrated int64
	Batches      int64 // commits that carried conversions (bundle commits and sweep batches)
	PoolRefusals int64 // reservations the pool refused
	// Deferred counts (side, key) groups a bundle needed whose conversion
	// the pool refused: the bundle served them from their buckets (which
	// stay authoritative) and a later bundle or Sweep converts them.
	Deferred int64
	Done     bool // no bucket entry is left
}

// MigratingJoinState is a record-layout join state restored from a
// checkpoint that may still hold bucket entries (both recordstore states
// declared on the backend). The first bundle that touches a join key
// converts that key's buckets, both sides, into records: Begin reads the
// buckets with one batched lookup and converts them into a private
// in-memory record state that serves the bundle's reads and writes of
// those (side, key) groups; Commit puts the groups' resulting records and
// deletes their buckets in the bundle's own atomic write batch, together
// with every other write of the bundle. An aborted or failed bundle leaves
// the buckets as they were. Until its bundle commits a key's content lives
// in its bucket, and Logical shows both layouts merged, so a canonical
// savepoint taken mid-migration equals one taken before it (see
// ExportView). The bytes of the buckets being converted are reserved from
// the pool until the bundle ends; when the pool refuses, the pressure
// handler is asked to drain and the reservation retried. When the pool
// still refuses, the (side, key) group is not converted in this bundle:
// it stays in the bucket layout, a bucket-layout state serves the
// bundle's reads and writes of it (its rewritten bucket goes into the same
// bundle batch), and a later bundle converts it when memory is available
// (counted in PoolRefusals and Deferred). A group is therefore always in
// exactly one layout, and mixed state checkpoints and restores as is.
//
// Every key a bundle touches must be among the probes given to Begin (the
// recordstore.Join driver does so): an unprobed key still in the bucket
// layout is an error rather than silently missing rows.
type MigratingJoinState struct {
	recordstore.JoinState
	be      engine.Backend
	bst     int
	rst     int
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

	// the bundle's converted groups
	scratch  engine.Backend        // heap: the converted records
	sclock   *engine.Clock         // manual, set to the bundle's time
	sjs      recordstore.JoinState // record state on scratch
	routed   map[string]bool       // group prefixes served by sjs
	deferred map[string]bool       // group prefixes served by bjs (conversion refused)
	bjs      recordstore.JoinState // bucket state of deferred groups, writes captured
	dprobes  []recordstore.Probe   // probes of deferred groups
	capture  bool                  // bjs is committing: its writes go to pend
	dgroups  map[string]*dgroup    // deferred groups' lookups in the bundle
	dseq     int
	vstored  []visitRow
	vfresh   []visitRow
	sprobes  []recordstore.Probe // probes of routed groups
	mprobes  []recordstore.Probe // the others
	buckets  [][]byte            // bucket keys to delete at Commit
	rows     int64               // rows converted in the open bundle
	res      *engine.Reservation // conversion bytes of the open bundle
	pressure func() error
	pend     []pendingWrite // preloaded into the bundle's batch at Commit
	preload  bool
}

// scratchEntryOverhead is what one converted record costs beyond its
// bytes in the scratch state (map entry, slice headers).
const scratchEntryOverhead = 96

type pendingWrite struct {
	st     int
	k, v   []byte
	delete bool
}

// hookedBackend is the backend the record state runs on: the bundle's
// batch starts with the conversions' writes. The native access is passed
// through so that the record state keeps its bundle-wide iterator.
type hookedBackend struct {
	engine.Backend
	m *MigratingJoinState
}

// Native forwards the native access of the wrapped backend.
func (h *hookedBackend) Native() (engine.Native, bool) { return engine.NativeOf(h.Backend) }

// NewBatch returns a batch of the backend holding the pending conversion
// writes when the wrapper is committing a bundle.
func (h *hookedBackend) NewBatch() engine.Batch {
	b := h.Backend.NewBatch()
	if h.m.preload {
		for _, w := range h.m.pend {
			if w.delete {
				b.Delete(w.st, w.k)
			} else {
				b.Put(w.st, w.k, w.v)
			}
		}
		h.m.preload = false
	}
	return b
}

// bucketBackend is the backend the deferred groups' bucket state runs on:
// reads go to the store, writes are captured (only those of deferred
// groups) into the pending writes of the bundle's own batch.
type bucketBackend struct {
	engine.Backend
	m *MigratingJoinState
}

// Native forwards the native access of the wrapped backend.
func (h *bucketBackend) Native() (engine.Native, bool) { return engine.NativeOf(h.Backend) }

// NewBatch returns a capturing batch while the wrapper commits the
// deferred groups, else a batch that refuses to commit (the bucket state
// must never write on its own).
func (h *bucketBackend) NewBatch() engine.Batch { return &captureBatch{m: h.m} }

type captureBatch struct {
	m *MigratingJoinState
	w []pendingWrite
}

// keep: only the deferred groups are written. The bucket state also
// hydrates the other side of each probe, which may be a group being
// converted (its bucket is deleted by this bundle) or a record group; a
// rewrite of those (dropping expired rows) is not for this state to do.
func (b *captureBatch) keep(st int, key []byte) bool {
	return st == b.m.bst && b.m.deferred[string(key)]
}

func (b *captureBatch) Put(st int, key, val []byte) {
	if b.keep(st, key) {
		b.w = append(b.w, pendingWrite{st: st, k: append([]byte(nil), key...), v: append([]byte(nil), val...)})
	}
}

func (b *captureBatch) Delete(st int, key []byte) {
	if b.keep(st, key) {
		b.w = append(b.w, pendingWrite{st: st, k: append([]byte(nil), key...), delete: true})
	}
}

func (b *captureBatch) Len() int { return len(b.w) }

func (b *captureBatch) Commit() error {
	if !b.m.capture {
		return errors.New("migrate: the deferred groups' bucket state committed outside the bundle")
	}
	b.m.pend = append(b.m.pend, b.w...)
	b.w = nil
	return nil
}

func (b *captureBatch) Close() { b.w = nil }

// NewMigratingJoinState opens the record layout on be (which must declare
// both recordstore.BucketStateName and recordstore.RecordStateName) and
// migrates keys as they are touched. opts.Pool also bounds the migration.
func NewMigratingJoinState(be engine.Backend, opts recordstore.Options) (*MigratingJoinState, error) {
	bst, err := StateID(be, recordstore.BucketStateName)
	if err != nil {
		return nil, err
	}
	rst, err := StateID(be, recordstore.RecordStateName)
	if err != nil {
		return nil, err
	}
	clock := opts.Clock
	if clock == nil {
		clock = engine.SystemClock()
		opts.Clock = clock
	}
	m := &MigratingJoinState{be: be, bst: bst, rst: rst, width: be.Layout().Width(), maxP: be.Layout().MaxParallelism,
		pool: opts.Pool, clock: clock, ttl: be.States()[bst].TTL.Milliseconds(), probed: map[string]bool{}, routed: map[string]bool{},
		deferred: map[string]bool{}, dgroups: map[string]*dgroup{}}
	js, err := recordstore.Open(recordstore.LayoutRecord, &hookedBackend{Backend: be, m: m}, opts)
	if err != nil {
		return nil, err
	}
	m.JoinState = js
	rdesc := be.States()[rst]
	if m.scratch, err = engine.OpenHeap(be.Layout(), []engine.StateDesc{rdesc}); err != nil {
		return nil, err
	}
	m.sclock = engine.NewManualClock(clock.Now())
	sopts := opts
	sopts.Clock, sopts.PrefixBloom = m.sclock, false
	if m.sjs, err = recordstore.Open(recordstore.LayoutRecord, m.scratch, sopts); err != nil {
		m.scratch.Close()
		return nil, err
	}
	bopts := sopts
	bopts.Pool = nil
	if m.bjs, err = recordstore.Open(recordstore.LayoutBucket, &bucketBackend{Backend: be, m: m}, bopts); err != nil {
		m.scratch.Close()
		return nil, err
	}
	m.conv.Width = m.width
	if err := m.checkLeft(); err != nil {
		m.scratch.Close()
		return nil, err
	}
	return m, nil
}

// Close releases the wrapper's private memory (not the backend).
func (m *MigratingJoinState) Close() error {
	m.res.Release()
	m.res = nil
	return m.scratch.Close()
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

// SetPressureHandler installs fn on the record state, the converted groups'
// state and the conversion's reservations.
func (m *MigratingJoinState) SetPressureHandler(fn func() error) {
	m.pressure = fn
	m.JoinState.SetPressureHandler(fn)
	m.sjs.SetPressureHandler(fn)
	m.bjs.SetPressureHandler(fn)
}

// Begin converts the buckets of every probed key (both sides) into the
// bundle's private record state, then opens the bundle.
func (m *MigratingJoinState) Begin(probes []recordstore.Probe) error {
	m.reset()
	if !m.left {
		return m.JoinState.Begin(probes)
	}
	if err := m.convertProbed(probes); err != nil {
		m.reset()
		return err
	}
	m.sprobes, m.mprobes, m.dprobes = m.sprobes[:0], m.mprobes[:0], m.dprobes[:0]
	for _, p := range probes {
		m.scr = recordstore.AppendGroupPrefix(m.scr[:0], m.width, recordstore.KeyGroupOf(p.Key, m.maxP), p.Side, p.Key)
		switch {
		case m.routed[string(m.scr)]:
			m.sprobes = append(m.sprobes, p)
		case m.deferred[string(m.scr)]:
			m.dprobes = append(m.dprobes, p)
		default:
			m.mprobes = append(m.mprobes, p)
		}
	}
	if err := m.JoinState.Begin(m.mprobes); err != nil {
		m.JoinState.Abort()
		m.reset()
		return err
	}
	// the converted and the deferred groups see the bundle's own time
	m.sclock.Set(m.JoinState.Now())
	if len(m.routed) > 0 {
		if err := m.sjs.Begin(m.sprobes); err != nil {
			m.sjs.Abort()
			m.JoinState.Abort()
			m.reset()
			return err
		}
	}
	if len(m.deferred) > 0 {
		err := m.bjs.Begin(m.dprobes)
		for i := 0; err == nil && i < len(m.dprobes); i++ {
			// the record layout looks the probes' rows up first
			err = m.lookupDeferred(m.dprobes[i].Side, m.dprobes[i].Key, m.dprobes[i].Row)
		}
		if err != nil {
			m.bjs.Abort()
			m.sjs.Abort()
			m.JoinState.Abort()
			m.reset()
			return err
		}
	}
	return nil
}

// reset forgets the open bundle's conversions and returns their memory.
func (m *MigratingJoinState) reset() {
	clear(m.probed)
	if len(m.routed) > 0 || len(m.buckets) > 0 {
		m.scratch.DeleteRange(0, nil, nil)
	}
	clear(m.routed)
	clear(m.deferred)
	clear(m.dgroups)
	m.dseq = 0
	m.capture = false
	m.buckets = m.buckets[:0]
	m.rows = 0
	m.pend = m.pend[:0]
	m.preload = false
	m.res.Release()
	m.res = nil
}

// reserve charges n conversion bytes to the pool (drain and retry once on
// refusal). A refusal is counted and reported: the caller does not convert.
func (m *MigratingJoinState) reserve(n int64) bool {
	if m.pool == nil {
		return true
	}
	if m.res == nil {
		var ok bool
		if m.res, ok = m.pool.Reserve(0); !ok {
			m.res = nil
			m.stats.PoolRefusals++
			return false
		}
	}
	if m.res.Grow(n) {
		return true
	}
	if m.pressure != nil && m.pressure() == nil && m.res.Grow(n) {
		return true
	}
	m.stats.PoolRefusals++
	return false
}

// conversionCost is what converting bucket (k, v) holds until the bundle
// ends: the records twice (scratch batch and scratch state), each with its
// map entry. A bucket that does not decode costs nothing here: converting
// it reports the error.
func conversionCost(k, v []byte) int64 {
	var n, rows int64
	if _, err := recordstore.DecodeBucketValue(v, func(r recordstore.LogicalRow) error {
		n += int64(len(r.Row))
		rows++
		return nil
	}); err != nil {
		return 0
	}
	return 2*(n+rows*int64(len(k)+recordstore.RecordValueSize)) + rows*scratchEntryOverhead
}

// unprobedBuckets returns the bucket keys (both sides) of the probed join
// keys not looked up before, marks them looked up and counts the lookups.
func (m *MigratingJoinState) unprobedBuckets(probes []recordstore.Probe) [][]byte {
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
	m.stats.Lookups += int64(len(keys))
	return keys
}

// convertProbed looks up the buckets of the probed keys (both sides) and
// converts the found ones into the scratch state.
func (m *MigratingJoinState) convertProbed(probes []recordstore.Probe) error {
	keys := m.unprobedBuckets(probes)
	if len(keys) == 0 {
		return nil
	}
	b := m.scratch.NewBatch()
	defer b.Close()
	var ferr error
	err := m.be.MultiGet(m.bst, keys, func(i int, v []byte, ok bool) {
		if !ok || ferr != nil {
			return
		}
		if !m.reserve(conversionCost(keys[i], v)) {
			// not now: the bucket serves this bundle
			m.deferred[string(keys[i])] = true
			m.stats.Deferred++
			return
		}
		_, err := m.conv.ConvertBucket(keys[i], v, func(_ *Bucket, _ *recordstore.LogicalRow, rk, rv []byte) error {
			b.Put(0, rk, rv)
			m.rows++
			return nil
		})
		if err != nil {
			ferr = fmt.Errorf("migrate: online: %w", err)
			return
		}
		m.routed[string(keys[i])] = true
		m.buckets = append(m.buckets, keys[i])
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	if b.Len() > 0 {
		return b.Commit()
	}
	return nil
}

// Commit writes the bundle: the converted groups' records and the deletion
// of their buckets go into the same atomic batch as the bundle's other
// writes.
func (m *MigratingJoinState) Commit() error {
	if len(m.routed) == 0 && len(m.deferred) == 0 {
		err := m.JoinState.Commit()
		m.reset()
		return err
	}
	defer m.reset()
	m.pend = m.pend[:0]
	if len(m.routed) > 0 {
		if err := m.sjs.Commit(); err != nil {
			m.bjs.Abort()
			m.JoinState.Abort()
			return fmt.Errorf("migrate: converted groups: %w", err)
		}
		err := m.scratch.Scan(0, nil, nil, func(k, v []byte) bool {
			m.pend = append(m.pend, pendingWrite{st: m.rst, k: append([]byte(nil), k...), v: append([]byte(nil), v...)})
			return true
		})
		if err != nil {
			m.bjs.Abort()
			m.JoinState.Abort()
			return err
		}
		for _, k := range m.buckets {
			m.pend = append(m.pend, pendingWrite{st: m.bst, k: k, delete: true})
		}
	}
	if len(m.deferred) > 0 {
		// the deferred groups' rewritten buckets join the same batch
		m.capture = true
		err := m.bjs.Commit()
		m.capture = false
		if err != nil {
			m.JoinState.Abort()
			return fmt.Errorf("migrate: deferred groups: %w", err)
		}
	}
	m.preload = true
	if err := m.JoinState.Commit(); err != nil {
		return err
	}
	if m.preload {
		return errors.New("migrate: the record state committed without a batch")
	}
	if len(m.buckets) > 0 {
		m.stats.Batches++
	}
	m.stats.KeysMigrated += int64(len(m.buckets))
	m.stats.RowsMigrated += m.rows
	if m.stats.KeysMigrated-m.checked >= 1024 {
		// now and then: has the last bucket gone? (then lookups stop)
		m.checked = m.stats.KeysMigrated
		return m.checkLeft()
	}
	return nil
}

// Abort discards the bundle; its keys' buckets stay.
func (m *MigratingJoinState) Abort() {
	m.JoinState.Abort()
	m.sjs.Abort()
	m.bjs.Abort()
	m.reset()
}

// state is the join state serving (side, key) in the open bundle.
func (m *MigratingJoinState) state(side recordstore.Side, key []byte) recordstore.JoinState {
	if len(m.routed) > 0 || len(m.deferred) > 0 {
		m.scr = recordstore.AppendGroupPrefix(m.scr[:0], m.width, recordstore.KeyGroupOf(key, m.maxP), side, key)
		if m.routed[string(m.scr)] {
			return m.sjs
		}
		if m.deferred[string(m.scr)] {
			return m.bjs
		}
	}
	return m.JoinState
}

// sweep converts the given keys' buckets outside a bundle, in batches of
// their own (pool-bounded; a bucket's records and its deletion always
// share a batch).
func (m *MigratingJoinState) sweep(probes []recordstore.Probe) error {
	keys := m.unprobedBuckets(probes)
	if len(keys) == 0 {
		return nil
	}
	// each found bucket is converted straight from the read callback into
	// the batch, its bytes reserved first; a refusal commits what the batch
	// holds and retries the key in a further round, and a bucket refused
	// with nothing held is left for later (Deferred)
	var res *engine.Reservation
	if m.pool != nil {
		res, _ = m.pool.Reserve(0)
	}
	defer res.Release()
	b := m.be.NewBatch()
	defer b.Close()
	rst := m.stOf(recordstore.RecordStateName)
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
	var migrated, rows int64
	convert := func(k, v []byte) error {
		n := int64(0)
		_, err := m.conv.ConvertBucket(k, v, func(_ *Bucket, _ *recordstore.LogicalRow, rk, rv []byte) error {
			b.Put(rst, rk, rv)
			n++
			return nil
		})
		if err != nil {
			return fmt.Errorf("migrate: online: %w", err)
		}
		b.Delete(m.bst, k)
		migrated++
		rows += n
		return nil
	}
	// every round converts or defers at least its first key (it starts
	// with nothing held), so there are at most len(keys) rounds
	for pending := keys; len(pending) > 0; {
		var again [][]byte
		var ferr error
		err := m.be.MultiGet(m.bst, pending, func(i int, v []byte, ok bool) {
			if !ok || ferr != nil {
				return
			}
			if res != nil && !res.Grow(int64(2*len(v)+64)) {
				m.stats.PoolRefusals++
				if res.Size() == 0 {
					m.stats.Deferred++
					return
				}
				again = append(again, pending[i])
				return
			}
			ferr = convert(pending[i], v)
		})
		if err == nil {
			err = ferr
		}
		if err == nil {
			err = commit()
		}
		if err != nil {
			return err
		}
		// counted once committed
		m.stats.KeysMigrated += migrated
		m.stats.RowsMigrated += rows
		migrated, rows = 0, 0
		pending = again
	}
	if m.stats.KeysMigrated-m.checked >= 1024 {
		// now and then: has the last bucket gone? (then lookups stop)
		m.checked = m.stats.KeysMigrated
		return m.checkLeft()
	}
	return nil
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
	if err := m.sweep(probes); err != nil {
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
	js := m.state(side, key)
	if js == m.bjs {
		if err := m.lookupDeferred(side, key, row); err != nil {
			return 0, err
		}
	}
	return js.Count(side, key, row)
}

// Visit is the record state's Visit after the key's migration.
func (m *MigratingJoinState) Visit(side recordstore.Side, key []byte, fn func(row []byte, count int64) error) error {
	if err := m.guard(side, key); err != nil {
		return err
	}
	js := m.state(side, key)
	if js == m.bjs {
		return m.visitDeferred(side, key, fn)
	}
	return js.Visit(side, key, fn)
}

// Add is the record state's Add after the key's migration.
func (m *MigratingJoinState) Add(side recordstore.Side, key, row []byte, delta int64) (int64, error) {
	if err := m.guard(side, key); err != nil {
		return 0, err
	}
	js := m.state(side, key)
	if js == m.bjs {
		if err := m.lookupDeferred(side, key, row); err != nil {
			return 0, err
		}
	}
	return js.Add(side, key, row, delta)
}

// dgroup follows the rows of a deferred group that the bundle looked up,
// so that its visits list rows in the order the record layout does: the
// rows stored live at the bundle's start in row order, then the others in
// the order of their first lookup.
type dgroup struct {
	seen  map[string]bool // rows looked up
	fresh map[string]int  // of those, the rows not live at their first lookup: rank
}

// lookupDeferred notes the bundle's first lookup of a row of a deferred
// group (before the bundle changes it: a live count then means stored).
func (m *MigratingJoinState) lookupDeferred(side recordstore.Side, key, row []byte) error {
	m.scr = recordstore.AppendGroupPrefix(m.scr[:0], m.width, recordstore.KeyGroupOf(key, m.maxP), side, key)
	g := m.dgroups[string(m.scr)]
	if g == nil {
		g = &dgroup{seen: map[string]bool{}, fresh: map[string]int{}}
		m.dgroups[string(m.scr)] = g
	}
	if g.seen[string(row)] {
		return nil
	}
	g.seen[string(row)] = true
	c, err := m.bjs.Count(side, key, row)
	if err != nil {
		return err
	}
	if c == 0 {
		g.fresh[string(row)] = m.dseq
		m.dseq++
	}
	return nil
}

type visitRow struct {
	row   []byte
	count int64
	rank  int
}

// visitDeferred visits a deferred group from its bucket in the record
// layout's order. The rows are not copied: the bucket state keeps them
// for the bundle.
func (m *MigratingJoinState) visitDeferred(side recordstore.Side, key []byte, fn func(row []byte, count int64) error) error {
	m.scr = recordstore.AppendGroupPrefix(m.scr[:0], m.width, recordstore.KeyGroupOf(key, m.maxP), side, key)
	g := m.dgroups[string(m.scr)]
	stored, fresh := m.vstored[:0], m.vfresh[:0]
	err := m.bjs.Visit(side, key, func(row []byte, count int64) error {
		if g != nil {
			if r, ok := g.fresh[string(row)]; ok {
				fresh = append(fresh, visitRow{row, count, r})
				return nil
			}
		}
		stored = append(stored, visitRow{row, count, 0})
		return nil
	})
	m.vstored, m.vfresh = stored[:0], fresh[:0]
	if err != nil {
		return err
	}
	sort.Slice(stored, func(i, j int) bool { return bytes.Compare(stored[i].row, stored[j].row) < 0 })
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].rank < fresh[j].rank })
	for _, list := range [2][]visitRow{stored, fresh} {
		for _, r := range list {
			if err := fn(r.row, r.count); err != nil {
				return err
			}
		}
	}
	return nil
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
