package checkpoint

import (
	"context"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/s3"
)

// Hooks for restores that adopt a checkpoint's files one by one into a
// backend that is already open (RestoreLazy).

// FetchObject downloads o from st into dst (which must not exist), in
// parallel ranged reads when o is large, and verifies its size and
// CRC-32C; a mismatch satisfies errors.Is(err, ErrCorrupt). Nothing is left
// at dst on error.
func FetchObject(ctx context.Context, st s3.Storage, o Object, dst string) error {
	return fetch(ctx, st, o, dst)
}

// FetchObjectRanged is FetchObject reading objects larger than chunk as
// chunk-sized ranges, inFlight at a time (for a download that must finish
// soon while other downloads share the link).
func FetchObjectRanged(ctx context.Context, st s3.Storage, o Object, dst string, chunk int64, inFlight int) error {
	if chunk < 1<<16 || inFlight < 1 {
		return fetch(ctx, st, o, dst)
	}
	return fetchRanged(ctx, st, o, dst, chunk, chunk, inFlight)
}

// File returns the entry as the engine's SST file description (for
// engine.ImportSSTFiles and engine.CheckImportable).
func (e SSTEntry) File() engine.SSTFile { return e.sst() }
