package engine

// #include <stdlib.h>
// #include "shim.h"
// #include "shim_checkpoint.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// Hooks for native checkpoints (package package checkpoint): a RocksDB
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
// whose column families hold exactly the given SST files, with their
// sequence numbers, as a subset of some checkpoint. The files are read from
// fileDir by name and hard-linked into dir. Column families without files
// are not created (OpenRocksDB creates them empty).
//
// RocksDB 7.8 imports no two overlapping files into one level, and level-0
// files usually overlap. Levels are therefore reassigned, newest data
// highest: level-0 files in descending sequence order, grouped while they
// do not overlap, then the levels 1 and up, each group or level on its own
// level, the oldest on the last level (see importLevels). When that needs
// more than the 7 levels, the error satisfies errors.Is(err,
// ErrImportOverlap) and the caller must restore the checkpoint as a whole
// (CheckImportable tells in advance).
//
// The import is bounded by ImportTimeout; ImportSSTFilesContext also by a
// context.
func ImportSSTFiles(dir, fileDir string, files []SSTFile) error {
	return ImportSSTFilesContext(context.Background(), dir, fileDir, files)
}

// ImportTimeout bounds one ImportSSTFiles call. An import links files and
// reads their index blocks; it takes seconds even for many gigabytes.
var ImportTimeout = 5 * time.Minute

// ErrImportStalled: an import did not finish within its bound (or its
// context ended first). The native call cannot be interrupted: it is
// abandoned and finishes (and cleans up) in the background, so dir is left
// as it is and must not be reused; restore into another directory.
var ErrImportStalled = errors.New("engine: SST import did not finish in time")

// ImportSSTFilesContext is ImportSSTFiles returning when ctx ends or
// ImportTimeout passes, whichever is first, with an error satisfying
// errors.Is(err, ErrImportStalled).
func ImportSSTFilesContext(ctx context.Context, dir, fileDir string, files []SSTFile) error {
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
	for _, cf := range order {
		fs, err := importLevels(byCF[cf])
		if err != nil {
			return fmt.Errorf("engine: import into %s, family %q: %w", dir, cf, err)
		}
		byCF[cf] = fs
	}
	if ImportTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ImportTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: import of %d files into %s: %v", ErrImportStalled, len(files), dir, err)
	}
	done := make(chan error, 1)
	go func() { done <- importNative(dir, fileDir, order, byCF) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: import of %d files into %s: %v", ErrImportStalled, len(files), dir, ctx.Err())
	}
}

// importNative opens a fresh RocksDB in dir and imports each family's
// files (levels already assigned). The directory only carries the files
// into the backend that opens it next, so the import DB runs no background
// work: auto compactions are off (a compaction scheduled by the import
// would otherwise run, and be waited for at close, for nothing) and the
// write-stall triggers are out of reach of any file count.
func importNative(dir, fileDir string, order []string, byCF map[string][]SSTFile) error {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	opts.SetErrorIfExists(true)
	opts.SetDisableAutoCompactions(true)
	opts.SetLevel0SlowdownWritesTrigger(1 << 30)
	opts.SetLevel0StopWritesTrigger(1 << 30)
	opts.SetLevel0FileNumCompactionTrigger(1 << 30)
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
		if _, err := importLevels(fs); err != nil {
			return fmt.Errorf("family %q: %w", cf, err)
		}
	}
	return nil
}

// ErrImportOverlap: the files cannot be arranged into RocksDB's levels
// without two overlapping files on one level.
var ErrImportOverlap = errors.New("engine: SST files overlap too much to import")

// importNumLevels is RocksDB's default number of levels.
const importNumLevels = 7

// importLevels returns fs with levels reassigned for import (see
// ImportSSTFiles); newer data always stays on a lower level than older
// data it may shadow.
func importLevels(fs []SSTFile) ([]SSTFile, error) {
	var l0 []SSTFile
	byLevel := map[int][]SSTFile{}
	maxLevel := 0
	for _, f := range fs {
		if f.Level == 0 {
			l0 = append(l0, f)
			continue
		}
		byLevel[f.Level] = append(byLevel[f.Level], f)
		maxLevel = max(maxLevel, f.Level)
	}
	sort.Slice(l0, func(i, j int) bool { return l0[i].LargestSeqno > l0[j].LargestSeqno })
	var runs [][]SSTFile
	for _, f := range l0 {
		if n := len(runs); n > 0 && !overlapsAny(runs[n-1], f) {
			runs[n-1] = append(runs[n-1], f)
			continue
		}
		runs = append(runs, []SSTFile{f})
	}
	for lvl := 1; lvl <= maxLevel; lvl++ {
		if l := byLevel[lvl]; len(l) > 0 {
			for i := range l {
				if overlapsAny(l[:i], l[i]) {
					return nil, fmt.Errorf("%w: level %d files overlap (%s)", ErrImportOverlap, lvl, l[i].Name)
				}
			}
			runs = append(runs, l)
		}
	}
	if len(runs) > importNumLevels {
		return nil, fmt.Errorf("%w: %d sorted runs, %d levels", ErrImportOverlap, len(runs), importNumLevels)
	}
	// The runs take the last levels, the oldest the bottom one: nothing
	// lands on level 0 unless all 7 levels are needed. Piling every file
	// of a key-group layout (tens of non-overlapping files) onto level 0
	// put the restored backend past its write-stall triggers, so its first
	// writes waited for a compaction of everything just imported.
	first := importNumLevels - len(runs)
	out := make([]SSTFile, 0, len(fs))
	for i, r := range runs {
		for _, f := range r {
			f.Level = first + i
			out = append(out, f)
		}
	}
	return out, nil
}

func overlapsAny(run []SSTFile, f SSTFile) bool {
	for _, g := range run {
		if string(g.Smallest) <= string(f.Largest) && string(f.Smallest) <= string(g.Largest) {
			return true
		}
	}
	return false
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
func CompactNative(b Backend) error { return CompactNativeRange(b, nil, nil) }

// OpenRocksDBKeyGroupFiles is OpenRocksDB with every state's compactions
// cutting SST files at key-group boundaries (a fixed-prefix SST partitioner
// over the key-group prefix): after compaction each SST file holds one key
// group, so a rescaled restore fetches only the files of its key groups.
// Flushes still write files spanning all key groups.
func OpenRocksDBKeyGroupFiles(dir string, layout Layout, states []StateDesc, ro RocksOptions) (Backend, error) {
	return openRocks(dir, layout, states, ro, true)
}

// setKeyGroupPartitioner makes compactions under o cut SST files at every
// change of the first width bytes (the key-group prefix).
func setKeyGroupPartitioner(o *grocksdb.Options, width int) {
	C.sfs_options_set_prefix_partitioner(nativeOptions(o), C.size_t(width))
}

// CompactNativeRange compacts every state of a RocksDB backend over the
// user keys [lo, hi) (nil bounds are open) and waits. After DeleteRange over the same keys it
// drops the deleted entries and, at the bottom level, the range tombstone
// itself, so no SST file of the backend spans the deleted keys any more.
func CompactNativeRange(b Backend, lo, hi []byte) error {
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
		rb.db.CompactRangeCF(cf, grocksdb.Range{Start: lo, Limit: hi})
	}
	return nil
}
