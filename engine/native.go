package engine

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// The native API: the narrow RocksDB access that tools built on the engine
// (the migration, the record store, rescaling) need beyond Backend, so that
// no package outside engine/ links RocksDB or uses cgo itself.
//
//   - Native (from NativeOf) gives a RocksDB backend's prefix cursors,
//     mutable column-family options and SST ingestion, per state id.
//   - NativeDB is a RocksDB directory opened on its own (read-only for
//     scans, or for bulk loading), by column-family name.
//   - SSTWriter writes SST files (to be ingested) from entries or Frames.
//
// Entries cross the cgo boundary in batches (Frames): one C call copies or
// writes as many entries as fit into a buffer instead of a few calls per
// entry.

// Native is direct access to the RocksDB instance behind a backend. States
// are addressed by state id (the index in Backend.States).
type Native interface {
	// NewPrefixCursor opens a cursor over state st reading the state as of
	// now (see PrefixCursor). Close it before the backend.
	NewPrefixCursor(st int) (*PrefixCursor, error)
	// SetOptions changes mutable column-family options of state st
	// (RocksDB option names and values, e.g. "compression",
	// "kNoCompression").
	SetOptions(st int, keys, values []string) error
	// Ingest adds external SST files (sorted, non-overlapping with each
	// other) to state st; with move the files are moved (hard-linked)
	// instead of copied.
	Ingest(st int, files []string, move bool) error
}

// NativeProvider is implemented by backends with native access: the
// RocksDB backend, and wrappers of a backend that forward it (a wrapper
// embedding Backend does not get it by embedding: it forwards with
// NativeOf on the wrapped backend).
type NativeProvider interface {
	Native() (Native, bool)
}

// NativeOf returns the native access of b, ok=false when b is not backed by
// RocksDB (or does not forward it).
func NativeOf(b Backend) (Native, bool) {
	if p, ok := b.(NativeProvider); ok {
		return p.Native()
	}
	return nil, false
}

// Native implements NativeProvider.
func (b *rocksBackend) Native() (Native, bool) { return rocksNative{b}, true }

type rocksNative struct{ b *rocksBackend }

// cf returns the open family of state st (under b.mu, read-locked by the
// caller).
func (n rocksNative) cf(st int) (*grocksdb.ColumnFamilyHandle, error) {
	if n.b.closed {
		return nil, ErrClosed
	}
	if st < 0 || st >= len(n.b.cfs) {
		return nil, fmt.Errorf("engine: no state %d", st)
	}
	return n.b.cfs[st], nil
}

func (n rocksNative) NewPrefixCursor(st int) (*PrefixCursor, error) {
	n.b.mu.RLock()
	defer n.b.mu.RUnlock()
	cf, err := n.cf(st)
	if err != nil {
		return nil, err
	}
	return newPrefixCursor(n.b.db, cf)
}

func (n rocksNative) SetOptions(st int, keys, values []string) error {
	n.b.mu.RLock()
	defer n.b.mu.RUnlock()
	cf, err := n.cf(st)
	if err != nil {
		return err
	}
	return n.b.db.SetOptionsCF(cf, keys, values)
}

func (n rocksNative) Ingest(st int, files []string, move bool) error {
	n.b.mu.RLock()
	defer n.b.mu.RUnlock()
	cf, err := n.cf(st)
	if err != nil {
		return err
	}
	return ingest(n.b.db, cf, files, move)
}

func ingest(db *grocksdb.DB, cf *grocksdb.ColumnFamilyHandle, files []string, move bool) error {
	io := grocksdb.NewDefaultIngestExternalFileOptions()
	defer io.Destroy()
	io.SetMoveFiles(move)
	return db.IngestExternalFileCF(cf, files, io)
}

// Frames is a batch of (key, value) entries in one buffer, as exchanged
// with RocksDB in one call: each entry is
//
//	u32 klen | u32 vlen | key | value   (lengths little-endian)
type Frames struct {
	b []byte
	n int
}

