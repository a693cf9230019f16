package savepoint

import (
	"context"
	"fmt"
)

// KeyedLayout tells how the data behind a managed keyed handle is laid out
// (LayoutCanonical, LayoutNativeHeap or LayoutNativeRocksDB), with the same
// decision the entry reader (WalkKeyed) makes: the handle tag, then the
// trailer's format type, and, where both leave it open (tag 3/12 handles of
// checkpoints, V3 files such as Flink 1.11 savepoints), a probe of the
// first non-empty key group (parsed both ways; see probeNativeHeap), which
// needs the operator's max parallelism. Only that probe opens the stream;
// its errors are returned.
func (sp *Savepoint) KeyedLayout(ctx context.Context, kh KeyedHandle, maxParallelism int) (string, error) {
	layout := sp.handleLayout(kh)
	h, ok := kh.(*KeyGroupsHandle)
	if !ok {
		return LayoutNativeRocksDB, nil
	}
	if layout != "" {
		return layout, nil
	}
	if h.Delegate == nil {
		return "", fmt.Errorf("%w: %s: key-groups handle tag %d without a stream", ErrFormat, sp.Name(), h.Tag)
	}
	f, err := sp.openKeyed(ctx, h, 0)
	if err != nil {
		return "", err
	}
	return fileLayout(layout, f, h, maxParallelism), nil
}
