// The finger memtable: a skip list whose inserts start from the position of
// the previous insert (the finger) instead of from the head.
//
// A bundle commits its dirty set sorted by key, so consecutive inserts of
// one write batch land close together in the memtable: D entries apart for
// a memtable of N entries and a batch of B keys, D ~ N/B. A search from the
// head costs O(log N) node visits, nearly all of them cache misses; a search
// from the finger walks up only as far as the finger's bracket at a level
// still encloses the new key and costs O(log D). RocksDB's own skip list
// keeps a finger too, but repairs it only for strictly adjacent inserts;
// otherwise it searches from the head again.
//
// One writer at a time (the DB must run with allow_concurrent_memtable_write
// off, which the engine sets with this memtable); readers run concurrently
// with the writer and never see a half-linked node: a node's links are set
// before it is published, bottom level first, with release stores, and
// readers load links with acquire.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include <rocksdb/comparator.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>

#include "shim.h"

struct rocksdb_options_t {
  rocksdb::Options rep;
};

namespace sfs {

// The allocation interface RocksDB hands to memtable reps (its Arena and
// ConcurrentArena both derive from this one base alone, so their pointers are
// pointers to it). It is not among the installed headers; the virtual
// functions are declared here in RocksDB 7.8's order. sfs_finger_block_size
// reports what BlockSize() returned, so a test can check the declaration
// against the configured arena block size. It must not sit in an anonymous
// namespace: the compiler would then know every class deriving from it (none
// in this file) and turn its calls into pure-virtual traps.
class ArenaIface {
 public:
  virtual ~ArenaIface() {}
  virtual char* Allocate(size_t bytes) = 0;
  virtual char* AllocateAligned(size_t bytes, size_t huge_page_size,
                                rocksdb::Logger* logger) = 0;
  virtual size_t BlockSize() const = 0;
};

}  // namespace sfs

namespace {

using sfs::ArenaIface;

std::atomic<size_t> last_block_size{0};
// Inserts, summed over finger memtables when they are freed (tests).
std::atomic<uint64_t> inserts_total{0};

constexpr int kMaxHeight = 12;

// A node of height h is h links (level h-1 first, level 0 last) followed by
// the memtable key; a Node* points at the level-0 link.
struct Node {
  std::atomic<Node*>& link(int n) {
    return *(reinterpret_cast<std::atomic<Node*>*>(this) - n);
  }
  const char* key() const {
    return reinterpret_cast<const char*>(this) + sizeof(std::atomic<Node*>);
  }
  Node* next(int n) { return link(n).load(std::memory_order_acquire); }
};

// The head's links, laid out as a node of kMaxHeight.
struct Head {
  std::atomic<Node*> links[kMaxHeight];
  Node* node() { return reinterpret_cast<Node*>(&links[kMaxHeight - 1]); }
};

class FingerList : public rocksdb::MemTableRep {
 public:
  FingerList(const KeyComparator& cmp, rocksdb::Allocator* allocator,
             bool bytewise)
      : MemTableRep(allocator),
        cmp_(cmp),
        bytewise_(bytewise),
        arena_(reinterpret_cast<ArenaIface*>(allocator)) {
    for (auto& l : head_.links) l.store(nullptr, std::memory_order_relaxed);
    head = head_.node();
    for (int i = 0; i < kMaxHeight; i++) {
      prev_[i] = head;
      next_[i] = nullptr;
    }
    last_block_size.store(arena_->BlockSize(), std::memory_order_relaxed);
  }

  rocksdb::KeyHandle Allocate(const size_t len, char** buf) override {
    int h = RandomHeight();
    char* mem = arena_->AllocateAligned(
        sizeof(std::atomic<Node*>) * h + len, 0, nullptr);
    Node* x = reinterpret_cast<Node*>(mem + sizeof(std::atomic<Node*>) * (h - 1));
    // The height waits in the level-0 link until Insert links the node.
    x->link(0).store(reinterpret_cast<Node*>(static_cast<intptr_t>(h)),
                     std::memory_order_relaxed);
    *buf = const_cast<char*>(x->key());
    return x;
  }

