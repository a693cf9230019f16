#include "shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

sfs_clock_t* sfs_clock_new(int manual, int64_t now_ms) {
  sfs_clock_t* c = (sfs_clock_t*)calloc(1, sizeof(sfs_clock_t));
  if (c == NULL) return NULL;
  c->manual = manual;
  __atomic_store_n(&c->now_ms, now_ms, __ATOMIC_RELEASE);
  return c;
}

void sfs_clock_free(sfs_clock_t* c) { free(c); }

int64_t sfs_clock_now(const sfs_clock_t* c) {
  if (c != NULL && c->manual) {
    return __atomic_load_n(&c->now_ms, __ATOMIC_ACQUIRE);
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sfs_clock_set(sfs_clock_t* c, int64_t now_ms) {
  __atomic_store_n(&c->now_ms, now_ms, __ATOMIC_RELEASE);
}

typedef struct {
  int64_t ttl_ms;
  const sfs_clock_t* clock;
} ttl_state;

static int64_t ttl_dropped = 0;

static void ttl_destroy(void* s) { free(s); }

static const char* ttl_name(void* s) {
  (void)s;
  return "sfstate.ttl";
}

static unsigned char ttl_filter(void* s, int level, const char* key,
                                size_t key_length, const char* value,
                                size_t value_length, char** new_value,
                                size_t* new_value_length,
                                unsigned char* value_changed) {
  (void)level;
  (void)key;
  (void)key_length;
  (void)new_value;
  (void)new_value_length;
  *value_changed = 0;
  const ttl_state* st = (const ttl_state*)s;
  if (value_length < 8) return 0;
  const unsigned char* p = (const unsigned char*)value;
  uint64_t ts = 0;
  for (int i = 0; i < 8; i++) ts = (ts << 8) | p[i];
  int64_t last = (int64_t)ts;
  int64_t now = sfs_clock_now(st->clock);
  // expired when last + ttl <= now (no overflow: clamp)
  if (last > INT64_MAX - st->ttl_ms) return 0;
  if (last + st->ttl_ms <= now) {
    __atomic_add_fetch(&ttl_dropped, 1, __ATOMIC_RELAXED);
    return 1;
  }
  return 0;
}

rocksdb_compactionfilter_t* sfs_ttl_filter_new(int64_t ttl_ms,
                                               const sfs_clock_t* clock) {
  ttl_state* st = (ttl_state*)malloc(sizeof(ttl_state));
  if (st == NULL) return NULL;
  st->ttl_ms = ttl_ms;
  st->clock = clock;
  return rocksdb_compactionfilter_create(st, ttl_destroy, ttl_filter, ttl_name);
}

int64_t sfs_ttl_filter_dropped(void) {
  return __atomic_load_n(&ttl_dropped, __ATOMIC_RELAXED);
}

char* sfs_multiget(rocksdb_t* db, const rocksdb_readoptions_t* ro,
                   rocksdb_column_family_handle_t* cf, size_t n,
                   const char* keybuf, const size_t* keylens,
                   const char** vptrs, size_t* vlens, void** pins) {
  *pins = NULL;
  if (n == 0) return NULL;
  const char** keys = (const char**)malloc(n * sizeof(char*));
  rocksdb_pinnableslice_t** vals =
      (rocksdb_pinnableslice_t**)calloc(n, sizeof(rocksdb_pinnableslice_t*));
  char** errs = (char**)calloc(n, sizeof(char*));
  if (keys == NULL || vals == NULL || errs == NULL) {
    free(keys);
    free(vals);
    free(errs);
    return strdup("sfs_multiget: out of memory");
  }
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    keys[i] = keybuf + off;
    off += keylens[i];
  }
  rocksdb_batched_multi_get_cf(db, ro, cf, n, keys, keylens, vals, errs, 0);
  free(keys);
  char* first = NULL;
  for (size_t i = 0; i < n; i++) {
    if (errs[i] != NULL) {
      if (first == NULL) {
        first = errs[i];
      } else {
        rocksdb_free(errs[i]);
      }
    }
    if (vals[i] != NULL) {
      size_t len = 0;
      const char* v = rocksdb_pinnableslice_value(vals[i], &len);
      vptrs[i] = v;
      vlens[i] = len;
      if (v == NULL) vptrs[i] = NULL;
      // an empty present value must still read as present
      if (v == NULL) {
        static const char empty = 0;
        vptrs[i] = &empty;
        vlens[i] = 0;
      }
    } else {
      vptrs[i] = NULL;
      vlens[i] = 0;
    }
  }
  free(errs);
  *pins = vals;
  return first;
}

void sfs_multiget_release(void* pins, size_t n) {
  if (pins == NULL) return;
  rocksdb_pinnableslice_t** vals = (rocksdb_pinnableslice_t**)pins;
  for (size_t i = 0; i < n; i++) {
    if (vals[i] != NULL) rocksdb_pinnableslice_destroy(vals[i]);
  }
  free(vals);
}

int64_t sfs_thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// ---- list values: TTL-aware merge operator and compaction filter -----------
//
// A list value is an 8-byte big-endian prefix followed by the elements. With
// bit 63 of the prefix clear (whole-list format) the prefix is the list's
// last-access time and each element is uvarint(len) bytes. With bit 63 set
// (per-element format) the rest of the prefix is the newest element's time
// and each element is an 8-byte big-endian last-access time, uvarint(len),
// bytes. Merging concatenates; the result is per-element as soon as one
// input is, whole-list elements then taking their value's time.

#define SFS_LIST_FLAG ((uint64_t)1 << 63)

static uint64_t load_be64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
  return v;
}

