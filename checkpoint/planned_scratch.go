package checkpoint

import (
	"context"
	"fmt"
	"os"

	"github.com/sfstate/sfstate/engine"
)

// readScratch calls fn for the live entries of the scratch import in dir
// whose key groups are set in mask (indexed from layout.Range.Start), in
// the families named in stateOf, family by family in key order. Only the
// masked key-group ranges are scanned. Block checksums are not verified
// again: every file's size and CRC-32C were checked when it was fetched.
// The scratch imports hold files of engine checkpoints, whose list
// families may carry the engine's merge operands: engine.OpenNativeImport
// folds them.
func readScratch(ctx context.Context, dir string, layout engine.Layout, mask []bool, stateOf map[string]int, fn func(st, kg int, key, val []byte) error) error {
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("scratch import: %w", err)
	}
	db, err := engine.OpenNativeImport(dir)
	if err != nil {
		return fmt.Errorf("scratch import %s: %w", dir, err)
	}
	defer db.Close()
	names := db.Families()
	for _, n := range names {
		if _, ok := stateOf[n]; !ok && n != "default" {
			return fmt.Errorf("undeclared state %q", n)
		}
	}
	r := layout.Range
	for _, name := range names {
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
			if err := scanRange(ctx, db, name, layout, lo, hi, st, fn); err != nil {
				return fmt.Errorf("scratch import, family %q: %w", name, err)
			}
			lo = hi
		}
	}
	return nil
}

// scanRange visits key groups lo..hi of family cf in batches.
func scanRange(ctx context.Context, db *engine.NativeDB, cf string, layout engine.Layout, lo, hi, st int, fn func(st, kg int, key, val []byte) error) error {
	lower, upper := layout.RangeBounds(lo, hi)
	// No explicit readahead: RocksDB's own iterator readahead (growing to
	// 256 KiB) serves these freshly downloaded files from the page cache;
	// a 4 MiB readahead buffer per scan made the adoption 15-25% slower
	// (BenchmarkLazyAdopt).
	o := engine.ScanOptions{Lower: lower, Upper: upper, SkipChecksums: true}
	n := 0
	return db.ScanWith(cf, o, func(key, val []byte) error {
		kg, err := layout.KeyGroupOf(key)
		if err == nil && (kg < lo || kg > hi) {
			err = fmt.Errorf("key of key group %d outside the scanned [%d, %d]", kg, lo, hi)
		}
		if err == nil {
			err = fn(st, kg, key, val)
		}
		if err != nil {
			return err
		}
		if n++; n%1024 == 0 {
			return ctx.Err()
		}
		return nil
	})
}
