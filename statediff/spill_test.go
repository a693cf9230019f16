package statediff

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// genMaxP is the max parallelism of the generated savepoints.
const genMaxP = 128

// hugeKG is the key group holding almost all generated keys.
const hugeKG = 37

// genKeys returns n Long keys of key group hugeKG and one key for each
// other key group (Flink's key-group assignment of Long keys).
func genKeys(n int) map[int][]int64 {
	out := map[int][]int64{}
	for k := int64(0); len(out[hugeKG]) < n || len(out) < genMaxP; k++ {
		kg := keygroups.KeyGroupFor(keygroups.HashLong(k), genMaxP)
		if kg == hugeKG && len(out[hugeKG]) < n || kg != hugeKG && len(out[kg]) == 0 {
			out[kg] = append(out[kg], k)
		}
	}
	return out
}

// genValue is one generated entry (ok false: absent).
type genValue struct {
	ok       bool
	val, ttl int64
}

// writeGenerated writes a canonical savepoint into dir: one operator
// (parallelism 2) with a TTL VALUE state "counts" of Long keys and Long
// values, the entry of key k given by f(k).
func writeGenerated(t testing.TB, dir string, keys map[int][]int64, f func(k int64) genValue) {
	t.Helper()
	writeGeneratedPar(t, dir, 2, keys, f)
}

