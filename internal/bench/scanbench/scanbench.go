// Package scanbench measures how fast package savepoint reads a large
// canonical savepoint: it generates one (SQL rows written with flinkwrite)
// and times raw reads of its data file (from the page cache and cold from
// disk), a header-only scan, full decodes (parallel and sequential, warm
// and cold; generic values and typed column batches), validation and the structural check, with peak RSS per phase. `sfstate bench
// inspect` and the savepoint benchmarks use it.
package scanbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/sfstate/sfstate/internal/bench/proc"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// MaxParallelism of the generated operator.
const MaxParallelism = 128

// DataFile is the name of the generated keyed-state file.
const DataFile = "keyed-0"

// Generated describes a generated savepoint.
type Generated struct {
	Dir     string
	Entries int64
	// DataBytes is the size of the keyed-state file.
	DataBytes int64
}

var (
	keyTypes = []flinkwrite.LogicalType{flinkwrite.BigIntType{Nullable: true}, flinkwrite.VarCharType{Nullable: true, Length: math.MaxInt32}}
	keyRow   = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString}
	accTypes = []flinkwrite.LogicalType{flinkwrite.BigIntType{Nullable: false}, flinkwrite.DoubleType{Nullable: true},
		flinkwrite.VarCharType{Nullable: true, Length: math.MaxInt32}, flinkwrite.TimestampType{Nullable: true, Precision: 3},
		flinkwrite.IntType{Nullable: true}, flinkwrite.BooleanType{Nullable: true}}
	accRow = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeDouble, keygroups.TypeString, keygroups.TypeTimestamp(3), keygroups.TypeInt, keygroups.TypeBoolean}
)

func keyValues(i int64, name []byte) []any {
	name = strconv.AppendInt(append(name[:0], "user-"...), i, 10)
	return []any{i * 7, string(name)}
}

// Generate writes into dir a canonical savepoint of one SQL-style operator
// (parallelism 1, max parallelism 128): n keys Row(BIGINT, VARCHAR), each
// with one TTL VALUE state entry holding a 6-field row (BIGINT, DOUBLE,
// VARCHAR, TIMESTAMP(3), INT, BOOLEAN), ~130 bytes per entry. Memory use
// is ~6 bytes per key (the key-group order) plus buffers.
func Generate(dir string, n int64) (*Generated, error) { return GenerateLayout(dir, n, false) }

