package rescale

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/linxGnu/grocksdb"

	"github.com/sfstate/sfstate/engine"
)

var (
	scratchOptsOnce sync.Once
	scratchOpts     *grocksdb.Options
)

// scratchReadOptions are the options of every read-only open of a scratch
// import, made once and never destroyed (grocksdb v1.7.15's
// Options.Destroy frees a Go merge operator RocksDB already owns). The
// scratch imports hold files of engine checkpoints, whose list families
// may carry the engine's merge operands: ListMergeOperator folds them.
func scratchReadOptions() *grocksdb.Options {
	scratchOptsOnce.Do(func() {
		o := grocksdb.NewDefaultOptions()
		o.SetMaxOpenFiles(-1)
		o.SetInfoLogLevel(grocksdb.ErrorInfoLogLevel)
		o.SetMergeOperator(engine.ListMergeOperator{})
		scratchOpts = o
	})
	return scratchOpts
}

// readScratch calls fn for the live entries of the scratch import in dir
// whose key groups are set in mask (indexed from layout.Range.Start), in
// the families named in stateOf, family by family in key order. Only the
// masked key-group ranges are scanned. Block checksums are not verified
// again: every file's size and CRC-32C were checked when it was fetched.
func readScratch(ctx context.Context, dir string, layout engine.Layout, mask []bool, stateOf map[string]int, fn func(st, kg int, key, val []byte) error) error {
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("scratch import: %w", err)
	}
	opts := scratchReadOptions()
	names, err := grocksdb.ListColumnFamilies(opts, dir)
	if err != nil {
		return fmt.Errorf("scratch import %s: list column families: %w", dir, err)
	}
	if len(names) == 0 || len(names) > 1<<16 {
		return fmt.Errorf("scratch import %s lists %d column families", dir, len(names))
	}
	for _, n := range names {
		if _, ok := stateOf[n]; !ok && n != "default" {
			return fmt.Errorf("undeclared state %q", n)
		}
	}
	cfOpts := make([]*grocksdb.Options, len(names))
	for i := range names {
		cfOpts[i] = opts
	}
	db, handles, err := grocksdb.OpenDbForReadOnlyColumnFamilies(opts, dir, names, cfOpts, false)
	if err != nil {
		return fmt.Errorf("scratch import %s: open read-only: %w", dir, err)
	}
	defer func() {
		for _, h := range handles {
			h.Destroy()
		}
		db.Close()
	}()
	r := layout.Range
	for i, name := range names {
		st, ok := stateOf[name]
		if !ok {
			continue // "default": holds nothing the engine uses
		}
		for lo := r.Start; lo <= r.End; lo++ {
			if !mask[lo-r.Start] {
				continue
			}
			hi := lo
			for hi < r.End && mask[hi+1-r.Start] {
				hi++
			}
			if err := scanRange(ctx, db, handles[i], layout, lo, hi, st, fn); err != nil {
				return fmt.Errorf("scratch import, family %q: %w", name, err)
			}
			lo = hi
		}
	}
	return nil
}

func scanRange(ctx context.Context, db *grocksdb.DB, h *grocksdb.ColumnFamilyHandle, layout engine.Layout, lo, hi, st int, fn func(st, kg int, key, val []byte) error) error {
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetVerifyChecksums(false)
	ro.SetFillCache(false)
	// No explicit readahead: RocksDB's own iterator readahead (growing to
	// 256 KiB) serves these freshly downloaded files from the page cache;
	// a 4 MiB readahead buffer per scan made the adoption 15-25% slower
	// (BenchmarkLazyAdopt).
	lower, upper := layout.RangeBounds(lo, hi)
	ro.SetIterateLowerBound(lower)
	if upper != nil {
		ro.SetIterateUpperBound(upper)
	}
	it := db.NewIteratorCF(ro, h)
	defer it.Close()
	n := 0
	for it.Seek(lower); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		key, val := k.Data(), v.Data()
		kg, err := layout.KeyGroupOf(key)
		if err == nil && (kg < lo || kg > hi) {
			err = fmt.Errorf("key of key group %d outside the scanned [%d, %d]", kg, lo, hi)
		}
		if err == nil {
			err = fn(st, kg, key, val)
		}
		k.Free()
		v.Free()
		if err != nil {
			return err
		}
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return nil
}
