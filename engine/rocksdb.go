package engine

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// RocksOptions configures one operator subtask's RocksDB instance. The
// per-record baseline in the benchmarks uses the very same options.
type RocksOptions struct {
	// Slot, when set, supplies the shared block cache and write-buffer
	// manager. Without it the instance gets a private 8 MiB cache.
	Slot *SlotMemory
	// WriteBufferSize is the configured memtable size per column family;
	// zero means 64 MiB (RocksDB's and Flink's default). With a Slot, each
	// family gets the smaller of this and its share of the slot's
	// write-buffer capacity (WriteBufferShare), resized as instances open
	// and close in the slot.
	WriteBufferSize int64
	// MaxWriteBufferNumber defaults to 2.
	MaxWriteBufferNumber int
	// BloomBitsPerKey > 0 adds a bloom filter; zero means 10, negative none.
	BloomBitsPerKey int
	// BlockSize defaults to 4 KiB.
	BlockSize int
	// Clock drives the native TTL compaction filter, which physically drops
	// entries whose timestamp plus TTL is at or before Clock's now. nil means
	// no TTL compaction filter: expired entries then stay on disk until
	// overwritten, but are still never returned (reads use the Operator's
	// clock). Pass SystemClock() in production, and the Operator's own clock
	// everywhere else: a filter on the wall clock under a manual clock set in
	// the past would drop entries the operator still considers live.
	Clock *Clock
	// ErrorIfExists refuses to open an existing directory.
	ErrorIfExists bool
	// NoRecordPrefix leaves the join record state's column family
	// (RecordStateName) without the record prefix extractor and memtable
	// prefix bloom it otherwise gets at open (see RecordPrefixExtractor).
	NoRecordPrefix bool
	// InsertHintPrefix > 0 sets RocksDB's
	// memtable_insert_with_hint_prefix_extractor to a fixed prefix of that
	// many bytes (e.g. the key-group prefix) on every family; zero leaves
	// it unset (the default: the micro-benchmarks measured no gain). Only
	// RocksDB's skip list (SkipListMemTable) uses the hints.
	InsertHintPrefix int
	// SkipListMemTable uses RocksDB's own skip-list memtable instead of the
	// finger memtable (memtable.cc), whose inserts start from the previous
	// insert's position: O(log D) for keys D entries apart, which is what a
	// sorted bundle commit produces. Both have the same read path.
	SkipListMemTable bool
}

func (o *RocksOptions) defaults() {
	if o.WriteBufferSize == 0 {
		o.WriteBufferSize = 64 << 20
	}
	if o.MaxWriteBufferNumber == 0 {
		o.MaxWriteBufferNumber = 2
	}
	if o.BloomBitsPerKey == 0 {
		o.BloomBitsPerKey = 10
	}
	if o.BlockSize == 0 {
		o.BlockSize = 4 << 10
	}
}

type rocksBackend struct {
	mu     sync.RWMutex
	closed bool
	dir    string
	layout Layout
	states []StateDesc
	ropts  RocksOptions

	db       *grocksdb.DB
	handles  []*grocksdb.ColumnFamilyHandle // every opened family
	cfs      []*grocksdb.ColumnFamilyHandle // by state id
	opts     []*grocksdb.Options            // kept alive until Close
	cache    *grocksdb.Cache                // private cache, when no slot
	bbto     *grocksdb.BlockBasedTableOptions
	wo       *grocksdb.WriteOptions
	slotNat  *C.sfs_slot_memory_t
	member   *slotMember // this instance's share of the slot's write buffers
	cdb      *C.rocksdb_t
	ccfs     []*C.rocksdb_column_family_handle_t
	cfIDs    []uint32 // column family id by state id (write batch records)
	cro      *C.rocksdb_readoptions_t
	scratchP sync.Pool
}

