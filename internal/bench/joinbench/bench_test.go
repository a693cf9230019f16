//go:build cgo

package joinbench

import (
	"fmt"
	"testing"
)

// BenchmarkJoinUnique runs the bench join unique shapes (100000 inputs, enough to spill into SSTs)
// under the bucket and the record-with-pool policies, one fresh RocksDB
// instance per iteration: the focused target for CPU profiles of the
// unique-key path (go test -bench JoinUnique -cpuprofile ...).
func BenchmarkJoinUnique(b *testing.B) {
	shapes, err := selectShapes(benchShapes(JoinBenchConfig{Inputs: 100_000, GroupRows: 10}), []string{"unique"})
	if err != nil {
		b.Fatal(err)
	}
	for si := range shapes {
		sh := &shapes[si]
		for pi, pol := range []benchPolicy{benchPolicies[0], benchPolicies[4], benchPolicies[4]} {
			noBloom := pi == 1
			name := pol.name
			if noBloom {
				name += "_no_prefix_bloom"
			}
			b.Run(fmt.Sprintf("%s-%d/%s", sh.name, sh.payload, name), func(b *testing.B) {
				var cpu float64
				n := 0
				for ; b.Loop(); n++ {
					r, err := runTrial(fmt.Sprintf("%s/run-%d", b.TempDir(), n), sh, pol, noBloom)
					if err != nil {
						b.Fatal(err)
					}
					cpu += r.cpu
				}
				b.ReportMetric(cpu/float64(max(n, 1)), "cpu-s/op")
			})
		}
	}
}

func TestSelectShapes(t *testing.T) {
	all := benchShapes(JoinBenchConfig{Inputs: 64, GroupRows: 4})
	got, err := selectShapes(all, []string{"unique/256", "skewed"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, fmt.Sprintf("%s/%d", s.name, s.payload))
	}
	if fmt.Sprint(names) != "[unique/256 skewed/0 skewed/256]" {
		t.Fatalf("selected %v", names)
	}
	if _, err := selectShapes(all, []string{"unique/17"}); err == nil {
		t.Fatal("an unknown shape was accepted")
	}
}

// BenchmarkJoinSkewed runs the bench join skewed/256 shape (200000 inputs)
// under the record-with-pool policy only (the bucket layout takes minutes
// per run): the focused target for CPU profiles of the skewed path.
func BenchmarkJoinSkewed(b *testing.B) {
	shapes, err := selectShapes(benchShapes(JoinBenchConfig{Inputs: 100_000, GroupRows: 10}), []string{"skewed/256"})
	if err != nil {
		b.Fatal(err)
	}
	sh := &shapes[0]
	var cpu float64
	n := 0
	for ; b.Loop(); n++ {
		r, err := runTrial(fmt.Sprintf("%s/run-%d", b.TempDir(), n), sh, benchPolicies[4], false)
		if err != nil {
			b.Fatal(err)
		}
		cpu += r.cpu
	}
	b.ReportMetric(cpu/float64(max(n, 1)), "cpu-s/op")
}
