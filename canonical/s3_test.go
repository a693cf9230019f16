package canonical

import (
	"context"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestExportImportOverS3 exports to an S3 gateway and imports at another
// parallelism from it: data files are read by ranged GETs only, the
// metadata is the only whole-object GET, and the content survives.
func TestExportImportOverS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	base, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	op, _ := genOperator(t, "rocksdb", 128, 2, 800)
	if _, _, err := Export(ctx, []Operator{op}, base, ExportOptions{Dir: "jobs/sp-1", InlineThreshold: -1, TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	var cnt s3.Counters
	sp, err := savepoint.Open(ctx, s3.WithCounters(base, &cnt), "jobs/sp-1/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(ctx, sp, testFactory(t, "heap", engine.NewManualClock(testNow), nil), ImportOptions{Parallelism: 3, ReadAhead: 4096, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if g := cnt.Requests(s3.OpGet); g != 1 {
		t.Errorf("%d whole-object GETs, want 1 (the metadata)", g)
	}
	if cnt.Requests(s3.OpGetRange) == 0 {
		t.Error("no ranged reads")
	}
	local, _ := s3.NewLocal(t.TempDir())
	back := reexport(t, res, engine.NewManualClock(testNow), local, "b")
	if diff := mustDigest(t, sp).Diff(mustDigest(t, back), 10); diff != nil {
		t.Fatalf("content changed over S3: %v", diff)
	}
}
