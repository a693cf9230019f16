// Native helpers for the engine: batched pinned reads, the TTL compaction
// filter, a controllable clock, and the slot-wide cache / write-buffer manager
// that the RocksDB C API does not expose.
#ifndef SFSTATE_ENGINE_SHIM_H
#define SFSTATE_ENGINE_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <rocksdb/c.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- clock -----------------------------------------------------------------

// sfs_clock_t is a millisecond clock shared by Go and the compaction filter.
// manual == 0 means wall clock; otherwise now_ms is returned.
typedef struct sfs_clock_t {
  int64_t now_ms;
  int32_t manual;
} sfs_clock_t;

sfs_clock_t* sfs_clock_new(int manual, int64_t now_ms);
void sfs_clock_free(sfs_clock_t* c);
int64_t sfs_clock_now(const sfs_clock_t* c);
void sfs_clock_set(sfs_clock_t* c, int64_t now_ms);

// ---- TTL compaction filter ---------------------------------------------------

// Creates a compaction filter dropping entries whose 8-byte big-endian
// last-access prefix plus ttl_ms is <= the clock's now. Values shorter than
// 8 bytes are kept. The clock must outlive the filter.
rocksdb_compactionfilter_t* sfs_ttl_filter_new(int64_t ttl_ms,
                                               const sfs_clock_t* clock);
// Number of entries the filters created by this process dropped (for tests).
int64_t sfs_ttl_filter_dropped(void);

// ---- batched pinned reads ----------------------------------------------------

// sfs_multiget runs rocksdb_batched_multi_get_cf over n keys packed back to
// back in keybuf (lengths in keylens). For each key it stores the pinned
// value's address and length into vptrs/vlens (vptrs[i] == 0 when absent),
// keeping the pinnable slices in *pins (to be released with
// sfs_multiget_release). Returns NULL or a malloc'ed error string.
char* sfs_multiget(rocksdb_t* db, const rocksdb_readoptions_t* ro,
                   rocksdb_column_family_handle_t* cf, size_t n,
                   const char* keybuf, const size_t* keylens,
                   const char** vptrs, size_t* vlens, void** pins);
void sfs_multiget_release(void* pins, size_t n);

// ---- list values --------------------------------------------------------------

// The list merge operator ("sfstate.list"): concatenates list values (see
// shim.c for the two formats). sfs_list_merge is its core, exposed for
// tests: merges n values in order into a malloc'ed value, NULL when one is
// malformed.
rocksdb_mergeoperator_t* sfs_list_merge_operator_new(void);
char* sfs_list_merge(const char* const* vals, const size_t* lens, int n,
                     size_t* out_len);
// Compaction filter for list states with a TTL: drops a list whose newest
// element expired, and rewrites per-element lists without their expired
// elements. The clock must outlive the filter.
rocksdb_compactionfilter_t* sfs_list_ttl_filter_new(int64_t ttl_ms,
                                                    const sfs_clock_t* clock);
// Number of list elements the list filters dropped (for tests).
int64_t sfs_list_elems_dropped(void);

// Sets write_buffer_size and arena_block_size (mutable options: they apply
// from each family's next memtable) on n column families. Returns NULL or
// an error string (malloc'ed).
char* sfs_set_write_buffer(rocksdb_t* db, rocksdb_column_family_handle_t** cfs,
                           size_t n, size_t write_buffer, size_t arena);

// CPU time consumed by the calling thread, in nanoseconds.
int64_t sfs_thread_cpu_ns(void);

// ---- slot memory (C++) -------------------------------------------------------

typedef struct sfs_slot_memory_t sfs_slot_memory_t;

// Creates one shared LRU cache (capacity cache_bytes, high-priority pool
// ratio hi_ratio, not strict) and one write-buffer manager of wbm_bytes
// whose memtable memory is charged to that cache.
sfs_slot_memory_t* sfs_slot_memory_new(size_t cache_bytes, double hi_ratio,
                                       size_t wbm_bytes);
