//go:build cgo

package restore

import (
	"context"
	"errors"
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
// reader's heap mode); the RocksDB NATIVE one is refused as unreadable,
// not mis-decoded.
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
			if strings.Contains(fx.Name, "-rocksdb-NATIVE-") {
				if !errors.Is(err, verify.ErrUnreadable) || !errors.Is(err, savepoint.ErrNativeLayout) {
					t.Fatalf("native savepoint: %v, want ErrUnreadable and ErrNativeLayout", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
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
