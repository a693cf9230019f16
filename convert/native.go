package convert

import (
	"context"
	"fmt"

	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/native"
)

// dirReader reads a downloaded RocksDB directory; nil when the build has
// no RocksDB (see rocksdb_cgo.go).
var dirReader native.DirReader

// nativeSource opens an operator's native handles for the rewriter: each
// handle's walk downloads its files into a fresh directory under tempDir,
// reads them with RocksDB and hands out the decoded entries (removing the
// directory before it returns). With observe set, every handle's entries
// are also handed to the function it returns for the handle
// (Request.OnNative).
func nativeSource(tempDir string, observe func(*savepoint.OperatorState, *rescale.NativeHandle) func(*keyed.Entry) error) rescale.NativeSource {
	if dirReader == nil {
		return nil
	}
	read := dirReader
	return func(ctx context.Context, sp *savepoint.Savepoint, op *savepoint.OperatorState) ([]*rescale.NativeHandle, error) {
		snap, err := native.Open(ctx, sp, savepoint.ScanOptions{Operator: op.ID.String(), KeyGroupTo: -1})
		if err != nil {
			return nil, err
		}
		if snap.Layout != native.LayoutFlink {
			return nil, fmt.Errorf("%w: operator %s: %s; only Flink's RocksDB layout converts to canonical entries", rescale.ErrUnsupported, op.ID, snap.LayoutReason)
		}
		out := make([]*rescale.NativeHandle, 0, len(snap.Handles))
		for _, h := range snap.Handles {
			one := &native.Snapshot{Layout: snap.Layout, LayoutReason: snap.LayoutReason, Handles: []*native.Handle{h}}
			nh := &rescale.NativeHandle{Subtask: h.Subtask, Header: h.Header, Name: h.MetaName,
				Skipped: func() int64 { return h.OutOfRange }}
			nh.Walk = func(ctx context.Context, fn func(*keyed.Entry) error) error {
				var seen func(*keyed.Entry) error
				if observe != nil {
					seen = observe(op, nh)
				}
				return one.Walk(ctx, sp, read, native.WalkOptions{KeyGroupTo: -1, TempDir: tempDir}, func(_ *native.Handle, e *keyed.Entry) error {
					if seen != nil {
						if err := seen(e); err != nil {
							return err
						}
					}
					return fn(e)
				})
			}
			out = append(out, nh)
		}
		return out, nil
	}
}
