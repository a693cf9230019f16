package keygroups

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// parallelismCases is a spread of (maxP, p) pairs: small exhaustive ones,
// Flink defaults, primes and the extremes.
func parallelismCases() [][2]int {
	var out [][2]int
	for m := 1; m <= 40; m++ {
		for p := 1; p <= m; p++ {
			out = append(out, [2]int{m, p})
		}
	}
	for _, m := range []int{128, 129, 256, 1000, 4096, 32768} {
		for _, p := range []int{1, 2, 3, 7, 31, 64, 127, 128, m / 3, m - 1, m} {
			if p >= 1 && p <= m {
				out = append(out, [2]int{m, p})
			}
		}
	}
	return out
}

func TestRangesPartitionKeyGroups(t *testing.T) {
	if Ranges(4, 5) != nil {
		t.Fatal("Ranges accepted p > maxP")
	}
	for _, c := range parallelismCases() {
		m, p := c[0], c[1]
		next := 0
		all := Ranges(m, p)
		if len(all) != p {
			t.Fatalf("Ranges(%d, %d) has %d entries", m, p, len(all))
		}
		for i := range p {
			r := RangeForSubtask(m, p, i)
			if all[i] != r {
				t.Fatalf("Ranges(%d, %d)[%d] = %v, want %v", m, p, i, all[i], r)
			}
			if r.IsEmpty() || r.Start != next {
				t.Fatalf("maxP %d p %d subtask %d: range %v, want start %d", m, p, i, r, next)
			}
			// Flink's ranges differ in size by at most one.
			if r.Len() < m/p || r.Len() > (m+p-1)/p {
				t.Fatalf("maxP %d p %d subtask %d: %v has %d key groups", m, p, i, r, r.Len())
			}
			next = r.End + 1
		}
		if next != m {
			t.Fatalf("maxP %d p %d: ranges end at %d", m, p, next-1)
		}
	}
}

func TestSubtaskForKeyGroupAgreesWithRanges(t *testing.T) {
	for _, c := range parallelismCases() {
		m, p := c[0], c[1]
		step := 1
		if m > 4096 {
			step = 7 // keep the test fast; still hits every range
		}
		for kg := 0; kg < m; kg += step {
			i := SubtaskForKeyGroup(m, p, kg)
			if r := RangeForSubtask(m, p, i); !r.Contains(kg) {
				t.Fatalf("maxP %d p %d: kg %d → subtask %d whose range is %v", m, p, kg, i, r)
			}
		}
	}
}

func TestManifestRanges(t *testing.T) {
	// MANIFEST §2.2: maxP 128, p 4 → [0..31] [32..63] [64..95] [96..127].
	for i, want := range []Range{{0, 31}, {32, 63}, {64, 95}, {96, 127}} {
		if got := RangeForSubtask(128, 4, i); got != want {
			t.Errorf("subtask %d: %v, want %v", i, got, want)
		}
	}
	// maxP 4, p 4: one key group each; keys 0,1 → kg 2 → subtask 2.
	if got := SubtaskForKeyGroup(4, 4, Assign(Tuple{Long(0)}, 4)); got != 2 {
		t.Errorf("Tuple1<Long>(0) on subtask %d, want 2", got)
	}
	// Uneven split: maxP 128, p 3.
	for i, want := range []Range{{0, 42}, {43, 85}, {86, 127}} {
		if got := RangeForSubtask(128, 3, i); got != want {
			t.Errorf("p=3 subtask %d: %v, want %v", i, got, want)
		}
	}
}

