package migrate

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/sfstate/sfstate/recordstore"
)

// TestConvertOrderAndDigest: buckets converted in key order yield record
// keys in strictly ascending order (what an SST writer needs), and the
// record digest equals the bucket digest; changing one count, timestamp or
// row byte changes it.
func TestConvertOrderAndDigest(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, width := range []int{1, 2} {
		type ent struct{ k, v []byte }
		var buckets []ent
		seen := map[string]bool{}
		for i := 0; i < 300; i++ {
			key := make([]byte, rng.IntN(200)) // lengths across the 1-byte uvarint boundary
			for j := range key {
				key[j] = byte(rng.IntN(3))
			}
			side := recordstore.Side(rng.IntN(2))
			kg := rng.IntN(1 << (8 * width))
			bk := recordstore.AppendGroupPrefix(nil, width, kg, side, key)
			if seen[string(bk)] {
				continue
			}
			seen[string(bk)] = true
			rows := map[string]bool{}
			var lr []recordstore.LogicalRow
			for j := 0; j < 1+rng.IntN(6); j++ {
				r := make([]byte, rng.IntN(4))
				for x := range r {
					r[x] = byte(rng.IntN(3))
				}
				if rows[string(r)] {
					continue
				}
				rows[string(r)] = true
				lr = append(lr, recordstore.LogicalRow{Row: r, Count: 1 + rng.Int64N(5), Assoc: rng.Int64N(2), TS: rng.Int64N(1 << 40)})
			}
			sort.Slice(lr, func(a, b int) bool { return bytes.Compare(lr[a].Row, lr[b].Row) < 0 })
			buckets = append(buckets, ent{bk, recordstore.AppendBucketValue(nil, lr)})
		}
		sort.Slice(buckets, func(a, b int) bool { return bytes.Compare(buckets[a].k, buckets[b].k) < 0 })
		c := Converter{Width: width}
		src := NewDigest()
		rd := &RecordDigester{D: NewDigest(), Width: width}
		var prev []byte
		var recs []ent
		for _, b := range buckets {
			if err := src.AddBucketEntry(width, b.k, b.v); err != nil {
				t.Fatal(err)
			}
			if _, err := c.ConvertBucket(b.k, b.v, func(_ *Bucket, _ *recordstore.LogicalRow, k, v []byte) error {
				if prev != nil && bytes.Compare(prev, k) >= 0 {
					t.Fatalf("record key %x not after %x", k, prev)
				}
				prev = append(prev[:0], k...)
				recs = append(recs, ent{append([]byte(nil), k...), append([]byte(nil), v...)})
				return rd.Add(k, v)
			}); err != nil {
				t.Fatal(err)
			}
		}
		if ms := Compare(src, rd.D); len(ms) != 0 {
			t.Fatalf("width %d: %d groups differ: %v", width, len(ms), ms[0])
		}
		// sensitivity: alter one record's count, timestamp or row
		for _, alter := range []func(k, v []byte) ([]byte, []byte){
			func(k, v []byte) ([]byte, []byte) { v[15]++; return k, v },
			func(k, v []byte) ([]byte, []byte) { v[7]++; return k, v },
			func(k, v []byte) ([]byte, []byte) { return append(k, 9), v },
		} {
			d := &RecordDigester{D: NewDigest(), Width: width}
			for i, r := range recs {
				k, v := append([]byte(nil), r.k...), append([]byte(nil), r.v...)
				if i == len(recs)/2 {
					k, v = alter(k, v)
				}
				if err := d.Add(k, v); err != nil {
					t.Fatal(err)
				}
			}
			if len(Compare(src, d.D)) != 1 {
				t.Fatalf("width %d: altering one record changed %d groups, want 1", width, len(Compare(src, d.D)))
			}
		}
	}
}

func TestConvertCorrupt(t *testing.T) {
	c := Converter{Width: 1}
	bk := recordstore.AppendGroupPrefix(nil, 1, 3, recordstore.Right, []byte("k"))
	v := recordstore.AppendBucketValue(nil, []recordstore.LogicalRow{{Row: []byte("x"), Count: 1, TS: 1}})
	for name, kv := range map[string][2][]byte{
		"key with trailing bytes": {append(append([]byte(nil), bk...), 1), v},
		"side byte 2":             {[]byte{3, 2, 1, 'k'}, v},
		"short value":             {bk, v[:5]},
	} {
		_, err := c.ConvertBucket(kv[0], kv[1], func(*Bucket, *recordstore.LogicalRow, []byte, []byte) error { return nil })
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: want ErrCorrupt, got %v", name, err)
		}
	}
}

// TestHashBytesSensitive: the digest hash changes when any bit of a row
// flips, when the row is extended or cut by one byte, and with the seed,
// for every length around the 8-, 16- and 32-byte steps.
func TestHashBytesSensitive(t *testing.T) {
	buf := make([]byte, 100)
	for i := range buf {
		buf[i] = byte(i*37 + 11)
	}
	for n := 0; n < 99; n++ {
		b := buf[:n]
		h := hashBytes(7, b)
		if hashBytes(7, b) != h {
			t.Fatalf("len %d: not deterministic", n)
		}
		if hashBytes(8, b) == h {
			t.Fatalf("len %d: seed ignored", n)
		}
		if hashBytes(7, buf[:n+1]) == h {
			t.Fatalf("len %d: one more byte gives the same hash", n)
		}
		z := make([]byte, n+1)
		if n > 0 && hashBytes(7, z[:n]) == hashBytes(7, z) {
			t.Fatalf("len %d: a trailing zero byte gives the same hash", n)
		}
		for i := 0; i < n; i++ {
			for bit := 0; bit < 8; bit++ {
				c := append([]byte(nil), b...)
				c[i] ^= 1 << bit
				if hashBytes(7, c) == h {
					t.Fatalf("len %d: flipping bit %d of byte %d gives the same hash", n, bit, i)
				}
			}
		}
	}
}