// ColumnFamilyOptions builds the options every state's column family (and
// the per-record baseline) uses. The returned options own native memory:
// Destroy them after the DB that uses them is closed.
// Options of a list state (kind KindList) also get the native list merge
// operator, and its TTL filter drops expired elements (see list.go).
func columnFamilyOptions(o RocksOptions, kind Kind, ttlMillis int64, slot *C.sfs_slot_memory_t, private *grocksdb.BlockBasedTableOptions) (*grocksdb.Options, error) {
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	opts.SetCreateIfMissingColumnFamilies(true)
	opts.SetErrorIfExists(o.ErrorIfExists)
	opts.SetAtomicFlush(true)
	opts.SetWriteBufferSize(uint64(o.WriteBufferSize))
	opts.SetMaxWriteBufferNumber(o.MaxWriteBufferNumber)
	opts.SetMaxBackgroundJobs(2)
	opts.SetCompression(grocksdb.SnappyCompression)
	if slot != nil {
		arena := ArenaBlockSize(o.WriteBufferSize, int64(C.sfs_slot_memory_wbm_capacity(slot)))
		bits := o.BloomBitsPerKey
		if bits < 0 {
			bits = 0
		}
		if rc := C.sfs_options_apply_slot(nativeOptions(opts), slot, C.size_t(o.BlockSize), C.int(bits), C.size_t(arena)); rc != 0 {
			opts.Destroy()
			return nil, fmt.Errorf("engine: applying slot memory to options failed (%d)", int(rc))
		}
	} else if private != nil {
		opts.SetBlockBasedTableFactory(private)
	}
	if !o.SkipListMemTable {
		C.sfs_options_set_finger_memtable(nativeOptions(opts))
	}
	if o.InsertHintPrefix > 0 {
		C.sfs_options_set_insert_hint_prefix(nativeOptions(opts), C.size_t(o.InsertHintPrefix))
	}
	if kind == KindList {
		setListMergeOperator(opts)
	}
	if ttlMillis > 0 && o.Clock != nil {
		f := newNativeTTLFilter(ttlMillis, o.Clock)
		if kind == KindList {
			f = newNativeListTTLFilter(ttlMillis, o.Clock)
		}
		if f == nil {
			opts.Destroy()
			return nil, errors.New("engine: cannot create the TTL compaction filter")
		}
		opts.SetCompactionFilter(grocksdb.NewNativeCompactionFilter(unsafe.Pointer(f)))
	}
	return opts, nil
}

func privateTableOptions(o RocksOptions) (*grocksdb.BlockBasedTableOptions, *grocksdb.Cache) {
	cache := grocksdb.NewLRUCache(8 << 20)
	t := grocksdb.NewDefaultBlockBasedTableOptions()
	t.SetBlockCache(cache)
	t.SetBlockSize(o.BlockSize)
	t.SetCacheIndexAndFilterBlocks(true)
	if o.BloomBitsPerKey > 0 {
		t.SetFilterPolicy(grocksdb.NewBloomFilter(float64(o.BloomBitsPerKey)))
	}
	return t, cache
}

// OpenRocksDB opens (creating if needed) one operator subtask's RocksDB
// instance in dir, one column family per declared state.
func OpenRocksDB(dir string, layout Layout, states []StateDesc, ro RocksOptions) (Backend, error) {
	return openRocks(dir, layout, states, ro, false)
}

// openRocks is the one open path of OpenRocksDB and
// OpenRocksDBKeyGroupFiles; keyGroupFiles adds the key-group SST
// partitioner to every state's column family.
func openRocks(dir string, layout Layout, states []StateDesc, ro RocksOptions, keyGroupFiles bool) (Backend, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if err := checkStates(states); err != nil {
		return nil, err
	}
	ro.defaults()
	b := &rocksBackend{dir: dir, layout: layout, states: append([]StateDesc(nil), states...), ropts: ro}
	if ro.Slot != nil {
		nat, err := ro.Slot.acquire()
		if err != nil {
			return nil, err
		}
		b.slotNat = nat
		b.member = &slotMember{configured: ro.WriteBufferSize}
		b.ropts.WriteBufferSize = ro.Slot.join(b.member, len(states))
	} else {
		b.bbto, b.cache = privateTableOptions(ro)
	}
	if err := b.open(keyGroupFiles); err != nil {
		b.release()
		return nil, err
	}
	return b, nil
}

