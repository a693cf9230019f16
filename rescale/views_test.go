package rescale

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
)

func TestLayoutParallelism(t *testing.T) {
	for _, c := range []struct{ maxP, oldP, newP int }{
		{128, 2, 3}, {128, 3, 2}, {128, 4, 2}, {128, 2, 4}, {7, 3, 5}, {128, 7, 11}, {4, 3, 2}, {32768, 13, 17}, {10, 10, 1},
	} {
		var bounds []int
		for _, r := range keygroups.Ranges(c.maxP, c.oldP) {
			bounds = append(bounds, r.Start)
		}
		k, err := LayoutParallelism(c.maxP, c.newP, bounds)
		if err != nil {
			t.Fatal(err)
		}
		if k%c.newP != 0 && k != c.maxP {
			t.Fatalf("%+v: layout %d is not a multiple of %d", c, k, c.newP)
		}
		// Every layout range lies inside one old and one new range.
		for _, r := range keygroups.Ranges(c.maxP, k) {
			if keygroups.SubtaskForKeyGroup(c.maxP, c.oldP, r.Start) != keygroups.SubtaskForKeyGroup(c.maxP, c.oldP, r.End) ||
				keygroups.SubtaskForKeyGroup(c.maxP, c.newP, r.Start) != keygroups.SubtaskForKeyGroup(c.maxP, c.newP, r.End) {
				t.Fatalf("%+v: layout %d range %v straddles a boundary", c, k, r)
			}
		}
		// And it is the smallest such multiple.
		for m := c.newP; m < k; m += c.newP {
			if hasBounds(c.maxP, m, bounds) {
				t.Fatalf("%+v: %d would do, chose %d", c, m, k)
			}
		}
	}
	if _, err := LayoutParallelism(4, 5, nil); err == nil {
		t.Fatal("parallelism above max parallelism accepted")
	}
}

// TestRandomViews: for random states and (max P, old P, new P), the
// rescaled metadata hands every new subtask exactly the entries of its key
// groups — none lost, none twice — at the target parallelism and at another
// one, the source stays byte-identical, and the bytes written are metadata
// only.
func TestRandomViews(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(42))
	maxPs := []int{1, 4, 7, 16, 128, 129, 300}
	iters := 40
	if testing.Short() {
		iters = 10
	}
	for it := 0; it < iters; it++ {
		maxP := maxPs[rng.Intn(len(maxPs))]
		spec := synthSpec{maxP: maxP, oldP: 1 + rng.Intn(min(maxP, 9)), keys: 50 + rng.Intn(400), inline: 0.3, missing: 0.15}
		newP := 1 + rng.Intn(min(maxP, 12))
		copyMode := it%4 == 3
		root := t.TempDir()
		src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		n := writeSynth(t, rng, src, spec)
		before := treeHash(t, src)
		sp := openDir(t, ctx, src)
		want := sourceEntries(t, ctx, sp)
		if n > 0 && len(want) == 0 {
			t.Fatal("entries written but none read back")
		}
		dstStore, err := s3.NewLocal(dst)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + src, Dst: dstStore, Options: Options{Parallelism: newP, Copy: copyMode}})
		if err != nil {
			t.Fatalf("iteration %d %+v -> %d: %v", it, spec, newP, err)
		}
		if got := treeHash(t, src); got != before {
			t.Fatalf("iteration %d: source changed", it)
		}
		if !copyMode && res.BytesWritten != res.MetadataBytes+res.SourcesBytes {
			t.Fatalf("views wrote %d bytes beyond metadata", res.BytesWritten-res.MetadataBytes-res.SourcesBytes)
		}
		var out *savepoint.Savepoint
		if copyMode {
			out = openDir(t, ctx, dst)
			if probs, _ := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(probs) > 0 {
				t.Fatalf("iteration %d: check: %v", it, probs[0])
			}
		} else {
			out = openAt(t, ctx, dst)
		}
		op := out.Meta.Operators[0]
		k := int(op.Parallelism)
		if k%newP != 0 && k != maxP {
			t.Fatalf("layout parallelism %d for target %d", k, newP)
		}
		for _, st := range op.Subtasks {
			s, e := st.ManagedKeyed.KeyGroupRange()
			if r := keygroups.RangeForSubtask(maxP, k, st.Index); r.Start != s || r.End != e {
				t.Fatalf("layout subtask %d holds [%d, %d], standard range is %v", st.Index, s, e, r)
			}
		}
		if len(want) == 0 {
			continue
		}
		sameCounts(t, "target parallelism", want, assignedEntries(t, ctx, out, newP))
		other := 1 + rng.Intn(maxP)
		sameCounts(t, "other parallelism", want, assignedEntries(t, ctx, out, other))
		sameCounts(t, "layout parallelism", want, assignedEntries(t, ctx, out, k))
	}
}

func TestDestinationExists(t *testing.T) {
	ctx := context.Background()
	src, dst := t.TempDir(), t.TempDir()
	writeSynth(t, rand.New(rand.NewSource(1)), src, synthSpec{maxP: 128, oldP: 2, keys: 50})
	sp := openDir(t, ctx, src)
	dstStore, _ := s3.NewLocal(dst)
	if _, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + src, Dst: dstStore, Options: Options{Parallelism: 3}}); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(dst, savepoint.MetadataName))
	_, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + src, Dst: dstStore, Options: Options{Parallelism: 5}})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("second run into the same destination: %v", err)
	}
	again, _ := os.ReadFile(filepath.Join(dst, savepoint.MetadataName))
	if string(first) != string(again) {
		t.Fatal("existing _metadata was overwritten")
	}
}

