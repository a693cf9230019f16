// The version of the RocksDB library linked into the engine.
#include <string>

#include "rocksdb/version.h"

extern "C" const char* sfs_rocksdb_version() {
  static const std::string v = rocksdb::GetRocksVersionAsString(true);
  return v.c_str();
}