static void store_be64(unsigned char* p, uint64_t v) {
  for (int i = 7; i >= 0; i--) {
    p[i] = (unsigned char)v;
    v >>= 8;
  }
}

// Reads a uvarint of at most 10 bytes; returns its width or 0 when malformed.
static size_t read_uvarint(const unsigned char* p, size_t n, uint64_t* out) {
  uint64_t v = 0;
  for (size_t i = 0; i < n && i < 10; i++) {
    v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
    if (p[i] < 0x80) {
      *out = v;
      return i + 1;
    }
  }
  return 0;
}

// Checks a list payload and returns its element count, or -1 when malformed.
static long list_elements(const unsigned char* p, size_t n, int per_elem) {
  long count = 0;
  while (n > 0) {
    if (per_elem) {
      if (n < 8) return -1;
      p += 8;
      n -= 8;
    }
    uint64_t len = 0;
    size_t w = read_uvarint(p, n, &len);
    if (w == 0 || len > n - w) return -1;
    p += w + len;
    n -= w + len;
    count++;
  }
  return count;
}

// sfs_list_merge merges n list values (whole-list or per-element format) in
// order into one malloc'ed value; NULL when an input is malformed.
char* sfs_list_merge(const char* const* vals, const size_t* lens, int n,
                     size_t* out_len) {
  int per_elem = 0;
  uint64_t newest = 0;
  size_t size = 8;
  for (int i = 0; i < n; i++) {
    if (lens[i] < 8) return NULL;
    uint64_t pre = load_be64((const unsigned char*)vals[i]);
    if (pre & SFS_LIST_FLAG) per_elem = 1;
  }
  for (int i = 0; i < n; i++) {
    const unsigned char* v = (const unsigned char*)vals[i];
    uint64_t pre = load_be64(v);
    int pe = (pre & SFS_LIST_FLAG) != 0;
    uint64_t ts = pre & ~SFS_LIST_FLAG;
    if (i == 0 || ts > newest) newest = ts;
    long count = list_elements(v + 8, lens[i] - 8, pe);
    if (count < 0) return NULL;
    size += lens[i] - 8;
    if (per_elem && !pe) size += 8 * (size_t)count;
  }
  unsigned char* out = (unsigned char*)malloc(size > 0 ? size : 1);
  if (out == NULL) return NULL;
  store_be64(out, newest | (per_elem ? SFS_LIST_FLAG : 0));
  size_t at = 8;
  for (int i = 0; i < n; i++) {
    const unsigned char* v = (const unsigned char*)vals[i];
    uint64_t pre = load_be64(v);
    const unsigned char* p = v + 8;
    size_t left = lens[i] - 8;
    if (!per_elem || (pre & SFS_LIST_FLAG)) {
      memcpy(out + at, p, left);
      at += left;
      continue;
    }
    // whole-list elements into the per-element format
    while (left > 0) {
      uint64_t len = 0;
      size_t w = read_uvarint(p, left, &len);
      store_be64(out + at, pre);
      at += 8;
      memcpy(out + at, p, w + len);
      at += w + len;
      p += w + len;
      left -= w + len;
    }
  }
  *out_len = at;
  return (char*)out;
}

