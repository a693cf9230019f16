package engine

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/linxGnu/grocksdb"
)

// ListMergeDelimiter is the byte Flink's RocksDB list state puts between
// list elements; its merge operator ("stringappendtest") joins operands
// with it. ReadNativeDir uses the same joining so that list entries whose
// merge operands were never compacted read as one value (except in
// families whose OPTIONS name the engine's own list merge operator,
// ListMergeName, which it merges with ListMergeOperator).
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
	engineOpts   *grocksdb.Options
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
		e := grocksdb.NewDefaultOptions()
		e.SetParanoidChecks(true)
		e.SetMaxOpenFiles(64)
		e.SetInfoLogLevel(grocksdb.ErrorInfoLogLevel)
		e.SetMergeOperator(ListMergeOperator{})
		engineOpts = e
	})
	return readOpts
}

// engineListOptions are the options of the column families of an engine
// directory whose OPTIONS name the engine's list merge operator (never
// destroyed, as nativeReadOptions).
func engineListOptions() *grocksdb.Options {
	nativeReadOptions()
	return engineOpts
}

// maxOptionsFile bounds the OPTIONS file ReadNativeDir parses.
const maxOptionsFile = 64 << 20

// listMergeFamilies returns the column families whose merge operator in
// dir's newest OPTIONS file is ListMergeName (the engine's list families).
// A directory without an OPTIONS file yields none (Flink's operator is
// used for every family).
func listMergeFamilies(dir string) (map[string]bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("engine: native dir: %w", err)
	}
	best, bestN := "", int64(-1)
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), "OPTIONS-")
		if !ok || e.IsDir() {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		if n > bestN {
			best, bestN = e.Name(), n
		}
	}
	out := map[string]bool{}
	if best == "" {
		return out, nil
	}
	path := filepath.Join(dir, best)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("engine: options file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxOptionsFile))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	cf, line := "", 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(t, "[") {
			cf = ""
			if name, ok := strings.CutPrefix(t, "[CFOptions \""); ok {
				name, ok = strings.CutSuffix(name, "\"]")
				if !ok {
					return nil, fmt.Errorf("engine: %s line %d: malformed section %q", path, line, t)
				}
				cf = unescapeOptionName(name)
			}
			continue
		}
		if cf == "" {
			continue
		}
		if v, ok := strings.CutPrefix(t, "merge_operator="); ok && mergeOperatorID(v) == ListMergeName {
			out[cf] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("engine: options file %s (after line %d): %w", path, line, err)
	}
	return out, nil
}

// mergeOperatorID returns the operator name of an OPTIONS merge_operator
// value: a bare name or a customizable form "{id=NAME;...}".
func mergeOperatorID(v string) string {
	v = strings.TrimSpace(v)
	if inner, ok := strings.CutPrefix(v, "{"); ok {
		inner = strings.TrimSuffix(inner, "}")
		for _, part := range strings.Split(inner, ";") {
			if id, ok := strings.CutPrefix(strings.TrimSpace(part), "id="); ok {
				return strings.TrimSpace(id)
			}
		}
		return ""
	}
	return v
}

// unescapeOptionName undoes RocksDB's escaping of section names
// (a backslash before the escaped character).
func unescapeOptionName(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
	engineLists, err := listMergeFamilies(dir)
	if err != nil {
		return err
	}
	cfOpts := make([]*grocksdb.Options, len(names))
	for i, name := range names {
		cfOpts[i] = opts
		if engineLists[name] {
			cfOpts[i] = engineListOptions()
		}
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
