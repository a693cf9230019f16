package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/linxGnu/grocksdb"
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
	Seed          uint64
	// Progress, when set, is told each finished step.
	Progress func(step string)
}

// WorkloadResult is one Nexmark-shaped workload: bundled engine versus the
// per-record path (one Get + one Put per state access through grocksdb).
type WorkloadResult struct {
	Name         string  `json:"name"`
	Events       int     `json:"events"`
	PerRecordEPS float64 `json:"per_record_eps"`
	BundleEPS    float64 `json:"bundle_eps"`
	Speedup      float64 `json:"speedup"`
	CommitP50Ms  float64 `json:"commit_p50_ms"`
	CommitP99Ms  float64 `json:"commit_p99_ms"`
}

// MicroResult is one of Flink's state micro-benchmarks in ops/ms.
type MicroResult struct {
	Op          string  `json:"op"`
	PerOpOpsMs  float64 `json:"per_op_ops_ms"`
	EngineOpsMs float64 `json:"engine_ops_ms"`
	Speedup     float64 `json:"speedup"`
}

// MemoryResult is the native memory of n operators sharing one slot after
// the same write volume.
type MemoryResult struct {
	Operators        int   `json:"operators"`
	CacheUsage       int64 `json:"block_cache_usage"`
	CacheCapacity    int64 `json:"block_cache_capacity"`
	MemTables        int64 `json:"cur_size_all_mem_tables"`
	TableReadersMem  int64 `json:"estimate_table_readers_mem"`
	WriteBufferUsage int64 `json:"write_buffer_manager_usage"`
}

// StateBenchResult is everything `sfstate bench state` reports.
type StateBenchResult struct {
	Workloads      []WorkloadResult `json:"workloads"`
	GeomeanSpeedup float64          `json:"geomean_speedup"`
	Micro          []MicroResult    `json:"micro"`
	Memory         []MemoryResult   `json:"memory"`
}

// ---- Nexmark-shaped event generator ---------------------------------------

// Nexmark's proportions (1 person : 3 auctions : 46 bids per 50 events),
// its hot ratios (half the bids go to a hot auction, three quarters come
// from a hot bidder; "hot" ids are multiples of 100), 5 categories.
const (
	nxPersonProp  = 1
	nxAuctionProp = 3
	nxTotalProp   = 50
	nxHotRatio    = 100
	nxCategories  = 5
	nxEventMillis = 2 // event-time spacing
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
	persons, auction int64
}

