//go:build cgo

// Package joinbench measures the join state (package recordstore) under
// its layouts and cache policies on generated input shapes, each trial on a
// fresh RocksDB instance (sfstate bench join).
package joinbench

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/internal/bench/proc"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
)

// JoinBenchConfig sizes the join-state benchmark.
type JoinBenchConfig struct {
	Dir    string // scratch directory (default: system temp); removed afterwards
	Quick  bool   // smaller shapes
	Trials int    // measured trials per policy (default 5)
	Warmup int    // warm-up trials per policy (0 = default 1, negative = none)
	Seed   uint64
	// Inputs and GroupRows override the shapes' input rows and the size of
	// the one large group (tests use tiny shapes).
	Inputs, GroupRows int
	// Shapes, when non-empty, selects the shapes to run: "name" (every
	// payload) or "name/payload", e.g. "unique/256".
	Shapes []string
	// NoPrefixBloom runs the record policies with Options.NoPrefixBloom
	// (without the group-prefix bloom filters).
	NoPrefixBloom bool
	// Progress, when set, is told each finished shape.
	Progress func(step string)
}

// JoinBenchRow is the median seconds of every policy for one shape.
type JoinBenchRow struct {
	Shape         string  `json:"shape"`
	Payload       int     `json:"payload"`
	Inputs        int     `json:"inputs"`
	OutputRows    int64   `json:"outputRows"`
	Checksum      string  `json:"checksum"`
	Bucket        float64 `json:"bucket"`
	RecordNoReuse float64 `json:"recordNoReuse"`
	Record8MiB    float64 `json:"record8mib"`
	Record64MiB   float64 `json:"record64mib"`
	RecordPool    float64 `json:"recordPool"`
	// CPU is the median process CPU seconds (user + system, RocksDB's
	// background threads included) of the same trials: on a shared machine
	// it is steadier than wall time.
	CPU *JoinBenchCPU `json:"cpu,omitempty"`
}

// JoinBenchCPU holds per-policy median CPU seconds.
type JoinBenchCPU struct {
	Bucket        float64 `json:"bucket"`
	RecordNoReuse float64 `json:"recordNoReuse"`
	Record8MiB    float64 `json:"record8mib"`
	Record64MiB   float64 `json:"record64mib"`
	RecordPool    float64 `json:"recordPool"`
}

// JoinBenchResult is the benchmark table plus the original engine's medians
// (other hardware: compare ratios, not seconds).
type JoinBenchResult struct {
	Rows     []JoinBenchRow `json:"rows"`
	Original []JoinBenchRow `json:"original"`
}

// OriginalJoinMedians are the original engine's reported medians (seconds;
// it had no pool policy, so RecordPool is left zero).
var OriginalJoinMedians = []JoinBenchRow{
	{Shape: "unique", Payload: 0, Bucket: 0.0755, RecordNoReuse: 0.1534, Record8MiB: 0.1585, Record64MiB: 0.1548},
	{Shape: "unique", Payload: 256, Bucket: 0.0900, RecordNoReuse: 0.1873, Record8MiB: 0.1846, Record64MiB: 0.1924},
	{Shape: "repeated", Payload: 0, Bucket: 0.0781, RecordNoReuse: 0.1864, Record8MiB: 0.0877, Record64MiB: 0.0880},
	{Shape: "repeated", Payload: 256, Bucket: 0.2655, RecordNoReuse: 0.2869, Record8MiB: 0.1595, Record64MiB: 0.1596},
	{Shape: "skewed", Payload: 0, Bucket: 0.0563, RecordNoReuse: 0.0942, Record8MiB: 0.0620, Record64MiB: 0.0612},
	{Shape: "skewed", Payload: 256, Bucket: 2.0976, RecordNoReuse: 0.1459, Record8MiB: 0.0972, Record64MiB: 0.0952},
	{Shape: "group50k", Payload: 0, Bucket: 0.1256, RecordNoReuse: 0.3622, Record8MiB: 0.3635, Record64MiB: 0.1277},
	{Shape: "group50k", Payload: 256, Bucket: 0.4500, RecordNoReuse: 0.9465, Record8MiB: 0.9475, Record64MiB: 0.4557},
}

// benchPolicy is one state configuration under test.
type benchPolicy struct {
	name      string
	layout    recordstore.Layout
	reuse     bool
	allowance int64
}

var benchPolicies = []benchPolicy{
	{"bucket", recordstore.LayoutBucket, false, 0},
	{"record_no_reuse", recordstore.LayoutRecord, false, 0},
	{"record_8mib", recordstore.LayoutRecord, true, 8 << 20},
	{"record_64mib", recordstore.LayoutRecord, true, 64 << 20},
	{"record_pool", recordstore.LayoutRecord, true, 0},
}