// NewFrames returns an empty batch with room for capacity bytes.
func NewFrames(capacity int) *Frames { return &Frames{b: make([]byte, 0, capacity)} }

// Reset empties the batch, keeping its buffer.
func (f *Frames) Reset() { f.b, f.n = f.b[:0], 0 }

// Len is the number of entries.
func (f *Frames) Len() int { return f.n }

// Size is the number of bytes the entries take, framing included.
func (f *Frames) Size() int { return len(f.b) }

// Add appends one entry.
func (f *Frames) Add(k, v []byte) {
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(k)))
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(v)))
	f.b = append(f.b, k...)
	f.b = append(f.b, v...)
	f.n++
}

// AddJoined appends one entry whose key is k followed by row, assembled in
// place.
func (f *Frames) AddJoined(k, row, v []byte) {
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(k)+len(row)))
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(v)))
	f.b = append(f.b, k...)
	f.b = append(f.b, row...)
	f.b = append(f.b, v...)
	f.n++
}

// Each visits the entries in order until fn fails. The slices alias the
// buffer.
func (f *Frames) Each(fn func(k, v []byte) error) error {
	b := f.b
	for i := 0; i < f.n; i++ {
		kl := int(binary.LittleEndian.Uint32(b))
		vl := int(binary.LittleEndian.Uint32(b[4:]))
		if err := fn(b[8:8+kl:8+kl], b[8+kl:8+kl+vl:8+kl+vl]); err != nil {
			return err
		}
		b = b[8+kl+vl:]
	}
	return nil
}

// NativeDB is a RocksDB directory opened with every column family, outside
// any backend: read-only (OpenNativeReadOnly) to scan it, or for bulk
// loading (OpenNativeBulk). Families are addressed by name; a name the
// directory does not have reads as empty. Not safe for concurrent use.
type NativeDB struct {
	db       *grocksdb.DB
	opts     *grocksdb.Options
	keepOpts bool // opts are shared and never destroyed
	names    []string
	cfs      map[string]*grocksdb.ColumnFamilyHandle
	all      []*grocksdb.ColumnFamilyHandle
	wo       *grocksdb.WriteOptions // bulk loading
}

// OpenNativeReadOnly opens dir read-only with RocksDB's default options.
func OpenNativeReadOnly(dir string) (*NativeDB, error) {
	opts := grocksdb.NewDefaultOptions()
	names, err := grocksdb.ListColumnFamilies(opts, dir)
	if err != nil {
		opts.Destroy()
		return nil, err
	}
	cfOpts := make([]*grocksdb.Options, len(names))
	for i := range cfOpts {
		cfOpts[i] = opts
	}
	db, hs, err := grocksdb.OpenDbForReadOnlyColumnFamilies(opts, dir, names, cfOpts, false)
	if err != nil {
		opts.Destroy()
		return nil, err
	}
	return newNativeDB(db, opts, names, hs), nil
}

// OpenNativeBulk opens dir for bulk loading (a new database when dir holds
// none): the directory's families plus those of names are opened (created
// when missing), with automatic
// compactions off (ingested files stay as they are), Snappy compression,
// 64 MiB write buffers and writes that skip the WAL (Flush makes them
// durable).
func OpenNativeBulk(dir string, names []string) (*NativeDB, error) {
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	opts.SetCreateIfMissingColumnFamilies(true)
	opts.SetDisableAutoCompactions(true)
	opts.SetCompression(grocksdb.SnappyCompression)
	opts.SetWriteBufferSize(64 << 20)
	have := []string{"default"} // a new database
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err == nil {
		if have, err = grocksdb.ListColumnFamilies(opts, dir); err != nil {
			opts.Destroy()
			return nil, err
		}
	}
	seen := map[string]bool{}
	for _, n := range have {
		seen[n] = true
	}
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			have = append(have, n)
		}
	}
	cfOpts := make([]*grocksdb.Options, len(have))
	for i := range cfOpts {
		cfOpts[i] = opts
	}
	db, hs, err := grocksdb.OpenDbColumnFamilies(opts, dir, have, cfOpts)
	if err != nil {
		opts.Destroy()
		return nil, err
	}
	d := newNativeDB(db, opts, have, hs)
	d.wo = grocksdb.NewDefaultWriteOptions()
	d.wo.DisableWAL(true)
	return d, nil
}

