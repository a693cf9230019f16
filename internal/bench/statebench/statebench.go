// Package statebench measures the bundled state engine against the
// per-record baseline (engine.PerRecord: one RocksDB call per access, as
// Flink's RocksDB backend does): Nexmark-style workloads, Flink's state
// micro-benchmarks and slot memory (sfstate bench state).
package statebench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/bench/proc"
	"github.com/sfstate/sfstate/keygroups"
)

// StateBenchConfig sizes the state benchmarks.
type StateBenchConfig struct {
	Dir           string // scratch directory (removed afterwards)
	Events        int    // events per Nexmark-shaped workload
	BundleSize    int    // events per bundle
	MicroKeys     int    // keys set up for the micro-benchmarks
	MicroOps      int    // operations measured per micro-benchmark
	ManagedMemory int64  // slot managed memory for every instance
	MemoryBytes   int64  // bytes written in the memory comparison (default 32 MiB)
	// LargeEvents is the event count of the long q4 and q17 runs (10M by
	// default), each also run bundle-only for its peak RSS; 0 skips them.
	// They run with LargeManagedMemory per slot (default 1 GiB): at 10M
	// events q4's state is several times 256 MiB, and with a block cache
	// that small both paths spend their time rereading blocks.
	LargeEvents        int
	LargeManagedMemory int64
	MicroOnly          bool // run only the micro-benchmarks
	MemoryOnly         bool // run only the memory comparison
	Seed               uint64
	// Progress, when set, is told each finished step.
	Progress func(step string)

	microFilter map[string]bool // run only these micro-benchmarks (nil: all)
	perfLevel   int             // RocksDB perf level for the micro thread (0: library default)
	insertHint  int             // engine.RocksOptions.InsertHintPrefix of both paths
	verifyMicro bool            // compare both paths' stored state after each micro-benchmark
}

// WorkloadResult is one Nexmark-shaped workload: bundled engine versus the
// per-record path (one Get + one Put per state access through grocksdb).
type WorkloadResult struct {
	Name         string  `json:"name"`
	Events       int     `json:"events"`
	PerRecordEPS float64 `json:"perRecordEps"`
	BundleEPS    float64 `json:"bundleEps"`
	Speedup      float64 `json:"speedup"`
	// CPU time of the task thread only (RocksDB's background flushes and
	// compactions excluded): robust on a loaded machine.
	PerRecordCPUEPS float64 `json:"perRecordCpuEps"`
	BundleCPUEPS    float64 `json:"bundleCpuEps"`
	CPUSpeedup      float64 `json:"cpuSpeedup"`
	// Accesses is the state reads+writes of the per-record path; Hydrated
	// and Writes are the bundled path's batched reads and written keys.
	Accesses    int64   `json:"accesses"`
	Hydrated    int64   `json:"hydrated"`
	Writes      int64   `json:"writes"`
	CommitP50Ms float64 `json:"commitP50Ms"`
	CommitP99Ms float64 `json:"commitP99Ms"`
	// BundlePeakRSS is the process's peak resident set while the bundled
	// path alone ran the workload again (peak reset first; 0 when not
	// measured, -1 when the kernel does not support the reset).
	BundlePeakRSS int64 `json:"bundlePeakRssBytes,omitempty"`
}

// MicroResult is one of Flink's state micro-benchmarks in ops/ms.
type MicroResult struct {
	Op          string  `json:"op"`
	PerOpOpsMs  float64 `json:"perOpOpsMs"` // same options as the engine
	EngineOpsMs float64 `json:"engineOpsMs"`
	Speedup     float64 `json:"speedup"`
	CPUSpeedup  float64 `json:"cpuSpeedup"`
	// The per-op path on RocksDB's skip-list memtable (Flink's
	// configuration) instead of the engine's finger memtable, and the
	// engine's thread-CPU speed-up over it.
	PerOpSkipListOpsMs float64 `json:"perOpSkiplistOpsMs"`
	SkipListCPUSpeedup float64 `json:"skiplistCpuSpeedup"`
}