// GenerateLayout is Generate with a choice of layout: with heap the keyed
// file holds the same entries in the heap backend's own key-group layout
// (as a hashmap checkpoint stores them: flinkwrite.HeapWriter, handle tag
// 12, every key group listed), so that reads of both layouts can be
// compared on the same state.
func GenerateLayout(dir string, n int64, heap bool) (*Generated, error) {
	if n <= 0 || n > 1<<32 {
		return nil, fmt.Errorf("scanbench: %d entries out of range", n)
	}
	kb, err := keygroups.NewRowBuilder(keyRow)
	if err != nil {
		return nil, err
	}
	ab, err := keygroups.NewRowBuilder(accRow)
	if err != nil {
		return nil, err
	}
	// Pass 1: the key group of every key, then the keys in key-group order
	// (counting sort).
	kgs := make([]uint8, n)
	var counts [MaxParallelism + 1]int64
	var name, row []byte
	for i := range n {
		row, err = kb.Append(row[:0], keyValues(i, name))
		if err != nil {
			return nil, err
		}
		kg := keygroups.KeyGroupFor(keygroups.HashRow(row), MaxParallelism)
		kgs[i] = uint8(kg)
		counts[kg+1]++
	}
	for kg := 1; kg <= MaxParallelism; kg++ {
		counts[kg] += counts[kg-1]
	}
	order := make([]uint32, n)
	next := counts
	for i := range n {
		order[next[kgs[i]]] = uint32(i)
		next[kgs[i]]++
	}
	kgs = nil

	keySer := flinkwrite.RowDataSnapshot{Types: keyTypes}
	h := flinkwrite.Header{KeySerializer: keySer, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("accState", flinkwrite.KindValue, flinkwrite.VoidNamespaceSnapshot, flinkwrite.TtlSnapshot(flinkwrite.RowDataSnapshot{Types: accTypes})),
	}}
	f, err := os.Create(filepath.Join(dir, DataFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	rng := keygroups.Range{Start: 0, End: MaxParallelism - 1}
	prefix := keygroups.PrefixWidth(MaxParallelism)
	void := flinkwrite.AppendVoidNamespace(nil)
	var w interface {
		Close() error
		Size() int64
		Offsets() []int64
	}
	var add func(kg int, keyBytes, val []byte) error
	tag := byte(savepoint.TagSavepointKeyGroups)
	if heap {
		hw, err := flinkwrite.NewHeapWriter(bw, h, rng, MaxParallelism)
		if err != nil {
			return nil, err
		}
		w, tag = hw, savepoint.TagKeyGroups
		add = func(kg int, keyBytes, val []byte) error { return hw.Add(kg, 0, void, keyBytes, val) }
	} else {
		kw, err := flinkwrite.NewKeyedWriter(bw, h, rng, MaxParallelism)
		if err != nil {
			return nil, err
		}
		var key []byte
		w = kw
		add = func(kg int, keyBytes, val []byte) error {
			key, err = flinkwrite.StateKey{KeyGroup: kg, PrefixLen: prefix, Key: keyBytes, Namespace: void}.Append(key[:0])
			if err != nil {
				return err
			}
			return kw.Add(kg, 0, key, val)
		}
	}
	var keyBytes, acc, val []byte
	accVals := make([]any, 6)
	for kg := range MaxParallelism {
		for _, idx := range order[counts[kg]:counts[kg+1]] {
			i := int64(idx)
			row, err = kb.Append(row[:0], keyValues(i, name))
			if err != nil {
				return nil, err
			}
			keyBytes, _ = flinkwrite.AppendRowData(keyBytes[:0], row)
			accVals[0], accVals[1], accVals[2] = i, float64(i)/3, "a"+strconv.FormatInt(i%1000, 10)
			accVals[3], accVals[4], accVals[5] = keygroups.Timestamp{Millis: 1_700_000_000_000 + i}, int64(i%97), i%2 == 0
			if i%11 == 0 {
				accVals[2] = nil
			}
			acc, err = ab.Append(acc[:0], accVals)
			if err != nil {
				return nil, err
			}
			val, _ = flinkwrite.AppendRowData(flinkwrite.AppendTtlValue(val[:0], 1_700_000_000_000+i, nil), acc)
			if err := add(kg, keyBytes, val); err != nil {
				return nil, err
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	size := w.Size()
	op := &savepoint.OperatorState{ID: savepoint.OperatorIDFromUID("scanbench"), Parallelism: 1, MaxParallelism: MaxParallelism}
	op.Subtasks = []*savepoint.SubtaskState{{Index: 0, ManagedKeyed: &savepoint.KeyGroupsHandle{Tag: tag,
		StartKeyGroup: 0, Offsets: w.Offsets(), Delegate: &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: DataFile, Size: size}}}}
	b, err := savepoint.EncodeMetadata(&savepoint.Metadata{Version: 3, CheckpointID: 1, Operators: []*savepoint.OperatorState{op}})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, savepoint.MetadataName), b, 0o644); err != nil {
		return nil, err
	}
	return &Generated{Dir: dir, Entries: n, DataBytes: size}, nil
}

// Phase is one measured pass over the savepoint.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// CPUSeconds is the process's user+system CPU time of the phase (less
	// sensitive than Seconds to other load on the machine).
	CPUSeconds    float64 `json:"cpuSeconds"`
	Entries       int64   `json:"entries"`
	EntriesPerSec float64 `json:"entriesPerSecond"`
	MBPerSec      float64 `json:"mbPerSecond"`
	// MBPerCPUSecond is the data size over CPUSeconds: the speed per core
	// the phase would reach without competing load.
	MBPerCPUSecond float64 `json:"mbPerCpuSecond"`
	// Workers is the number of decode goroutines (savepoint.ScanOptions.
	// Workers; 1 = sequential).
	Workers int `json:"workers"`
	// ReuseValues is set when decoded values were valid only during their
	// callback (savepoint.ScanOptions.ReuseValues); unset for full
	// decodes whose values outlive the callback.
	ReuseValues bool `json:"reuseValues,omitempty"`
	// Cold is set for phases that start with the data file evicted from
	// the page cache (EvictFile), so its bytes come from disk.
	Cold bool `json:"cold"`
	// Cached is the fraction of the data file's pages that were in the
	// page cache when the (fastest) round started, measured with mincore:
	// ~0 for cold phases (the eviction worked), ~1 for warm ones.
	Cached float64 `json:"cachedAtStart"`
	// RatioToRaw is MBPerSec over the page-cached raw read's.
	RatioToRaw float64 `json:"ratioToRaw"`
	// RatioToColdRaw is MBPerSec over the cold raw read's (0 when no cold
	// read ran).
	RatioToColdRaw float64 `json:"ratioToColdRaw"`
	// PeakRSS is the process's peak resident set during the phase (bytes;
	// the peak is reset before each phase where the kernel allows it,
	// else it is the process peak so far).
	PeakRSS int64 `json:"peakRSSBytes"`
	// Allocs is the number of heap allocations during the phase.
	Allocs uint64 `json:"allocs"`
}

