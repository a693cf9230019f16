package rescale

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// walkEntries returns the multiset of keyed entries of sp as the savepoint
// package's walk reads them: operator, state, key group, key and value
// bytes.
func walkEntries(t *testing.T, ctx context.Context, sp *savepoint.Savepoint) map[string]int {
	t.Helper()
	got := map[string]int{}
	var mu sync.Mutex
	err := sp.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeRaw}, func(e *savepoint.KeyedEntry) error {
		h := sha256.New()
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00", e.Operator.ID, e.State.Name, e.KeyGroup, len(e.KeyBytes))
		h.Write(e.KeyBytes)
		h.Write(e.ValueBytes)
		mu.Lock()
		got[hex.EncodeToString(h.Sum(nil))]++
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// withPinned writes a copy of the (self-contained) savepoint in dir to a
// temporary directory, with one more keyed operator the way Flink SQL
// plans global aggregates, sorts and limits: parallelism 1, max
// parallelism 1 (its state inline).
func withPinned(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	synth := t.TempDir()
	writeSynth(t, rand.New(rand.NewSource(7)), synth, synthSpec{maxP: 1, oldP: 1, keys: 40, inline: 1})
	pinned := openDir(t, ctx, synth).Meta.Operators[0]
	md := *openDir(t, ctx, dir).Meta
	md.Operators = append(append([]*savepoint.OperatorState(nil), md.Operators...), pinned)
	out := t.TempDir()
	st, _ := s3.NewLocal(out)
	if err := savepoint.WriteMetadata(ctx, st, savepoint.MetadataName, &md, true); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSQLFixturesWholeJob: every SQL fixture, with a global operator of
// max parallelism 1 added, rescales to parallelism 3 with and without
// --merge-files: the global operator keeps its parallelism (with a note),
// the rest get 3, and the output decodes to exactly the input's entries.
func TestSQLFixturesWholeJob(t *testing.T) {
	ctx := context.Background()
	n := 0
	for _, f := range fixtures.All(t) {
		if !strings.HasPrefix(f.Name, "sql-") {
			continue
		}
		n++
		t.Run(f.Name, func(t *testing.T) {
			sp := openDir(t, ctx, withPinned(t, ctx, f.Dir))
			want := walkEntries(t, ctx, sp)
			if _, err := Run(ctx, Request{Src: openDir(t, ctx, f.Dir), Dst: s3.NewMem(), Options: Options{Parallelism: 3}}); err != nil {
				t.Fatalf("fixture as is: %v", err)
			}
			for _, merge := range []bool{false, true} {
				dst := t.TempDir()
				st, _ := s3.NewLocal(dst)
				res, err := Run(ctx, Request{Src: sp, Dst: st, Options: Options{Parallelism: 3, MergeFiles: merge}})
				if err != nil {
					t.Fatalf("merge=%v: %v", merge, err)
				}
				out := openDir(t, ctx, dst)
				sameCounts(t, fmt.Sprintf("merge=%v", merge), want, walkEntries(t, ctx, out))
				if probs, _ := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(probs) > 0 {
					t.Fatalf("merge=%v: check: %v", merge, probs[0])
				}
				stats := map[string]LayoutStats{}
				for _, s := range res.Operators {
					stats[s.Operator] = s
				}
				for i, op := range sp.Meta.Operators {
					k, _ := Classify(op)
					if k != KindCanonical {
						continue
					}
					s, nop := stats[op.ID.String()], out.Meta.Operators[i]
					if op.MaxParallelism < 3 {
						if nop.Parallelism != op.Parallelism || s.Note == "" || s.NewParallelism != int(op.Parallelism) {
							t.Errorf("merge=%v: operator %s (max parallelism %d) got parallelism %d, note %q", merge, op.ID, op.MaxParallelism, nop.Parallelism, s.Note)
						}
					} else if s.NewParallelism != 3 || nop.Parallelism%3 != 0 || s.Note != "" {
						t.Errorf("merge=%v: operator %s: %+v, layout %d", merge, op.ID, s, nop.Parallelism)
					}
				}
			}
		})
	}
	if n == 0 {
		t.Fatal("no SQL fixtures")
	}
}

// TestOperatorOverrides: per-operator parallelism and max parallelism,
// the job-wide max parallelism skipping operators pinned at 1, and the
// refusals of overrides that do not fit.
func TestOperatorOverrides(t *testing.T) {
	ctx := context.Background()
	var sp *savepoint.Savepoint
	var pinned, wide *savepoint.OperatorState
	for _, f := range fixtures.All(t) {
		if !strings.HasPrefix(f.Name, "sql-") {
			continue
		}
		s := openDir(t, ctx, withPinned(t, ctx, f.Dir))
		var p1, pw *savepoint.OperatorState
		for _, op := range s.Meta.Operators {
			if k, _ := Classify(op); k != KindCanonical {
				continue
			}
			if op.MaxParallelism == 1 && p1 == nil {
				p1 = op
			}
			if op.MaxParallelism >= 8 && pw == nil {
				pw = op
			}
		}
		if p1 != nil && pw != nil {
			sp, pinned, wide = s, p1, pw
			break
		}
	}
	if sp == nil {
		t.Skip("no SQL fixture with both a pinned and a parallel keyed operator")
	}
	want := walkEntries(t, ctx, sp)
	run := func(o Options) (*Result, *savepoint.Savepoint, error) {
		dst := t.TempDir()
		st, _ := s3.NewLocal(dst)
		res, err := Run(ctx, Request{Src: sp, Dst: st, Options: o})
		if err != nil {
			return nil, nil, err
		}
		return res, openDir(t, ctx, dst), nil
	}
	find := func(sp *savepoint.Savepoint, id savepoint.OperatorID) *savepoint.OperatorState {
		for _, op := range sp.Meta.Operators {
			if op.ID == id {
				return op
			}
		}
		t.Fatalf("operator %s missing", id)
		return nil
	}
	// One operator at 5, the rest at 2.
	_, out, err := run(Options{Parallelism: 2, OperatorParallelism: map[string]int{wide.ID.String(): 5}})
	if err != nil {
		t.Fatal(err)
	}
	if p := find(out, wide.ID).Parallelism; p%5 != 0 {
		t.Errorf("override: layout parallelism %d", p)
	}
	sameCounts(t, "override", want, walkEntries(t, ctx, out))
	// Job-wide max parallelism: applied to the wide operator, never to
	// the pinned one.
	res, out, err := run(Options{Parallelism: 2, MaxParallelism: 64})
	if err != nil {
		t.Fatal(err)
	}
	if find(out, wide.ID).MaxParallelism != 64 || find(out, pinned.ID).MaxParallelism != 1 || find(out, pinned.ID).Parallelism != 1 {
		t.Errorf("max parallelism: wide %d, pinned %d/%d", find(out, wide.ID).MaxParallelism, find(out, pinned.ID).Parallelism, find(out, pinned.ID).MaxParallelism)
	}
	noted := false
	for _, s := range res.Operators {
		noted = noted || (s.Operator == pinned.ID.String() && strings.Contains(s.Note, "max parallelism 1"))
	}
	if !noted {
		t.Errorf("no note for the pinned operator: %+v", res.Operators)
	}
	if got := walkEntries(t, ctx, out); len(got) != len(want) {
		// Re-keyed entries change their key-group prefix: compare counts.
		t.Errorf("re-keyed output has %d distinct entries, source %d", len(got), len(want))
	}
	// Overrides that cannot apply.
	for name, o := range map[string]Options{
		"pinned parallelism":     {Parallelism: 2, OperatorParallelism: map[string]int{pinned.ID.String(): 2}},
		"pinned max parallelism": {Parallelism: 2, OperatorMaxParallelism: map[string]int{pinned.ID.String(): 4}},
		"unknown operator":       {Parallelism: 2, OperatorParallelism: map[string]int{"no-such-uid": 2}},
		"above max parallelism":  {Parallelism: 2, OperatorParallelism: map[string]int{wide.ID.String(): int(wide.MaxParallelism) + 1}},
	} {
		_, _, err := run(o)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if name == "unknown operator" && !errors.Is(err, ErrOptions) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