func (b *rocksBackend) open(keyGroupFiles bool) error {
	base, err := columnFamilyOptions(b.ropts, 0, 0, b.slotNat, b.bbto)
	if err != nil {
		return err
	}
	b.opts = append(b.opts, base)
	names := []string{"default"}
	cfOpts := []*grocksdb.Options{base}
	for _, s := range b.states {
		o, err := columnFamilyOptions(b.ropts, s.Kind, s.TTL.Milliseconds(), b.slotNat, b.bbto)
		if err != nil {
			return err
		}
		if keyGroupFiles {
			setKeyGroupPartitioner(o, b.layout.Width())
		}
		b.opts = append(b.opts, o)
		if recordPrefixState(s) && !b.ropts.NoRecordPrefix {
			if err := setRecordPrefix(o, b.layout.Width()); err != nil {
				return err
			}
		}
		names = append(names, s.Name)
		cfOpts = append(cfOpts, o)
	}
	// Families that exist on disk but are not declared must be opened too.
	if existing, err := grocksdb.ListColumnFamilies(base, b.dir); err == nil {
		declared := make(map[string]bool, len(names))
		for _, n := range names {
			declared[n] = true
		}
		for _, n := range existing {
			if !declared[n] {
				names = append(names, n)
				cfOpts = append(cfOpts, base)
			}
		}
	}
	db, handles, err := grocksdb.OpenDbColumnFamilies(base, b.dir, names, cfOpts)
	if err != nil {
		return fmt.Errorf("engine: open rocksdb %s: %w", b.dir, err)
	}
	b.db = db
	b.handles = handles
	b.cfs = handles[1 : 1+len(b.states)]
	b.cdb = nativeDB(db)
	b.ccfs = make([]*C.rocksdb_column_family_handle_t, len(b.cfs))
	b.cfIDs = make([]uint32, len(b.cfs))
	for i, h := range b.cfs {
		b.ccfs[i] = nativeCF(h)
		b.cfIDs[i] = uint32(C.rocksdb_column_family_handle_get_id(b.ccfs[i]))
	}
	b.cro = C.rocksdb_readoptions_create()
	b.wo = grocksdb.NewDefaultWriteOptions()
	b.wo.DisableWAL(true)
	if b.member != nil {
		return b.ropts.Slot.register(b.member, b.cdb, b.ccfs)
	}
	return nil
}

func (b *rocksBackend) release() {
	if b.member != nil {
		b.ropts.Slot.leave(b.member, len(b.states))
		b.member = nil
	}
	if b.db != nil {
		for _, h := range b.handles {
			h.Destroy()
		}
		b.db.Close()
		b.db = nil
	}
	if b.cro != nil {
		C.rocksdb_readoptions_destroy(b.cro)
		b.cro = nil
	}
	if b.wo != nil {
		b.wo.Destroy()
		b.wo = nil
	}
	for _, o := range b.opts {
		o.Destroy()
	}
	b.opts = nil
	if b.bbto != nil {
		b.bbto.Destroy()
		b.bbto = nil
	}
	if b.cache != nil {
		b.cache.Destroy()
		b.cache = nil
	}
	if b.slotNat != nil {
		b.slotNat = nil
		b.ropts.Slot.release()
	}
}

func (b *rocksBackend) Name() string        { return "rocksdb" }
func (b *rocksBackend) Layout() Layout      { return b.layout }
func (b *rocksBackend) States() []StateDesc { return b.states }

func (b *rocksBackend) check(st int) error {
	if b.closed {
		return ErrClosed
	}
	if st < 0 || st >= len(b.cfs) {
		return ErrUnknownState
	}
	return nil
}

