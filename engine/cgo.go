package engine

// #cgo CFLAGS: -O2
// #cgo CXXFLAGS: -std=c++17 -O2
// #cgo LDFLAGS: -lrocksdb -lstdc++
// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"time"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// The handles below are read from grocksdb's wrapper structs, whose first
// field is the C API pointer (true for grocksdb v1.7.15, the version go.mod
// pins; TestNativeHandles checks each one against the C API).

func nativeDB(db *grocksdb.DB) *C.rocksdb_t {
	return *(**C.rocksdb_t)(unsafe.Pointer(db))
}

func nativeCF(cf *grocksdb.ColumnFamilyHandle) *C.rocksdb_column_family_handle_t {
	return *(**C.rocksdb_column_family_handle_t)(unsafe.Pointer(cf))
}

func nativeOptions(o *grocksdb.Options) *C.rocksdb_options_t {
	return *(**C.rocksdb_options_t)(unsafe.Pointer(o))
}

// cError converts and frees a C error string.
func cError(e *C.char) error {
	if e == nil {
		return nil
	}
	s := C.GoString(e)
	C.free(unsafe.Pointer(e))
	return errors.New(s)
}

// ttlFilterDropped counts the entries the native TTL filters dropped.
func ttlFilterDropped() int64 { return int64(C.sfs_ttl_filter_dropped()) }

// optionsUseSlot reports whether opts use the slot's cache and write-buffer
// manager, and returns the arena block and write-buffer sizes the native
// options hold.
func optionsUseSlot(o *grocksdb.Options, s *SlotMemory) (uses bool, arena, writeBuffer int64) {
	n := nativeOptions(o)
	return C.sfs_options_uses_slot(n, s.native) == 1,
		int64(C.sfs_options_arena_block_size(n)), int64(C.sfs_options_write_buffer_size(n))
}

// threadCPU is the CPU time the calling OS thread has used.
func threadCPU() time.Duration { return time.Duration(C.sfs_thread_cpu_ns()) }

// newNativeTTLFilter creates the native TTL compaction filter (owned by the
// options it is set on).
func newNativeTTLFilter(ttlMillis int64, clock *Clock) *C.rocksdb_compactionfilter_t {
	return C.sfs_ttl_filter_new(C.int64_t(ttlMillis), clock.c)
}

// newNativeListTTLFilter creates the native list TTL compaction filter.
func newNativeListTTLFilter(ttlMillis int64, clock *Clock) *C.rocksdb_compactionfilter_t {
	return C.sfs_list_ttl_filter_new(C.int64_t(ttlMillis), clock.c)
}

// setListMergeOperator gives opts the native list merge operator (owned by
// the options from then on).
func setListMergeOperator(o *grocksdb.Options) {
	C.rocksdb_options_set_merge_operator(nativeOptions(o), C.sfs_list_merge_operator_new())
}

// listElemsDropped counts the list elements the native list filters dropped.
func listElemsDropped() int64 { return int64(C.sfs_list_elems_dropped()) }

// nativeListMerge runs the native merge operator's core on vals (for tests
// comparing it with mergeListValues); ok is false when it refuses them.
func nativeListMerge(vals [][]byte) (out []byte, ok bool) {
	n := len(vals)
	ptrs := C.malloc(C.size_t(n+1) * C.size_t(unsafe.Sizeof(uintptr(0))))
	lens := C.malloc(C.size_t(n+1) * C.size_t(unsafe.Sizeof(C.size_t(0))))
	defer C.free(ptrs)
	defer C.free(lens)
	ps := unsafe.Slice((**C.char)(ptrs), n+1)
	ls := unsafe.Slice((*C.size_t)(lens), n+1)
	for i, v := range vals {
		// a private C copy (never appended to the caller's slice)
		c := (*C.char)(C.malloc(C.size_t(len(v) + 1)))
		copy(unsafe.Slice((*byte)(unsafe.Pointer(c)), len(v)+1), v)
		ps[i] = c
		ls[i] = C.size_t(len(v))
	}
	defer func() {
		for i := range vals {
			C.free(unsafe.Pointer(ps[i]))
		}
	}()
	var outLen C.size_t
	r := C.sfs_list_merge((**C.char)(ptrs), (*C.size_t)(lens), C.int(n), &outLen)
	if r == nil {
		return nil, false
	}
	defer C.free(unsafe.Pointer(r))
	return C.GoBytes(unsafe.Pointer(r), C.int(outLen)), true
}

// RocksDB's per-thread perf counting levels (rocksdb::PerfLevel).
const (
	perfLevelDisable = 1 // no perf_context counters
	perfLevelDefault = 2 // kEnableCount, the library default
)

// setPerfLevel sets RocksDB's perf level for the calling OS thread.
func setPerfLevel(level int) { C.rocksdb_set_perf_level(C.int(level)) }

// Measurement hooks for the benchmark harnesses (internal/bench).

// PerfLevelDefault is RocksDB's default per-thread perf level
// (kEnableCount).
const PerfLevelDefault = perfLevelDefault

// SetPerfLevel sets RocksDB's perf counting level (rocksdb::PerfLevel, 1 =
// disabled … 5 = all timers) for the calling OS thread; lock the goroutine
// to its thread around the measured code.
func SetPerfLevel(level int) { setPerfLevel(level) }

// ThreadCPU is the CPU time the calling OS thread has used; lock the
// goroutine to its thread between two readings.
func ThreadCPU() time.Duration { return threadCPU() }
