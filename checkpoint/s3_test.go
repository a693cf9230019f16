package checkpoint

import (
	"context"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestRoundTripVersitygw runs the incremental and rescaled round trip and
// retention against an S3 gateway, through the retry wrapper.
func TestRoundTripVersitygw(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	raw, err := srv.NewStore(ctx, "jobs/a", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := s3.WithRetry(raw, s3.RetryPolicy{})
	runRoundTrip(t, st)

	sp, err := savepoint.Open(ctx, st, MetadataKey(2))
	if err != nil {
		t.Fatal(err)
	}
	h := sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*savepoint.IncrementalHandle)
	if len(h.Shared) == 0 || h.Shared[0].Handle.Path[:5] != "s3://" {
		t.Fatalf("shared handle on S3: %+v", h.Shared)
	}

	// Retention on S3: keep one.
	c := newCluster(t, 2)
	rst, err := srv.NewStore(ctx, "jobs/b", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	cp := New(rst, Options{Retain: 1})
	for id := int64(1); id <= 3; id++ {
		c.write(int(id)*400, int(id)*400+800, "x", id == 2)
		if id == 2 {
			compactAll(t, c)
		}
		if _, err := cp.TakeSync(ctx, c.backends, id); err != nil {
			t.Fatal(err)
		}
	}
	assertConsistent(t, rst, []int64{3}, liveShared(cp))
	restored, _ := restoreAll(t, rst, 3, 3, RestoreOptions{})
	checkRestored(t, c.want, restored)
}
