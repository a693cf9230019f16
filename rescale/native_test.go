package rescale

import (
	"context"
	"fmt"
	"github.com/sfstate/sfstate/checkpoint/manifest"
	"math/rand"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestFlinkNativeFixture: a Flink incremental checkpoint keeps its handles
// (rebased to absolute URIs into the source) and every new subtask is
// assigned every overlapping handle.
func TestFlinkNativeFixture(t *testing.T) {
	ctx := context.Background()
	var dir string
	for _, f := range fixtures.All(t) {
		if strings.Contains(f.Name, "rocksdb-NATIVE") {
			dir = f.Dir
		}
	}
	if dir == "" {
		t.Skip("no native RocksDB fixture")
	}
	sp := openDir(t, ctx, dir)
	for _, p := range []int{1, 2, 3} {
		if p > minKeyedMaxP(sp) {
			continue
		}
		dst := t.TempDir()
		st, _ := s3.NewLocal(dst)
		res, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + dir, Dst: st, Options: Options{Parallelism: p}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Native != nil {
			t.Fatal("plan written for a Flink checkpoint without an engine manifest")
		}
		out := openAt(t, ctx, dst)
		natives := 0
		for i, op := range out.Meta.Operators {
			srcOp := sp.Meta.Operators[i]
			if k, _ := Classify(op); k != KindNative {
				continue
			}
			for _, s := range op.Subtasks {
				h := s.ManagedKeyed.(*savepoint.IncrementalHandle)
				natives++
				for _, ns := range append(append([]savepoint.NamedStream{{Handle: h.Meta}}, h.Shared...), h.Private...) {
					if ns.Handle == nil || ns.Handle.Tag == savepoint.TagByteStream {
						continue
					}
					if ns.Handle.Tag != savepoint.TagFile {
						t.Fatalf("handle %s kept tag %d", ns.Handle.Path, ns.Handle.Tag)
					}
					loc, err := out.Resolve(ns.Handle)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := out.StoreOf(loc).Stat(ctx, loc.Key); err != nil {
						t.Fatalf("rebased handle %s: %v", ns.Handle.Path, err)
					}
				}
			}
			for i := 0; i < p; i++ {
				r := keygroups.RangeForSubtask(int(op.MaxParallelism), p, i)
				covered := 0
				for _, kh := range Assign(op, p, i, false) {
					s, e := kh.KeyGroupRange()
					covered += r.Intersect(keygroups.Range{Start: s, End: e}).Len()
				}
				want := 0
				for _, s := range srcOp.Subtasks {
					if s.ManagedKeyed != nil {
						a, b := s.ManagedKeyed.KeyGroupRange()
						want += r.Intersect(keygroups.Range{Start: a, End: b}).Len()
					}
				}
				if covered != want {
					t.Fatalf("p=%d subtask %d: handles cover %d key groups, source %d", p, i, covered, want)
				}
			}
		}
		if natives == 0 {
			t.Fatal("no native handles in output")
		}
	}
}

func TestPlanNative(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for it := 0; it < 200; it++ {
		maxP := 1 + rng.Intn(300)
		oldP := 1 + rng.Intn(min(maxP, 6))
		newP := 1 + rng.Intn(min(maxP, 6))
		m := &manifest.Manifest{Format: manifest.Format, Version: manifest.Version, CheckpointID: 3, MaxParallelism: maxP}
		for i, r := range keygroups.Ranges(maxP, oldP) {
			m.Subtasks = append(m.Subtasks, manifest.Subtask{Index: i, BackendID: fmt.Sprint("b", i), StartKeyGroup: r.Start, EndKeyGroup: r.End,
				Private: []manifest.Object{{Name: "CURRENT", Key: fmt.Sprintf("chk-3/task-%d/CURRENT", i), Size: 16}}})
			sub := &m.Subtasks[len(m.Subtasks)-1]
			for kg := r.Start; kg <= r.End; {
				end := min(r.End, kg+rng.Intn(8))
				sub.Shared = append(sub.Shared, manifest.SSTEntry{Object: manifest.Object{Name: fmt.Sprintf("%06d.sst", kg), Key: fmt.Sprintf("shared/b%d-%06d.sst", i, kg), Size: int64(100 + rng.Intn(1000))}, FirstKeyGroup: kg, LastKeyGroup: end, Level: 6})
				kg = end + 1
			}
		}
		p, err := planNative(m, newP, "manifest")
		if err != nil {
			t.Fatal(err)
		}
		var whole int64
		for _, s := range m.Subtasks {
			for _, f := range s.Shared {
				whole += f.Size
			}
		}
		var needed int64
		for _, ps := range p.Subtasks {
			r := keygroups.Range{Start: ps.StartKeyGroup, End: ps.EndKeyGroup}
			covered := 0
			for j, src := range ps.Sources {
				if src.Base != (j == 0) || (j > 0 && src.OverlapsGroups > ps.Sources[0].OverlapsGroups) {
					t.Fatalf("base is not the largest overlap: %+v", ps.Sources)
				}
				covered += src.OverlapsGroups
				// Needed files overlap; skipped ones do not; together they
				// are every shared file of the instance.
				n := 0
				for _, f := range src.SST {
					if r.Intersect(keygroups.Range{Start: f.FirstKeyGroup, End: f.LastKeyGroup}).IsEmpty() {
						t.Fatalf("file %s [%d, %d] needed for %v", f.Name, f.FirstKeyGroup, f.LastKeyGroup, r)
					}
					n++
				}
				if n+src.SkippedFiles != len(m.Subtasks[src.OldSubtask].Shared) {
					t.Fatal("files lost")
				}
			}
			if covered != r.Len() {
				t.Fatalf("sources cover %d of %d key groups", covered, r.Len())
			}
			needed += ps.NeededBytes
		}
		// Every SST is needed by at least one new subtask: total needed
		// bytes are at least the state size, and only boundary files are
		// counted twice.
		if needed < whole || needed > whole+p.BoundaryBytes {
			t.Fatalf("needed %d, state %d, boundary %d", needed, whole, p.BoundaryBytes)
		}
		if p.WholeBytes < p.NeededBytes {
			t.Fatal("whole handles smaller than needed files")
		}
	}
	if _, err := planNative(&manifest.Manifest{Format: "other", Version: 1, MaxParallelism: 4}, 2, "m"); err == nil {
		t.Fatal("foreign manifest accepted")
	}
}