static char* list_full_merge(void* s, const char* key, size_t key_length,
                             const char* existing, size_t existing_length,
                             const char* const* ops, const size_t* op_lens,
                             int n, unsigned char* success, size_t* out_len) {
  (void)s;
  (void)key;
  (void)key_length;
  const char* stack_vals[16];
  size_t stack_lens[16];
  const char** vals = stack_vals;
  size_t* lens = stack_lens;
  int total = n + (existing != NULL ? 1 : 0);
  if (total > 16) {
    vals = (const char**)malloc(sizeof(char*) * (size_t)total);
    lens = (size_t*)malloc(sizeof(size_t) * (size_t)total);
    if (vals == NULL || lens == NULL) {
      free(vals);
      free(lens);
      *success = 0;
      return NULL;
    }
  }
  int k = 0;
  if (existing != NULL) {
    vals[k] = existing;
    lens[k++] = existing_length;
  }
  for (int i = 0; i < n; i++) {
    vals[k] = ops[i];
    lens[k++] = op_lens[i];
  }
  char* out = sfs_list_merge(vals, lens, total, out_len);
  if (vals != stack_vals) {
    free(vals);
    free(lens);
  }
  *success = out != NULL;
  return out;
}

static char* list_partial_merge(void* s, const char* key, size_t key_length,
                                const char* const* ops, const size_t* op_lens,
                                int n, unsigned char* success,
                                size_t* out_len) {
  return list_full_merge(s, key, key_length, NULL, 0, ops, op_lens, n, success,
                         out_len);
}

static void list_delete_value(void* s, const char* v, size_t n) {
  (void)s;
  (void)n;
  free((void*)v);
}

static void list_merge_destroy(void* s) { (void)s; }

static const char* list_merge_name(void* s) {
  (void)s;
  return "sfstate.list";
}

rocksdb_mergeoperator_t* sfs_list_merge_operator_new(void) {
  return rocksdb_mergeoperator_create(NULL, list_merge_destroy,
                                      list_full_merge, list_partial_merge,
                                      list_delete_value, list_merge_name);
}

static int64_t list_elems_dropped = 0;

// The filter's rewritten value lives in a per-thread buffer: the C API
// copies it right after the call and never frees it.
static __thread unsigned char* list_buf = NULL;
static __thread size_t list_cap = 0;

static unsigned char list_filter(void* s, int level, const char* key,
                                 size_t key_length, const char* value,
                                 size_t value_length, char** new_value,
                                 size_t* new_value_length,
                                 unsigned char* value_changed) {
  (void)level;
  (void)key;
  (void)key_length;
  *value_changed = 0;
  const ttl_state* st = (const ttl_state*)s;
  if (value_length < 8) return 0;
  const unsigned char* v = (const unsigned char*)value;
  uint64_t pre = load_be64(v);
  int64_t now = sfs_clock_now(st->clock);
  int64_t newest = (int64_t)(pre & ~SFS_LIST_FLAG);
  if (newest > INT64_MAX - st->ttl_ms) return 0;
  if (newest + st->ttl_ms <= now) {
    __atomic_add_fetch(&ttl_dropped, 1, __ATOMIC_RELAXED);
    return 1;  // every element is at least this old
  }
  if (!(pre & SFS_LIST_FLAG)) return 0;
  // Per-element: keep the live elements only.
  if (list_elements(v + 8, value_length - 8, 1) < 0) return 0;
  const unsigned char* p = v + 8;
  size_t left = value_length - 8;
  size_t at = 8;
  int64_t keep_newest = INT64_MIN;
  long dropped = 0;
  if (list_cap < value_length) {
    unsigned char* nb = (unsigned char*)realloc(list_buf, value_length);
    if (nb == NULL) return 0;
    list_buf = nb;
    list_cap = value_length;
  }
  while (left > 0) {
    int64_t ts = (int64_t)load_be64(p);
    uint64_t len = 0;
    size_t w = read_uvarint(p + 8, left - 8, &len);
    size_t el = 8 + w + len;
    if (ts <= INT64_MAX - st->ttl_ms && ts + st->ttl_ms <= now) {
      dropped++;
    } else {
      memcpy(list_buf + at, p, el);
      at += el;
      if (ts > keep_newest) keep_newest = ts;
    }
    p += el;
    left -= el;
  }
  if (dropped == 0) return 0;
  __atomic_add_fetch(&list_elems_dropped, dropped, __ATOMIC_RELAXED);
  if (at == 8) {
    __atomic_add_fetch(&ttl_dropped, 1, __ATOMIC_RELAXED);
    return 1;
  }
  store_be64(list_buf, (uint64_t)keep_newest | SFS_LIST_FLAG);
  *new_value = (char*)list_buf;
  *new_value_length = at;
  *value_changed = 1;
  return 0;
}

