package s3bench

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
)

func benchStore(b *testing.B) (s3.Storage, int64) {
	srv := testutil.StartVersitygw(b)
	ctx := context.Background()
	st, err := srv.NewStore(ctx, "b", s3.S3Options{})
	if err != nil {
		b.Fatal(err)
	}
	const size = 16 << 20
	if err := st.Put(ctx, "blob", &repeatReader{src: make([]byte, 1<<20), n: size}, size); err != nil {
		b.Fatal(err)
	}
	return st, size
}

func BenchmarkRangeRead4KiB(b *testing.B) {
	st, size := benchStore(b)
	ctx := context.Background()
	b.SetBytes(4096)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		off := int64(0)
		for pb.Next() {
			off = (off + 1234567) % (size - 4096)
			rc, err := st.GetRange(ctx, "blob", off, 4096)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, rc)
			rc.Close()
		}
	})
}

func BenchmarkUpload32MiB(b *testing.B) {
	st, _ := benchStore(b)
	ctx := context.Background()
	src := make([]byte, 16<<20)
	b.SetBytes(32 << 20)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := st.Put(ctx, "up", &repeatReader{src: src, n: 32 << 20}, -1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStorageQuick runs the `sfstate bench storage --quick` table once
// and reports its rows as metrics (MiB/s; slowdown of the latency rows).
func BenchmarkStorageQuick(b *testing.B) {
	for _, bin := range []string{"versitygw", "toxiproxy-server"} {
		if _, err := testutil.FindBinary(bin); err != nil {
			b.Skip(err)
		}
	}
	for i := 0; i < b.N; i++ {
		rep, err := Run(context.Background(), DefaultConfig(true))
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rep.Rows {
			name := strings.NewReplacer(" ", "_", "±", "+-", ",", "").Replace(r.Name + "/" + strings.Fields(r.Network)[0])
			b.ReportMetric(r.MiBps, name+"_MiB/s")
			if r.VsDirect > 0 {
				b.ReportMetric(r.VsDirect, name+"_slowdown")
			}
		}
	}
}
