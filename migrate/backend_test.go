//go:build cgo

package migrate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
)

const testTTL = 40 * time.Millisecond

func testKey(t testing.TB, k int64) []byte {
	t.Helper()
	b, err := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeBigInt})
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Build([]any{k})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testRow is an opaque row payload; migration never interprets it.
func testRow(id int64, pad int) []byte {
	r := binary.BigEndian.AppendUint64(nil, uint64(id))
	return append(r, bytes.Repeat([]byte{byte(id)}, pad)...)
}

func bothStates(ttl time.Duration) []engine.StateDesc {
	return []engine.StateDesc{recordstore.StateDesc(recordstore.LayoutBucket, ttl), recordstore.StateDesc(recordstore.LayoutRecord, ttl)}
}

func openBackend(t testing.TB, kind string, maxP int, clock *engine.Clock, states []engine.StateDesc) engine.Backend {
	t.Helper()
	layout := engine.Layout{MaxParallelism: maxP, Range: keygroups.Range{Start: 0, End: maxP - 1}}
	var be engine.Backend
	var err error
	switch kind {
	case "heap":
		be, err = engine.OpenHeap(layout, states)
	case "rocksdb":
		be, err = engine.OpenRocksDB(t.TempDir(), layout, states, engine.RocksOptions{Clock: clock, WriteBufferSize: 4 << 20})
	default:
		t.Fatalf("backend %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

// history drives a random join history (inserts, retractions, clock
// advances past the TTL) through a bucket-layout state.
func history(t testing.TB, rng *rand.Rand, be engine.Backend, clock *engine.Clock, bundles, keys int) {
	t.Helper()
	js, err := recordstore.Open(recordstore.LayoutBucket, be, recordstore.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for b := 0; b < bundles; b++ {
		n := 1 + rng.IntN(20)
		var probes []recordstore.Probe
		type op struct {
			side     recordstore.Side
			key, row []byte
			delta    int64
		}
		var ops []op
		for i := 0; i < n; i++ {
			side := recordstore.Side(rng.IntN(2))
			k := testKey(t, int64(rng.IntN(keys)))
			if rng.IntN(10) == 0 { // a hot key with a large multiset
				k = testKey(t, -1)
			}
			row := testRow(int64(rng.IntN(40)), rng.IntN(3)*rng.IntN(100))
			d := int64(1 + rng.IntN(3))
			if rng.IntN(3) == 0 {
				d = -int64(1 + rng.IntN(2))
			}
			probes = append(probes, recordstore.Probe{Side: side, Key: k, Row: row})
			ops = append(ops, op{side, k, row, d})
		}
		if err := js.Begin(probes); err != nil {
			t.Fatal(err)
		}
		for _, o := range ops {
			if _, err := js.Add(o.side, o.key, o.row, o.delta); err != nil {
				t.Fatal(err)
			}
		}
		if err := js.Commit(); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Duration(rng.IntN(8)) * time.Millisecond)
	}
}

func logical(t testing.TB, l recordstore.Layout, be engine.Backend, clock *engine.Clock) []recordstore.LogicalGroup {
	t.Helper()
	js, err := recordstore.Open(l, be, recordstore.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var out []recordstore.LogicalGroup
	if err := js.Logical(func(g *recordstore.LogicalGroup) error {
		c := *g
		c.Key = append([]byte(nil), g.Key...)
		c.Rows = append([]recordstore.LogicalRow(nil), g.Rows...)
		out = append(out, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func countEntries(t testing.TB, be engine.Backend, name string) int {
	st, err := StateID(be, name)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := be.Scan(st, nil, nil, func(k, v []byte) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateRandomHistories: bucket state → migrate → record state has the
// same logical content and the same raw digest (rows, counts, association
// counts, timestamps), in place and into another backend, on both backends,
// with pools small enough to force chunks inside one key.
func TestMigrateRandomHistories(t *testing.T) {
	for _, kind := range []string{"heap", "rocksdb"} {
		for seed := uint64(1); seed <= 4; seed++ {
			for _, inPlace := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/seed%d/inplace=%v", kind, seed, inPlace), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, 7))
					maxP := 128
					if seed%2 == 0 {
						maxP = 300 // 2-byte key-group prefix
					}
					clock := engine.NewManualClock(1_000_000)
					src := openBackend(t, kind, maxP, clock, bothStates(testTTL))
					history(t, rng, src, clock, 60, 12)
					before := logical(t, recordstore.LayoutBucket, src, clock)
					rawBefore, err := DigestBuckets(src)
					if err != nil {
						t.Fatal(err)
					}
					if len(before) == 0 || rawBefore.Total().Rows == 0 {
						t.Fatal("history left no state")
					}
					dst := src
					if !inPlace {
						other := "heap"
						if kind == "heap" {
							other = "rocksdb"
						}
						dst = openBackend(t, other, maxP, clock, []engine.StateDesc{recordstore.StateDesc(recordstore.LayoutRecord, testTTL)})
					}
					pool := engine.NewPool(int64(200 + rng.IntN(2000)))
					res, err := MigrateBackend(src, dst, BackendOptions{Pool: pool})
					if err != nil {
						t.Fatal(err)
					}
					if pool.Used() != 0 {
						t.Fatalf("pool still holds %d bytes", pool.Used())
					}
					if res.Chunks < 2 {
						t.Fatalf("expected several chunks under a small pool, got %d", res.Chunks)
					}
					if ms := Compare(rawBefore, res.Source); len(ms) > 0 {
						t.Fatalf("source digest while migrating differs: %v", ms[0])
					}
					rawAfter, err := DigestRecords(dst)
					if err != nil {
						t.Fatal(err)
					}
					if ms := Compare(rawBefore, rawAfter); len(ms) > 0 {
						t.Fatalf("%d groups differ, first: %v", len(ms), ms[0])
					}
					after := logical(t, recordstore.LayoutRecord, dst, clock)
					if !reflect.DeepEqual(before, after) {
						t.Fatalf("logical content differs: %d groups before, %d after", len(before), len(after))
					}
					if inPlace {
						if n := countEntries(t, src, recordstore.BucketStateName); n != 0 {
							t.Fatalf("%d bucket entries left after in-place migration", n)
						}
					}
					// time keeps running: rows expire identically in both layouts
					clock.Advance(testTTL / 2)
					if inPlace {
						return
					}
					b2, a2 := logical(t, recordstore.LayoutBucket, src, clock), logical(t, recordstore.LayoutRecord, dst, clock)
					if !reflect.DeepEqual(b2, a2) {
						t.Fatalf("logical content differs after the clock advanced")
					}
				})
			}
		}
	}
}

// TestMigrateRepeatable: running the conversion twice (an interrupted run
// repeated) changes nothing.
func TestMigrateRepeatable(t *testing.T) {
	clock := engine.NewManualClock(1_000_000)
	src := openBackend(t, "heap", 128, clock, bothStates(0))
	history(t, rand.New(rand.NewPCG(9, 9)), src, clock, 40, 8)
	dst := openBackend(t, "heap", 128, clock, []engine.StateDesc{recordstore.StateDesc(recordstore.LayoutRecord, 0)})
	if _, err := MigrateBackend(src, dst, BackendOptions{ChunkBytes: 500}); err != nil {
		t.Fatal(err)
	}
	d1, _ := DigestRecords(dst)
	if _, err := MigrateBackend(src, dst, BackendOptions{}); err != nil {
		t.Fatal(err)
	}
	d2, _ := DigestRecords(dst)
	if ms := Compare(d1, d2); len(ms) > 0 || d1.Total().Rows == 0 {
		t.Fatalf("second run changed the result: %v", ms)
	}
}

// TestMigrateCorruptBucket: a corrupt bucket value fails with ErrCorrupt and
// the offset.
func TestMigrateCorruptBucket(t *testing.T) {
	clock := engine.NewManualClock(1_000_000)
	be := openBackend(t, "heap", 128, clock, bothStates(0))
	k := testKey(t, 5)
	kg := recordstore.KeyGroupOf(k, 128)
	bk := recordstore.AppendGroupPrefix(nil, 1, kg, recordstore.Left, k)
	good := recordstore.AppendBucketValue(nil, []recordstore.LogicalRow{{Row: []byte("a"), Count: 2, TS: 5}, {Row: []byte("b"), Count: 1, TS: 7}})
	cases := map[string][]byte{
		"truncated":   good[:len(good)-3],
		"zero count":  bytes.Replace(append([]byte(nil), good...), []byte{'a', 2}, []byte{'a', 0}, 1),
		"bad version": append(append(append([]byte(nil), good[:8]...), 9), good[9:]...),
		"huge length": append(append([]byte(nil), good[:9]...), 0xff, 0xff, 0xff, 0x7f),
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			b := be.NewBatch()
			b.Put(0, bk, v)
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			_, err := MigrateBackend(be, be, BackendOptions{})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("want ErrCorrupt, got %v", err)
			}
			if !bytes.Contains([]byte(err.Error()), []byte("offset")) {
				t.Fatalf("error does not name an offset: %v", err)
			}
		})
	}
}