// MemoryResult is the native memory of n operators sharing one slot after
// the same write volume.
type MemoryResult struct {
	Operators        int   `json:"operators"`
	WriteBufferSize  int64 `json:"writeBufferSize"`
	CacheUsage       int64 `json:"blockCacheUsage"`
	CacheCapacity    int64 `json:"blockCacheCapacity"`
	MemTables        int64 `json:"curSizeAllMemTables"`
	TableReadersMem  int64 `json:"estimateTableReadersMem"`
	WriteBufferUsage int64 `json:"writeBufferManagerUsage"`
	WriteBufferCap   int64 `json:"writeBufferManagerCapacity"`
	ArenaBlockSize   int64 `json:"arenaBlockSize"`
	// WriteBufferShare is each family's share of the slot's write-buffer
	// capacity; a family's write buffer is min(WriteBufferSize, share) and
	// ArenaBlockSize one eighth of that.
	WriteBufferShare int64 `json:"writeBufferShare"`
	// TotalNative is CacheUsage (memtables included) plus TableReadersMem.
	TotalNative int64 `json:"totalNative"`
}

// StateBenchResult is everything `sfstate bench state` reports.
type StateBenchResult struct {
	Workloads      []WorkloadResult `json:"workloads"`
	GeomeanSpeedup float64          `json:"geomeanSpeedup"`
	GeomeanCPU     float64          `json:"geomeanCpuSpeedup"`
	Micro          []MicroResult    `json:"micro"`
	Memory         []MemoryResult   `json:"memory"`
}

// ---- Nexmark-shaped event generator ---------------------------------------

// Nexmark's generator (as in Beam's and nexmark-flink's): 1 person : 3
// auctions : 46 bids per 50 events; half the bids go to the hot auction
// (the first of the last 100 auctions), three quarters come from the hot
// bidder (the second of the last 100 people); other bids pick one of the
// ~100 auctions in flight (plus a lead of 10) and one of the 1000 active
// people (plus 10); prices are round(10^(6u)·100) cents; 5 categories.
const (
	nxPersonProp     = 1
	nxAuctionProp    = 3
	nxTotalProp      = 50
	nxHotRatio       = 100
	nxCategories     = 5
	nxInFlight       = 100
	nxActivePeople   = 1000
	nxIDLead         = 10
	nxEventMillis    = 2 // event-time spacing
	nxFirstID        = 1000
	nxHotAuctionProb = 2 // 1 - 1/2 of the bids are hot
	nxHotBidderProb  = 4 // 1 - 1/4 of the bids are hot
)

type nxKind uint8

const (
	nxPerson nxKind = iota
	nxAuction
	nxBid
)

type nxEvent struct {
	kind     nxKind
	id       int64 // person or auction id
	auction  int64 // bid
	bidder   int64 // bid
	price    int64
	category int64
	time     int64 // event time, ms
}

type nxGen struct {
	rng              *rand.Rand
	n                int64
	persons, auction int64 // generated so far
}

func newNxGen(seed uint64) *nxGen {
	return &nxGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *nxGen) price() int64 {
	return int64(math.Round(math.Pow(10, g.rng.Float64()*6) * 100))
}

func (g *nxGen) next() nxEvent {
	i := g.n
	g.n++
	ev := nxEvent{time: 1_600_000_000_000 + i*nxEventMillis}
	switch r := i % nxTotalProp; {
	case r < nxPersonProp:
		ev.kind, ev.id = nxPerson, nxFirstID+g.persons
		g.persons++
	case r < nxPersonProp+nxAuctionProp:
		ev.kind, ev.id = nxAuction, nxFirstID+g.auction
		g.auction++
		ev.category = 10 + g.rng.Int64N(nxCategories)
		ev.price = g.price()
	default:
		ev.kind = nxBid
		lastAuction := max(g.auction-1, 0)
		if g.rng.IntN(nxHotAuctionProb) > 0 {
			ev.auction = lastAuction / nxHotRatio * nxHotRatio
		} else {
			lo := max(lastAuction-nxInFlight, 0)
			ev.auction = lo + g.rng.Int64N(lastAuction-lo+1+nxIDLead)
		}
		ev.auction += nxFirstID
		lastPerson := max(g.persons-1, 0)
		if g.rng.IntN(nxHotBidderProb) > 0 {
			ev.bidder = lastPerson/nxHotRatio*nxHotRatio + 1
		} else {
			people := lastPerson + 1
			active := min(people, nxActivePeople)
			ev.bidder = people - active + g.rng.Int64N(active+nxIDLead)
		}
		ev.bidder += nxFirstID
		ev.price = g.price()
		ev.category = 10 + ev.auction%nxCategories
	}
	return ev
}

