package statediff

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// BenchmarkDiffS3 diffs the generated pair at parallelism 16 (16 keyed
// files per side; SFSTATE_DIFF_BENCH_KEYS entries in key group 37, 20,000
// by default) stored in a local S3 gateway, directly and through a proxy
// adding 5 ms to every response (a remote object store's round trip). It
// reports the requests of one diff: range reads (get_range/op) and size
// look-ups (stat/op), and the bytes read.
func BenchmarkDiffS3(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("SFSTATE_DIFF_BENCH_KEYS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	srv := testutil.StartVersitygw(b)
	tp := testutil.StartToxiproxy(b)
	proxy, err := tp.CreateProxy(ctx, "diff-bench", srv.Endpoint[len("http://"):])
	if err != nil {
		b.Fatal(err)
	}
	if err := proxy.AddToxic(ctx, testutil.Latency("rtt", "downstream", 5*time.Millisecond, 0)); err != nil {
		b.Fatal(err)
	}
	da, db := genPairPar(b, n, 16)
	for _, x := range []struct{ dir, prefix string }{{da, "a/"}, {db, "b/"}} {
		ents, err := os.ReadDir(x.dir)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range ents {
			data, err := os.ReadFile(filepath.Join(x.dir, e.Name()))
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Store.Put(ctx, x.prefix+e.Name(), bytes.NewReader(data), int64(len(data))); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []struct{ name, endpoint string }{{"loopback", ""}, {"rtt-5ms", proxy.URL()}} {
		b.Run(c.name, func(b *testing.B) {
			st, err := srv.NewStore(ctx, "", srv.Options(c.endpoint, s3.S3Options{}))
			if err != nil {
				b.Fatal(err)
			}
			var ctr s3.Counters
			cst := s3.WithCounters(st, &ctr)
			var r *Result
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				sa, err := savepoint.Open(ctx, cst, "a/"+savepoint.MetadataName)
				if err != nil {
					b.Fatal(err)
				}
				sb, err := savepoint.Open(ctx, cst, "b/"+savepoint.MetadataName)
				if err != nil {
					b.Fatal(err)
				}
				before := ctr.Snapshot()
				b.StartTimer()
				if r, err = Diff(ctx, sa, sb, Options{Limit: 3, TempDir: b.TempDir()}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				after := ctr.Snapshot()
				if i == 0 {
					b.ReportMetric(float64(after.Requests["get_range"]-before.Requests["get_range"]), "get_range/op")
					b.ReportMetric(float64(after.Requests["stat"]-before.Requests["stat"]), "stat/op")
					b.ReportMetric(float64(after.BytesRead-before.BytesRead)/(1<<10), "KiB-read/op")
				}
				b.StartTimer()
			}
			if r.Equal || total(r) == 0 {
				b.Fatalf("unexpected result %s", mustJSON(r))
			}
		})
	}
}
