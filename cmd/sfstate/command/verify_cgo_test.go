//go:build cgo

package command

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify/restore"
)

// TestVerifyNativeCheckpoint: `sfstate verify .../chk-N` restores an
// engine checkpoint at its parallelism and one more on both backends.
func TestVerifyNativeCheckpoint(t *testing.T) {
	root := t.TempDir()
	store, _ := s3.NewLocal(root)
	bes, _, _, n, err := restore.GenerateBackends(restore.GenOptions{Keys: 500, Parallelism: 2, MaxParallelism: 32, Now: 1_750_000_000_000, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, be := range bes {
			be.Close()
		}
	}()
	if _, err := checkpoint.New(store, checkpoint.Options{}).TakeSync(context.Background(), bes, 3); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "--json", "verify", "--temp-dir", t.TempDir(), filepath.Join(root, "chk-3"))
	if code != ExitOK {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	var r struct {
		OK      bool `json:"ok"`
		Targets []struct {
			Name string `json:"name"`
		} `json:"targets"`
		Digest struct {
			Groups []struct {
				Entries int64 `json:"entries"`
			} `json:"groups"`
		} `json:"digest"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, g := range r.Digest.Groups {
		total += g.Entries
	}
	names := fmt.Sprint(r.Targets)
	if !r.OK || total != n || len(r.Targets) != 4 || names != "[{rocksdb@p2} {rocksdb@p3} {heap@p2} {heap@p3}]" {
		t.Fatalf("ok %v, %d of %d entries, targets %s", r.OK, total, n, names)
	}
	// --against another checkpoint of the same backends: equal; after one
	// deleted entry: exit 1.
	cp := checkpoint.New(store, checkpoint.Options{})
	if _, err := cp.TakeSync(context.Background(), bes, 4); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(t, "verify", "--against", filepath.Join(root, "chk-4"), filepath.Join(root, "chk-3")); code != ExitOK {
		t.Fatalf("against an equal checkpoint: exit %d: %s\n%s", code, errOut, out)
	}
	var victim []byte
	_ = bes[1].Scan(1, nil, nil, func(k, _ []byte) bool { victim = append([]byte{}, k...); return false })
	b := bes[1].NewBatch()
	b.Delete(1, victim)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := cp.TakeSync(context.Background(), bes, 5); err != nil {
		t.Fatal(err)
	}
	out, _, code = run(t, "verify", "--against", filepath.Join(root, "chk-5"), filepath.Join(root, "chk-3"))
	if code != ExitCheckFailed || !strings.Contains(out, "distinct") {
		t.Fatalf("against a checkpoint with a deleted entry: exit %d:\n%s", code, out)
	}
}

// TestVerifyShardsOnS3: the CI flow of docs/verify — shards of a savepoint
// on S3 verified by separate runs into digest files, then merged.
func TestVerifyShardsOnS3(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	if _, err := restore.Generate(context.Background(), srv.Store, "sp", restore.GenOptions{Keys: 600, Parallelism: 2, MaxParallelism: 32, Now: 1_750_000_000_000, TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("SFSTATE_S3_ENDPOINT", srv.Endpoint)
	url := "s3://" + srv.Bucket + "/sp"
	dir := t.TempDir()
	var files []string
	for i := 0; i < 2; i++ {
		f := filepath.Join(dir, fmt.Sprintf("shard-%d.json", i))
		out, errOut, code := run(t, "-q", "verify", "--shard", fmt.Sprintf("%d/2", i), "--parallelism", "3", "--temp-dir", t.TempDir(), "--digest-out", f, url)
		if code != ExitOK {
			t.Fatalf("shard %d: exit %d: %s%s", i, code, out, errOut)
		}
		files = append(files, f)
	}
	junit := filepath.Join(dir, "verify.xml")
	out, errOut, code := run(t, append([]string{"verify", "--merge", "--junit", junit}, files...)...)
	if code != ExitOK || !strings.Contains(out, "OK") || !strings.Contains(out, "ROCKSDB@P3") || !strings.Contains(out, "left-records") {
		t.Fatalf("merge: exit %d:\n%s%s", code, out, errOut)
	}
}