const (
	benchPool        = 64 << 20
	benchBlockCache  = 8 << 20 // the engine's private cache without a slot
	benchWriteBuffer = 16 << 20
	benchBundle      = 1000
)

// benchBundleData is one bundle's input, as columns: the timed loop
// converts it to keys (BinaryRowData) and payloads (compact rows).
type benchBundleData struct {
	sides []recordstore.Side
	keys  []int64
	rec   arrow.RecordBatch // id int64, pad binary (null when payload 0)
}

type benchShape struct {
	name    string
	payload int
	bundles []benchBundleData
	inputs  int
}

var benchSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "pad", Type: arrow.BinaryTypes.Binary, Nullable: true},
}, nil)

type genRow struct {
	side recordstore.Side
	key  int64
}

func makeShape(name string, payload int, rows []genRow, seed uint64) benchShape {
	s := benchShape{name: name, payload: payload, inputs: len(rows)}
	rng := rand.New(rand.NewPCG(seed, 3))
	pad := make([]byte, payload)
	mem := memory.NewGoAllocator()
	for lo := 0; lo < len(rows); lo += benchBundle {
		hi := min(len(rows), lo+benchBundle)
		b := benchBundleData{}
		rb := array.NewRecordBuilder(mem, benchSchema)
		ids := rb.Field(0).(*array.Int64Builder)
		pads := rb.Field(1).(*array.BinaryBuilder)
		for i := lo; i < hi; i++ {
			b.sides = append(b.sides, rows[i].side)
			b.keys = append(b.keys, rows[i].key)
			ids.Append(int64(i))
			if payload == 0 {
				pads.AppendNull()
			} else {
				for j := range pad {
					pad[j] = byte(rng.Uint32())
				}
				pads.Append(pad)
			}
		}
		b.rec = rb.NewRecordBatch()
		rb.Release()
		s.bundles = append(s.bundles, b)
	}
	return s
}

func benchShapes(cfg JoinBenchConfig) []benchShape {
	seed := cfg.Seed
	n, groupRows, groupProbes := 100_000, 50_000, 10
	if cfg.Quick {
		n, groupRows, groupProbes = 20_000, 50_000, 4
	}
	if cfg.Inputs > 0 {
		n = cfg.Inputs
	}
	if cfg.GroupRows > 0 {
		groupRows = cfg.GroupRows
	}
	var out []benchShape
	for _, payload := range []int{0, 256} {
		rng := rand.New(rand.NewPCG(seed, 11))
		// unique: every key once per side, sides in random order
		var uniq []genRow
		for k := 0; k < n/2; k++ {
			uniq = append(uniq, genRow{recordstore.Left, int64(k)}, genRow{recordstore.Right, int64(k)})
		}
		rng.Shuffle(len(uniq), func(i, j int) { uniq[i], uniq[j] = uniq[j], uniq[i] })
		// repeated: 200 keys x 8 right rows, then left probes over them
		repKeys := max(1, min(200, n/16))
		var rep []genRow
		for k := 0; k < repKeys; k++ {
			for c := 0; c < 8; c++ {
				rep = append(rep, genRow{recordstore.Right, int64(k)})
			}
		}
		for i := len(rep); i < n; i++ {
			rep = append(rep, genRow{recordstore.Left, int64(rng.IntN(repKeys))})
		}
		// skewed: left inserts with Zipf(1.5) keys over 1000 keys build
		// large groups (the hottest takes about a third of the rows), 2%
		// right probes with uniform keys;
		// twice the inputs: the bucket layout's cost grows with each hot
		// key's history (every bundle rewrites it whole), the record
		// layout's does not, so the gap is a function of history length
		zipf := rand.NewZipf(rand.New(rand.NewPCG(seed, 12)), benchZipfS, 1, 999)
		var skew []genRow
		for i := 0; i < 2*n; i++ {
			if rng.IntN(50) == 0 {
				skew = append(skew, genRow{recordstore.Right, int64(rng.IntN(1000))})
			} else {
				skew = append(skew, genRow{recordstore.Left, int64(zipf.Uint64())})
			}
		}
		// one group: groupRows right rows of one key, then left probes
		var grp []genRow
		for i := 0; i < groupRows; i++ {
			grp = append(grp, genRow{recordstore.Right, 7})
		}
		for i := 0; i < 2*benchBundle; i++ {
			if i%benchBundle < groupProbes {
				grp = append(grp, genRow{recordstore.Left, 7})
			} else {
				grp = append(grp, genRow{recordstore.Left, int64(1_000_000 + i)})
			}
		}
		out = append(out,
			makeShape("unique", payload, uniq, seed+1),
			makeShape("repeated", payload, rep, seed+2),
			makeShape("skewed", payload, skew, seed+3),
			makeShape("group50k", payload, grp, seed+4))
	}
	sort.SliceStable(out, func(i, j int) bool { return shapeRank(out[i].name) < shapeRank(out[j].name) })
	return out
}

