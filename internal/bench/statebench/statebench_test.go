package statebench

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/engine"
)

func TestNexmarkGeneratorProportions(t *testing.T) {
	g := newNxGen(1)
	var persons, auctions, bids, hot int
	for i := 0; i < 50_000; i++ {
		ev := g.next()
		switch ev.kind {
		case nxPerson:
			persons++
		case nxAuction:
			auctions++
		case nxBid:
			bids++
			if (ev.auction-nxFirstID)%nxHotRatio == 0 {
				hot++
			}
		}
	}
	if persons != 1000 || auctions != 3000 || bids != 46000 {
		t.Fatalf("proportions %d/%d/%d", persons, auctions, bids)
	}
	if hot < bids*45/100 {
		t.Fatalf("hot auction bids %d of %d", hot, bids)
	}
	// deterministic
	a, b := newNxGen(9), newNxGen(9)
	for i := 0; i < 1000; i++ {
		if a.next() != b.next() {
			t.Fatal("generator not deterministic")
		}
	}
}

// TestWorkloadsAgree runs every workload through both paths on a small
// input and checks the resulting state is identical.
func TestWorkloadsAgree(t *testing.T) {
	cfg := StateBenchConfig{Events: 3000, BundleSize: 250, ManagedMemory: 32 << 20, Seed: 3}
	for _, w := range nexmarkWorkloads() {
		t.Run(w.name, func(t *testing.T) {
			dir := t.TempDir()
			slot, err := engine.NewSlotMemory(engine.SlotConfig{ManagedMemory: cfg.ManagedMemory})
			if err != nil {
				t.Fatal(err)
			}
			defer slot.Close()
			g := newNxGen(cfg.Seed)
			events := make([]nxEvent, cfg.Events)
			for i := range events {
				events[i] = g.next()
			}
			p, err := openPerRecord(dir+"/p", w.states, cfg.rocksOptions(slot))
			if err != nil {
				t.Fatal(err)
			}
			for i := range events {
				var ks [][]byte
				w.keys(benchLayout, &events[i], func(_ int, k []byte) { ks = append(ks, k) })
				w.apply(&events[i], ks, p, nil)
			}
			be, err := engine.OpenRocksDB(dir+"/b", benchLayout, w.states, cfg.rocksOptions(slot))
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			op := engine.NewOperator(be, nil)
			b := op.NewBundle()
			defer b.Close()
			acc := &bundleAccess{b: b, sts: op.States()}
			if w.winners {
				b.SetWinnerCache(op.States()[0], engine.NewWinnerCache(slot.Pool(), 1<<20))
			}
			for lo := 0; lo < len(events); lo += cfg.BundleSize {
				var refs []engine.KeyRef
				for i := lo; i < lo+cfg.BundleSize; i++ {
					w.keys(benchLayout, &events[i], func(st int, k []byte) { refs = append(refs, engine.KeyRef{State: op.States()[st], Key: k}) })
				}
				_ = b.Begin(refs)
				for i := lo; i < lo+cfg.BundleSize; i++ {
					var ks [][]byte
					w.keys(benchLayout, &events[i], func(_ int, k []byte) { ks = append(ks, k) })
					w.apply(&events[i], ks, acc, nil)
				}
				if err := b.Commit(); err != nil || acc.err != nil {
					t.Fatal(err, acc.err)
				}
				if b.Stats().PointReads != 0 {
					t.Fatalf("bundle needed %d point reads: keys() misses accesses", b.Stats().PointReads)
				}
			}
			for st := range w.states {
				// payloads without the TTL prefix, keyed by stored key
				pm, bm := map[string]string{}, map[string]string{}
				p.iterate(st, nil, func(k, v []byte) bool { pm[string(k)] = string(v); return true })
				if err := p.Err(); err != nil {
					t.Fatal(err)
				}
				_ = be.Scan(st, nil, nil, func(k, v []byte) bool { bm[string(k)] = string(v[engine.TTLPrefix:]); return true })
				if len(pm) == 0 || len(pm) != len(bm) {
					t.Fatalf("state %d: %d vs %d entries", st, len(pm), len(bm))
				}
				for k, v := range pm {
					if bm[k] != v {
						t.Fatalf("state %d: key %x differs", st, k)
					}
				}
			}
			p.close()
		})
	}
}