// Phases names, in run order.
const (
	// PhaseRaw reads the data file from the page cache with 1 MiB reads.
	PhaseRaw = "raw read"
	// PhaseRawCold evicts the data file from the page cache and reads it
	// from disk with 4 MiB sequential reads.
	PhaseRawCold = "raw read, cold"
	PhaseHeader  = "header-only scan"
	// PhaseDecode decodes every key and value with the decode workers,
	// into recycled memory (values valid during their callback, as the
	// dump, digest and statistics callers use them).
	PhaseDecode = "full decode"
	// PhaseDecodeCold is PhaseDecode on an evicted data file.
	PhaseDecodeCold = "full decode, cold"
	// PhaseDecode1 is PhaseDecode with one worker (sequential).
	PhaseDecode1 = "full decode, 1 worker"
	// PhaseDecodeKeep is PhaseDecode with values that outlive their
	// callbacks (fresh memory per value batch: garbage-collector work).
	PhaseDecodeKeep = "full decode, kept values"
	// PhaseColumns decodes every key and value with
	// savepoint.ScanColumns into typed column batches (no boxed values,
	// whole batches handed over by the decode workers).
	PhaseColumns = "full decode, columnar"
	// PhaseColumnsCold is PhaseColumns on an evicted data file.
	PhaseColumnsCold = "full decode, columnar, cold"
	// PhaseColumns1 is PhaseColumns with one worker.
	PhaseColumns1 = "full decode, columnar, 1 worker"
	// PhaseValidate walks every entry with keyed.ModeValidate: every byte
	// of every key and value checked as by a full decode, no values built.
	PhaseValidate = "full validate"
	PhaseCheck    = "check"
)

// Options tune RunWith.
type Options struct {
	// Rounds > 1 runs each phase that often and keeps the fastest.
	Rounds int
	// Workers is the decode workers of the parallel phases (0 =
	// savepoint.DefaultWorkers()).
	Workers int
	// Phases, when set, runs only these phases (by name) besides the
	// cached raw read the ratios refer to.
	Phases []string
}

// LayoutPhases are the phases `sfstate bench inspect` also runs on the
// heap-layout copy of the state (GenerateLayout): the entry-by-entry
// reads both layouts share.
var LayoutPhases = []string{PhaseHeader, PhaseDecode, PhaseDecode1, PhaseValidate, PhaseCheck}

// Run is RunWith with the default workers.
func Run(ctx context.Context, g *Generated, rounds int) ([]Phase, error) {
	return RunWith(ctx, g, Options{Rounds: rounds})
}

