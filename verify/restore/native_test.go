//go:build cgo

package restore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify"
)

// TestNativeCheckpoint: a native checkpoint of the engine verifies on both
// backends at other parallelisms, with and without a TTL time, and a
// checkpoint missing a shared file fails.
func TestNativeCheckpoint(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store, _ := s3.NewLocal(root)
	bes, _, _, n, err := GenerateBackends(GenOptions{Keys: 1500, Parallelism: 2, MaxParallelism: 64, Now: genNow, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, be := range bes {
			be.Close()
		}
	}()
	if _, err := checkpoint.New(store, checkpoint.Options{}).TakeSync(ctx, bes, 7); err != nil {
		t.Fatal(err)
	}
	o := verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 3, 1), TempDir: t.TempDir()}
	r, err := VerifyNative(ctx, store, 7, o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Fatalf("failures:\n%s", strings.Join(r.Failures(), "\n"))
	}
	tot := r.Digest.Total("", "")
	if tot.Entries != n || tot.Counts == 0 || tot.TTLEntries == 0 {
		t.Fatalf("source digest %+v, %d entries written", tot, n)
	}
	o.TTL = verify.TTLCheck{TTLMillis: (24 * time.Hour).Milliseconds(), NowMillis: genNow + (24 * time.Hour).Milliseconds() - 500}
	r, err = VerifyNative(ctx, store, 7, o)
	if err != nil || !r.OK {
		t.Fatalf("with TTL: %v %v", err, r.Failures())
	}
	if exp := r.Digest.Total("", "").Expired; exp == 0 || exp >= tot.TTLEntries {
		t.Fatalf("%d expired of %d TTL entries", exp, tot.TTLEntries)
	}
	if got, want := r.Targets[0].Digest.Total("", "").Entries, r.Digest.Live.Total("", "").Entries; got != want || got == tot.Entries {
		t.Fatalf("target returns %d entries, %d live of %d", got, want, tot.Entries)
	}
	// A lost shared file is reported.
	shared, _ := filepath.Glob(filepath.Join(root, "shared", "*"))
	if len(shared) == 0 {
		t.Fatal("no shared files")
	}
	if err := os.Remove(shared[0]); err != nil {
		t.Fatal(err)
	}
	r, err = VerifyNative(ctx, store, 7, verify.Options{Targets: targets([]string{"heap"}, 3), TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK {
		t.Fatal("missing shared file not detected")
	}
	t.Logf("%s", strings.Join(r.Failures(), "\n"))
}
