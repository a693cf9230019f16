package rescale

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
)

// stripPrefixes maps entry ids to ones without the key-group prefix so that
// content can be compared across max parallelisms.
func logicalEntries(t *testing.T, ctx context.Context, sp *savepoint.Savepoint, p int, assigned bool) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, op := range sp.Meta.Operators {
		if k, _ := Classify(op); k != KindCanonical {
			continue
		}
		maxP := int(op.MaxParallelism)
		w := keygroups.PrefixWidth(maxP)
		read := func(h *savepoint.KeyGroupsHandle, r keygroups.Range) {
			err := readHandle(ctx, sp, h, maxP, func(kg int, state string, key, value []byte) error {
				if !r.Contains(kg) {
					t.Fatalf("key group %d outside %v", kg, r)
				}
				if pk, err := keygroups.ReadPrefix(key, w); err != nil || pk != kg {
					t.Fatalf("key prefix %d in key group %d (%v)", pk, kg, err)
				}
				got[entryID(op.ID.String(), state, key[w:], value)]++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if !assigned {
			for _, st := range op.Subtasks {
				if h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok {
					read(h, keygroups.Range{Start: 0, End: maxP - 1})
				}
			}
			continue
		}
		for i := 0; i < p; i++ {
			r := keygroups.RangeForSubtask(maxP, p, i)
			for _, kh := range Assign(op, p, i, false) {
				read(kh.(*savepoint.KeyGroupsHandle), r)
			}
		}
	}
	return got
}

func TestRandomRekeyAndMerge(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(7))
	maxPs := []int{4, 16, 128, 129, 1000}
	iters := 16
	if testing.Short() {
		iters = 5
	}
	for it := 0; it < iters; it++ {
		maxP := maxPs[rng.Intn(len(maxPs))]
		spec := synthSpec{maxP: maxP, oldP: 1 + rng.Intn(min(maxP, 6)), keys: 100 + rng.Intn(300), inline: 0.3, missing: 0.1}
		newMaxP := 0
		if it%2 == 0 {
			newMaxP = maxPs[rng.Intn(len(maxPs))]
		}
		limit := maxP
		if newMaxP > 0 {
			limit = newMaxP
		}
		newP := 1 + rng.Intn(min(limit, 7))
		root := t.TempDir()
		src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
		os.MkdirAll(src, 0o755)
		writeSynth(t, rng, src, spec)
		before := treeHash(t, src)
		sp := openDir(t, ctx, src)
		want := logicalEntries(t, ctx, sp, 0, false)
		dstStore, _ := s3.NewLocal(dst)
		res, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + src, Dst: dstStore, Options: Options{Parallelism: newP, MaxParallelism: newMaxP, MergeFiles: true}})
		if err != nil {
			t.Fatalf("iteration %d %+v -> p %d maxP %d: %v", it, spec, newP, newMaxP, err)
		}
		if treeHash(t, src) != before {
			t.Fatal("source changed")
		}
		if !res.Verified {
			t.Fatal("rewrite not verified")
		}
		out := openDir(t, ctx, dst)
		if probs, _ := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(probs) > 0 {
			t.Fatalf("iteration %d: check: %v", it, probs[0])
		}
		op := out.Meta.Operators[0]
		if int(op.Parallelism) != newP || len(op.Subtasks) != newP {
			t.Fatalf("merged into %d subtasks of %d, want %d", len(op.Subtasks), op.Parallelism, newP)
		}
		if len(want) == 0 {
			continue
		}
		sameCounts(t, "rewritten", want, logicalEntries(t, ctx, out, newP, true))
		sameCounts(t, "rewritten, other parallelism", want, logicalEntries(t, ctx, out, 1+rng.Intn(int(op.MaxParallelism)), true))
	}
}

// TestRewriteFailureLeavesNoMetadata fails the writes of a rewrite one by
// one: no run leaves a `_metadata`.
func TestRewriteFailureLeavesNoMetadata(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	writeSynth(t, rand.New(rand.NewSource(11)), src, synthSpec{maxP: 128, oldP: 3, keys: 300})
	sp := openDir(t, ctx, src)
	for after := int32(0); ; after++ {
		if after > 50 {
			t.Fatal("never succeeded")
		}
		dst := t.TempDir()
		base, _ := s3.NewLocal(dst)
		_, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + src, Dst: &failingStore{Storage: base, after: after}, Options: Options{Parallelism: 2, MaxParallelism: 256}})
		_, statErr := os.Stat(filepath.Join(dst, savepoint.MetadataName))
		if err == nil {
			if statErr != nil {
				t.Fatal("no _metadata after success")
			}
			return
		}
		if !errors.Is(err, errInjected) {
			t.Fatal(err)
		}
		if statErr == nil {
			t.Fatalf("failure after %d writes left a _metadata", after)
		}
		if left, _ := os.ReadDir(dst); len(left) > 0 {
			t.Fatalf("failure after %d writes left %d files behind, e.g. %s", after, len(left), left[0].Name())
		}
	}
}

// TestFixtureRekey re-keys every canonical fixture whose key type is
// supported into other max parallelisms: Check passes (every key in the key
// group its hash names) and per-state totals of the logical digest are
// unchanged.
func TestFixtureRekey(t *testing.T) {
	ctx := context.Background()
	for _, f := range canonicalFixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			sp := openDir(t, ctx, f.Dir)
			want, err := digest.Compute(ctx, sp, digest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ p, maxP int }{{2, 256}, {3, 64}, {1, 0}} {
				dst := t.TempDir()
				dstStore, _ := s3.NewLocal(dst)
				_, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + f.Dir, Dst: dstStore, Options: Options{Parallelism: c.p, MaxParallelism: c.maxP, MergeFiles: true, Copy: true}})
				if errors.Is(err, ErrUnsupported) {
					t.Logf("%+v: refused: %v", c, err)
					if _, statErr := os.Stat(filepath.Join(dst, savepoint.MetadataName)); statErr == nil {
						t.Fatal("refused run left a _metadata")
					}
					continue
				}
				if err != nil {
					t.Fatalf("%+v: %v", c, err)
				}
				out := openDir(t, ctx, dst)
				if probs, _ := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(probs) > 0 {
					t.Fatalf("%+v: check: %v", c, probs[0])
				}
				got, err := digest.Compute(ctx, out, digest.Options{})
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range want.Keys() {
					a, b := want.Total(k.Operator, k.State), got.Total(k.Operator, k.State)
					if a.Entries != b.Entries || a.Hash != b.Hash {
						t.Fatalf("%+v: operator %s state %s: %d entries -> %d", c, k.Operator, k.State, a.Entries, b.Entries)
					}
				}
				if c.maxP == 0 {
					if diff := want.Diff(got, 3); len(diff) > 0 {
						t.Fatalf("merge changed per-group digests: %v", diff)
					}
				}
			}
		})
	}
}