func newNxGen(seed uint64) *nxGen {
	return &nxGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *nxGen) next() nxEvent {
	i := g.n
	g.n++
	ev := nxEvent{time: 1_600_000_000_000 + i*nxEventMillis}
	switch r := i % nxTotalProp; {
	case r < nxPersonProp:
		g.persons++
		ev.kind, ev.id = nxPerson, 1000+g.persons
	case r < nxPersonProp+nxAuctionProp:
		g.auction++
		ev.kind, ev.id = nxAuction, 1000+g.auction
		ev.category = 10 + g.rng.Int64N(nxCategories)
		ev.price = 100 + g.rng.Int64N(10000)
	default:
		ev.kind = nxBid
		if g.rng.IntN(2) > 0 { // hot auction
			ev.auction = 1000 + max(1, g.auction/nxHotRatio*nxHotRatio)
		} else {
			ev.auction = 1000 + 1 + g.rng.Int64N(max(1, g.auction))
		}
		if g.rng.IntN(4) > 0 { // hot bidder
			ev.bidder = 1000 + max(1, g.persons/nxHotRatio*nxHotRatio) + 1
		} else {
			ev.bidder = 1000 + 1 + g.rng.Int64N(max(1, g.persons))
		}
		ev.price = 100 + int64(math.Exp(g.rng.NormFloat64()*1.2+6))
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
	states []StateDesc
	// keys lists the state keys an event touches (for Begin).
	keys func(l Layout, ev *nxEvent, emit func(st int, key []byte))
	// apply runs the event's state accesses.
	apply func(l Layout, ev *nxEvent, a stateAccess, buf []byte)
}

func i64key(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func kgOf(v int64, maxPar int) int { return keygroups.KeyGroupFor(keygroups.HashLong(v), maxPar) }

func readI64s(p []byte, n int) []int64 {
	out := make([]int64, n)
	for i := 0; i < n && 8*i+8 <= len(p); i++ {
		out[i] = int64(binary.BigEndian.Uint64(p[8*i:]))
	}
	return out
}

func putI64s(dst []byte, vs ...int64) []byte {
	dst = dst[:0]
	for _, v := range vs {
		dst = binary.BigEndian.AppendUint64(dst, uint64(v))
	}
	return dst
}

func nexmarkWorkloads() []workload {
	mp := func(l Layout) int { return l.MaxParallelism }
	return []workload{
		{
			// q4: MAX(price) with retraction per auction (a multiset of bid
			// prices) feeding an AVG per category.
			name:   "q4",
			states: []StateDesc{{Name: "max_multiset", Kind: KindMultiset}, {Name: "avg", Kind: KindValue}},
			keys: func(l Layout, ev *nxEvent, emit func(int, []byte)) {
				if ev.kind != nxBid {
					return
				}
				emit(0, append(l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), nil), i64key(ev.price)...))
				emit(1, l.Key(nil, kgOf(ev.category, mp(l)), i64key(ev.category), nil))
			},
			apply: func(l Layout, ev *nxEvent, a stateAccess, buf []byte) {
				if ev.kind != nxBid {
					return
				}
				k := append(l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), nil), i64key(ev.price)...)
				c := int64(0)
				if p, ok := a.get(0, k); ok {
					c = readI64s(p, 1)[0]
				}
				a.put(0, k, putI64s(buf, c+1))
				ck := l.Key(nil, kgOf(ev.category, mp(l)), i64key(ev.category), nil)
				sum, cnt := int64(0), int64(0)
				if p, ok := a.get(1, ck); ok {
					v := readI64s(p, 2)
					sum, cnt = v[0], v[1]
				}
				a.put(1, ck, putI64s(buf, sum+ev.price, cnt+1))
			},
		},
		{
			// q7: the highest bid per 10 s tumbling window (window = namespace).
			name:   "q7",
			states: []StateDesc{{Name: "window_max", Kind: KindValue}},
			keys: func(l Layout, ev *nxEvent, emit func(int, []byte)) {
				if ev.kind == nxBid {
					emit(0, l.Key(nil, kgOf(0, mp(l)), i64key(0), i64key(ev.time/10_000)))
				}
			},
			apply: func(l Layout, ev *nxEvent, a stateAccess, buf []byte) {
				if ev.kind != nxBid {
					return
				}
				k := l.Key(nil, kgOf(0, mp(l)), i64key(0), i64key(ev.time/10_000))
				best, bidder := int64(-1), int64(0)
				if p, ok := a.get(0, k); ok {
					v := readI64s(p, 2)
					best, bidder = v[0], v[1]
				}
				if ev.price > best {
					best, bidder = ev.price, ev.bidder
				}
				a.put(0, k, putI64s(buf, best, bidder))
			},
		},
		{
			// q17: per auction and day: count, sum, min, max of bid prices.
			name:   "q17",
			states: []StateDesc{{Name: "auction_day", Kind: KindValue}},
			keys: func(l Layout, ev *nxEvent, emit func(int, []byte)) {
				if ev.kind == nxBid {
					emit(0, l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), i64key(ev.time/86_400_000)))
				}
			},
			apply: func(l Layout, ev *nxEvent, a stateAccess, buf []byte) {
				if ev.kind != nxBid {
					return
				}
				k := l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), i64key(ev.time/86_400_000))
				v := []int64{0, 0, math.MaxInt64, math.MinInt64}
				if p, ok := a.get(0, k); ok {
					v = readI64s(p, 4)
				}
				a.put(0, k, putI64s(buf, v[0]+1, v[1]+ev.price, min(v[2], ev.price), max(v[3], ev.price)))
			},
		},
		{
			// q18: Top-1 (last bid by time) per bidder and auction.
			name:   "q18",
			states: []StateDesc{{Name: "top1", Kind: KindValue, TTL: 24 * time.Hour}},
			keys: func(l Layout, ev *nxEvent, emit func(int, []byte)) {
				if ev.kind == nxBid {
					emit(0, l.Key(nil, kgOf(ev.bidder*31+ev.auction, mp(l)), append(i64key(ev.bidder), i64key(ev.auction)...), nil))
				}
			},
			apply: func(l Layout, ev *nxEvent, a stateAccess, buf []byte) {
				if ev.kind != nxBid {
					return
				}
				k := l.Key(nil, kgOf(ev.bidder*31+ev.auction, mp(l)), append(i64key(ev.bidder), i64key(ev.auction)...), nil)
				if p, ok := a.get(0, k); ok && readI64s(p, 1)[0] > ev.time {
					return
				}
				a.put(0, k, putI64s(buf, ev.time, ev.price, ev.bidder, ev.auction))
			},
		},
		{
			// q20: bids joined with their auction: auctions stored by id,
			// every bid looks its auction up.
			name:   "q20",
			states: []StateDesc{{Name: "auctions", Kind: KindValue}},
			keys: func(l Layout, ev *nxEvent, emit func(int, []byte)) {
				switch ev.kind {
				case nxAuction:
					emit(0, l.Key(nil, kgOf(ev.id, mp(l)), i64key(ev.id), nil))
				case nxBid:
					emit(0, l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), nil))
				}
			},
			apply: func(l Layout, ev *nxEvent, a stateAccess, buf []byte) {
				switch ev.kind {
				case nxAuction:
					a.put(0, l.Key(nil, kgOf(ev.id, mp(l)), i64key(ev.id), nil), putI64s(buf, ev.id, ev.category, ev.price, ev.time, 0, 0, 0, 0))
				case nxBid:
					if p, ok := a.get(0, l.Key(nil, kgOf(ev.auction, mp(l)), i64key(ev.auction), nil)); ok {
						_ = readI64s(p, 2)
					}
				}
			},
		},
	}
}

