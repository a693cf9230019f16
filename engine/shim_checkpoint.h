// Native helpers for checkpoints: list the live SST files of a RocksDB
// directory with their key ranges and sequence numbers (which the C API's
// live-file metadata lacks), and build a column family from a subset of a
// checkpoint's SST files (CreateColumnFamilyWithImport).
#ifndef SFSTATE_ENGINE_SHIM_CHECKPOINT_H
#define SFSTATE_ENGINE_SHIM_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <rocksdb/c.h>

#ifdef __cplusplus
extern "C" {
#endif

// One live SST file. Strings and keys are malloc'ed (freed by
// sfs_sst_files_free).
typedef struct sfs_sst_file_t {
  char* name;  // file name without directory, e.g. "000012.sst"
  char* cf;    // column family name
  int level;
  uint64_t size;
  char* smallest;
  size_t smallest_len;
  char* largest;
  size_t largest_len;
  uint64_t smallest_seqno;
  uint64_t largest_seqno;
  uint64_t entries;
  uint64_t deletions;
} sfs_sst_file_t;

// Opens the RocksDB directory dir read-only with every column family it
// has, lists the live SST files and closes it. *files is a malloc'ed array
// of *n entries. Returns NULL or a malloc'ed error string.
char* sfs_list_sst_files(const char* dir, sfs_sst_file_t** files, size_t* n);
void sfs_sst_files_free(sfs_sst_file_t* files, size_t n);

// Creates column family cf in db from the n SST files (in file_dir, each
// with its level and sequence numbers as listed), hard-linking them into the
// DB (move_files). Returns NULL or a malloc'ed error string.
char* sfs_import_column_family(rocksdb_t* db, const rocksdb_options_t* opts,
                               const char* cf, const sfs_sst_file_t* files,
                               size_t n, const char* file_dir);

// Makes compactions cut output files wherever the first prefix_len bytes
// of the key change (rocksdb::NewSstPartitionerFixedPrefixFactory): with the
// key-group prefix width, every compacted SST file holds one key group.
void sfs_options_set_prefix_partitioner(rocksdb_options_t* opts,
                                        size_t prefix_len);

#ifdef __cplusplus
}
#endif
#endif