// ---- accessors: the two write paths behind one interface ---------------------

type stateAccess interface {
	get(st int, key []byte) ([]byte, bool)
	put(st int, key, payload []byte)
	del(st int, key []byte)
}

type workload struct {
	name   string
	states []engine.StateDesc
	// keys lists the state keys an event touches (for Begin).
	keys func(l engine.Layout, ev *nxEvent, emit func(st int, key []byte))
	// apply runs the event's state accesses on the keys keys emitted.
	apply func(ev *nxEvent, keys [][]byte, a stateAccess, buf []byte)
	// winners attaches a Top-1 winner cache (16 MiB of the slot's pool)
	// to the first state on the bundled path.
	winners bool
}

func i64key(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func kgOf(v int64, maxPar int) int { return keygroups.KeyGroupFor(keygroups.HashLong(v), maxPar) }

func putI64s(dst []byte, vs ...int64) []byte {
	dst = dst[:0]
	for _, v := range vs {
		dst = binary.BigEndian.AppendUint64(dst, uint64(v))
	}
	return dst
}

func nexmarkWorkloads() []workload {
	mp := func(l engine.Layout) int { return l.MaxParallelism }
	return []workload{
		{
			// q4: MAX(price) with retraction per auction (a multiset of bid
			// prices) feeding an AVG per category.
			name:   "q4",
			states: []engine.StateDesc{{Name: "max_multiset", Kind: engine.KindMultiset}, {Name: "avg", Kind: engine.KindValue}},
			keys: func(l engine.Layout, ev *nxEvent, emit func(int, []byte)) {
				if ev.kind != nxBid {
					return
				}
				emit(0, append(l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), nil), i64key(ev.price)...))
				emit(1, l.Key(nil, kgOf(ev.category, mp(l)), i64key(ev.category), nil))
			},
			apply: func(ev *nxEvent, keys [][]byte, a stateAccess, buf []byte) {
				if ev.kind != nxBid {
					return
				}
				c := int64(0)
				if p, ok := a.get(0, keys[0]); ok {
					c = readI64(p, 0)
				}
				a.put(0, keys[0], putI64s(buf, c+1))
				sum, cnt := int64(0), int64(0)
				if p, ok := a.get(1, keys[1]); ok {
					sum, cnt = readI64(p, 0), readI64(p, 1)
				}
				a.put(1, keys[1], putI64s(buf, sum+ev.price, cnt+1))
			},
		},
		{
			// q7: the highest bid per 10 s tumbling window (window = namespace).
			name:   "q7",
			states: []engine.StateDesc{{Name: "window_max", Kind: engine.KindValue}},
			keys: func(l engine.Layout, ev *nxEvent, emit func(int, []byte)) {
				if ev.kind == nxBid {
					emit(0, l.Key(nil, kgOf(0, mp(l)), i64key(0), i64key(ev.time/10_000)))
				}
			},
			apply: func(ev *nxEvent, keys [][]byte, a stateAccess, buf []byte) {
				if ev.kind != nxBid {
					return
				}
				best, bidder := int64(-1), int64(0)
				if p, ok := a.get(0, keys[0]); ok {
					best, bidder = readI64(p, 0), readI64(p, 1)
				}
				if ev.price > best {
					best, bidder = ev.price, ev.bidder
				}
				a.put(0, keys[0], putI64s(buf, best, bidder))
			},
		},
		{
			// q17: per auction and day: count, sum, min, max of bid prices.
			name:   "q17",
			states: []engine.StateDesc{{Name: "auction_day", Kind: engine.KindValue}},
			keys: func(l engine.Layout, ev *nxEvent, emit func(int, []byte)) {
				if ev.kind == nxBid {
					emit(0, l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), i64key(ev.time/86_400_000)))
				}
			},
			apply: func(ev *nxEvent, keys [][]byte, a stateAccess, buf []byte) {
				if ev.kind != nxBid {
					return
				}
				n, sum, lo, hi := int64(0), int64(0), int64(math.MaxInt64), int64(math.MinInt64)
				if p, ok := a.get(0, keys[0]); ok {
					n, sum, lo, hi = readI64(p, 0), readI64(p, 1), readI64(p, 2), readI64(p, 3)
				}
				a.put(0, keys[0], putI64s(buf, n+1, sum+ev.price, min(lo, ev.price), max(hi, ev.price)))
			},
		},
		{
			// q18: Top-1 (last bid by time) per bidder and auction.
			name:    "q18",
			states:  []engine.StateDesc{{Name: "top1", Kind: engine.KindValue, TTL: 24 * time.Hour}},
			winners: true,
			keys: func(l engine.Layout, ev *nxEvent, emit func(int, []byte)) {
				if ev.kind == nxBid {
					emit(0, l.Key(nil, kgOf(ev.bidder*31+ev.auction, mp(l)), append(i64key(ev.bidder), i64key(ev.auction)...), nil))
				}
			},
			apply: func(ev *nxEvent, keys [][]byte, a stateAccess, buf []byte) {
				if ev.kind != nxBid {
					return
				}
				if p, ok := a.get(0, keys[0]); ok && readI64(p, 0) > ev.time {
					return
				}
				a.put(0, keys[0], putI64s(buf, ev.time, ev.price, ev.bidder, ev.auction))
			},
		},
		{
			// q20: bids joined with their auction: auctions stored by id,
			// every bid looks its auction up.
			name:   "q20",
			states: []engine.StateDesc{{Name: "auctions", Kind: engine.KindValue}},
			keys: func(l engine.Layout, ev *nxEvent, emit func(int, []byte)) {
				switch ev.kind {
				case nxAuction:
					emit(0, l.Key(nil, kgOf(ev.id, mp(l)), i64key(ev.id), nil))
				case nxBid:
					emit(0, l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), nil))
				}
			},
			apply: func(ev *nxEvent, keys [][]byte, a stateAccess, buf []byte) {
				switch ev.kind {
				case nxAuction:
					a.put(0, keys[0], putI64s(buf, ev.id, ev.category, ev.price, ev.time, 0, 0, 0, 0))
				case nxBid:
					if p, ok := a.get(0, keys[0]); ok {
						_ = readI64(p, 1)
					}
				}
			},
		},
	}
}

