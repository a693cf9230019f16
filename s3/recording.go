package s3

import (
	"context"
	"io"
	"sync"
)

// Recording is a Storage that remembers the keys written through it (Put,
// PutIfAbsent, Copy), so that a writer that fails can remove what it wrote
// and never published.
type Recording struct {
	Storage
	marker string

	mu   sync.Mutex
	keys []string
}

// NewRecording wraps st. marker is the key whose presence says the output
// is published (a snapshot's MetadataName, an export's manifest): it is
// never recorded, and Remove deletes nothing while it exists.
func NewRecording(st Storage, marker string) *Recording {
	return &Recording{Storage: st, marker: marker}
}

// Note records key as written (for writes that bypass the wrapper, such as
// a server-side copy through another store handle).
func (r *Recording) Note(key string) {
	if key == r.marker {
		return
	}
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
}

// Put implements Storage.
func (r *Recording) Put(ctx context.Context, key string, rd io.Reader, size int64) error {
	err := r.Storage.Put(ctx, key, rd, size)
	if err == nil {
		r.Note(key)
	}
	return err
}

// PutIfAbsent implements Storage.
func (r *Recording) PutIfAbsent(ctx context.Context, key string, rd io.Reader, size int64) error {
	err := r.Storage.PutIfAbsent(ctx, key, rd, size)
	if err == nil {
		r.Note(key)
	}
	return err
}

// Copy implements Storage.
func (r *Recording) Copy(ctx context.Context, src, dst string) error {
	err := r.Storage.Copy(ctx, src, dst)
	if err == nil {
		r.Note(dst)
	}
	return err
}

// Remove deletes the recorded keys, best effort, unless the marker exists
// (published after all) or its presence cannot be told: then every file
// stays. Call it with a context that outlives an interrupt
// (context.WithoutCancel), bounded in time.
func (r *Recording) Remove(ctx context.Context) {
	if _, err := r.Storage.Stat(ctx, r.marker); !IsNotExist(err) {
		return
	}
	r.mu.Lock()
	keys := r.keys
	r.keys = nil
	r.mu.Unlock()
	for _, k := range keys {
		_ = r.Storage.Delete(ctx, k) // best effort: the run already failed
	}
}