// ---- per-record path: grocksdb Get + Put per access ---------------------------

type perRecord struct {
	db      *grocksdb.DB
	handles []*grocksdb.ColumnFamilyHandle
	cfs     []*grocksdb.ColumnFamilyHandle
	opts    []*grocksdb.Options
	ro      *grocksdb.ReadOptions
	wo      *grocksdb.WriteOptions
	states  []StateDesc
	clock   *Clock
	slot    *SlotMemory
	val     []byte
	out     []byte
	err     error
}

func openPerRecord(dir string, states []StateDesc, ro RocksOptions) (*perRecord, error) {
	ro.defaults()
	nat, err := ro.Slot.acquire()
	if err != nil {
		return nil, err
	}
	p := &perRecord{states: states, clock: ro.Clock, slot: ro.Slot}
	names := []string{"default"}
	var cfo []*grocksdb.Options
	base, err := columnFamilyOptions(ro, 0, nat, nil)
	if err != nil {
		ro.Slot.release()
		return nil, err
	}
	p.opts = append(p.opts, base)
	cfo = append(cfo, base)
	for _, s := range states {
		o, err := columnFamilyOptions(ro, s.TTL.Milliseconds(), nat, nil)
		if err != nil {
			p.close()
			return nil, err
		}
		p.opts = append(p.opts, o)
		names = append(names, s.Name)
		cfo = append(cfo, o)
	}
	db, hs, err := grocksdb.OpenDbColumnFamilies(base, dir, names, cfo)
	if err != nil {
		p.close()
		return nil, err
	}
	p.db, p.handles, p.cfs = db, hs, hs[1:]
	p.ro = grocksdb.NewDefaultReadOptions()
	p.wo = grocksdb.NewDefaultWriteOptions()
	p.wo.DisableWAL(true)
	return p, nil
}

func (p *perRecord) close() {
	if p.db != nil {
		for _, h := range p.handles {
			h.Destroy()
		}
		p.db.Close()
		p.ro.Destroy()
		p.wo.Destroy()
		p.db = nil
	}
	for _, o := range p.opts {
		o.Destroy()
	}
	p.opts = nil
	if p.slot != nil {
		p.slot.release()
		p.slot = nil
	}
}

func (p *perRecord) get(st int, key []byte) ([]byte, bool) {
	s, err := p.db.GetCF(p.ro, p.cfs[st], key)
	if err != nil {
		p.err = err
		return nil, false
	}
	defer s.Free()
	if !s.Exists() {
		return nil, false
	}
	ts, pl, ok := splitValue(s.Data())
	if !ok {
		p.err = errors.New("value without TTL prefix")
		return nil, false
	}
	if ttl := p.states[st].TTL.Milliseconds(); ttl > 0 && ts+ttl <= p.clock.Now() {
		return nil, false
	}
	p.out = append(p.out[:0], pl...)
	return p.out, true
}

