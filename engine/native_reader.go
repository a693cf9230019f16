package engine

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/linxGnu/grocksdb"
)

// ListMergeDelimiter is the byte Flink's RocksDB list state puts between
// list elements; its merge operator ("stringappendtest") joins operands
// with it. ReadNativeDir uses the same joining so that list entries whose
// merge operands were never compacted read as one value.
const ListMergeDelimiter = ','

// listAppendMerge joins merge operands with ListMergeDelimiter, as Flink's
// RocksDB list state does.
type listAppendMerge struct{}

func (listAppendMerge) Name() string { return "stringappendtest" }

func (listAppendMerge) FullMerge(_, existing []byte, operands [][]byte) ([]byte, bool) {
	n := len(existing)
	for _, op := range operands {
		n += len(op) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, existing...)
	for _, op := range operands {
		if len(out) > 0 {
			out = append(out, ListMergeDelimiter)
		}
		out = append(out, op...)
	}
	return out, true
}

func (listAppendMerge) PartialMerge(_, left, right []byte) ([]byte, bool) {
	out := make([]byte, 0, len(left)+1+len(right))
	out = append(out, left...)
	out = append(out, ListMergeDelimiter)
	return append(out, right...), true
}

var (
	readOptsOnce sync.Once
	readOpts     *grocksdb.Options
)

// nativeReadOptions are the options of every ReadNativeDir open, made once
// and never destroyed: grocksdb's Options.Destroy frees a Go merge
// operator that RocksDB's shared pointer already owns, so options carrying
// one must not be destroyed.
func nativeReadOptions() *grocksdb.Options {
	readOptsOnce.Do(func() {
		o := grocksdb.NewDefaultOptions()
		o.SetParanoidChecks(true)
		o.SetMaxOpenFiles(64)
		o.SetInfoLogLevel(grocksdb.ErrorInfoLogLevel)
		o.SetMergeOperator(listAppendMerge{})
		readOpts = o
	})
	return readOpts
}

// ErrStopRead may be returned by a ReadNativeDir callback to end the read
// early without an error.
var ErrStopRead = errors.New("engine: stop reading")

// ReadNativeDir opens the RocksDB directory dir read-only (a restored
// native checkpoint or savepoint: CURRENT, MANIFEST, OPTIONS and SST
// files) and calls fn for every live entry of every column family, family
// by family in the order the MANIFEST lists them ("default" first), keys in
// byte order. key and value are only valid during the call. Checksums are
// verified on every block read; nothing in dir is modified except the
// RocksDB info log RocksDB itself writes there.
func ReadNativeDir(dir string, fn func(cf string, key, value []byte) error) (err error) {
	if fi, serr := os.Stat(dir); serr != nil {
		return fmt.Errorf("engine: native dir: %w", serr)
	} else if !fi.IsDir() {
		return fmt.Errorf("engine: native dir %s is not a directory", dir)
	}
	opts := nativeReadOptions()
	names, err := grocksdb.ListColumnFamilies(opts, dir)
	if err != nil {
		return fmt.Errorf("engine: list column families of %s: %w", dir, err)
	}
	if len(names) == 0 || len(names) > 1<<16 {
		return fmt.Errorf("engine: %s lists %d column families", dir, len(names))
	}
	cfOpts := make([]*grocksdb.Options, len(names))
	for i := range names {
		cfOpts[i] = opts
	}
	db, handles, err := grocksdb.OpenDbForReadOnlyColumnFamilies(opts, dir, names, cfOpts, false)
	if err != nil {
		return fmt.Errorf("engine: open %s read-only: %w", dir, err)
	}
	defer func() {
		for _, h := range handles {
			h.Destroy()
		}
		db.Close()
	}()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetVerifyChecksums(true)
	ro.SetFillCache(false)
	for i, name := range names {
		if err := readFamily(db, ro, handles[i], name, fn); err != nil {
			if errors.Is(err, ErrStopRead) {
				return nil
			}
			return err
		}
	}
	return nil
}

func readFamily(db *grocksdb.DB, ro *grocksdb.ReadOptions, h *grocksdb.ColumnFamilyHandle, name string, fn func(cf string, key, value []byte) error) error {
	it := db.NewIteratorCF(ro, h)
	defer it.Close()
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k := it.Key()
		v := it.Value()
		err := fn(name, k.Data(), v.Data())
		k.Free()
		v.Free()
		if err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("engine: column family %q: %w", name, err)
	}
	return nil
}