static const char* list_filter_name(void* s) {
  (void)s;
  return "sfstate.list-ttl";
}

rocksdb_compactionfilter_t* sfs_list_ttl_filter_new(int64_t ttl_ms,
                                                    const sfs_clock_t* clock) {
  ttl_state* st = (ttl_state*)malloc(sizeof(ttl_state));
  if (st == NULL) return NULL;
  st->ttl_ms = ttl_ms;
  st->clock = clock;
  return rocksdb_compactionfilter_create(st, ttl_destroy, list_filter,
                                         list_filter_name);
}

int64_t sfs_list_elems_dropped(void) {
  return __atomic_load_n(&list_elems_dropped, __ATOMIC_RELAXED);
}

char* sfs_set_write_buffer(rocksdb_t* db, rocksdb_column_family_handle_t** cfs,
                           size_t n, size_t write_buffer, size_t arena) {
  char wb[32], ab[32];
  snprintf(wb, sizeof wb, "%zu", write_buffer);
  snprintf(ab, sizeof ab, "%zu", arena);
  const char* keys[2] = {"write_buffer_size", "arena_block_size"};
  const char* vals[2] = {wb, ab};
  for (size_t i = 0; i < n; i++) {
    char* err = NULL;
    rocksdb_set_options_cf(db, cfs[i], 2, keys, vals, &err);
    if (err != NULL) return err;
  }
  return NULL;
}

static uint32_t sfs_le32(const char* p) {
  const unsigned char* u = (const unsigned char*)p;
  return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
}

static void sfs_put_le32(char* p, uint32_t v) {
  unsigned char* u = (unsigned char*)p;
  u[0] = (unsigned char)v;
  u[1] = (unsigned char)(v >> 8);
  u[2] = (unsigned char)(v >> 16);
  u[3] = (unsigned char)(v >> 24);
}

size_t sfs_scan_frames(rocksdb_iterator_t* it, char* buf, size_t cap,
                       size_t* used, size_t* need, int* valid) {
  size_t n = 0, off = 0;
  *need = 0;
  while (rocksdb_iter_valid(it)) {
    size_t kl, vl;
    const char* k = rocksdb_iter_key(it, &kl);
    const char* v = rocksdb_iter_value(it, &vl);
    size_t sz = 8 + kl + vl;
    if (off + sz > cap) {
      if (n == 0) *need = sz;
      break;
    }
    sfs_put_le32(buf + off, (uint32_t)kl);
    sfs_put_le32(buf + off + 4, (uint32_t)vl);
    memcpy(buf + off + 8, k, kl);
    memcpy(buf + off + 8 + kl, v, vl);
    off += sz;
    n++;
    rocksdb_iter_next(it);
  }
  *used = off;
  *valid = rocksdb_iter_valid(it);
  return n;
}

char* sfs_sst_put_frames(rocksdb_sstfilewriter_t* w, const char* buf,
                         size_t n) {
  size_t off = 0;
  char* err = NULL;
  for (size_t i = 0; i < n; i++) {
    uint32_t kl = sfs_le32(buf + off), vl = sfs_le32(buf + off + 4);
    rocksdb_sstfilewriter_put(w, buf + off + 8, kl, buf + off + 8 + kl, vl, &err);
    if (err != NULL) return err;
    off += 8 + (size_t)kl + vl;
  }
  return NULL;
}