func shapeRank(s string) int {
	for i, n := range []string{"unique", "repeated", "skewed", "group50k"} {
		if n == s {
			return i
		}
	}
	return 99
}

type trialResult struct {
	secs     float64
	cpu      float64
	rows     int64
	checksum uint64
}

// runTrial opens a fresh RocksDB instance and runs the shape under one
// policy. Timed: key and row conversion, the join, output consumption
// (a checksum over every output row) and state updates.
func runTrial(dir string, sh *benchShape, pol benchPolicy, noPrefixBloom bool) (trialResult, error) {
	layout := engine.Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}
	be, err := engine.OpenRocksDB(dir, layout, []engine.StateDesc{recordstore.StateDesc(pol.layout, 0)}, engine.RocksOptions{
		WriteBufferSize:      benchWriteBuffer,
		MaxWriteBufferNumber: 2,
		ErrorIfExists:        true,
		NoRecordPrefix:       noPrefixBloom,
	})
	if err != nil {
		return trialResult{}, err
	}
	defer os.RemoveAll(dir)
	defer be.Close()
	if err := disableCompression(be); err != nil {
		return trialResult{}, err
	}
	pool := engine.NewPool(benchPool)
	// every bench row carries a unique id: both sides declare unique rows
	opts := recordstore.Options{CacheAllowance: pol.allowance, UniqueRows: [2]bool{true, true}, NoPrefixBloom: noPrefixBloom,
		IterPerGroup: benchIterPerGroup}
	if pol.reuse {
		opts.Pool = pool
	}
	st, err := recordstore.Open(pol.layout, be, opts)
	if err != nil {
		return trialResult{}, err
	}
	j := recordstore.NewJoin(st, recordstore.JoinOptions{Pool: pool})
	codec, err := rowcodec.NewCodec(benchSchema)
	if err != nil {
		return trialResult{}, err
	}
	kb, err := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeBigInt})
	if err != nil {
		return trialResult{}, err
	}
	var arena rowcodec.Arena
	var keyBuf []byte
	var keyOffs []int
	inputs := make([]recordstore.Input, 0, benchBundle)
	var res trialResult
	var kv [1]any
	consume := func(chunk []recordstore.Output) error {
		for i := range chunk {
			o := &chunk[i]
			h := uint64(crc32.Checksum(o.Left, crcTable))<<32 | uint64(crc32.Checksum(o.Right, crcTable))
			res.checksum += h*0x9e3779b97f4a7c15 + uint64(o.Kind)
		}
		res.rows += int64(len(chunk))
		return nil
	}
	cpu0 := proc.CPU().Seconds()
	start := time.Now()
	for bi := range sh.bundles {
		b := &sh.bundles[bi]
		arena.Reset()
		if err := codec.EncodeBatch(b.rec, nil, &arena); err != nil {
			return res, err
		}
		keyBuf, keyOffs = keyBuf[:0], keyOffs[:0]
		for _, k := range b.keys {
			keyOffs = append(keyOffs, len(keyBuf))
			kv[0] = k
			if keyBuf, err = kb.Append(keyBuf, kv[:]); err != nil {
				return res, err
			}
		}
		keyOffs = append(keyOffs, len(keyBuf))
		inputs = inputs[:0]
		for i := range b.keys {
			inputs = append(inputs, recordstore.Input{Side: b.sides[i], Kind: keygroups.Insert,
				Key: keyBuf[keyOffs[i]:keyOffs[i+1]:keyOffs[i+1]],
				Row: arena.Value(i)[rowcodec.TTLSize:]})
		}
		if err := j.ProcessBundle(inputs, consume); err != nil {
			return res, err
		}
	}
	res.secs = time.Since(start).Seconds()
	res.cpu = proc.CPU().Seconds() - cpu0
	if pool.Used() != 0 {
		return res, fmt.Errorf("%d pool bytes still reserved after the run", pool.Used())
	}
	return res, nil
}

// benchIterPerGroup, set by hand, measures every policy with one bounded
// iterator per group visit (recordstore.Options.IterPerGroup).
var benchIterPerGroup = false

