package engine

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
)

// familyOptions returns the options of column family cf in dir's newest
// OPTIONS file.
func familyOptions(t *testing.T, dir, cf string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	best, bestN := "", -1
	for _, e := range ents {
		if num, ok := strings.CutPrefix(e.Name(), "OPTIONS-"); ok {
			if n, err := strconv.Atoi(num); err == nil && n > bestN {
				best, bestN = e.Name(), n
			}
		}
	}
	if best == "" {
		t.Fatalf("no OPTIONS file in %s", dir)
	}
	f, err := os.Open(filepath.Join(dir, best))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			in = line == fmt.Sprintf("[CFOptions %q]", cf)
			continue
		}
		if k, v, ok := strings.Cut(line, "="); in && ok {
			out[k] = v
		}
	}
	if len(out) == 0 {
		t.Fatalf("no options of %q in %s", cf, best)
	}
	return out
}

// TestRecordPrefixAtOpen: the join record state's column family gets the
// record prefix extractor and the memtable prefix bloom in its options
// when the instance opens (other families do not, NoRecordPrefix turns it
// off), and instances written with and without it reopen the other way
// with every entry readable, by point read and by key-group scan.
func TestRecordPrefixAtOpen(t *testing.T) {
	for _, maxPar := range []int{128, 1024} {
		layout := Layout{MaxParallelism: maxPar, Range: keygroups.Range{Start: 0, End: maxPar - 1}}
		w := layout.Width()
		states := []StateDesc{{Name: RecordStateName, Kind: KindMap}, {Name: "other", Kind: KindMap}}
		name, err := RecordPrefixExtractor(w)
		if err != nil {
			t.Fatal(err)
		}
		for _, first := range []bool{false, true} { // NoRecordPrefix of the first open
			dir := filepath.Join(t.TempDir(), "db")
			be, err := OpenRocksDB(dir, layout, states, RocksOptions{NoRecordPrefix: first})
			if err != nil {
				t.Fatal(err)
			}
			rec := familyOptions(t, dir, RecordStateName)
			if got := rec["prefix_extractor"]; (got == name) == first {
				t.Fatalf("width %d, NoRecordPrefix %v: prefix_extractor %q", w, first, got)
			}
			if got, _ := strconv.ParseFloat(rec["memtable_prefix_bloom_size_ratio"], 64); (got == RecordMemtableBloomRatio) == first {
				t.Fatalf("width %d, NoRecordPrefix %v: memtable_prefix_bloom_size_ratio %v", w, first, got)
			}
			if got := familyOptions(t, dir, "other")["prefix_extractor"]; got == name {
				t.Fatalf("other family has the record prefix extractor")
			}
			// Record keys: kg | side | uvarint len | key | row.
			var keys [][]byte
			inKG5 := 0
			b := be.NewBatch()
			for i := 0; i < 300; i++ {
				k := layout.AppendKeyGroup(nil, i%maxPar)
				eq := fmt.Sprint("eq-", i%37)
				k = append(k, byte(i%2), byte(len(eq)))
				k = append(append(k, eq...), fmt.Sprint("row-", i)...)
				keys = append(keys, k)
				if i%maxPar == 5 {
					inKG5++
				}
				b.Put(0, k, []byte(fmt.Sprint("v", i)))
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if err := be.Flush(); err != nil {
				t.Fatal(err)
			}
			be.Close()
			be, err = OpenRocksDB(dir, layout, states, RocksOptions{NoRecordPrefix: !first})
			if err != nil {
				t.Fatal(err)
			}
			bad := -1
			err = be.MultiGet(0, keys, func(i int, v []byte, ok bool) {
				if (!ok || string(v) != fmt.Sprint("v", i)) && bad < 0 {
					bad = i
				}
			})
			if err != nil || bad >= 0 {
				be.Close()
				t.Fatalf("width %d reopened: key %d wrong or missing, %v", w, bad, err)
			}
			n := 0
			err = be.Scan(0, layout.AppendKeyGroup(nil, 5), layout.AppendKeyGroup(nil, 6), func(k, v []byte) bool { n++; return true })
			be.Close()
			if err != nil || n != inKG5 {
				t.Fatalf("width %d: key group 5 scan: %d entries, %v", w, n, err)
			}
		}
	}
}