type mgScratch struct {
	keybuf []byte
	lens   []C.size_t
	states []C.uint16_t
	vptrs  []*C.char
	vlens  []C.size_t
}

// MultiGet runs RocksDB's batched MultiGet through the shim: keys are packed
// into one buffer, values come back pinned and are handed to fn straight from
// RocksDB's memory, then released together.
func (b *rocksBackend) MultiGet(st int, keys [][]byte, fn func(i int, val []byte, ok bool)) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.check(st); err != nil {
		return err
	}
	n := len(keys)
	if n == 0 {
		return nil
	}
	sc, _ := b.scratchP.Get().(*mgScratch)
	if sc == nil {
		sc = &mgScratch{}
	}
	defer b.scratchP.Put(sc)
	sc.keybuf = sc.keybuf[:0]
	sc.lens = sc.lens[:0]
	for _, k := range keys {
		sc.keybuf = append(sc.keybuf, k...)
		sc.lens = append(sc.lens, C.size_t(len(k)))
	}
	if cap(sc.vptrs) < n {
		sc.vptrs = make([]*C.char, n)
		sc.vlens = make([]C.size_t, n)
	}
	vptrs, vlens := sc.vptrs[:n], sc.vlens[:n]
	var kb *C.char
	if len(sc.keybuf) > 0 {
		kb = (*C.char)(unsafe.Pointer(&sc.keybuf[0]))
	} else {
		// all keys empty: any valid address will do
		var z byte
		kb = (*C.char)(unsafe.Pointer(&z))
	}
	var pins unsafe.Pointer
	cerr := C.sfs_multiget(b.cdb, b.cro, b.ccfs[st], C.size_t(n), kb, &sc.lens[0], &vptrs[0], &vlens[0], &pins)
	defer C.sfs_multiget_release(pins, C.size_t(n))
	if err := cError(cerr); err != nil {
		return fmt.Errorf("engine: multiget on state %q: %w", b.states[st].Name, err)
	}
	for i := 0; i < n; i++ {
		if vptrs[i] == nil {
			fn(i, nil, false)
			continue
		}
		fn(i, unsafe.Slice((*byte)(unsafe.Pointer(vptrs[i])), int(vlens[i])), true)
	}
	return nil
}

// MultiGetStates reads keys of several states in one batched MultiGet.
func (b *rocksBackend) MultiGetStates(sts []int, keys [][]byte, fn func(i int, val []byte, ok bool)) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if len(sts) != len(keys) {
		return errors.New("engine: MultiGetStates: states and keys differ in length")
	}
	n := len(keys)
	if n == 0 {
		return nil
	}
	sc, _ := b.scratchP.Get().(*mgScratch)
	if sc == nil {
		sc = &mgScratch{}
	}
	defer b.scratchP.Put(sc)
	sc.keybuf, sc.lens, sc.states = sc.keybuf[:0], sc.lens[:0], sc.states[:0]
	for i, k := range keys {
		if sts[i] < 0 || sts[i] >= len(b.cfs) {
			return ErrUnknownState
		}
		sc.keybuf = append(sc.keybuf, k...)
		sc.lens = append(sc.lens, C.size_t(len(k)))
		sc.states = append(sc.states, C.uint16_t(sts[i]))
	}
	if cap(sc.vptrs) < n {
		sc.vptrs = make([]*C.char, n)
		sc.vlens = make([]C.size_t, n)
	}
	vptrs, vlens := sc.vptrs[:n], sc.vlens[:n]
	var z byte
	kb := (*C.char)(unsafe.Pointer(&z))
	if len(sc.keybuf) > 0 {
		kb = (*C.char)(unsafe.Pointer(&sc.keybuf[0]))
	}
	var pins unsafe.Pointer
	cerr := C.sfs_multiget_cfs(b.cdb, &b.ccfs[0], C.size_t(len(b.ccfs)), C.size_t(n), &sc.states[0], kb, &sc.lens[0], &vptrs[0], &vlens[0], &pins)
	defer C.sfs_multiget_cfs_release(pins)
	if err := cError(cerr); err != nil {
		return fmt.Errorf("engine: multiget: %w", err)
	}
	for i := 0; i < n; i++ {
		if vptrs[i] == nil {
			fn(i, nil, false)
			continue
		}
		fn(i, unsafe.Slice((*byte)(unsafe.Pointer(vptrs[i])), int(vlens[i])), true)
	}
	return nil
}