var (
	importOptsOnce sync.Once
	importOpts     *grocksdb.Options
)

// OpenNativeImport opens dir read-only as a directory built from the SST
// files of engine checkpoints (ImportSSTFiles): every file kept open, an
// errors-only info log, and the merge operands of the engine's list
// families folded with ListMergeOperator. Its options are made once and
// never destroyed (grocksdb's Options.Destroy frees a Go merge operator
// that RocksDB already owns).
func OpenNativeImport(dir string) (*NativeDB, error) {
	importOptsOnce.Do(func() {
		o := grocksdb.NewDefaultOptions()
		o.SetMaxOpenFiles(-1)
		o.SetInfoLogLevel(grocksdb.ErrorInfoLogLevel)
		o.SetMergeOperator(ListMergeOperator{})
		importOpts = o
	})
	names, err := grocksdb.ListColumnFamilies(importOpts, dir)
	if err != nil {
		return nil, fmt.Errorf("list column families: %w", err)
	}
	if len(names) == 0 || len(names) > 1<<16 {
		return nil, fmt.Errorf("%d column families", len(names))
	}
	cfOpts := make([]*grocksdb.Options, len(names))
	for i := range cfOpts {
		cfOpts[i] = importOpts
	}
	db, hs, err := grocksdb.OpenDbForReadOnlyColumnFamilies(importOpts, dir, names, cfOpts, false)
	if err != nil {
		return nil, fmt.Errorf("open read-only: %w", err)
	}
	d := newNativeDB(db, importOpts, names, hs)
	d.keepOpts = true
	return d, nil
}

// Families lists the column families of the database, in the order RocksDB
// lists them ("default" first).
func (d *NativeDB) Families() []string { return append([]string(nil), d.names...) }

func newNativeDB(db *grocksdb.DB, opts *grocksdb.Options, names []string, hs []*grocksdb.ColumnFamilyHandle) *NativeDB {
	d := &NativeDB{db: db, opts: opts, names: names, cfs: map[string]*grocksdb.ColumnFamilyHandle{}, all: hs}
	for i, n := range names {
		d.cfs[n] = hs[i]
	}
	return d
}

// Close releases the database; further calls are no-ops.
func (d *NativeDB) Close() {
	if d.db == nil {
		return
	}
	for _, h := range d.all {
		h.Destroy()
	}
	d.db.Close()
	if !d.keepOpts {
		d.opts.Destroy()
	}
	if d.wo != nil {
		d.wo.Destroy()
	}
	d.db = nil
}

func (d *NativeDB) family(cf string) (*grocksdb.ColumnFamilyHandle, error) {
	if d.db == nil {
		return nil, ErrClosed
	}
	h, ok := d.cfs[cf]
	if !ok {
		return nil, fmt.Errorf("engine: no column family %q", cf)
	}
	return h, nil
}

// ScanOptions configure a batched scan of a NativeDB family. The block
// cache is left alone.
type ScanOptions struct {
	// Lower and Upper bound the keys: Lower <= key < Upper (nil: no bound).
	Lower, Upper []byte
	// SkipChecksums does not verify block checksums (files whose bytes
	// were checked otherwise).
	SkipChecksums bool
	// Readahead is the read-ahead size in bytes (0: RocksDB's own,
	// growing per iterator).
	Readahead int
	// BufSize is the batch buffer in bytes (0: 64 KiB).
	BufSize int
}

// fullScan is the scan of Scan and Iter: checksums verified, 2 MiB
// readahead.
func fullScan(bufSize int) ScanOptions { return ScanOptions{Readahead: 2 << 20, BufSize: bufSize} }