// RunWith measures the phases on a generated savepoint. Cold phases are
// left out where the page cache cannot be dropped (not Linux, or a file
// system such as tmpfs that keeps its pages).
func RunWith(ctx context.Context, g *Generated, opts Options) ([]Phase, error) {
	rounds := opts.Rounds
	workers := opts.Workers
	if workers <= 0 {
		workers = savepoint.DefaultWorkers()
	}
	st, err := s3.NewLocal(g.Dir)
	if err != nil {
		return nil, err
	}
	sp, err := savepoint.Open(ctx, st, savepoint.MetadataName)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(g.Dir, DataFile)
	canEvict := evictWorks(data)
	rounds = max(rounds, 1)
	scan := func(mode keyed.Mode, workers int, reuse bool) savepoint.ScanOptions {
		return savepoint.ScanOptions{KeyGroupTo: -1, Mode: mode, Workers: workers, ReuseValues: reuse}
	}
	phases := []struct {
		name string
		cold bool
		o    savepoint.ScanOptions // of walks
		fn   func() (int64, error)
	}{
		{PhaseRaw, false, scan(0, 1, false), func() (int64, error) { return 0, readFile(data, 1<<20) }},
		{PhaseRawCold, true, scan(0, 1, false), func() (int64, error) { return 0, readFile(data, 4<<20) }},
		{PhaseHeader, false, scan(keyed.ModeRaw, workers, false), nil},
		{PhaseDecode, false, scan(keyed.ModeDecode, workers, true), nil},
		{PhaseDecodeCold, true, scan(keyed.ModeDecode, workers, true), nil},
		{PhaseDecode1, false, scan(keyed.ModeDecode, 1, true), nil},
		{PhaseDecodeKeep, false, scan(keyed.ModeDecode, workers, false), nil},
		{PhaseColumns, false, scan(0, workers, true), func() (int64, error) { return columns(ctx, sp, workers) }},
		{PhaseColumnsCold, true, scan(0, workers, true), func() (int64, error) { return columns(ctx, sp, workers) }},
		{PhaseColumns1, false, scan(0, 1, true), func() (int64, error) { return columns(ctx, sp, 1) }},
		{PhaseValidate, false, scan(keyed.ModeValidate, workers, false), nil},
		{PhaseCheck, false, scan(0, 1, false), func() (int64, error) {
			probs, stats := savepoint.Check(ctx, sp, savepoint.CheckOptions{})
			if len(probs) != 0 {
				return 0, fmt.Errorf("scanbench: check found %d problems, first: %v", len(probs), probs[0])
			}
			return stats.Entries, nil
		}},
	}
	var out []Phase
	for _, ph := range phases {
		if ph.cold && !canEvict {
			continue
		}
		if len(opts.Phases) > 0 && ph.name != PhaseRaw && !slices.Contains(opts.Phases, ph.name) {
			continue
		}
		fn := ph.fn
		if fn == nil {
			o := ph.o
			fn = func() (int64, error) { return walk(ctx, sp, o) }
		}
		best := Phase{Name: ph.name, Cold: ph.cold, Seconds: math.Inf(1), Workers: ph.o.Workers, ReuseValues: ph.o.ReuseValues}
		for range rounds {
			if ph.cold {
				if err := EvictFile(data); err != nil {
					return nil, fmt.Errorf("%s: %w", ph.name, err)
				}
			} else if err := readFile(data, 1<<20); err != nil { // warm the cache
				return nil, fmt.Errorf("%s: %w", ph.name, err)
			}
			cached, _ := Resident(data)
			runtime.GC()
			debug.FreeOSMemory()
			proc.ResetPeakRSS()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			c0 := proc.CPU().Seconds()
			t0 := time.Now()
			n, err := fn()
			sec := time.Since(t0).Seconds()
			cpu := proc.CPU().Seconds() - c0
			runtime.ReadMemStats(&ms1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ph.name, err)
			}
			if ph.name == PhaseRaw || ph.name == PhaseRawCold {
				n = g.Entries
			} else if n != g.Entries {
				return nil, fmt.Errorf("scanbench: %s saw %d entries, want %d", ph.name, n, g.Entries)
			}
			if sec < best.Seconds {
				best.Seconds, best.Entries, best.CPUSeconds, best.Cached = sec, n, cpu, cached
				best.Allocs = ms1.Mallocs - ms0.Mallocs
			}
			best.PeakRSS = max(best.PeakRSS, proc.PeakRSS())
		}
		best.EntriesPerSec = float64(best.Entries) / best.Seconds
		best.MBPerSec = float64(g.DataBytes) / 1e6 / best.Seconds
		if best.CPUSeconds > 0 {
			best.MBPerCPUSecond = float64(g.DataBytes) / 1e6 / best.CPUSeconds
		}
		out = append(out, best)
	}
	var raw, cold float64
	for _, p := range out {
		switch p.Name {
		case PhaseRaw:
			raw = p.MBPerSec
		case PhaseRawCold:
			cold = p.MBPerSec
		}
	}
	for i := range out {
		out[i].RatioToRaw = out[i].MBPerSec / raw
		if cold > 0 {
			out[i].RatioToColdRaw = out[i].MBPerSec / cold
		}
	}
	return out, nil
}

func walk(ctx context.Context, sp *savepoint.Savepoint, o savepoint.ScanOptions) (int64, error) {
	var n int64
	err := sp.WalkKeyed(ctx, o, func(*savepoint.KeyedEntry) error {
		n++
		return nil
	})
	return n, err
}

// columns decodes every entry with savepoint.ScanColumns and returns the
// number decoded (rows of the batches plus fallback entries).
func columns(ctx context.Context, sp *savepoint.Savepoint, workers int) (int64, error) {
	var n int64
	err := sp.ScanColumns(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Workers: workers}, func(b *savepoint.ColumnBatch) error {
		n += int64(b.Len())
		return nil
	}, func(*savepoint.KeyedEntry) error {
		n++
		return nil
	})
	return n, err
}

// evictWorks reports whether EvictFile drops path from the page cache here
// (it does not on Linux tmpfs, for example).
func evictWorks(path string) bool {
	if EvictFile(path) != nil {
		return false
	}
	r, err := Resident(path)
	return err == nil && r < 0.05
}

// RawRead reads a file from disk (or the page cache) with a 1 MiB buffer
// and discards the bytes: the baseline the decoding phases are compared
// with.
func RawRead(path string) error { return readFile(path, 1<<20) }

// readFile reads path sequentially with bufSize-byte reads, discarding the
// bytes.
func readFile(path string, bufSize int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, bufSize)
	for {
		_, err := f.Read(buf)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
