// Slot-wide memory governance: one LRU block cache with a high-priority pool
// and one write-buffer manager charged to it, applied to options created
// through the C API. The C API in RocksDB 7.8 exposes neither, so this file
// reaches rocksdb::Options through the C API's wrapper struct, declared here
// exactly as the C API declares it.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>

#include "shim.h"

struct rocksdb_options_t {
  rocksdb::Options rep;
};

struct rocksdb_t {
  rocksdb::DB* rep;
};

struct rocksdb_column_family_handle_t {
  rocksdb::ColumnFamilyHandle* rep;
};

struct rocksdb_writeoptions_t {
  rocksdb::WriteOptions rep;
};

struct sfs_slot_memory_t {
  std::shared_ptr<rocksdb::Cache> cache;
  std::shared_ptr<rocksdb::WriteBufferManager> wbm;
};

extern "C" {

char* sfs_write_rep(rocksdb_t* db, const rocksdb_writeoptions_t* wo,
                    const char* rep, size_t n) {
  try {
    rocksdb::WriteBatch wb(std::string(rep, n));
    rocksdb::Status s = db->rep->Write(wo->rep, &wb);
    if (s.ok()) return nullptr;
    return strdup(s.ToString().c_str());
  } catch (const std::exception& e) {
    return strdup(e.what());
  }
}

sfs_slot_memory_t* sfs_slot_memory_new(size_t cache_bytes, double hi_ratio,
                                       size_t wbm_bytes) {
  try {
    auto* m = new sfs_slot_memory_t;
    m->cache = rocksdb::NewLRUCache(cache_bytes, -1, false, hi_ratio);
    if (!m->cache) {
      delete m;
      return nullptr;
    }
    m->wbm = std::make_shared<rocksdb::WriteBufferManager>(wbm_bytes, m->cache,
                                                           false);
    return m;
  } catch (...) {
    return nullptr;
  }
}

void sfs_slot_memory_free(sfs_slot_memory_t* m) { delete m; }

size_t sfs_slot_memory_cache_usage(sfs_slot_memory_t* m) {
  return m->cache->GetUsage();
}

size_t sfs_slot_memory_cache_pinned_usage(sfs_slot_memory_t* m) {
  return m->cache->GetPinnedUsage();
}

size_t sfs_slot_memory_cache_capacity(sfs_slot_memory_t* m) {
  return m->cache->GetCapacity();
}

size_t sfs_slot_memory_wbm_usage(sfs_slot_memory_t* m) {
  return m->wbm->memory_usage();
}

size_t sfs_slot_memory_wbm_capacity(sfs_slot_memory_t* m) {
  return m->wbm->buffer_size();
}

int sfs_options_apply_slot(rocksdb_options_t* opts, sfs_slot_memory_t* m,
                           size_t block_size, int bits_per_key, size_t arena) {
  if (opts == nullptr || m == nullptr) return -1;
  try {
    rocksdb::BlockBasedTableOptions t;
    t.block_cache = m->cache;
    t.cache_index_and_filter_blocks = true;
    t.cache_index_and_filter_blocks_with_high_priority = true;
    t.pin_top_level_index_and_filter = true;
    t.pin_l0_filter_and_index_blocks_in_cache = false;
    if (block_size > 0) t.block_size = block_size;
    if (bits_per_key > 0) {
      t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(bits_per_key, false));
    }
    opts->rep.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
    opts->rep.write_buffer_manager = m->wbm;
    if (arena > 0) opts->rep.arena_block_size = arena;
    return 0;
  } catch (...) {
    return -2;
  }
}

int sfs_options_uses_slot(rocksdb_options_t* opts, sfs_slot_memory_t* m) {
  if (opts->rep.write_buffer_manager != m->wbm) return 0;
  auto* t = opts->rep.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
  if (t == nullptr || t->block_cache != m->cache) return 0;
  return 1;
}

void sfs_options_set_insert_hint_prefix(rocksdb_options_t* opts, size_t n) {
  opts->rep.memtable_insert_with_hint_prefix_extractor.reset(
      rocksdb::NewFixedPrefixTransform(n));
}

size_t sfs_options_arena_block_size(rocksdb_options_t* opts) {
  return opts->rep.arena_block_size;
}

size_t sfs_options_write_buffer_size(rocksdb_options_t* opts) {
  return opts->rep.write_buffer_size;
}

char* sfs_multiget_cfs(rocksdb_t* db, rocksdb_column_family_handle_t** cfs,
                       size_t ncfs, size_t n, const uint16_t* states,
                       const char* keybuf, const size_t* keylens,
                       const char** vptrs, size_t* vlens, void** pins) {
  *pins = nullptr;
  if (n == 0) return nullptr;
  try {
    std::vector<rocksdb::ColumnFamilyHandle*> handles(n);
    std::vector<rocksdb::Slice> keys(n);
    std::vector<rocksdb::Status> statuses(n);
    auto* values = new rocksdb::PinnableSlice[n];
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
      if (states[i] >= ncfs) {
        delete[] values;
        return strdup("sfs_multiget_cfs: state out of range");
      }
      handles[i] = cfs[states[i]]->rep;
      keys[i] = rocksdb::Slice(keybuf + off, keylens[i]);
      off += keylens[i];
    }
    rocksdb::ReadOptions ro;
    db->rep->MultiGet(ro, n, handles.data(), keys.data(), values,
                      statuses.data(), false);
    char* err = nullptr;
    static const char empty = 0;
    for (size_t i = 0; i < n; i++) {
      if (statuses[i].ok()) {
        vptrs[i] = values[i].size() > 0 ? values[i].data() : &empty;
        vlens[i] = values[i].size();
      } else {
        vptrs[i] = nullptr;
        vlens[i] = 0;
        if (!statuses[i].IsNotFound() && err == nullptr) {
          err = strdup(statuses[i].ToString().c_str());
        }
      }
    }
    *pins = values;
    return err;
  } catch (...) {
    return strdup("sfs_multiget_cfs: exception");
  }
}

void sfs_multiget_cfs_release(void* pins) {
  delete[] static_cast<rocksdb::PinnableSlice*>(pins);
}

char* sfs_flush_cfs(rocksdb_t* db, rocksdb_column_family_handle_t** cfs,
                    size_t n) {
  try {
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    handles.reserve(n);
    for (size_t i = 0; i < n; i++) handles.push_back(cfs[i]->rep);
    rocksdb::FlushOptions fo;
    fo.wait = true;
    rocksdb::Status s = db->rep->Flush(fo, handles);
    if (s.ok()) return nullptr;
    return strdup(s.ToString().c_str());
  } catch (...) {
    return strdup("sfs_flush_cfs: exception");
  }
}

}  // extern "C"
