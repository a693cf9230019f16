package rescale

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestS3 rescales a savepoint stored on S3 (versitygw): with --copy the
// files are copied server-side into the destination prefix, which then
// passes Check on its own; without, handles point at s3://bucket/src.
func TestS3(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	local := t.TempDir()
	writeSynth(t, rand.New(rand.NewSource(21)), local, synthSpec{maxP: 128, oldP: 2, keys: 300})
	root, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(local)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(local, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := root.Put(ctx, "src/"+e.Name(), bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	srcStore, err := srv.NewStore(ctx, "src", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(ctx, srcStore, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	want := sourceEntries(t, ctx, sp)
	var counters s3.Counters
	dstStore, err := srv.NewStore(ctx, "dst", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Request{Src: sp, SrcURI: "s3://" + srv.Bucket + "/src", Dst: s3.WithCounters(dstStore, &counters),
		CopyStore: root, SrcPrefix: "src/", DstPrefix: "dst/", Options: Options{Parallelism: 3, Copy: true}})
	if err != nil {
		t.Fatal(err)
	}
	if res.CopiedFiles == 0 || res.CopiedBytes == 0 {
		t.Fatalf("nothing copied: %+v", res)
	}
	// Server-side: only the metadata and its sums file went through the
	// client.
	sums, err := dstStore.Stat(ctx, savepoint.SumsName)
	if err != nil {
		t.Fatal(err)
	}
	if w := counters.BytesWritten(); w != res.MetadataBytes+sums.Size {
		t.Fatalf("client wrote %d bytes, metadata is %d and its sums %d", w, res.MetadataBytes, sums.Size)
	}
	out, err := savepoint.Open(ctx, dstStore, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	if probs, _ := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(probs) > 0 {
		t.Fatalf("check: %v", probs[0])
	}
	sameCounts(t, "s3 copy", want, assignedEntries(t, ctx, out, 3))

	// Views: absolute s3:// handles into the source prefix.
	viewStore, _ := srv.NewStore(ctx, "views", s3.S3Options{})
	if _, err := Run(ctx, Request{Src: sp, SrcURI: "s3://" + srv.Bucket + "/src", Dst: viewStore, Options: Options{Parallelism: 5}}); err != nil {
		t.Fatal(err)
	}
	vs, err := savepoint.Open(ctx, viewStore, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, st := range vs.Meta.Operators[0].Subtasks {
		d := st.ManagedKeyed.(*savepoint.KeyGroupsHandle).Delegate
		if d.Tag == savepoint.TagFile {
			if want := "s3://" + srv.Bucket + "/src/"; len(d.Path) < len(want) || d.Path[:len(want)] != want {
				t.Fatalf("view handle path %q", d.Path)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no file-backed views")
	}
	// Read them through a store over the bucket root (the reader only
	// follows absolute paths inside its store).
	vs.Store, vs.Dir = root, ""
	sameCounts(t, "s3 views", want, assignedEntries(t, ctx, vs, 5))
}
