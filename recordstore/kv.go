//go:build cgo

package recordstore

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/sfstate/sfstate/engine"
)

// kv is the slice of an engine.Backend one join state uses (one declared
// state), plus a per-bundle prefix cursor. engine.Backend.Scan opens a
// fresh iterator per call (and the heap backend sorts its keys per call),
// which is too expensive per probe; the cursor keeps one RocksDB iterator
// (or one sorted heap snapshot) for the whole bundle. Nothing is written
// until Commit, so a cursor opened in a bundle sees a consistent state.
type kv struct {
	be engine.Backend
	st int

	nat engine.Native        // RocksDB backends: native access, else nil
	cur *engine.PrefixCursor // the bundle's cursor (batched entry copies)

	snapKeys [][]byte // heap / generic backends: sorted snapshot per bundle
	snapVals [][]byte
	snapOK   bool

	// iterPerGroup makes every group visit open its own bounded iterator
	// through engine.Backend.Scan (what a straightforward port does;
	// Options.IterPerGroup), for measuring what the bundle-wide cursor
	// saves.
	iterPerGroup bool
}

func newKV(be engine.Backend, st int) *kv {
	k := &kv{be: be, st: st}
	if nat, ok := engine.NativeOf(be); ok && st < len(be.States()) {
		k.nat = nat
	}
	return k
}

// prefix visits the entries whose key starts with p, in key order, until
// fn returns false. Bytes are valid only during fn.
func (k *kv) prefix(p []byte, fn func(key, val []byte) bool) error {
	if k.iterPerGroup {
		return k.be.Scan(k.st, p, prefixEnd(p), fn)
	}
	if k.nat != nil {
		if k.cur == nil {
			c, err := k.nat.NewPrefixCursor(k.st)
			if err != nil {
				return fmt.Errorf("recordstore: %w", err)
			}
			k.cur = c
		}
		if err := k.cur.Scan(p, fn); err != nil {
			return fmt.Errorf("recordstore: prefix iteration: %w", err)
		}
		return nil
	}
	if !k.snapOK {
		k.snapKeys, k.snapVals = k.snapKeys[:0], k.snapVals[:0]
		err := k.be.Scan(k.st, nil, nil, func(key, val []byte) bool {
			k.snapKeys = append(k.snapKeys, append([]byte(nil), key...))
			k.snapVals = append(k.snapVals, append([]byte(nil), val...))
			return true
		})
		if err != nil {
			return err
		}
		k.snapOK = true
	}
	i := sort.Search(len(k.snapKeys), func(i int) bool { return bytes.Compare(k.snapKeys[i], p) >= 0 })
	for ; i < len(k.snapKeys) && bytes.HasPrefix(k.snapKeys[i], p); i++ {
		if !fn(k.snapKeys[i], k.snapVals[i]) {
			break
		}
	}
	return nil
}

// prefixBounded is prefix through the backend's own bounded scan
// ([p, end of p)): used by the lazy path so that a huge group never keeps a
// bundle-wide snapshot alive on the heap backend.
func (k *kv) prefixBounded(p []byte, fn func(key, val []byte) bool) error {
	if k.nat != nil || k.snapOK {
		return k.prefix(p, fn)
	}
	return k.be.Scan(k.st, p, prefixEnd(p), fn)
}

// endBundle closes the cursor; the next bundle sees the committed writes.
func (k *kv) endBundle() {
	if k.cur != nil {
		k.cur.Close()
		k.cur = nil
	}
	k.snapOK = false
	k.snapKeys, k.snapVals = k.snapKeys[:0], k.snapVals[:0]
}

// prefixEnd is the smallest key greater than every key starting with p,
// or nil when there is none.
func prefixEnd(p []byte) []byte {
	e := append([]byte(nil), p...)
	for i := len(e) - 1; i >= 0; i-- {
		if e[i] != 0xff {
			e[i]++
			return e[:i+1]
		}
	}
	return nil
}

// scanAll visits every entry of the state in key order.
func (k *kv) scanAll(fn func(key, val []byte) bool) error {
	return k.be.Scan(k.st, nil, nil, fn)
}

// memtablePrefixBloomRatio sizes the memtable prefix bloom as a fraction
// of the write buffer (RocksDB's memtable_prefix_bloom_size_ratio).
const memtablePrefixBloomRatio = "0.1"

// setPrefixExtractor installs the record layout's group-prefix extractor
// for key-group width w (and a memtable prefix bloom) on the state's
// column family of an open RocksDB instance (mutable options); a no-op for
// other backends.
func setPrefixExtractor(k *kv, w int) error {
	if k.nat == nil {
		return nil
	}
	name, err := engine.RecordPrefixExtractor(w)
	if err != nil {
		return fmt.Errorf("recordstore: %w", err)
	}
	err = k.nat.SetOptions(k.st, []string{"prefix_extractor", "memtable_prefix_bloom_size_ratio"},
		[]string{name, memtablePrefixBloomRatio})
	if err != nil {
		return fmt.Errorf("recordstore: setting the prefix extractor: %w", err)
	}
	return nil
}
