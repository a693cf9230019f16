package scanbench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
)

// TestGenerateAndRun: a small generated savepoint passes every phase (each
// phase verifies the entry count; check verifies every key's key group).
func TestGenerateAndRun(t *testing.T) {
	g, err := Generate(t.TempDir(), 3000)
	if err != nil {
		t.Fatal(err)
	}
	phases, err := Run(context.Background(), g, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) < 5 || phases[0].Name != PhaseRaw || phases[0].RatioToRaw != 1 {
		t.Fatalf("%+v", phases)
	}
	for _, p := range phases {
		if p.Entries != 3000 || p.Seconds <= 0 || p.PeakRSS <= 0 {
			t.Errorf("%+v", p)
		}
		// Cold phases run only where eviction was seen to work.
		if p.Cold && p.Cached > 0.05 {
			t.Errorf("cold phase with %.0f%% of the file cached: %+v", 100*p.Cached, p)
		}
		if !p.Cold && p.Cached < 0.95 {
			t.Errorf("warm phase with %.0f%% of the file cached: %+v", 100*p.Cached, p)
		}
	}
	// Spot-check decoded values: key 0 and its accumulator row.
	sp, err := savepoint.Open(context.Background(), mustLocal(t, g.Dir), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = sp.WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1}, func(e *savepoint.KeyedEntry) error {
		b, err := json.Marshal(e.Key)
		if err != nil {
			return err
		}
		if string(b) == `["+I",[7,"user-1"]]` {
			seen++
			v, _ := json.Marshal(e.Value)
			want := `["TtlValue",{"lastAccess":1700000000001,"value":["+I",[1,0.3333333333333333,"a1",["ts_millis",1700000000001],1,false]]}]`
			if string(v) != want {
				t.Errorf("value %s, want %s", v, want)
			}
		}
		return nil
	})
	if err != nil || seen != 1 {
		t.Fatalf("key user-1 seen %d times: %v", seen, err)
	}
}

// TestEvict: EvictFile drops a file from the page cache (mincore says so)
// and reading it brings it back.
func TestEvict(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("page-cache eviction is Linux-only")
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RawRead(p); err != nil {
		t.Fatal(err)
	}
	if r, err := Resident(p); err != nil || r < 0.99 {
		t.Fatalf("after a read: resident %.2f, %v", r, err)
	}
	if err := EvictFile(p); err != nil {
		t.Fatal(err)
	}
	r, err := Resident(p)
	if err != nil {
		t.Fatal(err)
	}
	if r > 0.05 {
		t.Skipf("the file system keeps the pages (%.0f%% resident after eviction)", 100*r)
	}
	if err := RawRead(p); err != nil {
		t.Fatal(err)
	}
	if r, err := Resident(p); err != nil || r < 0.99 {
		t.Fatalf("after re-reading: resident %.2f, %v", r, err)
	}
}

// BenchmarkScanLarge generates a large savepoint (SFSTATE_SCAN_ENTRIES
// entries, default 10M ≈ 1.3 GB; it only runs under -bench) and reports
// each phase.
func BenchmarkScanLarge(b *testing.B) {
	n := int64(10_000_000)
	if s := os.Getenv("SFSTATE_SCAN_ENTRIES"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	g, err := Generate(b.TempDir(), n)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		phases, err := Run(context.Background(), g, 1)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range phases {
			b.Logf("%-17s cached %3.0f%% %8.2fs %12.0f entries/s %8.1f MB/s / raw %.2f / cold raw %.2f peak RSS %d MiB allocs/entry %.2f",
				p.Name, 100*p.Cached, p.Seconds, p.EntriesPerSec, p.MBPerSec, p.RatioToRaw, p.RatioToColdRaw, p.PeakRSS>>20, float64(p.Allocs)/float64(p.Entries))
		}
	}
}