// newIter opens a batched iterator over h positioned at o.Lower (or the
// first entry).
func (d *NativeDB) newIter(h *grocksdb.ColumnFamilyHandle, o ScanOptions) *NativeIter {
	p := &NativeIter{ro: C.rocksdb_readoptions_create(), valid: true}
	if o.BufSize <= 0 {
		o.BufSize = 64 << 10
	}
	p.buf = make([]byte, o.BufSize)
	verify := C.uchar(1)
	if o.SkipChecksums {
		verify = 0
	}
	C.rocksdb_readoptions_set_verify_checksums(p.ro, verify)
	C.rocksdb_readoptions_set_fill_cache(p.ro, 0)
	if o.Readahead > 0 {
		C.rocksdb_readoptions_set_readahead_size(p.ro, C.size_t(o.Readahead))
	}
	// RocksDB keeps pointers to the bounds: they live in C memory until
	// Close.
	if o.Lower != nil {
		p.lower = C.CBytes(o.Lower)
		C.rocksdb_readoptions_set_iterate_lower_bound(p.ro, (*C.char)(p.lower), C.size_t(len(o.Lower)))
	}
	if o.Upper != nil {
		p.upper = C.CBytes(o.Upper)
		C.rocksdb_readoptions_set_iterate_upper_bound(p.ro, (*C.char)(p.upper), C.size_t(len(o.Upper)))
	}
	p.it = C.rocksdb_create_iterator_cf(nativeDB(d.db), p.ro, nativeCF(h))
	if o.Lower != nil {
		C.rocksdb_iter_seek(p.it, (*C.char)(p.lower), C.size_t(len(o.Lower)))
	} else {
		C.rocksdb_iter_seek_to_first(p.it)
	}
	return p
}

// Scan visits the entries of family cf in key order (checksums verified),
// copied out in batches of up to bufSize bytes, one C call per batch. An
// entry larger than the buffer is handed over in place (RocksDB's bytes, no
// copy). The slices are valid only during fn. A family the directory does
// not have has no entries.
func (d *NativeDB) Scan(cf string, bufSize int, fn func(k, v []byte) error) error {
	return d.ScanWith(cf, fullScan(bufSize), fn)
}

