package engine

// #include <stdlib.h>
// #include "shim.h"
// #include "shim_checkpoint.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// Hooks for native checkpoints (package engine/checkpoint): a RocksDB
// checkpoint of a running backend (hard links), the live SST files of a
// RocksDB directory with key ranges and sequence numbers, and a RocksDB
// directory built from a subset of a checkpoint's SST files.

// ErrNotNative is returned by the native checkpoint hooks for a backend
// that is not RocksDB.
var ErrNotNative = errors.New("engine: backend is not RocksDB")

// NativeDir returns the directory of a RocksDB backend.
func NativeDir(b Backend) (string, error) {
	rb, ok := b.(*rocksBackend)
	if !ok {
		return "", ErrNotNative
	}
	return rb.dir, nil
}

// CreateNativeCheckpoint writes a RocksDB checkpoint of b into dir, which
// must not exist and should be on the same file system as the backend (SST
// files are hard-linked, not copied). Every committed batch is flushed
// first (atomically across the state families), so the checkpoint holds
// the backend's committed state without any WAL. The cost is one memtable
// flush plus one link per live file; it does not grow with the volume
// written since the previous checkpoint beyond the memtables.
func CreateNativeCheckpoint(b Backend, dir string) error {
	rb, ok := b.(*rocksBackend)
	if !ok {
		return ErrNotNative
	}
	rb.mu.RLock()
	defer rb.mu.RUnlock()
	if rb.closed {
		return ErrClosed
	}
	if err := cError(C.sfs_flush_cfs(rb.cdb, &rb.ccfs[0], C.size_t(len(rb.ccfs)))); err != nil {
		return fmt.Errorf("engine: flush before checkpoint of %s: %w", rb.dir, err)
	}
	cp, err := rb.db.NewCheckpoint()
	if err != nil {
		return fmt.Errorf("engine: checkpoint of %s: %w", rb.dir, err)
	}
	defer cp.Destroy()
	// log_size_for_flush 0: flush again inside the checkpoint, so that
	// nothing lives only in a (disabled) WAL.
	if err := cp.CreateCheckpoint(dir, 0); err != nil {
		return fmt.Errorf("engine: checkpoint of %s into %s: %w", rb.dir, dir, err)
	}
	return nil
}

// SSTFile is one live SST file of a RocksDB directory.
type SSTFile struct {
	// Name is the file name inside the directory, e.g. "000012.sst".
	Name string
	// ColumnFamily is the state name ("default" for the default family).
	ColumnFamily string
	Level        int
	Size         int64
	// Smallest and Largest are the smallest and largest user keys (range
	// tombstones included).
	Smallest, Largest           []byte
	SmallestSeqno, LargestSeqno uint64
	Entries, Deletions          uint64
}

// ListSSTFiles opens the RocksDB directory dir read-only, lists its live
// SST files and closes it. Use it on a checkpoint directory: the list is
// exactly the files the checkpoint's MANIFEST references.
func ListSSTFiles(dir string) ([]SSTFile, error) {
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	var files *C.sfs_sst_file_t
	var n C.size_t
	if err := cError(C.sfs_list_sst_files(cdir, &files, &n)); err != nil {
		return nil, fmt.Errorf("engine: list SST files of %s: %w", dir, err)
	}
	defer C.sfs_sst_files_free(files, n)
	out := make([]SSTFile, 0, int(n))
	for _, f := range unsafe.Slice(files, int(n)) {
		out = append(out, SSTFile{
			Name:          C.GoString(f.name),
			ColumnFamily:  C.GoString(f.cf),
			Level:         int(f.level),
			Size:          int64(f.size),
			Smallest:      C.GoBytes(unsafe.Pointer(f.smallest), C.int(f.smallest_len)),
			Largest:       C.GoBytes(unsafe.Pointer(f.largest), C.int(f.largest_len)),
			SmallestSeqno: uint64(f.smallest_seqno),
			LargestSeqno:  uint64(f.largest_seqno),
			Entries:       uint64(f.entries),
			Deletions:     uint64(f.deletions),
		})
	}
	return out, nil
}