func (b *rocksBackend) Scan(st int, lower, upper []byte, fn func(key, val []byte) bool) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.check(st); err != nil {
		return err
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	if upper != nil {
		ro.SetIterateUpperBound(upper)
	}
	it := b.db.NewIteratorCF(ro, b.cfs[st])
	defer it.Close()
	if len(lower) > 0 {
		it.Seek(lower)
	} else {
		it.SeekToFirst()
	}
	for ; it.Valid(); it.Next() {
		k := it.Key()
		v := it.Value()
		cont := fn(k.Data(), v.Data())
		k.Free()
		v.Free()
		if !cont {
			break
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("engine: scan of state %q: %w", b.states[st].Name, err)
	}
	return nil
}

func (b *rocksBackend) DeleteRange(st int, lower, upper []byte) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.check(st); err != nil {
		return err
	}
	if upper == nil {
		// Bound the range just past the last stored key.
		ro := grocksdb.NewDefaultReadOptions()
		it := b.db.NewIteratorCF(ro, b.cfs[st])
		it.SeekToLast()
		if it.Valid() {
			k := it.Key()
			upper = append(append([]byte(nil), k.Data()...), 0)
			k.Free()
		}
		err := it.Err()
		it.Close()
		ro.Destroy()
		if err != nil {
			return err
		}
		if upper == nil {
			return nil // empty
		}
	}
	if err := b.db.DeleteRangeCF(b.wo, b.cfs[st], lower, upper); err != nil {
		return fmt.Errorf("engine: delete range on state %q: %w", b.states[st].Name, err)
	}
	return nil
}

// Flush writes every column family's memtables to SST files in one atomic
// flush and waits: all batches committed before Flush survive a crash.
func (b *rocksBackend) Flush() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	return cError(C.sfs_flush_cfs(b.cdb, &b.ccfs[0], C.size_t(len(b.ccfs))))
}

func (b *rocksBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	b.closed = true
	b.release()
	return nil
}

// Property reads an integer RocksDB property summed over the state
// families (e.g. "rocksdb.cur-size-all-mem-tables").
func (b *rocksBackend) Property(name string) (uint64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return 0, false
	}
	var total uint64
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	found := false
	for _, cf := range b.handles {
		var v C.uint64_t
		if C.rocksdb_property_int_cf(b.cdb, nativeCF(cf), cname, &v) == 0 {
			total += uint64(v)
			found = true
		}
	}
	return total, found
}

// Property reads an integer RocksDB property (for example
// "rocksdb.cur-size-all-mem-tables", "rocksdb.estimate-table-readers-mem",
// "rocksdb.estimate-num-keys") summed over every column family of a RocksDB
// backend; ok is false for other backends or unknown properties.
func Property(be Backend, name string) (v uint64, ok bool) {
	if r, isRocks := be.(*rocksBackend); isRocks {
		return r.Property(name)
	}
	return 0, false
}

// rocksBatch packs operations into Go buffers and hands them to RocksDB in
// one native call at Commit (one WriteBatch, one write, WAL off).
type rocksBatch struct {
	b  *rocksBackend
	wo *C.rocksdb_writeoptions_t // nil once closed
	// rep is the batch in RocksDB's WriteBatch format, built here and handed
	// over in one call: a 12-byte header (sequence number, filled in by
	// RocksDB, and the record count, little-endian) followed by records: a
	// tag byte, the column family id as a varint when not the default
	// family, then varint-length-prefixed key (and value).
	rep []byte
	n   int
}

