//go:build cgo

package migrate

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

// TestCheckpointS3: a checkpoint on versitygw migrates to another prefix of
// the same bucket (untouched files by server-side copy) and to a local
// directory (downloads, streamed copies), with the same content.
func TestCheckpointS3(t *testing.T) {
	ctx := context.Background()
	srv := testutil.StartVersitygw(t)
	f := makeSource(t, 8, nil)
	src, err := srv.NewStore(ctx, "mig/src", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CopyStore(ctx, f.store, src); err != nil {
		t.Fatal(err)
	}
	srcD, srcL, srcO := restoredContent(t, f.store, f, recordstore.LayoutBucket)

	dst, err := srv.NewStore(ctx, "mig/dst", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Checkpoint(ctx, src, dst, Options{WorkDir: t.TempDir(), Parallel: 2,
		CopyReferenced: func(ctx context.Context, key string) (bool, error) {
			return true, srv.Store.Copy(ctx, "mig/src/"+key, "mig/dst/"+key)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FilesReferenced == 0 || rep.FilesCopied != 0 || rep.BytesRead == 0 {
		t.Fatalf("referenced %d copied %d read %d", rep.FilesReferenced, rep.FilesCopied, rep.BytesRead)
	}
	local, _ := s3.NewLocal(filepath.Join(t.TempDir(), "local"))
	rep2, err := Checkpoint(ctx, src, local, Options{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep2.FilesCopied == 0 {
		t.Fatal("S3 to local should copy the untouched files")
	}
	for _, st := range []s3.Storage{dst, local} {
		if ids, _ := checkpoint.Completed(ctx, st); len(ids) != 1 {
			t.Fatalf("%s: checkpoints %v", st, ids)
		}
		d, l, o := restoredContent(t, st, f, recordstore.LayoutRecord)
		if ms := Compare(srcD, d); len(ms) > 0 || len(l) != len(srcL) || len(o) != len(srcO) {
			t.Fatalf("%s: content differs", st)
		}
	}
}