  void Insert(rocksdb::KeyHandle handle) override {
    Node* x = static_cast<Node*>(handle);
    const int h = static_cast<int>(reinterpret_cast<intptr_t>(
        x->link(0).load(std::memory_order_relaxed)));
    const rocksdb::Slice k = cmp_.decode_key(x->key());
    const int top = max_height_.load(std::memory_order_relaxed);

    // The finger brackets the previous key at every level: prev_[l] and
    // next_[l] are neighbours at level l. Find the lowest level whose
    // bracket also holds k. One comparison tells on which side of the
    // finger k lies; then only that side's bound needs checking per level
    // (the other holds at every level).
    int l = 0;
    if (prev_[0] != head && !Less(prev_[0], k)) {
      for (l = 1; l < top && prev_[l] != head && !Less(prev_[l], k);) l++;
    } else {
      while (l < top && next_[l] != nullptr && Less(next_[l], k)) l++;
    }
    inserts_++;
    // Levels >= l still bracket k; search the levels below from prev_[l].
    Node* p = l < top ? prev_[l] : head;
    Node* bigger = l < top ? next_[l] : nullptr;  // known > k
    for (int i = (l < top ? l : top) - 1; i >= 0; i--) {
      Node* n = p->next(i);
      while (n != nullptr && n != bigger && Less(n, k)) {
        p = n;
        n = p->next(i);
      }
      prev_[i] = p;
      next_[i] = n;
      bigger = n;
    }
    if (h > top) {
      // prev_/next_ above the old height are head/null already.
      max_height_.store(h, std::memory_order_relaxed);
    }
    for (int i = 0; i < h; i++) {
      x->link(i).store(next_[i], std::memory_order_relaxed);
      prev_[i]->link(i).store(x, std::memory_order_release);
      prev_[i] = x;
    }
  }

  bool Contains(const char* key) const override {
    const rocksdb::Slice k = cmp_.decode_key(key);
    Node* n = FindGreaterOrEqual(k);
    return n != nullptr && Compare(n, k) == 0;
  }

  size_t ApproximateMemoryUsage() override { return 0; }  // all in the arena

  ~FingerList() override {
    inserts_total.fetch_add(inserts_, std::memory_order_relaxed);
  }

  void Get(const rocksdb::LookupKey& k, void* callback_args,
           bool (*callback_func)(void* arg, const char* entry)) override {
    rocksdb::Slice ik;
    if (!LookupInternalKey(k, &ik)) {
      MemTableRep::Get(k, callback_args, callback_func);
      return;
    }
    for (Node* n = FindGreaterOrEqual(ik);
         n != nullptr && callback_func(callback_args, n->key()); n = n->next(0)) {
    }
  }

  class Iter : public MemTableRep::Iterator {
   public:
    explicit Iter(const FingerList* list) : list_(list) {}
    bool Valid() const override { return node_ != nullptr; }
    const char* key() const override { return node_->key(); }
    void Next() override { node_ = node_->next(0); }
    void Prev() override {
      node_ = list_->FindLessThan(list_->cmp_.decode_key(node_->key()));
    }
    void Seek(const rocksdb::Slice& internal_key,
              const char* /*memtable_key*/) override {
      node_ = list_->FindGreaterOrEqual(internal_key);
    }
    void SeekForPrev(const rocksdb::Slice& internal_key,
                     const char* /*memtable_key*/) override {
      // The last entry <= internal_key.
      Node* n = list_->FindGreaterOrEqual(internal_key);
      if (n != nullptr && list_->Compare(n, internal_key) == 0) {
        node_ = n;
        return;
      }
      node_ = list_->FindLessThan(internal_key);
    }
    void SeekToFirst() override { node_ = list_->head->next(0); }
    void SeekToLast() override { node_ = list_->FindLast(); }

   private:
    const FingerList* list_;
    Node* node_ = nullptr;
  };

  Iterator* GetIterator(rocksdb::Arena* arena) override {
    if (arena != nullptr) {
      // The caller destroys an arena iterator in place and never frees it.
      void* mem = reinterpret_cast<ArenaIface*>(arena)->AllocateAligned(
          sizeof(Iter), 0, nullptr);
      return new (mem) Iter(this);
    }
    return new Iter(this);
  }

 private:
  // Compares n's key with the internal key k: user keys ascending, then
  // sequence numbers descending (the value type byte is not compared), as
  // RocksDB's internal key comparator does. Inline for the bytewise user
  // comparator (no virtual calls, no perf counters); through the memtable's
  // comparator otherwise.
  int Compare(Node* n, const rocksdb::Slice& k) const {
    if (!bytewise_) return cmp_(n->key(), k);
    const char* p = n->key();
    uint32_t alen = static_cast<uint8_t>(*p++);
    if (alen & 0x80) {
      alen &= 0x7f;
      for (int shift = 7; shift <= 28; shift += 7) {
        uint32_t b = static_cast<uint8_t>(*p++);
        alen |= (b & 0x7f) << shift;
        if ((b & 0x80) == 0) break;
      }
    }
    const size_t au = alen - 8, bu = k.size() - 8;
    int r = std::memcmp(p, k.data(), au < bu ? au : bu);
    if (r == 0) {
      if (au != bu) return au < bu ? -1 : 1;
      uint64_t a, b;
      std::memcpy(&a, p + au, 8);
      std::memcpy(&b, k.data() + bu, 8);
      a >>= 8;
      b >>= 8;
      return a > b ? -1 : (a < b ? 1 : 0);
    }
    return r;
  }
  bool Less(Node* n, const rocksdb::Slice& k) const { return Compare(n, k) < 0; }

