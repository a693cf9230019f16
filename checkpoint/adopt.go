package checkpoint

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sfstate/sfstate/errclass"
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

// VerifyFile checks that the local file p holds o: o's recorded size and
// CRC-32C. A mismatch satisfies errors.Is(err, ErrCorrupt); the file is
// read only when its size matches.
func VerifyFile(p string, o Object) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != o.Size {
		return fmt.Errorf("%w: %s has %d bytes, manifest says %d", ErrCorrupt, o.Key, fi.Size(), o.Size)
	}
	return verifyOpen(f, o, p)
}

// verifyOpen reads f from its start and compares its size and CRC-32C with
// o's; name is f's name for errors.
func verifyOpen(f *os.File, o Object, name string) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := s3.NewHashingWriter(nil)
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("read %s (%s): %w", name, o.Key, err)
	}
	if h.Size() != o.Size || h.Sum() != o.CRC {
		return fmt.Errorf("%w: %w", ErrCorrupt, &errclass.CorruptionError{File: o.Key, Offset: -1,
			Err: fmt.Errorf("%d bytes with CRC-32C %08x, manifest says %d bytes, %08x", h.Size(), h.Sum(), o.Size, o.CRC)})
	}
	return nil
}
