//go:build cgo

package migrate

// #cgo CFLAGS: -O2
// #cgo LDFLAGS: -lrocksdb -lstdc++
// #include <stdlib.h>
// #include <stdint.h>
// #include <string.h>
// #include <rocksdb/c.h>
//
// // mig_scan copies entries from it into buf as frames
// // (u32 klen, u32 vlen, key, value) until buf is full or it is exhausted,
// // advancing it. It returns the number of frames; *used is the bytes
// // written; *need is set when the next entry alone does not fit in cap.
// static size_t mig_scan(rocksdb_iterator_t* it, char* buf, size_t cap, size_t* used, size_t* need, int* valid) {
//   size_t n = 0, off = 0;
//   *need = 0;
//   while (rocksdb_iter_valid(it)) {
//     size_t kl, vl;
//     const char* k = rocksdb_iter_key(it, &kl);
//     const char* v = rocksdb_iter_value(it, &vl);
//     size_t sz = 8 + kl + vl;
//     if (off + sz > cap) {
//       if (n == 0) *need = sz;
//       break;
//     }
//     uint32_t a = (uint32_t)kl, b = (uint32_t)vl;
//     memcpy(buf + off, &a, 4);
//     memcpy(buf + off + 4, &b, 4);
//     memcpy(buf + off + 8, k, kl);
//     memcpy(buf + off + 8 + kl, v, vl);
//     off += sz;
//     n++;
//     rocksdb_iter_next(it);
//   }
//   *used = off;
//   *valid = rocksdb_iter_valid(it);
//   return n;
// }
//
// // mig_sst_put puts n frames of buf into an SST writer; on error it
// // returns the message (caller frees).
// static char* mig_sst_put(rocksdb_sstfilewriter_t* w, const char* buf, size_t n) {
//   size_t off = 0;
//   char* err = NULL;
//   for (size_t i = 0; i < n; i++) {
//     uint32_t kl, vl;
//     memcpy(&kl, buf + off, 4);
//     memcpy(&vl, buf + off + 4, 4);
//     rocksdb_sstfilewriter_put(w, buf + off + 8, kl, buf + off + 8 + kl, vl, &err);
//     if (err != NULL) return err;
//     off += 8 + kl + vl;
//   }
//   return NULL;
// }
import "C"

import (
	"encoding/binary"
	"errors"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// grocksdb's wrappers hold the C API pointer as their first field
// (v1.7.15, pinned by go.mod); the engine reads handles the same way.
func nativeIter(it *grocksdb.Iterator) *C.rocksdb_iterator_t {
	return *(**C.rocksdb_iterator_t)(unsafe.Pointer(it))
}

func nativeSSTWriter(w *grocksdb.SSTFileWriter) *C.rocksdb_sstfilewriter_t {
	return *(**C.rocksdb_sstfilewriter_t)(unsafe.Pointer(w))
}

// frameBuf is a batch of (key, value) frames exchanged with C in one call.
type frameBuf struct {
	b []byte
	n int // frames
}

func (f *frameBuf) reset() { f.b, f.n = f.b[:0], 0 }

func (f *frameBuf) add(k, v []byte) {
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(k)))
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(v)))
	f.b = append(f.b, k...)
	f.b = append(f.b, v...)
	f.n++
}

// add3 appends one frame whose key is k followed by row (built in place).
func (f *frameBuf) add3(k, row, v []byte) {
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(k)+len(row)))
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(v)))
	f.b = append(f.b, k...)
	f.b = append(f.b, row...)
	f.b = append(f.b, v...)
	f.n++
}

// each visits the frames.
func (f *frameBuf) each(fn func(k, v []byte) error) error {
	b := f.b
	for i := 0; i < f.n; i++ {
		kl := int(binary.LittleEndian.Uint32(b))
		vl := int(binary.LittleEndian.Uint32(b[4:]))
		if err := fn(b[8:8+kl:8+kl], b[8+kl:8+kl+vl:8+kl+vl]); err != nil {
			return err
		}
		b = b[8+kl+vl:]
	}
	return nil
}

// scanBatched visits every entry of it (positioned by the caller) in
// batches copied out with one C call each; buf bounds the copy. An entry
// larger than the buffer is handed over in place (RocksDB's pinned bytes,
// no Go copy) and its consumer streams it in bounded chunks.
func scanBatched(it *grocksdb.Iterator, bufSize int, fn func(k, v []byte) error) error {
	f := &frameBuf{b: make([]byte, bufSize)}
	ci := nativeIter(it)
	for {
		var used, need C.size_t
		var valid C.int
		n := C.mig_scan(ci, (*C.char)(unsafe.Pointer(&f.b[0])), C.size_t(len(f.b)), &used, &need, &valid)
		if need > 0 {
			k, v := it.Key(), it.Value()
			err := fn(k.Data(), v.Data())
			k.Free()
			v.Free()
			if err != nil {
				return err
			}
			it.Next()
			continue
		}
		full := f.b
		f.b, f.n = f.b[:int(used)], int(n)
		if err := f.each(fn); err != nil {
			return err
		}
		f.b = full
		if valid == 0 {
			return it.Err()
		}
	}
}

// sstPutBatch puts f's frames into w with one C call.
func sstPutBatch(w *grocksdb.SSTFileWriter, f *frameBuf) error {
	if f.n == 0 {
		return nil
	}
	cerr := C.mig_sst_put(nativeSSTWriter(w), (*C.char)(unsafe.Pointer(&f.b[0])), C.size_t(f.n))
	if cerr != nil {
		msg := C.GoString(cerr)
		C.free(unsafe.Pointer(cerr))
		return errors.New(msg)
	}
	return nil
}

// pullIter reads an iterator in batches (as scanBatched) but hands entries
// out one at a time, so that two streams can be merged. The slices returned
// by next are valid until the following call.
type pullIter struct {
	it    *grocksdb.Iterator
	ci    *C.rocksdb_iterator_t
	buf   []byte
	cur   frameBuf
	off   int // byte offset of the next frame in cur
	left  int // frames left in cur
	valid bool
	big   bool // the last entry was handed over in place: advance it
	k, v  *grocksdb.Slice
}

func newPullIter(it *grocksdb.Iterator, bufSize int) *pullIter {
	return &pullIter{it: it, ci: nativeIter(it), buf: make([]byte, bufSize), valid: true}
}

func (p *pullIter) next() (k, v []byte, ok bool, err error) {
	if p.it == nil {
		return nil, nil, false, nil
	}
	if p.big {
		p.k.Free()
		p.v.Free()
		p.big = false
		p.it.Next()
	}
	if p.left == 0 {
		if !p.valid {
			return nil, nil, false, p.it.Err()
		}
		var used, need C.size_t
		var valid C.int
		n := C.mig_scan(p.ci, (*C.char)(unsafe.Pointer(&p.buf[0])), C.size_t(len(p.buf)), &used, &need, &valid)
		if need > 0 {
			p.k, p.v = p.it.Key(), p.it.Value()
			p.big = true
			return p.k.Data(), p.v.Data(), true, nil
		}
		p.valid = valid != 0
		p.cur.b, p.cur.n = p.buf[:int(used)], int(n)
		p.off, p.left = 0, int(n)
		if n == 0 {
			return nil, nil, false, p.it.Err()
		}
	}
	b := p.cur.b[p.off:]
	kl := int(binary.LittleEndian.Uint32(b))
	vl := int(binary.LittleEndian.Uint32(b[4:]))
	p.off += 8 + kl + vl
	p.left--
	return b[8 : 8+kl : 8+kl], b[8+kl : 8+kl+vl : 8+kl+vl], true, nil
}
