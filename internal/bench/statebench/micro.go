package statebench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/sfstate/sfstate/engine"
)

// iterAccess adds prefix iteration and list appends to a stateAccess.
type iterAccess interface {
	stateAccess
	iterate(st int, prefix []byte, fn func(userKey, payload []byte) bool)
	listAdd(st int, key []byte, elems [][]byte)
}

func (a *bundleAccess) listAdd(st int, key []byte, elems [][]byte) {
	if err := a.b.ListAddAll(a.sts[st], key, elems); err != nil && a.err == nil {
		a.err = err
	}
}

func (a *bundleAccess) iterate(st int, prefix []byte, fn func(userKey, payload []byte) bool) {
	if err := a.b.Iterate(a.sts[st], prefix, fn); err != nil && a.err == nil {
		a.err = err
	}
}

const microMapEntries = 4

// Profile labels of the two timed sections (go test -bench Micro
// -cpuprofile, then pprof -tagfocus path=engine).
var (
	perOpLabels     = pprof.WithLabels(context.Background(), pprof.Labels("path", "per-op"))
	perOpSkipLabels = pprof.WithLabels(context.Background(), pprof.Labels("path", "per-op-skiplist"))
	engineLabels    = pprof.WithLabels(context.Background(), pprof.Labels("path", "engine"))
)

type microDef struct {
	name  string
	kind  engine.Kind
	keys  func(r *microRun, i int, emit func([]byte))
	do    func(r *microRun, a iterAccess, i int)
	fresh bool // blind writes: nothing to hydrate
}

type microRun struct {
	kb    []byte // the key being built (both paths copy what they keep)
	l     engine.Layout
	nkeys int
	pick  []int // random existing key per op
	val   []byte
	one   [][]byte // {val}
	all   [][]byte // microMapEntries x val
	list  []byte   // all, list-encoded (listUpdate's new list, built once)
}

// key builds the stored key of set-up key k in r.kb: valid until the next
// key or entry call (both paths copy what they keep).
func (r *microRun) key(k int) []byte {
	var kk [8]byte
	binary.BigEndian.PutUint64(kk[:], uint64(k))
	r.kb = r.l.Key(r.kb[:0], kgOf(int64(k), r.l.MaxParallelism), kk[:], nil)
	return r.kb
}

func (r *microRun) entry(k, uk int) []byte {
	r.kb = binary.BigEndian.AppendUint64(r.key(k), uint64(uk))
	return r.kb
}

func listOf(n int, v []byte) []byte {
	var out []byte
	for i := 0; i < n; i++ {
		out = binary.AppendUvarint(out, uint64(len(v))) // whole-list encoding
		out = append(out, v...)
	}
	return out
}

