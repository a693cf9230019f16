package savepoint

import (
	"context"
	"fmt"

	"github.com/sfstate/sfstate/savepoint/keyed"
)

// KeyedLayout tells how the data behind a managed keyed handle is laid out
// (LayoutCanonical, LayoutNativeHeap, LayoutNativeRocksDB, LayoutChangelog
// or LayoutMixed), with the same decision the entry reader (WalkKeyed)
// makes: the handle tag, then the
// trailer's format type, and, where both leave it open (tag 3/12 handles of
// checkpoints, V3 files such as Flink 1.11 savepoints), a probe of the
// first non-empty key group (parsed both ways; see probeNativeHeap), which
// needs the operator's max parallelism. Only that probe opens the stream;
// its errors are returned. A changelog handle (tags 8/14) has the layout of
// its materialized handles (LayoutMixed when they differ) and
// LayoutChangelog when nothing was materialized: its state is then only in
// the state-change log.
func (sp *Savepoint) KeyedLayout(ctx context.Context, kh KeyedHandle, maxParallelism int) (string, error) {
	if ch, ok := kh.(*ChangelogHandle); ok {
		out := ""
		for _, m := range MaterializedKeyed(ch) {
			if _, nested := m.(*ChangelogHandle); nested {
				return "", fmt.Errorf("%w: %s: changelog handle nested in a changelog handle", ErrFormat, sp.Name())
			}
			l, err := sp.KeyedLayout(ctx, m, maxParallelism)
			if err != nil {
				return "", err
			}
			if out == "" {
				out = l
			} else if out != l {
				return LayoutMixed, nil
			}
		}
		if out == "" {
			return LayoutChangelog, nil
		}
		return out, nil
	}
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

// OpenKeyed opens the stream of a key-groups handle and reads its header
// as the entry reader does: up to the first key-group offset (the stream's
// end when no key group holds data), stepping over serializer snapshots it
// cannot read (their states are partial; see keyed.ParseHeaderWithin).
// The savepoint keeps the header (see headercache.go): opening the stream
// again, here or by the entry readers, reads no header bytes. The header
// is shared; callers must not modify it.
func (sp *Savepoint) OpenKeyed(ctx context.Context, h *KeyGroupsHandle, readAhead int) (*Object, *keyed.Header, error) {
	if h == nil || h.Delegate == nil {
		return nil, nil, fmt.Errorf("%w: %s: key-groups handle without a stream", ErrFormat, sp.Name())
	}
	f, err := sp.openKeyed(ctx, h, readAhead)
	if err != nil {
		return nil, nil, err
	}
	return f.obj, f.header, nil
}

// KeyedHeader returns the header of a key-groups handle's stream as
// OpenKeyed reads it, for callers that need the header alone (planning a
// read of the entries): when the handle tells where the header ends, only
// the header's bytes are fetched, not a read-ahead buffer of key-group
// data, and a header the savepoint already holds costs no request.
func (sp *Savepoint) KeyedHeader(ctx context.Context, h *KeyGroupsHandle) (*keyed.Header, error) {
	// A read-ahead of one byte makes the header read (one read of the
	// header's length when its end is known) go straight to the store.
	_, hdr, err := sp.OpenKeyed(ctx, h, 1)
	return hdr, err
}
