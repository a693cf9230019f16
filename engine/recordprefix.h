// The join record layout's prefix extractor (see recordprefix.go).
#ifndef SFSTATE_ENGINE_RECORDPREFIX_H
#define SFSTATE_ENGINE_RECORDPREFIX_H

#include <stddef.h>

#include <rocksdb/c.h>

#ifdef __cplusplus
extern "C" {
#endif

// Registers the group-prefix extractors (key-group widths 1 and 2) with
// RocksDB's default object library, once; returns 0 on success.
int sfs_record_prefix_register(void);

// The extractor's prefix length of key[0:n] for key-group width w, or -1
// when the key is outside its domain (for tests: the same code RocksDB
// calls).
long sfs_record_prefix_len(int w, const char* key, size_t n);

// Sets the group-prefix extractor for key-group width w and a memtable
// prefix bloom of memtable_bloom_ratio of the write buffer on opts (before
// the column family is opened, so its first memtable has the bloom);
// returns 0 on success.
int sfs_options_set_record_prefix(rocksdb_options_t* opts, int w,
                                  double memtable_bloom_ratio);

#ifdef __cplusplus
}
#endif

#endif