  // The first node >= k, or null.
  Node* FindGreaterOrEqual(const rocksdb::Slice& k) const {
    Node* x = head;
    Node* bigger = nullptr;  // known >= k at the level above
    for (int i = max_height_.load(std::memory_order_relaxed) - 1; i >= 0;) {
      Node* n = x->next(i);
      if (n != nullptr && n != bigger && Less(n, k)) {
        x = n;
      } else {
        if (i == 0) return n;
        bigger = n;
        i--;
      }
    }
    return nullptr;
  }

  // The last node < k, or null.
  Node* FindLessThan(const rocksdb::Slice& k) const {
    Node* x = head;
    for (int i = max_height_.load(std::memory_order_relaxed) - 1; i >= 0; i--) {
      for (Node* n = x->next(i); n != nullptr && Less(n, k);
           n = x->next(i)) {
        x = n;
      }
    }
    return x == head ? nullptr : x;
  }

  Node* FindLast() const {
    Node* x = head;
    for (int i = max_height_.load(std::memory_order_relaxed) - 1; i >= 0; i--) {
      for (Node* n = x->next(i); n != nullptr; n = x->next(i)) x = n;
    }
    return x == head ? nullptr : x;
  }

  // A LookupKey holds three pointers into its buffer: the memtable key
  // (varint32 length, then the internal key) and the end. The class is not
  // among the installed headers; its layout is checked on every use and a
  // mismatch falls back to the base class's iterator-based Get.
  static bool LookupInternalKey(const rocksdb::LookupKey& k,
                                rocksdb::Slice* ik) {
    struct View {
      const char* start;
      const char* kstart;
      const char* end;
    };
    View v;
    std::memcpy(&v, &k, sizeof(v));
    if (v.start == nullptr || v.kstart <= v.start || v.end < v.kstart + 8 ||
        v.kstart - v.start > 5) {
      return false;
    }
    uint32_t n = 0;
    int shift = 0;
    const char* p = v.start;
    for (; p < v.kstart; p++, shift += 7) {
      uint8_t b = static_cast<uint8_t>(*p);
      n |= static_cast<uint32_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        p++;
        break;
      }
    }
    if (p != v.kstart || n != static_cast<uint32_t>(v.end - v.kstart)) {
      return false;
    }
    *ik = rocksdb::Slice(v.kstart, n);
    return true;
  }

  int RandomHeight() {
    // xorshift64*; one level more with probability 1/4.
    rnd_ ^= rnd_ >> 12;
    rnd_ ^= rnd_ << 25;
    rnd_ ^= rnd_ >> 27;
    uint64_t r = rnd_ * 0x2545F4914F6CDD1DULL;
    int h = 1;
    while (h < kMaxHeight && (r & 3) == 0) {
      h++;
      r >>= 2;
    }
    return h;
  }

  const KeyComparator& cmp_;
  // The user comparator is RocksDB's bytewise one: compare inline.
  const bool bytewise_;
  ArenaIface* arena_;
  Head head_;
  Node* head;  // head_.node()
  std::atomic<int> max_height_{1};
  uint64_t rnd_ = 0x9E3779B97F4A7C15ULL;
  uint64_t inserts_ = 0;  // writer only

  // The finger: the previous insert's neighbours at every level (writer
  // only).
  Node* prev_[kMaxHeight];
  Node* next_[kMaxHeight];
};

class FingerFactory : public rocksdb::MemTableRepFactory {
 public:
  explicit FingerFactory(bool bytewise) : bytewise_(bytewise) {}
  rocksdb::MemTableRep* CreateMemTableRep(
      const rocksdb::MemTableRep::KeyComparator& cmp,
      rocksdb::Allocator* allocator, const rocksdb::SliceTransform*,
      rocksdb::Logger*) override {
    return new FingerList(cmp, allocator, bytewise_);
  }
  const char* Name() const override { return "SfsFingerSkipList"; }

 private:
  const bool bytewise_;
};

}  // namespace

extern "C" {

void sfs_options_set_finger_memtable(rocksdb_options_t* opts) {
  // Set after the comparator: the engine never changes it from RocksDB's
  // bytewise default, which the inline comparison implements (fixed-width
  // sequence numbers little-endian: x86-64 and arm64 hosts).
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian host");
  opts->rep.memtable_factory = std::make_shared<FingerFactory>(
      opts->rep.comparator == rocksdb::BytewiseComparator());
  opts->rep.allow_concurrent_memtable_write = false;
}

int sfs_options_uses_finger_memtable(rocksdb_options_t* opts) {
  return opts->rep.memtable_factory != nullptr &&
         std::strcmp(opts->rep.memtable_factory->Name(), "SfsFingerSkipList") == 0;
}

size_t sfs_finger_block_size(void) {
  return last_block_size.load(std::memory_order_relaxed);
}

uint64_t sfs_finger_inserts(void) {
  return inserts_total.load(std::memory_order_relaxed);
}

}  // extern "C"
