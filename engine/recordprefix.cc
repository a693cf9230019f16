// A RocksDB prefix extractor for the join record layout: the prefix of a
// record key is its whole group prefix,
//
//   kg (w bytes) | side (1 byte) | uvarint len | equality key (len bytes)
//
// so every record of one (key group, side, equality key) shares one prefix
// and distinct groups never do. Group prefixes are prefix-free (the varint
// is, and it fixes the key's length), which is what RocksDB requires of an
// extractor: key order implies prefix order, and a prefix is its own
// prefix. Keys too short to hold a complete group prefix (key-group bounds,
// truncated keys) are outside the domain: they are neither added to nor
// checked against the bloom filters, so seeks with them stay total-order.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/utilities/object_registry.h>

#include "recordprefix.h"

// The C API's options wrapper, declared exactly as the C API (and shim.cc)
// declare it.
struct rocksdb_options_t {
  rocksdb::Options rep;
};

namespace {

// groupPrefixLen returns the length of the complete group prefix at the
// start of key, or -1.
long groupPrefixLen(int w, const char* p, size_t n) {
  size_t i = static_cast<size_t>(w) + 1;  // key group and side
  if (n < i) {
    return -1;
  }
  uint64_t len = 0;
  for (int shift = 0;; shift += 7) {
    if (i >= n || shift > 28) {  // unterminated, or beyond 32 bits
      return -1;
    }
    unsigned char b = static_cast<unsigned char>(p[i++]);
    len |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (b < 0x80) {
      break;
    }
  }
  if (len > n - i) {
    return -1;
  }
  return static_cast<long>(i + len);
}

class GroupPrefix : public rocksdb::SliceTransform {
 public:
  explicit GroupPrefix(int w)
      : w_(w), name_("sfstate.JoinGroupPrefix." + std::to_string(w)) {}
  const char* Name() const override { return name_.c_str(); }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    long n = groupPrefixLen(w_, key.data(), key.size());
    // RocksDB calls Transform only for keys InDomain accepted; keep the
    // whole key otherwise rather than read past it
    return rocksdb::Slice(key.data(), n < 0 ? key.size() : static_cast<size_t>(n));
  }
  bool InDomain(const rocksdb::Slice& key) const override {
    return groupPrefixLen(w_, key.data(), key.size()) >= 0;
  }
  bool SameResultWhenAppended(const rocksdb::Slice& prefix) const override {
    return groupPrefixLen(w_, prefix.data(), prefix.size()) ==
           static_cast<long>(prefix.size());
  }

 private:
  int w_;
  std::string name_;
};

}  // namespace

extern "C" int sfs_record_prefix_register(void) {
  static std::once_flag once;
  std::call_once(once, [] {
    auto lib = rocksdb::ObjectLibrary::Default();
    for (int w = 1; w <= 2; w++) {
      lib->AddFactory<const rocksdb::SliceTransform>(
          "sfstate.JoinGroupPrefix." + std::to_string(w),
          [w](const std::string&, std::unique_ptr<const rocksdb::SliceTransform>* guard,
              std::string*) {
            guard->reset(new GroupPrefix(w));
            return guard->get();
          });
    }
  });
  return 0;
}

extern "C" long sfs_record_prefix_len(int w, const char* key, size_t n) {
  return groupPrefixLen(w, key, n);
}

extern "C" int sfs_options_set_record_prefix(rocksdb_options_t* opts, int w,
                                             double memtable_bloom_ratio) {
  if (w != 1 && w != 2) {
    return 1;
  }
  if (sfs_record_prefix_register() != 0) {
    return 2;
  }
  opts->rep.prefix_extractor = std::make_shared<GroupPrefix>(w);
  opts->rep.memtable_prefix_bloom_size_ratio = memtable_bloom_ratio;
  return 0;
}