// WriteBatch record tags (RocksDB's ValueType values), in the default
// column family and in another one (followed by the family id).
const (
	wbDeletion   = 0x0
	wbValue      = 0x1
	wbMerge      = 0x2
	wbCFDeletion = 0x4
	wbCFValue    = 0x5
	wbCFMerge    = 0x6
	wbHeaderLen  = 12
)

func (b *rocksBackend) NewBatch() Batch {
	wo := C.rocksdb_writeoptions_create()
	C.rocksdb_writeoptions_disable_WAL(wo, 1)
	return &rocksBatch{b: b, wo: wo}
}

func (w *rocksBatch) record(tag, cfTag byte, st int, key []byte) {
	if len(w.rep) == 0 {
		w.rep = append(w.rep, make([]byte, wbHeaderLen)...)
	}
	if cf := w.b.cfIDs[st]; cf == 0 {
		w.rep = append(w.rep, tag)
	} else {
		w.rep = binary.AppendUvarint(append(w.rep, cfTag), uint64(cf))
	}
	w.rep = append(binary.AppendUvarint(w.rep, uint64(len(key))), key...)
	w.n++
}

func (w *rocksBatch) Put(st int, key, val []byte) {
	w.record(wbValue, wbCFValue, st, key)
	w.rep = append(binary.AppendUvarint(w.rep, uint64(len(val))), val...)
}

// Merge queues a list merge (the state's family has the list merge
// operator).
func (w *rocksBatch) Merge(st int, key, val []byte) {
	w.record(wbMerge, wbCFMerge, st, key)
	w.rep = append(binary.AppendUvarint(w.rep, uint64(len(val))), val...)
}

func (w *rocksBatch) Delete(st int, key []byte) { w.record(wbDeletion, wbCFDeletion, st, key) }

func (w *rocksBatch) Len() int { return w.n }

func (w *rocksBatch) reset() {
	w.rep, w.n = w.rep[:0], 0
	if cap(w.rep) > 64<<20 {
		w.rep = nil
	}
}

func (w *rocksBatch) Commit() error {
	w.b.mu.RLock()
	defer w.b.mu.RUnlock()
	defer w.reset()
	if w.b.closed {
		return ErrClosed
	}
	if w.wo == nil {
		return errors.New("engine: write batch closed")
	}
	if w.n == 0 {
		return nil
	}
	binary.LittleEndian.PutUint64(w.rep[0:8], 0)
	binary.LittleEndian.PutUint32(w.rep[8:12], uint32(w.n))
	cerr := C.sfs_write_rep(w.b.cdb, w.wo, (*C.char)(unsafe.Pointer(&w.rep[0])), C.size_t(len(w.rep)))
	if err := cError(cerr); err != nil {
		return fmt.Errorf("engine: write batch: %w", err)
	}
	if m := w.b.member; m != nil && m.retire.Load() {
		// The slot's write-buffer share shrank since these memtables were
		// created: flush them once, so the next ones take the new (smaller)
		// write buffer and arena block. The batch is committed either way;
		// a failed flush only delays that.
		m.retire.Store(false)
		_ = cError(C.sfs_flush_cfs(w.b.cdb, &w.b.ccfs[0], C.size_t(len(w.b.ccfs))))
	}
	return nil
}

func (w *rocksBatch) Close() {
	if w.wo != nil {
		C.rocksdb_writeoptions_destroy(w.wo)
		w.wo = nil
	}
}

// fingerInserts returns the inserts into finger memtables, summed over
// freed memtables.
func fingerInserts() uint64 { return uint64(C.sfs_finger_inserts()) }

// usesFingerMemtable reports whether o has the finger memtable.
func usesFingerMemtable(o *grocksdb.Options) bool {
	return C.sfs_options_uses_finger_memtable(nativeOptions(o)) != 0
}

// fingerBlockSize is the arena block size the last finger memtable saw.
func fingerBlockSize() int64 { return int64(C.sfs_finger_block_size()) }
