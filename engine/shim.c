#include "shim.h"

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

char* sfs_write_packed(rocksdb_t* db, const rocksdb_writeoptions_t* wo,
                       rocksdb_writebatch_t* wb,
                       rocksdb_column_family_handle_t** cfs, size_t ncfs,
                       size_t n, const uint8_t* ops, const uint16_t* states,
                       const char* keybuf, const size_t* keylens,
                       const char* valbuf, const size_t* vallens) {
  rocksdb_writebatch_clear(wb);
  size_t ko = 0, vo = 0;
  for (size_t i = 0; i < n; i++) {
    if (states[i] >= ncfs) return strdup("sfs_write_packed: state out of range");
    rocksdb_column_family_handle_t* cf = cfs[states[i]];
    if (ops[i] == 0) {
      rocksdb_writebatch_put_cf(wb, cf, keybuf + ko, keylens[i], valbuf + vo,
                                vallens[i]);
      vo += vallens[i];
    } else {
      rocksdb_writebatch_delete_cf(wb, cf, keybuf + ko, keylens[i]);
    }
    ko += keylens[i];
  }
  char* err = NULL;
  rocksdb_write(db, wo, wb, &err);
  rocksdb_writebatch_clear(wb);
  return err;
}