func mustLocal(t testing.TB, dir string) *s3.Local {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestColumnsMatchWalk: on generated data (every entry columnar) the
// columnar scan yields exactly the generic walk's keys, values and TTL
// timestamps, in order, with any number of workers.
func TestColumnsMatchWalk(t *testing.T) {
	g, err := Generate(t.TempDir(), 5000)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sp, err := savepoint.Open(ctx, mustLocal(t, g.Dir), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	err = sp.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1}, func(e *savepoint.KeyedEntry) error {
		b, err := json.Marshal([]any{e.KeyGroup, e.Key, e.Value, *e.TTLTimestamp})
		want = append(want, string(b))
		return err
	})
	if err != nil || len(want) != 5000 {
		t.Fatalf("walk: %d entries, %v", len(want), err)
	}
	for _, workers := range []int{1, 2, 3} {
		var got []string
		err := sp.ScanColumns(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Workers: workers}, func(b *savepoint.ColumnBatch) error {
			for i := 0; i < b.Len(); i++ {
				ttl, ok := b.TTLTimestamp(i)
				if !ok {
					t.Fatal("no TTL column")
				}
				j, err := json.Marshal([]any{b.KeyGroup, b.Key(i), b.Value(i), ttl})
				if err != nil {
					return err
				}
				got = append(got, string(j))
			}
			return nil
		}, func(e *savepoint.KeyedEntry) error {
			t.Fatalf("entry of state %q fell back to the generic decoder", e.State.Name)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("workers %d: %d entries, want %d", workers, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("workers %d: entry %d:\ncolumnar %s\ngeneric  %s", workers, i, got[i], want[i])
			}
		}
	}
}

// BenchmarkColumns: the columnar full decode (one worker) of a generated
// savepoint; compare with BenchmarkWalkDecode.
func BenchmarkColumns(b *testing.B) { benchScan(b, true, 1) }

// BenchmarkColumns2 is BenchmarkColumns with two workers.
func BenchmarkColumns2(b *testing.B) { benchScan(b, true, 2) }

// BenchmarkWalkDecode: the generic full decode (one worker, recycled
// values) of the same savepoint.
func BenchmarkWalkDecode(b *testing.B) { benchScan(b, false, 1) }

func benchScan(b *testing.B, cols bool, workers int) {
	g, err := Generate(b.TempDir(), 200_000)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sp, err := savepoint.Open(ctx, mustLocal(b, g.Dir), savepoint.MetadataName)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(g.DataBytes)
	b.ReportAllocs()
	for b.Loop() {
		var n int64
		if cols {
			n, err = columns(ctx, sp, workers)
		} else {
			n, err = walk(ctx, sp, savepoint.ScanOptions{KeyGroupTo: -1, Workers: 1, ReuseValues: true})
		}
		if err != nil || n != g.Entries {
			b.Fatalf("%d entries, %v", n, err)
		}
	}
}

// TestGenerateHeapLayout: the heap-layout copy of the generated state
// holds the same entries (equal digests), is detected as the heap layout,
// and the layout phases run on it.
func TestGenerateHeapLayout(t *testing.T) {
	ctx := context.Background()
	canon, err := Generate(t.TempDir(), 3000)
	if err != nil {
		t.Fatal(err)
	}
	heap, err := GenerateLayout(t.TempDir(), 3000, true)
	if err != nil {
		t.Fatal(err)
	}
	var ds []*digest.Digest
	for _, g := range []*Generated{canon, heap} {
		sp, err := savepoint.Open(ctx, mustLocal(t, g.Dir), savepoint.MetadataName)
		if err != nil {
			t.Fatal(err)
		}
		d, err := digest.Compute(ctx, sp, digest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
		sum := savepoint.Summarize(sp)
		if err := savepoint.ScanSummary(ctx, sp, sum, savepoint.ScanOptions{KeyGroupTo: -1}); err != nil {
			t.Fatal(err)
		}
		want := savepoint.LayoutCanonical
		if g == heap {
			want = savepoint.LayoutNativeHeap
		}
		if l := sum.Operators[0].KeyedLayout; l != want {
			t.Fatalf("layout %s, want %s", l, want)
		}
		if s := sum.Operators[0].KeyedStates[0]; s.Entries != 3000 || s.TTLEntries != 3000 {
			t.Fatalf("summary %+v", s)
		}
	}
	if diff := ds[0].Diff(ds[1], 3); len(diff) > 0 || ds[0].Total("", "").Entries != 3000 {
		t.Fatalf("heap layout differs from canonical: %v", diff)
	}
	phases, err := RunWith(ctx, heap, Options{Phases: LayoutPhases})
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != len(LayoutPhases)+1 {
		t.Fatalf("%d phases: %+v", len(phases), phases)
	}
	for _, p := range phases {
		if p.Entries != 3000 {
			t.Errorf("%+v", p)
		}
	}
}