// writeGeneratedPar is writeGenerated with the given parallelism (one
// keyed file per subtask).
func writeGeneratedPar(t testing.TB, dir string, parallelism int, keys map[int][]int64, f func(k int64) genValue) {
	t.Helper()
	h := flinkwrite.Header{KeySerializer: flinkwrite.LongSnapshot, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("counts", flinkwrite.KindValue, flinkwrite.VoidNamespaceSnapshot, flinkwrite.TtlSnapshot(flinkwrite.LongSnapshot)),
	}}
	op := &savepoint.OperatorState{ID: savepoint.OperatorIDFromUID("generated"), Parallelism: int32(parallelism), MaxParallelism: genMaxP}
	prefix := keygroups.PrefixWidth(genMaxP)
	var key, val []byte
	for i, r := range keygroups.Ranges(genMaxP, parallelism) {
		name := fmt.Sprintf("keyed-%d", i)
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		w, err := flinkwrite.NewKeyedWriter(fh, h, r, genMaxP)
		if err != nil {
			t.Fatal(err)
		}
		for kg := r.Start; kg <= r.End; kg++ {
			for _, k := range keys[kg] {
				v := f(k)
				if !v.ok {
					continue
				}
				key, err = flinkwrite.StateKey{KeyGroup: kg, PrefixLen: prefix, Key: flinkwrite.AppendLong(nil, k), Namespace: flinkwrite.AppendVoidNamespace(nil)}.Append(key[:0])
				if err != nil {
					t.Fatal(err)
				}
				val = flinkwrite.AppendTtlValue(val[:0], v.ttl, flinkwrite.AppendLong(nil, v.val))
				if err := w.Add(kg, 0, key, val); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		op.Subtasks = append(op.Subtasks, &savepoint.SubtaskState{Index: i, ManagedKeyed: &savepoint.KeyGroupsHandle{Tag: savepoint.TagSavepointKeyGroups,
			StartKeyGroup: int32(r.Start), Offsets: w.Offsets(), Delegate: &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: name, Size: w.Size()}}})
	}
	b, err := savepoint.EncodeMetadata(&savepoint.Metadata{Version: 3, CheckpointID: 1, Operators: []*savepoint.OperatorState{op}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, savepoint.MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// genPair writes A (every key, value 2k, TTL 1000+k) and B: A with every
// 7th key removed, every 11th value changed, every 13th TTL changed and a
// second key set added (keys k+1e9 for every 5th k).
func genPair(t testing.TB, n int) (a, b string) {
	t.Helper()
	return genPairPar(t, n, 2)
}

// genPairPar is genPair with the given parallelism.
func genPairPar(t testing.TB, n, parallelism int) (a, b string) {
	t.Helper()
	keys := genKeys(n)
	a, b = t.TempDir(), t.TempDir()
	writeGeneratedPar(t, a, parallelism, keys, func(k int64) genValue { return genValue{ok: k < 1e9, val: 2 * k, ttl: 1000 + k} })
	bkeys := map[int][]int64{}
	for kg, ks := range keys {
		bkeys[kg] = append([]int64(nil), ks...)
	}
	for k := int64(1e9); len(bkeys[hugeKG]) < n+n/5; k++ {
		if keygroups.KeyGroupFor(keygroups.HashLong(k), genMaxP) == hugeKG {
			bkeys[hugeKG] = append(bkeys[hugeKG], k)
		}
	}
	writeGeneratedPar(t, b, parallelism, bkeys, func(k int64) genValue {
		v := genValue{ok: true, val: 2 * k, ttl: 1000 + k}
		switch {
		case k >= 1e9:
		case k%7 == 0:
			v.ok = false
		case k%11 == 0:
			v.val++
		case k%13 == 0:
			v.ttl++
		}
		return v
	})
	return a, b
}

func stripSpill(r *Result) *Result {
	c := *r
	c.SpilledBytes, c.SpilledRuns = 0, 0
	return &c
}

// leftovers lists the spill directories under dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, s3.ScratchPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDiffSpillHugeKeyGroup diffs two savepoints whose key group 37 holds
// 20,000 entries with budgets of a few hundred entries: the spilled
// comparison (digest path and the full pass) gives exactly the in-memory
// result, counts and examples, and leaves no spill files behind.
func TestDiffSpillHugeKeyGroup(t *testing.T) {
	const n = 20000
	da, db := genPair(t, n)
	a, b := open(t, da), open(t, db)
	var removed, changed, ttl int64
	var keys []int64
	for _, ks := range genKeys(n) {
		keys = append(keys, ks...)
	}
	for _, k := range keys {
		switch {
		case k%7 == 0:
			removed++
		case k%11 == 0:
			changed++
		case k%13 == 0:
			ttl++
		}
	}
	for _, noDigest := range []bool{false, true} {
		mem := diff(t, a, b, Options{Limit: 7, NoDigest: noDigest})
		if mem.SpilledRuns != 0 {
			t.Fatalf("default budget spilled %d runs", mem.SpilledRuns)
		}
		if len(mem.States) != 1 {
			t.Fatalf("states %s", mustJSON(mem))
		}
		s := mem.States[0]
		if s.Removed != removed || s.Changed != changed || s.TTLChanged != ttl || s.Added != n/5 || s.EntriesA != n+genMaxP-1 {
			t.Fatalf("noDigest=%v: %s; want -%d ~%d ttl %d +%d", noDigest, mustJSON(s), removed, changed, ttl, n/5)
		}
		if !noDigest && (s.KeyGroupsSkipped == 0 || s.KeyGroupsSkipped >= genMaxP-1) {
			t.Fatalf("digest path skipped %d key groups", s.KeyGroupsSkipped)
		}
		for _, budget := range []int64{256 << 10, 32 << 10} {
			tmp := t.TempDir()
			sp, err := Diff(context.Background(), a, b, Options{Limit: 7, NoDigest: noDigest, MemoryBytes: budget, TempDir: tmp})
			if err != nil {
				t.Fatal(err)
			}
			if sp.SpilledRuns < 4 || sp.SpilledBytes == 0 {
				t.Fatalf("budget %d: spilled %d runs, %d bytes", budget, sp.SpilledRuns, sp.SpilledBytes)
			}
			if !reflect.DeepEqual(stripSpill(sp), mem) {
				t.Fatalf("noDigest=%v budget %d: spilled result\n%s\ndiffers from in-memory\n%s", noDigest, budget, mustJSON(sp), mustJSON(mem))
			}
			if l := leftovers(t, tmp); len(l) != 0 {
				t.Fatalf("spill files left: %v", l)
			}
			t.Logf("noDigest=%v budget %d KiB: %d runs, %d bytes spilled", noDigest, budget>>10, sp.SpilledRuns, sp.SpilledBytes)
		}
	}
}

// TestDiffSpillRemovedOnErrorAndCancel: a cancelled diff and one failing
// on a corrupt file after spilling leave no spill directory.
func TestDiffSpillRemovedOnErrorAndCancel(t *testing.T) {
	const n = 20000
	da, db := genPair(t, n)
	a, b := open(t, da), open(t, db)

	// Cancelled after the third spilled run.
	tmp := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	afterSpill = func(runs int) {
		if runs == 3 {
			cancel()
		}
	}
	defer func() { afterSpill = nil }()
	o := Options{NoDigest: true, MemoryBytes: 32 << 10, TempDir: tmp}
	if _, err := Diff(ctx, a, b, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled diff: %v", err)
	}
	if l := leftovers(t, tmp); len(l) != 0 {
		t.Fatalf("cancelled diff left %v", l)
	}
	afterSpill = nil

	// A keyed file of B cut short: the diff fails after A spilled.
	h := b.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*savepoint.KeyGroupsHandle)
	if start, _ := h.KeyGroupRange(); start > hugeKG {
		h = b.Meta.Operators[0].Subtasks[1].ManagedKeyed.(*savepoint.KeyGroupsHandle)
	}
	p := filepath.Join(db, h.Delegate.Path)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, fi.Size()-100); err != nil {
		t.Fatal(err)
	}
	tmp = t.TempDir()
	_, err = Diff(context.Background(), a, open(t, db), Options{NoDigest: true, MemoryBytes: 32 << 10, TempDir: tmp})
	if err == nil || !strings.Contains(err.Error(), h.Delegate.Path) {
		t.Fatalf("truncated %s: err %v", h.Delegate.Path, err)
	}
	if l := leftovers(t, tmp); len(l) != 0 {
		t.Fatalf("failed diff left %v", l)
	}
}

// BenchmarkDiffHugeKeyGroup compares two savepoints with 500,000 entries
// in one key group (SFSTATE_DIFF_BENCH_KEYS overrides), in memory and with
// a 16 MiB budget (spilling), through the digest path (both sides have
// the same max parallelism) and with NoDigest (one pass over everything).
// cpu-ns/entry is the process CPU time (all goroutines, GC included) per
// entry of A and B. Run one sub-benchmark per process to read its peak
// RSS:
//
//	go test ./statediff -run x -bench 'HugeKeyGroup/spill' -benchtime 3x
func BenchmarkDiffHugeKeyGroup(b *testing.B) {
	n := 500000
	if v, err := strconv.Atoi(os.Getenv("SFSTATE_DIFF_BENCH_KEYS")); err == nil && v > 0 {
		n = v
	}
	da, db := genPair(b, n)
	open := func(dir string) *savepoint.Savepoint {
		st, _ := s3.NewLocal(dir)
		sp, err := savepoint.Open(context.Background(), st, savepoint.MetadataName)
		if err != nil {
			b.Fatal(err)
		}
		return sp
	}
	sa, sb := open(da), open(db)
	for _, c := range []struct {
		name     string
		budget   int64
		noDigest bool
	}{{"memory", 8 << 30, false}, {"spill-16MiB", 16 << 20, false}, {"memory-nodigest", 8 << 30, true}, {"spill-16MiB-nodigest", 16 << 20, true}} {
		b.Run(c.name, func(b *testing.B) {
			var r *Result
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				var err error
				r, err = Diff(context.Background(), sa, sb, Options{MemoryBytes: c.budget, TempDir: b.TempDir(), NoDigest: c.noDigest})
				if err != nil {
					b.Fatal(err)
				}
			}
			var entries int64
			for _, s := range r.States {
				entries += s.EntriesA + s.EntriesB
			}
			cpu := cpuTime() - cpu0
			b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(entries)/float64(b.N), "cpu-ns/entry")
			b.ReportMetric(float64(r.SpilledRuns), "runs")
			b.ReportMetric(float64(r.SpilledBytes)/(1<<20), "spilled-MiB")
			b.ReportMetric(float64(maxRSS())/(1<<20), "maxrss-MiB")
		})
	}
}

// FuzzSpillRun reads arbitrary bytes as a run file: records or a one-line
// error naming the file, never a panic or a huge allocation.
func FuzzSpillRun(f *testing.F) {
	var run []byte
	for i, r := range []*rec{
		{state: 0, id: []byte{1, 2}, val: []byte{3}, ttl: []byte{0, 0, 0, 0, 0, 0, 0, 9}, js: Entry(`{"k":1}`), file: 0, kg: 5, offset: 100, bpos: -1},
		{state: 1, id: []byte{1, 3}, js: Entry(`{}`), kg: 127, offset: 1 << 40},
	} {
		run = appendRec(run, r)
		if i == 0 {
			f.Add(run)
		}
	}
	f.Add(run)
	f.Add(run[:len(run)-3])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		rr := &runReader{f: io.NopCloser(nil), r: bufio.NewReader(bytes.NewReader(b)), name: "run-fuzz", size: int64(len(b))}
		for n := 0; n <= len(b); n++ {
			if err := rr.read(); err != nil {
				if !strings.Contains(err.Error(), "run-fuzz") || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %q", err)
				}
				return
			}
			if rr.cur == nil {
				return
			}
		}
		t.Fatal("more records than bytes")
	})
}