func (p *perRecord) put(st int, key, payload []byte) {
	p.val = appendValue(p.val[:0], p.clock.Now(), payload)
	if err := p.db.PutCF(p.wo, p.cfs[st], key, p.val); err != nil {
		p.err = err
	}
}

func (p *perRecord) del(st int, key []byte) {
	if err := p.db.DeleteCF(p.wo, p.cfs[st], key); err != nil {
		p.err = err
	}
}

// ---- bundled path -------------------------------------------------------------

type bundleAccess struct {
	b   *Bundle
	sts []*State
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

var benchLayout = Layout{MaxParallelism: 128, Range: KeyGroupRange{0, 127}}

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

func (c StateBenchConfig) rocksOptions(slot *SlotMemory) RocksOptions {
	return RocksOptions{Slot: slot}
}

func runWorkload(cfg StateBenchConfig, w workload, dir string) (WorkloadResult, error) {
	res := WorkloadResult{Name: w.name, Events: cfg.Events}
	events := make([]nxEvent, cfg.Events)
	g := newNxGen(cfg.Seed)
	for i := range events {
		events[i] = g.next()
	}
	// per record
	{
		slot, err := NewSlotMemory(SlotConfig{ManagedMemory: cfg.ManagedMemory})
		if err != nil {
			return res, err
		}
		p, err := openPerRecord(filepath.Join(dir, w.name+"-per-record"), w.states, cfg.rocksOptions(slot))
		if err != nil {
			slot.Close()
			return res, err
		}
		buf := make([]byte, 0, 128)
		start := time.Now()
		for i := range events {
			w.apply(benchLayout, &events[i], p, buf)
		}
		el := time.Since(start)
		p.close()
		slot.Close()
		if p.err != nil {
			return res, p.err
		}
		res.PerRecordEPS = float64(len(events)) / el.Seconds()
	}
	// bundled
	{
		slot, err := NewSlotMemory(SlotConfig{ManagedMemory: cfg.ManagedMemory})
		if err != nil {
			return res, err
		}
		be, err := OpenRocksDB(filepath.Join(dir, w.name+"-bundle"), benchLayout, w.states, cfg.rocksOptions(slot))
		if err != nil {
			slot.Close()
			return res, err
		}
		op := NewOperator(be, nil)
		sts := op.States()
		b := op.NewBundle()
		acc := &bundleAccess{b: b, sts: sts}
		buf := make([]byte, 0, 128)
		var refs []KeyRef
		var commits []time.Duration
		start := time.Now()
		for lo := 0; lo < len(events); lo += cfg.BundleSize {
			hi := min(lo+cfg.BundleSize, len(events))
			refs = refs[:0]
			for i := lo; i < hi; i++ {
				w.keys(benchLayout, &events[i], func(st int, k []byte) { refs = append(refs, KeyRef{sts[st], k}) })
			}
			if err := b.Begin(refs); err != nil {
				acc.err = err
				break
			}
			for i := lo; i < hi; i++ {
				w.apply(benchLayout, &events[i], acc, buf)
			}
			t0 := time.Now()
			if err := b.Commit(); err != nil {
				acc.err = err
				break
			}
			commits = append(commits, time.Since(t0))
		}
		el := time.Since(start)
		b.Close()
		be.Close()
		slot.Close()
		if acc.err != nil {
			return res, acc.err
		}
		res.BundleEPS = float64(len(events)) / el.Seconds()
		res.CommitP50Ms = percentile(commits, 0.50)
		res.CommitP99Ms = percentile(commits, 0.99)
	}
	res.Speedup = res.BundleEPS / res.PerRecordEPS
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
	logSum := 0.0
	for _, w := range nexmarkWorkloads() {
		r, err := runWorkload(cfg, w, dir)
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", w.name, err)
		}
		out.Workloads = append(out.Workloads, r)
		logSum += math.Log(r.Speedup)
		note("workload " + w.name)
	}
	out.GeomeanSpeedup = math.Exp(logSum / float64(len(out.Workloads)))
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
