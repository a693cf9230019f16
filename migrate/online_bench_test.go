//go:build cgo

package migrate

import (
	"math/rand/v2"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
)

// BenchmarkOnlineBundle: join bundles of 64 inputs on RocksDB over 20k
// keys (8 rows per side) still in the bucket layout (migrating: each
// bundle converts the keys it touches first, inside its own write) and
// over the same state fully migrated (migrated).
//
//	go test -run '^$' -bench OnlineBundle ./migrate
func BenchmarkOnlineBundle(b *testing.B) {
	const keys, rows, bundle = 20000, 8, 64
	clock := engine.NewManualClock(1_000_000)
	src := openBackend(b, "rocksdb", 128, clock, bothStates(0))
	bs, err := recordstore.Open(recordstore.LayoutBucket, src, recordstore.Options{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	for k0 := 0; k0 < keys; k0 += 500 {
		var probes []recordstore.Probe
		for k := k0; k < min(k0+500, keys); k++ {
			for r := 0; r < rows; r++ {
				probes = append(probes, recordstore.Probe{Side: recordstore.Side(r & 1), Key: testKey(b, int64(k)), Row: testRow(int64(r), 40)})
			}
		}
		if err := bs.Begin(probes); err != nil {
			b.Fatal(err)
		}
		for _, p := range probes {
			if _, err := bs.Add(p.Side, p.Key, p.Row, 1); err != nil {
				b.Fatal(err)
			}
		}
		if err := bs.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, js recordstore.JoinState, stats func() OnlineStats) {
		rng := rand.New(rand.NewPCG(1, 2))
		j := recordstore.NewJoin(js, recordstore.JoinOptions{})
		in := make([]recordstore.Input, bundle)
		var out int64
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for n := range in {
				in[n] = recordstore.Input{Side: recordstore.Side(rng.IntN(2)), Key: testKey(b, int64(rng.IntN(keys))), Row: testRow(int64(rng.IntN(rows)), 40)}
			}
			if err := j.ProcessBundle(in, func(c []recordstore.Output) error { out += int64(len(c)); return nil }); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(out)/float64(b.N), "out/bundle")
		if stats != nil {
			b.ReportMetric(float64(stats().KeysMigrated)/float64(b.N), "buckets/bundle")
		}
	}
	b.Run("migrated", func(b *testing.B) {
		dst := openBackend(b, "rocksdb", 128, clock, bothStates(0))
		if _, err := MigrateBackend(src, dst, BackendOptions{KeepBuckets: true}); err != nil {
			b.Fatal(err)
		}
		js, err := recordstore.Open(recordstore.LayoutRecord, dst, recordstore.Options{Clock: clock})
		if err != nil {
			b.Fatal(err)
		}
		run(b, js, nil)
	})
	b.Run("migrating", func(b *testing.B) {
		// a fresh copy of the bucket state per run
		cp := openBackend(b, "rocksdb", 128, clock, bothStates(0))
		bt := cp.NewBatch()
		defer bt.Close()
		var berr error
		if err := src.Scan(0, nil, nil, func(k, v []byte) bool {
			bt.Put(0, k, v)
			if bt.Len() >= 4096 {
				berr = bt.Commit()
			}
			return berr == nil
		}); err != nil || berr != nil {
			b.Fatal(err, berr)
		}
		if err := bt.Commit(); err != nil {
			b.Fatal(err)
		}
		ms, err := NewMigratingJoinState(cp, recordstore.Options{Clock: clock, Pool: engine.NewPool(64 << 20)})
		if err != nil {
			b.Fatal(err)
		}
		defer ms.Close()
		run(b, ms, ms.OnlineStats)
	})
}
