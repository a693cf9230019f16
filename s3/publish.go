package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
)

// MetadataName is the file that marks a complete snapshot.
const MetadataName = "_metadata"

// Written records an object as a manifest needs it: key, size and CRC-32C.
type Written struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	CRC  uint32 `json:"crc32c"`
	// SHA256 is the SHA-256 of the bytes sent when the writer computed it
	// (PutHashed does), all zero otherwise; manifests do not carry it.
	SHA256 [32]byte `json:"-"`
}

// PutHashed streams r to key and returns its size, CRC-32C and SHA-256 as
// sent.
func PutHashed(ctx context.Context, st Storage, key string, r io.Reader, size int64) (Written, error) {
	sh := sha256.New()
	h := NewHashingReader(io.TeeReader(r, sh))
	if err := st.Put(ctx, key, h, size); err != nil {
		return Written{}, err
	}
	w := Written{Key: key, Size: h.Size(), CRC: h.Sum()}
	sh.Sum(w.SHA256[:0])
	return w, nil
}

// SnapshotFile is one data object of a snapshot to publish. Open is called
// once per upload; return a seekable reader (a file, bytes.Reader) so a
// Retry wrapper can replay it.
type SnapshotFile struct {
	Key  string
	Size int64 // -1 when unknown
	Open func() (io.ReadCloser, error)
}

// PublishSnapshot writes a snapshot so that readers never see a partial
// one. The rule every writer follows:
//
//  1. upload every data object (here in parallel, at most `parallel` at a
//     time), recording size and CRC-32C;
//  2. confirm each one is visible with the recorded size (Stat);
//  3. only then write metadataKey with PutIfAbsent.
//
// A reader that finds the metadata object therefore finds every object it
// references, and two writers racing for the same snapshot cannot both
// publish (the loser gets ErrExists). If any step fails, the metadata is
// not written; data objects already uploaded are left for the caller to
// delete or overwrite. The returned list is in files order.
func PublishSnapshot(ctx context.Context, st Storage, files []SnapshotFile, metadataKey string, metadata []byte, parallel int) ([]Written, error) {
	if err := ValidateKey(metadataKey); err != nil {
		return nil, err
	}
	if parallel < 1 {
		parallel = 4
	}
	out := make([]Written, len(files))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, f := range files {
		if f.Key == metadataKey {
			cancel(fmt.Errorf("%w: data file %q collides with the metadata key", ErrBadKey, f.Key))
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(i int, f SnapshotFile) {
			defer func() { <-sem; wg.Done() }()
			rc, err := f.Open()
			if err != nil {
				cancel(fmt.Errorf("open %s: %w", f.Key, err))
				return
			}
			defer rc.Close()
			w, err := PutHashed(ctx, st, f.Key, rc, f.Size)
			if err != nil {
				cancel(err)
				return
			}
			out[i] = w
		}(i, f)
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("publish %s: data not complete, metadata not written: %w", metadataKey, err)
	}
	if err := CommitMetadata(ctx, st, out, metadataKey, metadata); err != nil {
		return nil, err
	}
	return out, nil
}

// CommitMetadata is step 2 and 3 of PublishSnapshot for writers that
// uploaded their data objects themselves: it checks that every written
// object is visible with its recorded size, then writes metadata with
// PutIfAbsent.
func CommitMetadata(ctx context.Context, st Storage, written []Written, metadataKey string, metadata []byte) error {
	for _, w := range written {
		info, err := st.Stat(ctx, w.Key)
		if err != nil {
			return fmt.Errorf("publish %s: data object %s: %w", metadataKey, w.Key, err)
		}
		if info.Size != w.Size {
			return fmt.Errorf("%w: publish %s: data object %s has %d bytes, wrote %d", ErrIntegrity, metadataKey, w.Key, info.Size, w.Size)
		}
	}
	if err := st.PutIfAbsent(ctx, metadataKey, bytes.NewReader(metadata), int64(len(metadata))); err != nil {
		return fmt.Errorf("publish %s: %w", metadataKey, err)
	}
	return nil
}