func TestInvalidParallelism(t *testing.T) {
	for _, c := range [][3]int{{0, 1, 0}, {128, 0, 0}, {128, 129, 0}, {32769, 1, 0}, {128, 4, 4}, {128, 4, -1}} {
		if r := RangeForSubtask(c[0], c[1], c[2]); !r.IsEmpty() {
			t.Errorf("RangeForSubtask%v = %v, want empty", c, r)
		}
	}
	if err := CheckParallelism(128, 129); !errors.Is(err, ErrParallelism) {
		t.Errorf("CheckParallelism(128, 129) = %v", err)
	}
	for _, c := range [][3]int{{128, 4, 128}, {128, 4, -1}, {0, 1, 0}} {
		if got := SubtaskForKeyGroup(c[0], c[1], c[2]); got != -1 {
			t.Errorf("SubtaskForKeyGroup%v = %d, want -1", c, got)
		}
	}
}

func TestRangeOps(t *testing.T) {
	a, b := Range{0, 10}, Range{5, 20}
	if got := a.Intersect(b); got != (Range{5, 10}) {
		t.Errorf("intersect %v", got)
	}
	if got := a.Intersect(Range{11, 12}); !got.IsEmpty() || got.Len() != 0 {
		t.Errorf("disjoint intersect %v", got)
	}
	if got := Empty.Intersect(a); !got.IsEmpty() {
		t.Errorf("empty intersect %v", got)
	}
	if a.Len() != 11 || !a.Contains(0) || !a.Contains(10) || a.Contains(11) || a.Contains(-1) {
		t.Error("Len/Contains")
	}
	if a.String() != "[0..10]" || Empty.String() != "[]" {
		t.Errorf("String %q %q", a, Empty)
	}
}

func TestDefaultMaxParallelism(t *testing.T) {
	for _, tc := range [][2]int{{1, 128}, {4, 128}, {85, 128}, {86, 256}, {128, 256}, {1000, 2048},
		{21845, 32768}, {21846, 32768}, {32768, 32768}, {0, -1}, {32769, -1}} {
		if got := DefaultMaxParallelism(tc[0]); got != tc[1] {
			t.Errorf("DefaultMaxParallelism(%d) = %d, want %d", tc[0], got, tc[1])
		}
	}
}

func TestPrefix(t *testing.T) {
	if PrefixWidth(128) != 1 || PrefixWidth(129) != 2 || PrefixWidth(1) != 1 || PrefixWidth(32768) != 2 {
		t.Fatal("PrefixWidth")
	}
	for _, w := range []int{1, 2} {
		maxKG := 127
		if w == 2 {
			maxKG = 32767
		}
		for _, kg := range []int{0, 1, 3, 99, maxKG} {
			b := AppendPrefix([]byte{0xaa}, kg, w)
			if len(b) != 1+w {
				t.Fatalf("len %d", len(b))
			}
			got, err := ReadPrefix(b[1:], w)
			if err != nil || got != kg {
				t.Fatalf("w %d kg %d: read %d %v", w, kg, got, err)
			}
			p := make([]byte, w)
			PutPrefix(p, kg, w)
			if !bytes.Equal(p, b[1:]) {
				t.Fatalf("PutPrefix % x vs % x", p, b[1:])
			}
		}
	}
	// Big-endian, as in the fixtures' keys (kg 3 at maxP 4 → 03).
	if got := AppendPrefix(nil, 0x0102, 2); !bytes.Equal(got, []byte{1, 2}) {
		t.Fatalf("% x", got)
	}
	if _, err := ReadPrefix([]byte{1}, 2); !errors.Is(err, ErrShortPrefix) {
		t.Fatalf("short prefix: %v", err)
	}
	if _, err := ReadPrefix([]byte{1, 2, 3}, 3); err == nil {
		t.Fatal("width 3 accepted")
	}
	lo, hi := PrefixBounds(Range{32, 63}, 1)
	if !bytes.Equal(lo, []byte{32}) || !bytes.Equal(hi, []byte{64}) {
		t.Fatalf("bounds % x % x", lo, hi)
	}
	lo, hi = PrefixBounds(Range{0, 32767}, 2)
	if !bytes.Equal(lo, []byte{0, 0}) || !bytes.Equal(hi, []byte{0x80, 0}) {
		t.Fatalf("bounds % x % x", lo, hi)
	}
	if lo, hi := PrefixBounds(Empty, 1); lo != nil || hi != nil {
		t.Fatal("empty bounds")
	}
}

