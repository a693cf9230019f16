package savepoint

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
)

// TestOpenOverS3 uploads a fixture to a local S3 gateway and reads it back
// through the S3 store: metadata, keyed walk and check, with data files
// read only by ranged GETs.
func TestOpenOverS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	src := fixtureDir(t, "flink1.19-rocksdb-canonical-snappy-compressed")
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	base, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := base.Put(ctx, "jobs/sp-1/"+e.Name(), bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	var cnt s3.Counters
	st := s3.WithCounters(base, &cnt)
	sp, err := Open(ctx, st, "jobs/sp-1/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	if sp.FormatType() != FormatCanonical {
		t.Fatalf("format %q", sp.FormatType())
	}
	n := 0
	if err := sp.WalkKeyed(ctx, ScanOptions{KeyGroupTo: -1, ReadAhead: 256}, func(*KeyedEntry) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 32 {
		t.Fatalf("%d entries over S3, want 32", n)
	}
	if probs, _ := Check(ctx, sp, CheckOptions{}); len(probs) != 0 {
		t.Fatalf("check over S3: %v", probs)
	}
	// Whole-object GETs: the metadata and check's look for a sums file
	// (absent); state files are only read in ranges.
	if g := cnt.Requests(s3.OpGet); g != 2 {
		t.Fatalf("%d whole-object GETs, want 2 (the metadata and the sums file check looks for)", g)
	}
	if cnt.Requests(s3.OpGetRange) == 0 {
		t.Fatal("no ranged reads")
	}
	// An absolute s3:// path inside the savepoint resolves; one outside does not.
	if _, err := sp.Resolve(&StreamHandle{Tag: TagFile, Path: base.String() + "/jobs/sp-1/x"}); err != nil {
		t.Fatalf("inside: %v", err)
	}
	if _, err := sp.Resolve(&StreamHandle{Tag: TagFile, Path: base.String() + "/jobs/sp-2/x"}); err == nil {
		t.Fatal("outside path accepted")
	}
}
