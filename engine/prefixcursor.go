package engine

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <rocksdb/c.h>

// sfs_prefix_fill copies the entries of it whose key starts with p[0:plen]
// into buf as  u32 klen | u32 vlen | key | value  (native byte order),
// first seeking to p when seek is set, else going on from the iterator's
// position. It stops when buf is full (the iterator then stays on the
// first entry not copied), or when the iterator leaves the prefix or
// becomes invalid (*done = 1). When the next entry alone does not fit into
// an empty buf, nothing is copied and *need is its size. Returns the
// number of entries copied; an iterator error is returned in *err.
static int sfs_prefix_fill(rocksdb_iterator_t* it, int seek, const char* p, size_t plen,
                           char* buf, size_t cap, size_t* used, size_t* need, int* done,
                           char** err) {
  int n = 0;
  size_t off = 0;
  *need = 0;
  *done = 0;
  if (seek) {
    rocksdb_iter_seek(it, p, plen);
  }
  for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char* k = rocksdb_iter_key(it, &kl);
    if (kl < plen || memcmp(k, p, plen) != 0) {
      *done = 1;
      break;
    }
    const char* v = rocksdb_iter_value(it, &vl);
    size_t sz = 8 + kl + vl;
    if (kl > UINT32_MAX || vl > UINT32_MAX) {
      *err = strdup("entry larger than 4 GiB");
      break;
    }
    if (sz > cap - off) {
      if (n == 0) {
        *need = sz;
      }
      *used = off;
      return n;
    }
    uint32_t l32 = (uint32_t)kl, v32 = (uint32_t)vl;
    memcpy(buf + off, &l32, 4);
    memcpy(buf + off + 4, &v32, 4);
    memcpy(buf + off + 8, k, kl);
    memcpy(buf + off + 8 + kl, v, vl);
    off += sz;
    n++;
  }
  if (!*done && *err == NULL) {
    // left the loop on an invalid iterator: the end, or an error
    *done = 1;
    rocksdb_iter_get_error(it, err);
  }
  *used = off;
  return n;
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// PrefixCursor is one RocksDB iterator over a column family that visits
// the entries of a key prefix in batches: one cgo call seeks and copies as
// many entries as fit into its buffer, instead of four calls per entry
// (next, valid, key, value) through grocksdb.Iterator. It reads the state
// as of its creation plus nothing else (an implicit snapshot of the
// iterator). Not safe for concurrent use; Close it before the DB.
type PrefixCursor struct {
	it  *C.rocksdb_iterator_t
	ro  *C.rocksdb_readoptions_t
	buf []byte
}

// newPrefixCursor opens a cursor on cf of db with default read options
// (Native.NewPrefixCursor for a backend's state).
func newPrefixCursor(db *grocksdb.DB, cf *grocksdb.ColumnFamilyHandle) (*PrefixCursor, error) {
	if db == nil || cf == nil {
		return nil, errors.New("engine: prefix cursor: no database or column family")
	}
	ro := C.rocksdb_readoptions_create()
	it := C.rocksdb_create_iterator_cf(nativeDB(db), ro, nativeCF(cf))
	if it == nil {
		C.rocksdb_readoptions_destroy(ro)
		return nil, errors.New("engine: prefix cursor: cannot create an iterator")
	}
	return &PrefixCursor{it: it, ro: ro, buf: make([]byte, 64<<10)}, nil
}

// Scan calls fn for every entry whose key starts with prefix, in key
// order, until fn returns false. The slices are valid only during fn.
func (c *PrefixCursor) Scan(prefix []byte, fn func(key, val []byte) bool) error {
	if c.it == nil {
		return errors.New("engine: prefix cursor closed")
	}
	var pp *C.char
	if len(prefix) > 0 {
		pp = (*C.char)(unsafe.Pointer(&prefix[0]))
	}
	seek := C.int(1)
	for {
		var used, need C.size_t
		var done C.int
		var cerr *C.char
		n := C.sfs_prefix_fill(c.it, seek, pp, C.size_t(len(prefix)),
			(*C.char)(unsafe.Pointer(&c.buf[0])), C.size_t(len(c.buf)), &used, &need, &done, &cerr)
		seek = 0
		if err := cError(cerr); err != nil {
			return fmt.Errorf("engine: prefix cursor: %w", err)
		}
		if n == 0 && need > 0 {
			c.buf = make([]byte, int(need))
			continue
		}
		b := c.buf[:int(used)]
		for i := 0; i < int(n); i++ {
			kl := int(binary.NativeEndian.Uint32(b))
			vl := int(binary.NativeEndian.Uint32(b[4:]))
			k := b[8 : 8+kl : 8+kl]
			v := b[8+kl : 8+kl+vl : 8+kl+vl]
			b = b[8+kl+vl:]
			if !fn(k, v) {
				return nil
			}
		}
		if done != 0 {
			return nil
		}
	}
}

// Close releases the iterator.
func (c *PrefixCursor) Close() {
	if c.it != nil {
		C.rocksdb_iter_destroy(c.it)
		C.rocksdb_readoptions_destroy(c.ro)
		c.it, c.ro = nil, nil
	}
}
