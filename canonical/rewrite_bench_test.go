package canonical

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/savepoint"
)

// BenchmarkRewrite: Rewrite of a generated savepoint (one subtask, heap
// layout), plain and Snappy-compressed, copying verified blocks verbatim
// ("raw") or writing every entry again ("reencode"). Bytes are the source
// keyed stream sizes.
func BenchmarkRewrite(b *testing.B) {
	setupBench(b)
	ctx := context.Background()
	for _, compress := range []bool{false, true} {
		name := "plain"
		if compress {
			name = "snappy"
		}
		src := "rewrite-src-" + name
		if _, err := benchState.store.Stat(ctx, src+"/_metadata"); err != nil {
			if _, _, err := Export(ctx, []Operator{benchState.ops["heap"]}, benchState.store, ExportOptions{Dir: src, InlineThreshold: -1, Compress: compress}); err != nil {
				b.Fatal(err)
			}
		}
		sp, err := savepoint.Open(ctx, benchState.store, src+"/_metadata")
		if err != nil {
			b.Fatal(err)
		}
		var size int64
		for _, op := range sp.Meta.Operators {
			for _, st := range op.Subtasks {
				if h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok {
					if fi, err := os.Stat(filepath.Join(benchState.dir, src, h.Delegate.Path)); err == nil {
						size += fi.Size()
					}
				}
			}
		}
		for _, reencode := range []bool{false, true} {
			mode := "raw"
			if reencode {
				mode = "reencode"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				defer func(v bool) { reencodeBlocks = v }(reencodeBlocks)
				reencodeBlocks = reencode
				b.SetBytes(size)
				for i := 0; i < b.N; i++ {
					dir := fmt.Sprintf("rewrite-%s-%s-%d", name, mode, i)
					if _, err := Rewrite(ctx, sp, benchState.store, RewriteOptions{Dir: dir}); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					os.RemoveAll(filepath.Join(benchState.dir, dir))
					b.StartTimer()
				}
				reportEntries(b)
			})
		}
	}
}