// benchZipfS is the Zipf exponent of the skewed shape's left keys.
var benchZipfS = 1.5

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// RunJoinBench runs every shape under every policy: cfg.Warmup + cfg.Trials
// runs each, policy order rotated per trial, the median of the measured
// trials reported. Every policy must produce the same output row count and
// checksum, else the benchmark fails.
func RunJoinBench(cfg JoinBenchConfig) (*JoinBenchResult, error) {
	if cfg.Trials <= 0 {
		cfg.Trials = 5
	}
	if cfg.Warmup < 0 {
		cfg.Warmup = 0
	} else if cfg.Warmup == 0 {
		cfg.Warmup = 1
	}
	root, err := os.MkdirTemp(cfg.Dir, "sfstate-bench-join-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	shapes, err := selectShapes(benchShapes(cfg), cfg.Shapes)
	if err != nil {
		return nil, err
	}
	res := &JoinBenchResult{Original: OriginalJoinMedians}
	run := 0
	for _, sh := range shapes {
		times := make([][]float64, len(benchPolicies))
		cpus := make([][]float64, len(benchPolicies))
		row := JoinBenchRow{Shape: sh.name, Payload: sh.payload, Inputs: sh.inputs, OutputRows: -1}
		var sum uint64
		for t := 0; t < cfg.Warmup+cfg.Trials; t++ {
			for i := range benchPolicies {
				p := (i + t) % len(benchPolicies)
				pol := benchPolicies[p]
				run++
				r, err := runTrial(filepath.Join(root, fmt.Sprintf("run-%d", run)), &sh, pol, cfg.NoPrefixBloom)
				if err != nil {
					return nil, fmt.Errorf("%s/%d %s: %w", sh.name, sh.payload, pol.name, err)
				}
				if row.OutputRows < 0 {
					row.OutputRows, sum = r.rows, r.checksum
				} else if r.rows != row.OutputRows || r.checksum != sum {
					return nil, fmt.Errorf("%s/%d: policy %s produced %d rows (checksum %016x), others %d (%016x)",
						sh.name, sh.payload, pol.name, r.rows, r.checksum, row.OutputRows, sum)
				}
				if t >= cfg.Warmup {
					times[p] = append(times[p], r.secs)
					cpus[p] = append(cpus[p], r.cpu)
				}
			}
		}
		row.Checksum = fmt.Sprintf("%016x", sum)
		row.Bucket, row.RecordNoReuse = median(times[0]), median(times[1])
		row.Record8MiB, row.Record64MiB, row.RecordPool = median(times[2]), median(times[3]), median(times[4])
		row.CPU = &JoinBenchCPU{Bucket: median(cpus[0]), RecordNoReuse: median(cpus[1]),
			Record8MiB: median(cpus[2]), Record64MiB: median(cpus[3]), RecordPool: median(cpus[4])}
		res.Rows = append(res.Rows, row)
		for _, b := range sh.bundles {
			b.rec.Release()
		}
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf("%s/%d", sh.name, sh.payload))
		}
	}
	return res, nil
}

// ErrUnknownShape is returned by RunJoinBench for a JoinBenchConfig.Shapes
// entry that names no shape.
var ErrUnknownShape = errors.New("unknown shape")

// selectShapes keeps the shapes named by sel ("name" or "name/payload");
// all of them when sel is empty. A selector that matches nothing is an
// error. The bundles of dropped shapes are released.
func selectShapes(all []benchShape, sel []string) ([]benchShape, error) {
	if len(sel) == 0 {
		return all, nil
	}
	keep := make([]bool, len(all))
	for _, s := range sel {
		hit := false
		for i, sh := range all {
			if s == sh.name || s == fmt.Sprintf("%s/%d", sh.name, sh.payload) {
				keep[i], hit = true, true
			}
		}
		if !hit {
			return nil, fmt.Errorf("%w %q (want unique, repeated, skewed or group50k, optionally /0 or /256)", ErrUnknownShape, s)
		}
	}
	var out []benchShape
	for i, sh := range all {
		if keep[i] {
			out = append(out, sh)
		} else {
			for _, b := range sh.bundles {
				b.rec.Release()
			}
		}
	}
	return out, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// disableCompression turns compression off for every column family of a
// RocksDB backend (the engine's options always pick Snappy; the option is
// mutable, so it is changed on the open instance). A no-op for the heap.
func disableCompression(be engine.Backend) error {
	nat, ok := engine.NativeOf(be)
	if !ok {
		return nil
	}
	for st := range be.States() {
		if err := nat.SetOptions(st, []string{"compression"}, []string{"kNoCompression"}); err != nil {
			return fmt.Errorf("join bench: disabling compression: %w", err)
		}
	}
	return nil
}