// microDefs mirrors Flink's state micro-benchmarks (ValueState, ListState,
// MapState): each op on a random set-up key unless it adds new keys.
func microDefs() []microDef {
	valKeys := func(r *microRun, i int, emit func([]byte)) { emit(r.key(r.pick[i])) }
	freshKeys := func(r *microRun, i int, emit func([]byte)) { emit(r.key(r.nkeys + i)) }
	mapKeys := func(r *microRun, i int, emit func([]byte)) { emit(r.entry(r.pick[i], i%microMapEntries)) }
	noKeys := func(*microRun, int, func([]byte)) {}
	iter := func(r *microRun, a iterAccess, i int, fn func(uk, v []byte) bool) {
		a.iterate(0, r.key(r.pick[i]), fn)
	}
	var sink int
	return []microDef{
		{name: "valueAdd", kind: engine.KindValue, keys: freshKeys, fresh: true, do: func(r *microRun, a iterAccess, i int) { a.put(0, r.key(r.nkeys+i), r.val) }},
		{name: "valueUpdate", kind: engine.KindValue, keys: valKeys, fresh: true, do: func(r *microRun, a iterAccess, i int) { a.put(0, r.key(r.pick[i]), r.val) }},
		{name: "valueGet", kind: engine.KindValue, keys: valKeys, do: func(r *microRun, a iterAccess, i int) { a.get(0, r.key(r.pick[i])) }},
		// listAdd adds one element to a new key's list, listAppend to a
		// set-up list, listAddAll a list of elements to a set-up list: all
		// blind appends (a RocksDB merge per op on the per-op path, one
		// merge per touched key per bundle in the engine).
		{name: "listAdd", kind: engine.KindList, fresh: true, keys: freshKeys, do: func(r *microRun, a iterAccess, i int) { a.listAdd(0, r.key(r.nkeys+i), r.one) }},
		{name: "listAddAll", kind: engine.KindList, fresh: true, keys: valKeys, do: func(r *microRun, a iterAccess, i int) { a.listAdd(0, r.key(r.pick[i]), r.all) }},
		{name: "listAppend", kind: engine.KindList, fresh: true, keys: valKeys, do: func(r *microRun, a iterAccess, i int) { a.listAdd(0, r.key(r.pick[i]), r.one) }},
		{name: "listGet", kind: engine.KindList, keys: valKeys, do: func(r *microRun, a iterAccess, i int) {
			p, _ := a.get(0, r.key(r.pick[i]))
			sink += len(p)
		}},
		{name: "listGetAndIterate", kind: engine.KindList, keys: valKeys, do: func(r *microRun, a iterAccess, i int) {
			p, _ := a.get(0, r.key(r.pick[i]))
			_ = engine.ListElems(p, false, func(_ int64, el []byte) bool { sink += len(el); return true })
		}},
		{name: "listUpdate", kind: engine.KindList, keys: valKeys, fresh: true, do: func(r *microRun, a iterAccess, i int) {
			a.put(0, r.key(r.pick[i]), r.list)
		}},
		{name: "mapAdd", kind: engine.KindMap, fresh: true, keys: func(r *microRun, i int, emit func([]byte)) { emit(r.entry(r.nkeys+i, 0)) },
			do: func(r *microRun, a iterAccess, i int) { a.put(0, r.entry(r.nkeys+i, 0), r.val) }},
		{name: "mapContains", kind: engine.KindMap, keys: func(r *microRun, i int, emit func([]byte)) { emit(r.entry(r.pick[i], i%(2*microMapEntries))) },
			do: func(r *microRun, a iterAccess, i int) { a.get(0, r.entry(r.pick[i], i%(2*microMapEntries))) }},
		{name: "mapEntries", kind: engine.KindMap, keys: noKeys, do: func(r *microRun, a iterAccess, i int) {
			iter(r, a, i, func(uk, v []byte) bool { sink += len(uk) + len(v); return true })
		}},
		{name: "mapGet", kind: engine.KindMap, keys: mapKeys, do: func(r *microRun, a iterAccess, i int) { a.get(0, r.entry(r.pick[i], i%microMapEntries)) }},
		{name: "mapIsEmpty", kind: engine.KindMap, keys: noKeys, do: func(r *microRun, a iterAccess, i int) {
			iter(r, a, i, func(_, _ []byte) bool { sink++; return false })
		}},
		{name: "mapIterator", kind: engine.KindMap, keys: noKeys, do: func(r *microRun, a iterAccess, i int) {
			iter(r, a, i, func(_, _ []byte) bool { return true })
		}},
		{name: "mapKeys", kind: engine.KindMap, keys: noKeys, do: func(r *microRun, a iterAccess, i int) {
			iter(r, a, i, func(uk, _ []byte) bool { sink += len(uk); return true })
		}},
		{name: "mapPutAll", kind: engine.KindMap, fresh: true, keys: func(r *microRun, i int, emit func([]byte)) {
			for uk := 0; uk < microMapEntries; uk++ {
				emit(r.entry(r.nkeys+i, uk))
			}
		}, do: func(r *microRun, a iterAccess, i int) {
			for uk := 0; uk < microMapEntries; uk++ {
				a.put(0, r.entry(r.nkeys+i, uk), r.val)
			}
		}},
		{name: "mapRemove", kind: engine.KindMap, keys: mapKeys, fresh: true, do: func(r *microRun, a iterAccess, i int) { a.del(0, r.entry(r.pick[i], i%microMapEntries)) }},
		{name: "mapUpdate", kind: engine.KindMap, keys: mapKeys, fresh: true, do: func(r *microRun, a iterAccess, i int) { a.put(0, r.entry(r.pick[i], i%microMapEntries), r.val) }},
		{name: "mapValues", kind: engine.KindMap, keys: noKeys, do: func(r *microRun, a iterAccess, i int) {
			iter(r, a, i, func(_, v []byte) bool { sink += len(v); return true })
		}},
	}
}