// ImportSSTFiles creates a RocksDB directory dir (which must not exist)
// whose column families hold exactly the given SST files, at their levels
// and with their sequence numbers, as a subset of some checkpoint. The files
// are read from fileDir by name and hard-linked into dir. Column families
// without files are not created (OpenRocksDB creates them empty).
//
// RocksDB 7.8 refuses files whose key ranges overlap within one level (in
// practice several level-0 files); the error then satisfies
// errors.Is(err, ErrImportOverlap) and the caller must restore the
// checkpoint as a whole.
func ImportSSTFiles(dir, fileDir string, files []SSTFile) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("engine: import into %s: directory exists", dir)
	}
	byCF := map[string][]SSTFile{}
	var order []string
	for _, f := range files {
		if f.Name == "" || f.Name != filepath.Base(f.Name) {
			return fmt.Errorf("engine: import into %s: bad SST file name %q", dir, f.Name)
		}
		if _, ok := byCF[f.ColumnFamily]; !ok {
			order = append(order, f.ColumnFamily)
		}
		byCF[f.ColumnFamily] = append(byCF[f.ColumnFamily], f)
	}
	for cf, fs := range byCF {
		if err := checkLevelOverlap(fs); err != nil {
			return fmt.Errorf("engine: import into %s, family %q: %w", dir, cf, err)
		}
	}
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	opts.SetErrorIfExists(true)
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		return fmt.Errorf("engine: import into %s: %w", dir, err)
	}
	defer db.Close()
	cfileDir := C.CString(fileDir)
	defer C.free(unsafe.Pointer(cfileDir))
	for _, cf := range order {
		if cf == "default" {
			continue // holds nothing the engine uses
		}
		fs := byCF[cf]
		cfiles := (*C.sfs_sst_file_t)(C.calloc(C.size_t(len(fs)), C.size_t(unsafe.Sizeof(C.sfs_sst_file_t{}))))
		arr := unsafe.Slice(cfiles, len(fs))
		var frees []unsafe.Pointer
		for i, f := range fs {
			name, ccf := C.CString(f.Name), C.CString(cf)
			sm, lg := C.CBytes(nonEmpty(f.Smallest)), C.CBytes(nonEmpty(f.Largest))
			frees = append(frees, unsafe.Pointer(name), unsafe.Pointer(ccf), sm, lg)
			arr[i] = C.sfs_sst_file_t{
				name: name, cf: ccf, level: C.int(f.Level), size: C.uint64_t(f.Size),
				smallest: (*C.char)(sm), smallest_len: C.size_t(len(f.Smallest)),
				largest: (*C.char)(lg), largest_len: C.size_t(len(f.Largest)),
				smallest_seqno: C.uint64_t(f.SmallestSeqno), largest_seqno: C.uint64_t(f.LargestSeqno),
				entries: C.uint64_t(f.Entries), deletions: C.uint64_t(f.Deletions),
			}
		}
		ccfName := C.CString(cf)
		cerr := C.sfs_import_column_family(nativeDB(db), nativeOptions(opts), ccfName, cfiles, C.size_t(len(fs)), cfileDir)
		C.free(unsafe.Pointer(ccfName))
		for _, p := range frees {
			C.free(p)
		}
		C.free(unsafe.Pointer(cfiles))
		if err := cError(cerr); err != nil {
			return fmt.Errorf("engine: import into %s, family %q: %w", dir, cf, err)
		}
	}
	return nil
}

// CheckImportable reports whether ImportSSTFiles can build a directory from
// files (nil) or refuses them (an error satisfying ErrImportOverlap).
func CheckImportable(files []SSTFile) error {
	byCF := map[string][]SSTFile{}
	for _, f := range files {
		byCF[f.ColumnFamily] = append(byCF[f.ColumnFamily], f)
	}
	for cf, fs := range byCF {
		if err := checkLevelOverlap(fs); err != nil {
			return fmt.Errorf("family %q: %w", cf, err)
		}
	}
	return nil
}

// ErrImportOverlap: the SST files of one level overlap, RocksDB 7.8 cannot
// import them as one column family.
var ErrImportOverlap = errors.New("engine: SST files of one level overlap")

func checkLevelOverlap(fs []SSTFile) error {
	byLevel := map[int][]SSTFile{}
	for _, f := range fs {
		byLevel[f.Level] = append(byLevel[f.Level], f)
	}
	for lvl, l := range byLevel {
		for i := range l {
			for j := i + 1; j < len(l); j++ {
				a, b := l[i], l[j]
				if string(a.Smallest) <= string(b.Largest) && string(b.Smallest) <= string(a.Largest) {
					return fmt.Errorf("%w: level %d files %s and %s", ErrImportOverlap, lvl, a.Name, b.Name)
				}
			}
		}
	}
	return nil
}

func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return []byte{0}
	}
	return b
}

// CompactNative compacts every state of a RocksDB backend over its whole
// key range and waits (tests and benchmarks use it to make SST files
// obsolete, as background compaction would).
func CompactNative(b Backend) error {
	rb, ok := b.(*rocksBackend)
	if !ok {
		return ErrNotNative
	}
	rb.mu.RLock()
	defer rb.mu.RUnlock()
	if rb.closed {
		return ErrClosed
	}
	for _, cf := range rb.cfs {
		rb.db.CompactRangeCF(cf, grocksdb.Range{})
	}
	return nil
}
