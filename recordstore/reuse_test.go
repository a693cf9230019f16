//go:build cgo

package recordstore

import (
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
)

// buildGroup inserts n distinct right rows of pad bytes under one key, in
// bundles of 5000.
func buildGroup(t *testing.T, j *Join, key []byte, n, pad int) {
	t.Helper()
	for lo := 0; lo < n; lo += 5000 {
		var in []Input
		for i := lo; i < min(n, lo+5000); i++ {
			in = append(in, Input{Side: Right, Kind: keygroups.Insert, Key: key, Row: payload(t, int64(i), pad)})
		}
		if err := j.ProcessBundle(in, func([]Output) error { t.Fatal("output while building"); return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

func probeBundle(t *testing.T, key []byte, probes int) []Input {
	var in []Input
	for i := 0; i < probes; i++ {
		in = append(in, Input{Side: Left, Kind: keygroups.Insert, Key: key, Row: payload(t, int64(1_000_000+i), 8)})
	}
	return in
}

func TestLargeGroupReusedUnder64MiBPool(t *testing.T) {
	const rows, pad, probes = 36_000, 256, 4
	pool := engine.NewPool(64 << 20)
	e := openEnv(t, "rocksdb", LayoutRecord, 0, Options{Pool: pool})
	j := NewJoin(e.st, JoinOptions{Pool: pool})
	key := joinKey(t, 42)
	buildGroup(t, j, key, rows, pad)
	before := e.st.Stats()
	seen := map[string]int{}
	var n int64
	err := j.ProcessBundle(probeBundle(t, key, probes), func(chunk []Output) error {
		if pool.Used() == 0 {
			t.Error("pending output is not charged to the pool")
		}
		for _, o := range chunk {
			n++
			seen[string(o.Right)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st := e.st.Stats()
	if n != rows*probes || len(seen) != rows {
		t.Fatalf("got %d output rows over %d distinct right rows, want %d over %d", n, len(seen), rows*probes, rows)
	}
	for r, c := range seen {
		if c != probes {
			t.Fatalf("right row %x joined %d times, want %d", r[:8], c, probes)
		}
	}
	if st.CachePeak <= 8<<20 {
		t.Fatalf("cache peak %d: the group was expected to exceed 8 MiB", st.CachePeak)
	}
	if scans, hits := st.GroupScans-before.GroupScans, st.CacheHits-before.CacheHits; scans != 1 || hits != probes-1 {
		t.Fatalf("%d store scans and %d cache hits, want 1 and %d", scans, hits, probes-1)
	}
	if st.LazyVisits != before.LazyVisits {
		t.Fatal("group went lazy under a 64 MiB pool")
	}
	if pool.Used() != 0 {
		t.Fatalf("%d bytes still reserved after the bundle", pool.Used())
	}

	// The same group under an 8 MiB allowance goes lazy, with the same output.
	e.st.(*recordState).opts.CacheAllowance = 8 << 20
	var m int64
	if err := j.ProcessBundle(probeBundle(t, key, 2), func(chunk []Output) error { m += int64(len(chunk)); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := int64(rows) * 2; m != want {
		t.Fatalf("lazy probes: %d output rows, want %d", m, want)
	}
	if e.st.Stats().LazyVisits == st.LazyVisits {
		t.Fatal("8 MiB allowance did not force the lazy path")
	}
	if pool.Used() != 0 {
		t.Fatalf("%d bytes still reserved after the lazy bundle", pool.Used())
	}
}

func TestSmallPoolLazyBoundedChunks(t *testing.T) {
	const rows, chunkRows = 3000, 100
	for _, backend := range []string{"heap", "rocksdb"} {
		t.Run(backend, func(t *testing.T) {
			pool := engine.NewPool(16 << 10)
			e := openEnv(t, backend, LayoutRecord, time.Hour, Options{Pool: pool})
			j := NewJoin(e.st, JoinOptions{Pool: pool, ChunkRows: chunkRows})
			key := joinKey(t, 7)
			buildGroup(t, j, key, rows, 32)
			in := probeBundle(t, key, 3)
			in = append(in, Input{Side: Right, Kind: keygroups.Delete, Key: key, Row: payload(t, 5, 32)})
			in = append(in, probeBundle(t, key, 1)...)
			var total int64
			err := j.ProcessBundle(in, func(chunk []Output) error {
				if len(chunk) > chunkRows {
					t.Errorf("chunk of %d rows exceeds %d", len(chunk), chunkRows)
				}
				if used := pool.Used(); used > pool.Capacity() {
					t.Errorf("pool over capacity: %d", used)
				}
				total += int64(len(chunk))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// 3 probes see all rows, the retraction joins the 3 probes, the
			// last probe sees one row fewer.
			if want := int64(3*rows + 3 + rows - 1); total != want {
				t.Fatalf("%d output rows, want %d", total, want)
			}
			st := e.st.Stats()
			if st.LazyVisits == 0 || st.PressureCalls == 0 {
				t.Fatalf("lazy path not taken: %+v", st)
			}
			if pool.Used() != 0 {
				t.Fatalf("%d bytes still reserved", pool.Used())
			}
			if js := j.Stats(); js.MaxChunk > chunkRows {
				t.Fatalf("max chunk %d", js.MaxChunk)
			}
		})
	}
}

func TestCheckFindsEveryProblem(t *testing.T) {
	for _, l := range []Layout{LayoutRecord, LayoutBucket} {
		t.Run(string(l), func(t *testing.T) {
			e := openEnv(t, "heap", l, time.Hour, Options{})
			j := NewJoin(e.st, JoinOptions{})
			var in []Input
			for k := int64(0); k < 20; k++ {
				in = append(in, Input{Side: Left, Kind: keygroups.Insert, Key: joinKey(t, k), Row: payload(t, k, 4)})
			}
			if err := j.ProcessBundle(in, func([]Output) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if p, err := e.st.Check(); err != nil || len(p) != 0 {
				t.Fatalf("clean state: %v %v", err, p)
			}
			key := joinKey(t, 3)
			kg := KeyGroupOf(key, 128)
			good := AppendRecordValue(nil, 5, 1, 0)
			if l == LayoutBucket {
				good = AppendBucketValue(nil, []LogicalRow{{Row: payload(t, 3, 4), Count: 1, TS: 5}})
			}
			rowFor := func(p []byte) []byte {
				if l == LayoutBucket {
					return p[:len(p)-len(payload(t, 3, 4))]
				}
				return p
			}
			b := e.be.NewBatch()
			// wrong key group
			b.Put(0, rowFor(AppendRecordKey(nil, 1, (kg+1)%128, Left, key, payload(t, 3, 4))), good)
			// truncated key length
			b.Put(0, []byte{byte(kg), 0, 0x7f, 1}, good)
			// corrupt value
			b.Put(0, rowFor(AppendRecordKey(nil, 1, kg, Right, key, payload(t, 3, 4))), good[:len(good)-1])
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			probs, err := e.st.Check()
			if err != nil {
				t.Fatal(err)
			}
			if len(probs) != 3 {
				t.Fatalf("want 3 problems, got %d: %v", len(probs), probs)
			}
			all := ""
			for _, p := range probs {
				all += p.String() + "\n"
			}
			for _, want := range []string{"hashes to key group", "key length", "corrupt entry"} {
				if !strings.Contains(all, want) {
					t.Errorf("no problem mentions %q:\n%s", want, all)
				}
			}
			if err := e.st.Logical(func(*LogicalGroup) error { return nil }); err == nil {
				t.Fatal("Logical accepted corrupt entries")
			}
		})
	}
}