func setupMicro(r *microRun, d microDef, a stateAccess) { setupMicroRange(r, d, a, 0, r.nkeys) }

func setupMicroRange(r *microRun, d microDef, a stateAccess, lo, hi int) {
	for k := lo; k < hi; k++ {
		switch d.kind {
		case engine.KindValue:
			a.put(0, r.key(k), r.val)
		case engine.KindList:
			a.put(0, r.key(k), listOf(microMapEntries, r.val))
		case engine.KindMap:
			for uk := 0; uk < microMapEntries; uk++ {
				a.put(0, r.entry(k, uk), r.val)
			}
		}
	}
}

func newMicroRun(nkeys int) *microRun {
	r := &microRun{l: benchLayout, nkeys: nkeys, val: i64key(123456789)}
	r.one = [][]byte{r.val}
	for i := 0; i < microMapEntries; i++ {
		r.all = append(r.all, r.val)
	}
	r.list = listOf(microMapEntries, r.val)
	return r
}

// runMicro runs each micro-benchmark on two instances set up alike, the
// per-op path and the engine interleaved chunk by chunk (each timed
// separately, wall and task-thread CPU).
func runMicro(cfg StateBenchConfig, dir string, note func(string)) ([]MicroResult, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	r := newMicroRun(cfg.MicroKeys)
	r.pick = make([]int, cfg.MicroOps)
	for i := range r.pick {
		r.pick[i] = rng.IntN(cfg.MicroKeys)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cfg.perfLevel > 0 {
		// Perf counting is per thread: set for the locked thread, both
		// paths run on it.
		engine.SetPerfLevel(cfg.perfLevel)
		defer engine.SetPerfLevel(engine.PerfLevelDefault)
	}
	var out []MicroResult
	for _, d := range microDefs() {
		if cfg.microFilter != nil && !cfg.microFilter[d.name] {
			continue
		}
		res, err := runMicroOne(cfg, dir, r, d)
		if err != nil {
			return nil, fmt.Errorf("micro %s: %w", d.name, err)
		}
		out = append(out, res)
		note("micro " + d.name)
	}
	return out, nil
}

func runMicroOne(cfg StateBenchConfig, dir string, r *microRun, d microDef) (MicroResult, error) {
	states := []engine.StateDesc{{Name: "s", Kind: d.kind}}
	res := MicroResult{Op: d.name}
	slotP, err := engine.NewSlotMemory(engine.SlotConfig{ManagedMemory: cfg.ManagedMemory})
	if err != nil {
		return res, err
	}
	defer slotP.Close()
	slotE, err := engine.NewSlotMemory(engine.SlotConfig{ManagedMemory: cfg.ManagedMemory})
	if err != nil {
		return res, err
	}
	defer slotE.Close()
	p, err := openPerRecord(filepath.Join(dir, "micro-"+d.name+"-op"), states, cfg.rocksOptions(slotP))
	if err != nil {
		return res, err
	}
	defer p.close()
	// The per-op path once more on RocksDB's own skip-list memtable (what
	// Flink's RocksDB backend runs with), in its own slot.
	slotS, err := engine.NewSlotMemory(engine.SlotConfig{ManagedMemory: cfg.ManagedMemory})
	if err != nil {
		return res, err
	}
	defer slotS.Close()
	optsS := cfg.rocksOptions(slotS)
	optsS.SkipListMemTable = true
	pS, err := openPerRecord(filepath.Join(dir, "micro-"+d.name+"-op-skiplist"), states, optsS)
	if err != nil {
		return res, err
	}
	defer pS.close()
	be, err := engine.OpenRocksDB(filepath.Join(dir, "micro-"+d.name+"-engine"), benchLayout, states, cfg.rocksOptions(slotE))
	if err != nil {
		return res, err
	}
	defer be.Close()
	op := engine.NewOperator(be, nil)
	b := op.NewBundle()
	defer b.Close()
	acc := &bundleAccess{b: b, sts: op.States()}
	setupMicro(r, d, p)
	setupMicro(r, d, pS)
	for lo := 0; lo < r.nkeys; lo += 10000 {
		_ = b.Begin(nil)
		setupMicroRange(r, d, acc, lo, min(lo+10000, r.nkeys))
		if err := b.Commit(); err != nil {
			return res, err
		}
	}
	var (
		keys  [][]byte
		refs  []engine.KeyRef
		arena []byte
		offs  []int
	)
	st := op.States()[0]
	var perOp, perOpS, bundled, perOpCPU, perOpSCPU, engineCPU time.Duration
	for lo := 0; lo < cfg.MicroOps; lo += cfg.BundleSize {
		hi := min(lo+cfg.BundleSize, cfg.MicroOps)
		pprof.SetGoroutineLabels(perOpSkipLabels)
		cS, tS := engine.ThreadCPU(), time.Now()
		for i := lo; i < hi; i++ {
			d.do(r, pS, i)
		}
		pprof.SetGoroutineLabels(perOpLabels)
		c0, t0 := engine.ThreadCPU(), time.Now()
		for i := lo; i < hi; i++ {
			d.do(r, p, i)
		}
		c1, t1 := engine.ThreadCPU(), time.Now()
		perOpS += t0.Sub(tS)
		perOpSCPU += c0 - cS
		pprof.SetGoroutineLabels(engineLabels)
		// The bundle's keys, packed in one buffer (emit reuses r.kb).
		arena, offs = arena[:0], offs[:0]
		for i := lo; i < hi; i++ {
			d.keys(r, i, func(k []byte) {
				arena = append(arena, k...)
				offs = append(offs, len(arena))
			})
		}
		if d.fresh {
			// Blind writes: declared write-only, Begin reads nothing.
			refs = refs[:0]
			for j, at := range offs {
				refs = append(refs, engine.KeyRef{State: st, Key: arena[at-keyLen(offs, j) : at], WriteOnly: true})
			}
			if err := b.Begin(refs); err != nil {
				return res, err
			}
		} else {
			if err := b.Begin(nil); err != nil {
				return res, err
			}
			keys = keys[:0]
			for j, at := range offs {
				keys = append(keys, arena[at-keyLen(offs, j):at])
			}
			if err := b.Hydrate(st, keys); err != nil {
				return res, err
			}
		}
		for i := lo; i < hi; i++ {
			d.do(r, acc, i)
		}
		if err := b.Commit(); err != nil {
			return res, err
		}
		c2, t2 := engine.ThreadCPU(), time.Now()
		pprof.SetGoroutineLabels(context.Background())
		perOp += t1.Sub(t0)
		bundled += t2.Sub(t1)
		perOpCPU += c1 - c0
		engineCPU += c2 - c1
	}
	if p.Err() != nil {
		return res, p.Err()
	}
	if pS.Err() != nil {
		return res, pS.Err()
	}
	if acc.err != nil {
		return res, acc.err
	}
	if cfg.verifyMicro {
		if err := compareMicro(p, b, st); err != nil {
			return res, err
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	res.PerOpOpsMs = float64(cfg.MicroOps) / ms(perOp)
	res.EngineOpsMs = float64(cfg.MicroOps) / ms(bundled)
	res.Speedup = res.EngineOpsMs / res.PerOpOpsMs
	res.CPUSpeedup = ms(perOpCPU) / ms(engineCPU)
	res.PerOpSkipListOpsMs = float64(cfg.MicroOps) / ms(perOpS)
	res.SkipListCPUSpeedup = ms(perOpSCPU) / ms(engineCPU)
	return res, nil
}

func keyLen(offs []int, j int) int {
	if j == 0 {
		return offs[0]
	}
	return offs[j] - offs[j-1]
}

func runMemory(cfg StateBenchConfig, dir string) ([]MemoryResult, error) {
	total := cfg.MemoryBytes
	val := make([]byte, 512)
	var out []MemoryResult
	for _, wb := range []int64{64 << 20, 2 << 20} {
		rows, err := runMemoryWith(cfg, dir, wb, total, val)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// runMemoryWith measures 1, 4 and 16 operators with the configured write
// buffer wb (the arena block follows from it).
func runMemoryWith(cfg StateBenchConfig, dir string, wb, total int64, val []byte) ([]MemoryResult, error) {
	var out []MemoryResult
	for _, n := range []int{1, 4, 16} {
		slot, err := engine.NewSlotMemory(engine.SlotConfig{ManagedMemory: cfg.ManagedMemory})
		if err != nil {
			return nil, err
		}
		states := []engine.StateDesc{{Name: "a", Kind: engine.KindValue}, {Name: "b", Kind: engine.KindValue}}
		var bes []engine.Backend
		closeAll := func() {
			for _, be := range bes {
				be.Close()
			}
			slot.Close()
		}
		for i := 0; i < n; i++ {
			be, err := engine.OpenRocksDB(filepath.Join(dir, fmt.Sprintf("mem-%d-%d-%d", wb, n, i)), benchLayout, states, engine.RocksOptions{Slot: slot, WriteBufferSize: wb})
			if err != nil {
				closeAll()
				return nil, err
			}
			bes = append(bes, be)
		}
		per := int(total) / len(val) / n
		for i, be := range bes {
			op := engine.NewOperator(be, nil)
			b := op.NewBundle()
			for lo := 0; lo < per; lo += 5000 {
				_ = b.Begin(nil)
				for j := lo; j < min(lo+5000, per); j++ {
					s := op.States()[j%2]
					_ = b.Put(s, s.Key(nil, j%128, i64key(int64(i*per+j)), nil), val)
				}
				if err := b.Commit(); err != nil {
					b.Close()
					closeAll()
					return nil, err
				}
			}
			b.Close()
		}
		share := slot.WriteBufferShare()
		r := MemoryResult{Operators: n, WriteBufferSize: wb, CacheUsage: slot.CacheUsage(), CacheCapacity: slot.CacheCapacity(),
			WriteBufferUsage: slot.WriteBufferUsage(), WriteBufferCap: slot.WriteBufferCapacity(),
			ArenaBlockSize: engine.ArenaBlockSize(min(wb, share), slot.WriteBufferCapacity()), WriteBufferShare: share}
		for _, be := range bes {
			m, _ := engine.Property(be, "rocksdb.cur-size-all-mem-tables")
			t, _ := engine.Property(be, "rocksdb.estimate-table-readers-mem")
			r.MemTables += int64(m)
			r.TableReadersMem += int64(t)
		}
		r.TotalNative = r.CacheUsage + r.TableReadersMem
		closeAll()
		out = append(out, r)
	}
	return out, nil
}

// compareMicro checks that the per-op path and the engine hold the same live
// entries (payloads; timestamps differ by when each path wrote).
func compareMicro(p *perRecord, b *engine.Bundle, st *engine.State) error {
	type kv struct{ k, v string }
	var want, got []kv
	p.iterate(0, nil, func(k, v []byte) bool { want = append(want, kv{string(k), string(v)}); return true })
	if p.Err() != nil {
		return p.Err()
	}
	if err := b.Begin(nil); err != nil {
		return err
	}
	defer b.Abort()
	if err := b.Iterate(st, nil, func(k, v []byte) bool { got = append(got, kv{string(k), string(v)}); return true }); err != nil {
		return err
	}
	if len(want) != len(got) {
		return fmt.Errorf("per-op path holds %d entries, engine %d", len(want), len(got))
	}
	for i := range want {
		if want[i] != got[i] {
			return fmt.Errorf("entry %d differs: per-op %x=%x, engine %x=%x", i, want[i].k, want[i].v, got[i].k, got[i].v)
		}
	}
	return nil
}
