//go:build cgo

package restore

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// TestVerifyAllFixtures is `verify --backends rocksdb,heap --parallelism
// 1,2` on every fixture savepoint: each canonical one verifies (operators
// whose max parallelism is 1 restore at 1), and so does the NATIVE
// savepoint of the hashmap backend (heap key-group layout, read by the
// reader's heap mode) and the RocksDB NATIVE one (digested from its
// RocksDB entries, restored from a canonical conversion, with a note).
func TestVerifyAllFixtures(t *testing.T) {
	ctx := context.Background()
	for _, fx := range fixtures.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			start := time.Now()
			sp, err := savepoint.Open(ctx, mustLocal(t, fx.Dir), savepoint.MetadataName)
			if err != nil {
				t.Fatal(err)
			}
			r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{}, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			native := strings.Contains(fx.Name, "-rocksdb-NATIVE-")
			if got := slices.Contains(r.Notes, verify.NoteNativeSource); got != native {
				t.Fatalf("native-source note %v (notes %q), want %v", got, r.Notes, native)
			}
			if !r.OK {
				t.Fatalf("verification failed:\n%s", strings.Join(r.Failures(), "\n"))
			}
			if len(r.Targets) != 4 {
				t.Fatalf("%d targets", len(r.Targets))
			}
			for _, tr := range r.Targets {
				if tr.Digest == nil || tr.Digest.Total("", "").Entries != r.Digest.Total("", "").Entries {
					t.Fatalf("%s: entries differ", tr.Name)
				}
			}
			t.Logf("%d entries, %d operators, %v", r.Digest.Total("", "").Entries, len(r.Digest.Operators), time.Since(start).Round(time.Millisecond))
		})
	}
}