// TestFailureLeavesNoMetadata injects a failure at every write of a copy
// run: each fails, and none leaves a `_metadata` behind.
func TestFailureLeavesNoMetadata(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	writeSynth(t, rand.New(rand.NewSource(3)), src, synthSpec{maxP: 128, oldP: 3, keys: 200})
	sp := openDir(t, ctx, src)
	before := treeHash(t, src)
	for after := int32(0); ; after++ {
		if after > 100 {
			t.Fatal("run never succeeded")
		}
		dst := t.TempDir()
		base, _ := s3.NewLocal(dst)
		fs := &failingStore{Storage: base, after: after}
		_, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + src, Dst: fs, Options: Options{Parallelism: 2, Copy: true}})
		_, statErr := os.Stat(filepath.Join(dst, savepoint.MetadataName))
		if err == nil {
			if statErr != nil {
				t.Fatal("successful run left no _metadata")
			}
			if after < 2 {
				t.Fatalf("run succeeded with only %d writes allowed", after)
			}
			break
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("after %d writes: unexpected error %v", after, err)
		}
		if statErr == nil {
			t.Fatalf("failure after %d writes left a _metadata", after)
		}
		if left, _ := os.ReadDir(dst); len(left) > 0 {
			t.Fatalf("failure after %d writes left %d files behind, e.g. %s", after, len(left), left[0].Name())
		}
	}
	if treeHash(t, src) != before {
		t.Fatal("source changed")
	}
}

// canonicalFixtures lists the fixtures with key-groups handles: canonical
// ones and those in the heap backend's layout (a NATIVE hashmap savepoint
// and, from the additional fixtures, a hashmap checkpoint).
func canonicalFixtures(t *testing.T) []fixtures.Savepoint {
	var out []fixtures.Savepoint
	for _, f := range fixtures.All(t) {
		if strings.Contains(f.Name, "rocksdb-NATIVE") {
			continue
		}
		out = append(out, f)
	}
	if fixtures.MoreDir() != "" || os.Getenv("CI") == "true" {
		out = append(out, fixtures.Savepoint{Name: "flink1.15-hashmap-checkpoint", Dir: fixtures.MorePath(t, "flink1.15-hashmap-checkpoint", "savepoint")})
	}
	if len(out) == 0 {
		t.Skip("no canonical fixtures")
	}
	return out
}

// TestFixtureViews rescales every canonical fixture to several
// parallelisms: the copy passes savepoint.Check with an unchanged digest,
// and views (absolute handles) hand each subtask exactly its entries.
func TestFixtureViews(t *testing.T) {
	ctx := context.Background()
	for _, f := range canonicalFixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			sp := openDir(t, ctx, f.Dir)
			want := sourceEntries(t, ctx, sp)
			wantDigest, err := digest.Compute(ctx, sp, digest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []int{1, 2, 3, 5, 8} {
				if p > minKeyedMaxP(sp) {
					continue
				}
				dst := t.TempDir()
				dstStore, _ := s3.NewLocal(dst)
				res, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + f.Dir, Dst: dstStore, Options: Options{Parallelism: p, Copy: true}})
				if err != nil {
					t.Fatalf("p=%d: %v", p, err)
				}
				out := openDir(t, ctx, dst)
				if probs, _ := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(probs) > 0 {
					t.Fatalf("p=%d: check: %v", p, probs[0])
				}
				d, err := digest.Compute(ctx, out, digest.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if diff := wantDigest.Diff(d, 3); len(diff) > 0 {
					t.Fatalf("p=%d: digest differs: %v", p, diff)
				}
				if len(want) > 0 {
					sameCounts(t, "copy", want, assignedEntries(t, ctx, out, p))
				}
				if res.CopiedBytes > res.StateBytes {
					t.Fatalf("copied %d bytes of %d", res.CopiedBytes, res.StateBytes)
				}

				dst2 := t.TempDir()
				dstStore2, _ := s3.NewLocal(dst2)
				res2, err := Run(ctx, Request{Src: sp, SrcURI: "file:" + f.Dir, Dst: dstStore2, Options: Options{Parallelism: p}})
				if err != nil {
					t.Fatalf("p=%d views: %v", p, err)
				}
				if res2.BytesWritten != res2.MetadataBytes+res2.SourcesBytes || (res2.SourcesBytes == 0) != (res2.ReferencedFiles == 0) {
					t.Fatalf("views wrote %d bytes beyond metadata and the %d-byte record of sources", res2.BytesWritten-res2.MetadataBytes-res2.SourcesBytes, res2.SourcesBytes)
				}
				if len(want) > 0 {
					sameCounts(t, "views", want, assignedEntries(t, ctx, openAt(t, ctx, dst2), p))
				}
			}
		})
	}
}

func minKeyedMaxP(sp *savepoint.Savepoint) int {
	m := keygroups.MaxParallelismLimit
	for _, op := range sp.Meta.Operators {
		if k, _ := Classify(op); k != KindNonKeyed {
			m = min(m, int(op.MaxParallelism))
		}
	}
	return m
}