func readI64(p []byte, i int) int64 {
	if 8*i+8 > len(p) {
		return 0
	}
	return int64(binary.BigEndian.Uint64(p[8*i:]))
}

// ---- bundled path -------------------------------------------------------------

type bundleAccess struct {
	b   *engine.Bundle
	sts []*engine.State
	err error
}

func (a *bundleAccess) get(st int, key []byte) ([]byte, bool) {
	v, ok, err := a.b.Get(a.sts[st], key)
	if err != nil && a.err == nil {
		a.err = err
	}
	return v, ok
}

func (a *bundleAccess) put(st int, key, payload []byte) {
	if err := a.b.Put(a.sts[st], key, payload); err != nil && a.err == nil {
		a.err = err
	}
}

func (a *bundleAccess) del(st int, key []byte) {
	if err := a.b.Delete(a.sts[st], key); err != nil && a.err == nil {
		a.err = err
	}
}

var benchLayout = engine.Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}

func percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i]) / float64(time.Millisecond)
}

func (c StateBenchConfig) rocksOptions(slot *engine.SlotMemory) engine.RocksOptions {
	return engine.RocksOptions{Slot: slot, Clock: engine.SystemClock(), InsertHintPrefix: c.insertHint}
}

// runWorkload runs both paths over the same events, interleaved bundle by
// bundle (each path timed separately) so that machine load and background
// compaction weigh on both alike.
// Events are generated one bundle at a time (the same ones for both
// paths), so a long run holds no event array. With bundleOnly the per-record
// path is skipped.
func runWorkload(cfg StateBenchConfig, w workload, dir string, nEvents int, bundleOnly bool) (WorkloadResult, error) {
	res := WorkloadResult{Name: w.name, Events: nEvents}
	g := newNxGen(cfg.Seed)
	events := make([]nxEvent, cfg.BundleSize)
	slotB, err := engine.NewSlotMemory(engine.SlotConfig{ManagedMemory: cfg.ManagedMemory})
	if err != nil {
		return res, err
	}
	defer slotB.Close()
	run := fmt.Sprintf("%s-%d", w.name, nEvents)
	if bundleOnly {
		run += "-alone"
	}
	defer os.RemoveAll(filepath.Join(dir, run+"-bundle"))
	// The per-record path, in its own slot; not opened at all when the
	// bundled path runs alone (its peak RSS is measured then).
	var p *perRecord
	if !bundleOnly {
		slotP, err := engine.NewSlotMemory(engine.SlotConfig{ManagedMemory: cfg.ManagedMemory})
		if err != nil {
			return res, err
		}
		defer slotP.Close()
		defer os.RemoveAll(filepath.Join(dir, run+"-per-record"))
		if p, err = openPerRecord(filepath.Join(dir, run+"-per-record"), w.states, cfg.rocksOptions(slotP)); err != nil {
			return res, err
		}
		defer p.close()
	}
	be, err := engine.OpenRocksDB(filepath.Join(dir, run+"-bundle"), benchLayout, w.states, cfg.rocksOptions(slotB))
	if err != nil {
		return res, err
	}
	defer be.Close()
	op := engine.NewOperator(be, nil)
	sts := op.States()
	b := op.NewBundle()
	defer b.Close()
	acc := &bundleAccess{b: b, sts: sts}
	if w.winners {
		wc := engine.NewWinnerCache(slotB.Pool(), 16<<20)
		defer wc.Release()
		b.SetWinnerCache(sts[0], wc)
	}
	buf := make([]byte, 0, 128)
	var refs []engine.KeyRef
	var commits []time.Duration
	var perRecord, bundled, perRecordCPU, bundledCPU time.Duration
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var evKeys [][]byte
	var bundleStarts []int
	emitFor := func(ev *nxEvent) [][]byte {
		evKeys = evKeys[:0]
		w.keys(benchLayout, ev, func(_ int, k []byte) { evKeys = append(evKeys, k) })
		return evKeys
	}
	for base := 0; base < nEvents; base += cfg.BundleSize {
		lo, hi := 0, min(cfg.BundleSize, nEvents-base)
		for i := lo; i < hi; i++ {
			events[i] = g.next()
		}
		c0, t0 := engine.ThreadCPU(), time.Now()
		if !bundleOnly {
			for i := lo; i < hi; i++ {
				w.apply(&events[i], emitFor(&events[i]), p, buf)
			}
		}
		c1, t1 := engine.ThreadCPU(), time.Now()
		perRecord += t1.Sub(t0)
		perRecordCPU += c1 - c0
		// The bundled path keeps each event's keys from Begin to apply.
		refs = refs[:0]
		starts := bundleStarts[:0]
		for i := lo; i < hi; i++ {
			starts = append(starts, len(refs))
			w.keys(benchLayout, &events[i], func(st int, k []byte) { refs = append(refs, engine.KeyRef{State: sts[st], Key: k}) })
		}
		starts = append(starts, len(refs))
		bundleStarts = starts
		if err := b.Begin(refs); err != nil {
			return res, err
		}
		for i := lo; i < hi; i++ {
			evKeys = evKeys[:0]
			for _, r := range refs[starts[i-lo]:starts[i-lo+1]] {
				evKeys = append(evKeys, r.Key)
			}
			w.apply(&events[i], evKeys, acc, buf)
		}
		t2 := time.Now()
		if err := b.Commit(); err != nil {
			return res, err
		}
		t3 := time.Now()
		commits = append(commits, t3.Sub(t2))
		res.Hydrated += int64(b.Stats().Hydrated + b.Stats().PointReads)
		res.Writes += int64(b.Stats().Writes)
		bundled += t3.Sub(t1)
		bundledCPU += engine.ThreadCPU() - c1
	}
	if p != nil && p.Err() != nil {
		return res, p.Err()
	}
	if acc.err != nil {
		return res, acc.err
	}
	if p != nil {
		res.Accesses = p.Accesses()
	}
	res.PerRecordEPS = float64(nEvents) / perRecord.Seconds()
	res.BundleEPS = float64(nEvents) / bundled.Seconds()
	res.CommitP50Ms = percentile(commits, 0.50)
	res.CommitP99Ms = percentile(commits, 0.99)
	res.Speedup = res.BundleEPS / res.PerRecordEPS
	res.PerRecordCPUEPS = float64(nEvents) / perRecordCPU.Seconds()
	res.BundleCPUEPS = float64(nEvents) / bundledCPU.Seconds()
	res.CPUSpeedup = res.BundleCPUEPS / res.PerRecordCPUEPS
	return res, nil
}