func TestPlanCoversEveryKeyGroupOnce(t *testing.T) {
	var cases [][3]int
	for m := 1; m <= 24; m++ {
		for a := 1; a <= m; a++ {
			for b := 1; b <= m; b++ {
				cases = append(cases, [3]int{m, a, b})
			}
		}
	}
	for _, m := range []int{128, 1000, 32768} {
		for _, ab := range [][2]int{{1, 7}, {7, 1}, {2, 3}, {3, 2}, {4, 4}, {100, 128}, {128, 100}, {127, 5}} {
			if ab[0] <= m && ab[1] <= m {
				cases = append(cases, [3]int{m, ab[0], ab[1]})
			}
		}
	}
	for _, c := range cases {
		m, oldP, newP := c[0], c[1], c[2]
		plan, err := Plan(m, oldP, newP)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if len(plan.Subtasks) != newP {
			t.Fatalf("%v: %d assignments", c, len(plan.Subtasks))
		}
		seen := make([]int, m)
		for j, a := range plan.Subtasks {
			if a.Subtask != j || a.Range != RangeForSubtask(m, newP, j) {
				t.Fatalf("%v: assignment %d = %+v", c, j, a)
			}
			next := a.Range.Start
			for k, pc := range a.Pieces {
				old := RangeForSubtask(m, oldP, pc.OldSubtask)
				if pc.Range.IsEmpty() || pc.Range.Start != next || pc.Range != old.Intersect(a.Range) {
					t.Fatalf("%v: subtask %d piece %d %+v (old range %v)", c, j, k, pc, old)
				}
				if k > 0 && pc.OldSubtask <= a.Pieces[k-1].OldSubtask {
					t.Fatalf("%v: pieces not ordered by old subtask", c)
				}
				for kg := pc.Range.Start; kg <= pc.Range.End; kg++ {
					seen[kg]++
				}
				next = pc.Range.End + 1
			}
			if next != a.Range.End+1 {
				t.Fatalf("%v: subtask %d pieces end at %d, range %v", c, j, next-1, a.Range)
			}
		}
		for kg, n := range seen {
			if n != 1 {
				t.Fatalf("%v: key group %d covered %d times", c, kg, n)
			}
		}
		// Every old handle is read by somebody; identity plans map i → i.
		for i, readers := range plan.Readers() {
			if len(readers) == 0 {
				t.Fatalf("%v: old subtask %d read by nobody", c, i)
			}
			if plan.Identity() && (len(readers) != 1 || readers[0] != i) {
				t.Fatalf("%v: identity plan old %d read by %v", c, i, readers)
			}
		}
	}
}

func TestPlanExample(t *testing.T) {
	plan, err := Plan(128, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, a := range plan.Subtasks {
		got += fmt.Sprintf("%d%v:", a.Subtask, a.Range)
		for _, p := range a.Pieces {
			got += fmt.Sprintf(" %d%v", p.OldSubtask, p.Range)
		}
		got += ";"
	}
	want := "0[0..42]: 0[0..42];1[43..85]: 0[43..63] 1[64..85];2[86..127]: 1[86..127];"
	if got != want {
		t.Fatalf("plan\n got %s\nwant %s", got, want)
	}
	if r := plan.Subtasks[1].OldSubtasks(); len(r) != 2 || r[0] != 0 || r[1] != 1 {
		t.Fatalf("OldSubtasks %v", r)
	}
	for _, bad := range [][3]int{{128, 0, 1}, {128, 1, 129}, {0, 1, 1}} {
		if _, err := Plan(bad[0], bad[1], bad[2]); !errors.Is(err, ErrParallelism) {
			t.Errorf("Plan%v: %v", bad, err)
		}
	}
}