func BenchmarkWorkloads(b *testing.B) {
	for _, w := range nexmarkWorkloads() {
		b.Run(w.name, func(b *testing.B) {
			cfg := StateBenchConfig{Events: 200_000, BundleSize: benchBundle, ManagedMemory: 256 << 20, Seed: 42}
			for i := 0; i < b.N; i++ {
				r, err := runWorkload(cfg, w, b.TempDir(), cfg.Events, false)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.Speedup, "speedup")
				b.ReportMetric(r.CPUSpeedup, "cpu-speedup")
				b.ReportMetric(float64(r.Accesses), "accesses")
				b.ReportMetric(float64(r.Hydrated), "hydrated")
				b.ReportMetric(float64(r.Writes), "writes")
				b.ReportMetric(r.BundleEPS, "bundle-ev/s")
				b.ReportMetric(r.PerRecordEPS, "record-ev/s")
			}
		})
	}
}

var benchBundle = 1000

func init() {
	if s := os.Getenv("SFSTATE_BENCH_BUNDLE"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			benchBundle = n
		}
	}
}

func BenchmarkMicro(b *testing.B) {
	cfg := StateBenchConfig{BundleSize: benchBundle, MicroKeys: 20000, MicroOps: 50000, ManagedMemory: 256 << 20, Seed: 42}
	if s := os.Getenv("SFSTATE_MICRO"); s != "" {
		// SFSTATE_MICRO=valueUpdate,listAdd runs only those ops (profiling).
		cfg.microFilter = map[string]bool{}
		for _, op := range strings.Split(s, ",") {
			cfg.microFilter[op] = true
		}
	}
	if s := os.Getenv("SFSTATE_PERF_LEVEL"); s != "" {
		cfg.perfLevel, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("SFSTATE_MICRO_SCALE"); s != "" {
		// SFSTATE_MICRO_SCALE=keys,ops (the CLI's --micro-keys/--micro-ops).
		if k, o, ok := strings.Cut(s, ","); ok {
			cfg.MicroKeys, _ = strconv.Atoi(k)
			cfg.MicroOps, _ = strconv.Atoi(o)
		}
	}
	if s := os.Getenv("SFSTATE_INSERT_HINT"); s != "" {
		// Prefix bytes of memtable_insert_with_hint_prefix_extractor on
		// both paths.
		cfg.insertHint, _ = strconv.Atoi(s)
	}
	for i := 0; i < b.N; i++ {
		res, err := runMicro(cfg, b.TempDir(), func(string) {})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			b.Logf("%-12s per-op %7.0f engine %7.0f ops/ms  speedup %.2fx  cpu %.2fx", r.Op, r.PerOpOpsMs, r.EngineOpsMs, r.Speedup, r.CPUSpeedup)
		}
	}
}

// TestMicroPathsAgree runs every micro-benchmark small and checks that the
// per-op path and the engine end with the same stored state.
func TestMicroPathsAgree(t *testing.T) {
	cfg := StateBenchConfig{BundleSize: 97, MicroKeys: 300, MicroOps: 1000, ManagedMemory: 64 << 20, Seed: 3, verifyMicro: true}
	res, err := runMicro(cfg, t.TempDir(), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range res {
		seen[r.Op] = true
	}
	for _, op := range []string{"valueAdd", "valueGet", "valueUpdate", "listAdd", "listAddAll", "listAppend", "listGet", "listGetAndIterate", "listUpdate",
		"mapAdd", "mapContains", "mapEntries", "mapGet", "mapIsEmpty", "mapIterator", "mapKeys", "mapPutAll", "mapRemove", "mapUpdate", "mapValues"} {
		if !seen[op] {
			t.Errorf("micro-benchmark %s missing", op)
		}
	}
}