void sfs_slot_memory_free(sfs_slot_memory_t* m);
size_t sfs_slot_memory_cache_usage(sfs_slot_memory_t* m);
size_t sfs_slot_memory_cache_pinned_usage(sfs_slot_memory_t* m);
size_t sfs_slot_memory_cache_capacity(sfs_slot_memory_t* m);
size_t sfs_slot_memory_wbm_usage(sfs_slot_memory_t* m);
size_t sfs_slot_memory_wbm_capacity(sfs_slot_memory_t* m);

// Applies the slot's write-buffer manager and a block-based table factory
// using the slot's cache (index and filter blocks cached with high priority,
// top-level index pinned, bloom filter of bits_per_key when > 0) to opts.
// Sets arena_block_size too when arena > 0. Returns 0 on success.
int sfs_options_apply_slot(rocksdb_options_t* opts, sfs_slot_memory_t* m,
                           size_t block_size, int bits_per_key, size_t arena);
// Reads back what sfs_options_apply_slot set (for tests):
// 1 if opts uses m's write-buffer manager and its table factory uses m's cache.
int sfs_options_uses_slot(rocksdb_options_t* opts, sfs_slot_memory_t* m);
size_t sfs_options_arena_block_size(rocksdb_options_t* opts);

// Sets the finger memtable (memtable.cc): a skip list whose inserts start
// from the previous insert's position. Turns allow_concurrent_memtable_write
// off (the finger has one writer).
void sfs_options_set_finger_memtable(rocksdb_options_t* opts);
int sfs_options_uses_finger_memtable(rocksdb_options_t* opts);
// The arena block size the last finger memtable created saw (tests).
size_t sfs_finger_block_size(void);
// Inserts into finger memtables, summed over freed ones.
uint64_t sfs_finger_inserts(void);

// Sets memtable_insert_with_hint_prefix_extractor to a fixed prefix of n
// bytes: memtable inserts of keys sharing that prefix start from the
// position of the previous one.
void sfs_options_set_insert_hint_prefix(rocksdb_options_t* opts, size_t n);
size_t sfs_options_write_buffer_size(rocksdb_options_t* opts);

// Writes a batch given in RocksDB's WriteBatch format (rep, n bytes; the
// header's count must match the records). Returns NULL or a malloc'ed error
// string.
char* sfs_write_rep(rocksdb_t* db, const rocksdb_writeoptions_t* wo,
                    const char* rep, size_t n);

// Batched MultiGet over keys of several column families at once
// (cfs[states[i]] for key i), values pinned as in sfs_multiget; release
// with sfs_multiget_cfs_release.
char* sfs_multiget_cfs(rocksdb_t* db, rocksdb_column_family_handle_t** cfs,
                       size_t ncfs, size_t n, const uint16_t* states,
                       const char* keybuf, const size_t* keylens,
                       const char** vptrs, size_t* vlens, void** pins);
void sfs_multiget_cfs_release(void* pins);

// Flushes the memtables of all n column families in one call (atomically
// when the DB was opened with atomic_flush) and waits. Returns NULL or a
// malloc'ed error string.
char* sfs_flush_cfs(rocksdb_t* db, rocksdb_column_family_handle_t** cfs,
                    size_t n);

// ---- frames: batched scans and SST writes ----------------------------------

// A frame buffer holds (key, value) entries as  u32 klen | u32 vlen | key |
// value  (lengths little-endian), exchanged with Go in one call per batch.

// Copies entries from it into buf as frames until buf is full or it is
// exhausted, advancing it. Returns the number of frames; *used is the bytes
// written; *need is set (and nothing copied) when the next entry alone does
// not fit into cap; *valid is whether it still points at an entry.
size_t sfs_scan_frames(rocksdb_iterator_t* it, char* buf, size_t cap,
                       size_t* used, size_t* need, int* valid);

// Puts the n frames of buf into an SST writer, in order. Returns NULL or a
// malloc'ed error string.
char* sfs_sst_put_frames(rocksdb_sstfilewriter_t* w, const char* buf,
                         size_t n);

#ifdef __cplusplus
}
#endif
#endif
