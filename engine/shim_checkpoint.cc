// Checkpoint helpers over the C++ API (see shim_checkpoint.h). The C API's
// wrapper structs are declared here exactly as the C API declares them.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_partitioner.h>

#include "shim_checkpoint.h"

struct rocksdb_options_t {
  rocksdb::Options rep;
};

struct rocksdb_t {
  rocksdb::DB* rep;
};

namespace {

char* dup_status(const rocksdb::Status& s) {
  return strdup(s.ToString().c_str());
}

char* dup_bytes(const std::string& s) {
  char* p = static_cast<char*>(malloc(s.size() + 1));
  if (p == nullptr) return nullptr;
  memcpy(p, s.data(), s.size());
  p[s.size()] = 0;
  return p;
}

std::string base_name(const std::string& name) {
  auto pos = name.find_last_of('/');
  return pos == std::string::npos ? name : name.substr(pos + 1);
}

}  // namespace

extern "C" {

char* sfs_list_sst_files(const char* dir, sfs_sst_file_t** files, size_t* n) {
  *files = nullptr;
  *n = 0;
  try {
    rocksdb::DBOptions dbo;
    std::vector<std::string> names;
    rocksdb::Status s = rocksdb::DB::ListColumnFamilies(dbo, dir, &names);
    if (!s.ok()) return dup_status(s);
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (const auto& name : names) {
      cfs.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    s = rocksdb::DB::OpenForReadOnly(dbo, dir, cfs, &handles, &db);
    if (!s.ok()) return dup_status(s);
    std::vector<rocksdb::LiveFileMetaData> meta;
    db->GetLiveFilesMetaData(&meta);
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
    if (meta.empty()) return nullptr;
    auto* out = static_cast<sfs_sst_file_t*>(calloc(meta.size(), sizeof(sfs_sst_file_t)));
    if (out == nullptr) return strdup("sfs_list_sst_files: out of memory");
    for (size_t i = 0; i < meta.size(); i++) {
      const auto& m = meta[i];
      sfs_sst_file_t& f = out[i];
      f.name = dup_bytes(base_name(m.name));
      f.cf = dup_bytes(m.column_family_name);
      f.level = m.level;
      f.size = m.size;
      f.smallest = dup_bytes(m.smallestkey);
      f.smallest_len = m.smallestkey.size();
      f.largest = dup_bytes(m.largestkey);
      f.largest_len = m.largestkey.size();
      f.smallest_seqno = m.smallest_seqno;
      f.largest_seqno = m.largest_seqno;
      f.entries = m.num_entries;
      f.deletions = m.num_deletions;
      if (f.name == nullptr || f.cf == nullptr || f.smallest == nullptr || f.largest == nullptr) {
        sfs_sst_files_free(out, meta.size());
        return strdup("sfs_list_sst_files: out of memory");
      }
    }
    *files = out;
    *n = meta.size();
    return nullptr;
  } catch (...) {
    return strdup("sfs_list_sst_files: exception");
  }
}

void sfs_sst_files_free(sfs_sst_file_t* files, size_t n) {
  if (files == nullptr) return;
  for (size_t i = 0; i < n; i++) {
    free(files[i].name);
    free(files[i].cf);
    free(files[i].smallest);
    free(files[i].largest);
  }
  free(files);
}

char* sfs_import_column_family(rocksdb_t* db, const rocksdb_options_t* opts,
                               const char* cf, const sfs_sst_file_t* files,
                               size_t n, const char* file_dir) {
  try {
    rocksdb::ExportImportFilesMetaData md;
    md.db_comparator_name = rocksdb::BytewiseComparator()->Name();
    for (size_t i = 0; i < n; i++) {
      const sfs_sst_file_t& f = files[i];
      rocksdb::LiveFileMetaData m;
      m.name = std::string("/") + f.name;
      m.db_path = file_dir;
      m.column_family_name = cf;
      m.level = f.level;
      m.size = f.size;
      m.smallestkey.assign(f.smallest, f.smallest_len);
      m.largestkey.assign(f.largest, f.largest_len);
      m.smallest_seqno = f.smallest_seqno;
      m.largest_seqno = f.largest_seqno;
      m.num_entries = f.entries;
      m.num_deletions = f.deletions;
      md.files.push_back(m);
    }
    rocksdb::ImportColumnFamilyOptions io;
    io.move_files = true;
    rocksdb::ColumnFamilyHandle* h = nullptr;
    rocksdb::Status s = db->rep->CreateColumnFamilyWithImport(
        rocksdb::ColumnFamilyOptions(opts->rep), cf, io, md, &h);
    if (h != nullptr) db->rep->DestroyColumnFamilyHandle(h);
    if (!s.ok()) return dup_status(s);
    return nullptr;
  } catch (...) {
    return strdup("sfs_import_column_family: exception");
  }
}

void sfs_options_set_prefix_partitioner(rocksdb_options_t* opts,
                                        size_t prefix_len) {
  opts->rep.sst_partitioner_factory =
      rocksdb::NewSstPartitionerFixedPrefixFactory(prefix_len);
}

}  // extern "C"