// ScanWith is Scan with explicit bounds and read options.
func (d *NativeDB) ScanWith(cf string, o ScanOptions, fn func(k, v []byte) error) error {
	if d.db == nil {
		return ErrClosed
	}
	h, ok := d.cfs[cf]
	if !ok {
		return nil
	}
	p := d.newIter(h, o)
	defer p.Close()
	for {
		k, v, ok, err := p.Next()
		if err != nil || !ok {
			return err
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
}

// Iter opens a batched pull iterator over family cf (one yielding nothing
// when the directory does not have cf). Close it before the database.
func (d *NativeDB) Iter(cf string, bufSize int) *NativeIter {
	h, ok := d.cfs[cf]
	if !ok || d.db == nil {
		return &NativeIter{}
	}
	return d.newIter(h, fullScan(max(bufSize, 1)))
}

// NativeIter reads an iterator in batches copied out with one C call each but
// hands entries out one at a time (so that streams can be merged).
type NativeIter struct {
	it           *C.rocksdb_iterator_t
	ro           *C.rocksdb_readoptions_t
	lower, upper unsafe.Pointer // C copies of the bounds
	buf          []byte
	cur          []byte // frames of the current batch not yet handed out
	left         int    // frames in cur
	valid        bool   // the iterator has entries after cur
	big          bool   // the last entry was handed over in place: advance it
}

// Next returns the next entry, ok=false at the end. The slices are valid
// until the following call.
func (p *NativeIter) Next() (k, v []byte, ok bool, err error) {
	if p.it == nil {
		return nil, nil, false, nil
	}
	if p.big {
		p.big = false
		C.rocksdb_iter_next(p.it)
	}
	if p.left == 0 {
		if !p.valid {
			return nil, nil, false, p.iterErr()
		}
		var used, need C.size_t
		var valid C.int
		n := C.sfs_scan_frames(p.it, (*C.char)(unsafe.Pointer(&p.buf[0])), C.size_t(len(p.buf)), &used, &need, &valid)
		if need > 0 {
			var kl, vl C.size_t
			kp := C.rocksdb_iter_key(p.it, &kl)
			vp := C.rocksdb_iter_value(p.it, &vl)
			p.big = true
			return unsafe.Slice((*byte)(unsafe.Pointer(kp)), int(kl)), unsafe.Slice((*byte)(unsafe.Pointer(vp)), int(vl)), true, nil
		}
		p.valid = valid != 0
		p.cur, p.left = p.buf[:int(used)], int(n)
		if n == 0 {
			return nil, nil, false, p.iterErr()
		}
	}
	b := p.cur
	kl := int(binary.LittleEndian.Uint32(b))
	vl := int(binary.LittleEndian.Uint32(b[4:]))
	p.cur = b[8+kl+vl:]
	p.left--
	return b[8 : 8+kl : 8+kl], b[8+kl : 8+kl+vl : 8+kl+vl], true, nil
}

func (p *NativeIter) iterErr() error {
	var cerr *C.char
	C.rocksdb_iter_get_error(p.it, &cerr)
	return cError(cerr)
}

// Close releases the iterator; further calls are no-ops.
func (p *NativeIter) Close() {
	if p.it != nil {
		C.rocksdb_iter_destroy(p.it)
		C.rocksdb_readoptions_destroy(p.ro)
		C.free(p.lower)
		C.free(p.upper)
		p.it, p.ro, p.lower, p.upper = nil, nil, nil, nil
	}
}

// Ingest adds external SST files to family cf (moved when move).
func (d *NativeDB) Ingest(cf string, files []string, move bool) error {
	h, err := d.family(cf)
	if err != nil {
		return err
	}
	return ingest(d.db, h, files, move)
}

// Flush writes family cf's memtable to SST files and waits.
func (d *NativeDB) Flush(cf string) error {
	h, err := d.family(cf)
	if err != nil {
		return err
	}
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	return d.db.FlushCF(h, fo)
}

// Checkpoint creates a RocksDB checkpoint of the database in dir (which
// must not exist): hard links of the SST files plus copies of the rest.
func (d *NativeDB) Checkpoint(dir string) error {
	if d.db == nil {
		return ErrClosed
	}
	cp, err := d.db.NewCheckpoint()
	if err != nil {
		return err
	}
	defer cp.Destroy()
	return cp.CreateCheckpoint(dir, 0)
}

// NewBatch starts a write batch into family cf of a database opened for
// bulk loading.
func (d *NativeDB) NewBatch(cf string) (*NativeBatch, error) {
	h, err := d.family(cf)
	if err != nil {
		return nil, err
	}
	if d.wo == nil {
		return nil, errors.New("engine: native database is read-only")
	}
	return &NativeBatch{d: d, cf: h, b: grocksdb.NewWriteBatch()}, nil
}

// NativeBatch buffers puts into one family of a NativeDB.
type NativeBatch struct {
	d  *NativeDB
	cf *grocksdb.ColumnFamilyHandle
	b  *grocksdb.WriteBatch
}

// Put buffers one entry.
func (b *NativeBatch) Put(k, v []byte) { b.b.PutCF(b.cf, k, v) }

// Commit writes the buffered entries and empties the batch.
func (b *NativeBatch) Commit() error {
	if b.d.db == nil {
		return ErrClosed
	}
	if err := b.d.db.Write(b.d.wo, b.b); err != nil {
		return err
	}
	b.b.Clear()
	return nil
}

// Close releases the batch (uncommitted entries are dropped).
func (b *NativeBatch) Close() {
	if b.b != nil {
		b.b.Destroy()
		b.b = nil
	}
}

// Compression is the block compression of SST files an SSTWriter writes.
type Compression int

const (
	CompressionSnappy Compression = iota // RocksDB's default
	CompressionNone
	CompressionLZ4
)

// SSTOptions configure an SSTWriter.
type SSTOptions struct {
	Compression Compression
	// BlockSize is the data block size in bytes (0: RocksDB's default,
	// 4 KiB).
	BlockSize int
}

// SSTWriter writes SST files for ingestion, one at a time: Open starts a
// file, Put or PutFrames add entries in strictly increasing key order,
// Finish completes it. The options are kept across files; Close releases
// everything (an unfinished file stays incomplete). Not safe for concurrent
// use.
type SSTWriter struct {
	env  *C.rocksdb_envoptions_t
	opts *C.rocksdb_options_t
	bbto *C.rocksdb_block_based_table_options_t
	w    *C.rocksdb_sstfilewriter_t
}

// NewSSTWriter returns a writer with no file open.
func NewSSTWriter(o SSTOptions) *SSTWriter {
	w := &SSTWriter{env: C.rocksdb_envoptions_create(), opts: C.rocksdb_options_create()}
	switch o.Compression {
	case CompressionNone:
		C.rocksdb_options_set_compression(w.opts, C.rocksdb_no_compression)
	case CompressionLZ4:
		C.rocksdb_options_set_compression(w.opts, C.rocksdb_lz4_compression)
	default:
		C.rocksdb_options_set_compression(w.opts, C.rocksdb_snappy_compression)
	}
	if o.BlockSize > 0 {
		w.bbto = C.rocksdb_block_based_options_create()
		C.rocksdb_block_based_options_set_block_size(w.bbto, C.size_t(o.BlockSize))
		C.rocksdb_options_set_block_based_table_factory(w.opts, w.bbto)
	}
	return w
}

// Open starts the file path (an open file is abandoned: Finish it first).
func (w *SSTWriter) Open(path string) error {
	if w.opts == nil {
		return ErrClosed
	}
	w.drop()
	w.w = C.rocksdb_sstfilewriter_create(w.env, w.opts)
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var cerr *C.char
	C.rocksdb_sstfilewriter_open(w.w, cp, &cerr)
	if err := cError(cerr); err != nil {
		w.drop()
		return err
	}
	return nil
}

// Put adds one entry to the open file.
func (w *SSTWriter) Put(k, v []byte) error {
	if w.w == nil {
		return errors.New("engine: SST writer has no open file")
	}
	var cerr *C.char
	C.rocksdb_sstfilewriter_put(w.w, bytesPtr(k), C.size_t(len(k)), bytesPtr(v), C.size_t(len(v)), &cerr)
	return cError(cerr)
}

// PutFrames adds f's entries to the open file with one C call.
func (w *SSTWriter) PutFrames(f *Frames) error {
	if w.w == nil {
		return errors.New("engine: SST writer has no open file")
	}
	if f.n == 0 {
		return nil
	}
	return cError(C.sfs_sst_put_frames(w.w, (*C.char)(unsafe.Pointer(&f.b[0])), C.size_t(f.n)))
}

// Finish completes the open file (a no-op when none is open).
func (w *SSTWriter) Finish() error {
	if w.w == nil {
		return nil
	}
	var cerr *C.char
	C.rocksdb_sstfilewriter_finish(w.w, &cerr)
	w.drop()
	return cError(cerr)
}

func (w *SSTWriter) drop() {
	if w.w != nil {
		C.rocksdb_sstfilewriter_destroy(w.w)
		w.w = nil
	}
}

// Close releases the writer and its options; further calls are no-ops.
func (w *SSTWriter) Close() {
	w.drop()
	if w.opts != nil {
		C.rocksdb_options_destroy(w.opts)
		C.rocksdb_envoptions_destroy(w.env)
		if w.bbto != nil {
			C.rocksdb_block_based_options_destroy(w.bbto)
		}
		w.opts, w.env, w.bbto = nil, nil, nil
	}
}

func bytesPtr(b []byte) *C.char {
	if len(b) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&b[0]))
}