// RunStateBench runs the Nexmark-shaped workloads, the micro-benchmarks and
// the memory comparison.
func RunStateBench(cfg StateBenchConfig) (*StateBenchResult, error) {
	if cfg.Events <= 0 || cfg.BundleSize <= 0 || cfg.MicroKeys <= 0 || cfg.MicroOps <= 0 {
		return nil, errors.New("engine: bench sizes must be positive")
	}
	if cfg.ManagedMemory == 0 {
		cfg.ManagedMemory = 256 << 20
	}
	if cfg.Seed == 0 {
		cfg.Seed = 42
	}
	if cfg.MemoryBytes <= 0 {
		cfg.MemoryBytes = 32 << 20
	}
	dir, err := os.MkdirTemp(cfg.Dir, "sfstate-bench-state-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	note := func(s string) {
		if cfg.Progress != nil {
			cfg.Progress(s)
		}
	}
	out := &StateBenchResult{}
	logSum, logCPU := 0.0, 0.0
	if cfg.MemoryOnly {
		mem, err := runMemory(cfg, dir)
		if err != nil {
			return nil, err
		}
		out.Memory = mem
		note("memory")
		return out, nil
	}
	if cfg.MicroOnly {
		micro, err := runMicro(cfg, dir, note)
		if err != nil {
			return nil, err
		}
		out.Micro = micro
		return out, nil
	}
	for _, w := range nexmarkWorkloads() {
		r, err := runWorkload(cfg, w, dir, cfg.Events, false)
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", w.name, err)
		}
		out.Workloads = append(out.Workloads, r)
		logSum += math.Log(r.Speedup)
		logCPU += math.Log(r.CPUSpeedup)
		note("workload " + w.name)
	}
	out.GeomeanSpeedup = math.Exp(logSum / float64(len(out.Workloads)))
	out.GeomeanCPU = math.Exp(logCPU / float64(len(out.Workloads)))
	if cfg.LargeEvents > 0 {
		// The long runs (not in the geomean), each followed by the bundled
		// path alone on a fresh instance for its peak resident set.
		for _, w := range nexmarkWorkloads() {
			if w.name != "q4" && w.name != "q17" {
				continue
			}
			large := cfg
			large.ManagedMemory = cfg.LargeManagedMemory
			if large.ManagedMemory <= 0 {
				large.ManagedMemory = 1 << 30
			}
			r, err := runWorkload(large, w, dir, cfg.LargeEvents, false)
			if err != nil {
				return nil, fmt.Errorf("workload %s (%d events): %w", w.name, cfg.LargeEvents, err)
			}
			rss, err := proc.PeakRSSOf(func() error {
				_, err := runWorkload(large, w, dir, cfg.LargeEvents, true)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("workload %s (%d events, bundled alone): %w", w.name, cfg.LargeEvents, err)
			}
			r.BundlePeakRSS = rss
			out.Workloads = append(out.Workloads, r)
			note(fmt.Sprintf("workload %s (%d events)", w.name, cfg.LargeEvents))
		}
	}
	micro, err := runMicro(cfg, dir, note)
	if err != nil {
		return nil, err
	}
	out.Micro = micro
	mem, err := runMemory(cfg, dir)
	if err != nil {
		return nil, err
	}
	out.Memory = mem
	note("memory")
	return out, nil
}
