package savepoint

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
)

// TestLocateAndMapOverS3: Locate at every level of a checkpoint tree on S3
// (delimiter listings), and a checkpoint written locally with absolute
// file: handles, copied to S3, read there with a mapping.
func TestLocateAndMapOverS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	base, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	putCheckpointTree(t, base, "tree")
	st, err := srv.NewStore(ctx, "tree", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string]string{
		"ck/aaaa":                 "ck/aaaa/chk-12/_metadata",
		"ck/aaaa/chk-7":           "ck/aaaa/chk-7/_metadata",
		"sp/savepoint-1":          "sp/savepoint-1/_metadata",
		"ck/bbbb/chk-3/_metadata": "ck/bbbb/chk-3/_metadata",
	} {
		tg, err := Locate(ctx, st, prefix, LocateOptions{})
		if err != nil || tg.MetadataKey != want {
			t.Errorf("%s: %+v %v, want %s", prefix, tg, err, want)
		}
	}
	if tg, err := Locate(ctx, st, "ck", LocateOptions{Checkpoint: 3}); err != nil || tg.MetadataKey != "ck/bbbb/chk-3/_metadata" || tg.Picked.Job != "bbbb" {
		t.Errorf("root: %+v %v", tg, err)
	}
	found, _, err := FindSnapshots(ctx, st, "", FindOptions{})
	if err != nil || len(found) != 4 {
		t.Errorf("find: %+v %v", found, err)
	}

	// A local checkpoint with absolute handles, copied to S3.
	root := filepath.Join(t.TempDir(), "job")
	writeNativeCheckpoint(t, root, TagIncrementalKeyGroupsV2, "shared/a.sst", "taskowned/b.sst")
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		return base.Put(ctx, "copy/job/"+filepath.ToSlash(rel), bytes.NewReader(b), int64(len(b)))
	})
	if err != nil {
		t.Fatal(err)
	}
	chk, err := srv.NewStore(ctx, "copy/job/chk-7", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := OpenWith(ctx, chk, MetadataName, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if probs, _ := Check(ctx, sp, CheckOptions{}); len(probs) == 0 || probs[0].Kind != ProblemPath {
		t.Fatalf("copied checkpoint without a mapping: %v", probs)
	}
	sp, err = OpenWith(ctx, chk, MetadataName, OpenOptions{Map: []PathMap{{From: root, To: "s3://" + srv.Bucket + "/copy/job"}}})
	if err != nil {
		t.Fatal(err)
	}
	if probs, stats := Check(ctx, sp, CheckOptions{}); len(probs) != 0 || stats.Files != 3 {
		t.Fatalf("copied checkpoint with a mapping: %v (%d files)", probs, stats.Files)
	}
	h := sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*IncrementalHandle)
	if got := readAll(t, sp, h.Shared[0].Handle); got != "0123456789" {
		t.Fatalf("read %q", got)
	}
}
