package s3

import (
	"context"
	"io"
	"sync"
)

// Limit is a Storage wrapper that bounds the operations in flight. A Get or
// GetRange holds its slot until the returned reader is closed (the transfer
// is the work), so callers must close readers promptly and must not hold
// more open readers than the limit while opening another.
type Limit struct {
	st  Storage
	sem chan struct{}
}

var _ Storage = (*Limit)(nil)

// WithLimit wraps st allowing at most n concurrent operations (n >= 1).
func WithLimit(st Storage, n int) *Limit {
	if n < 1 {
		n = 1
	}
	return &Limit{st: st, sem: make(chan struct{}, n)}
}

// Unwrap returns the wrapped store.
func (l *Limit) Unwrap() Storage { return l.st }

func (l *Limit) String() string { return l.st.String() }

func (l *Limit) acquire(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Limit) release() { <-l.sem }

func (l *Limit) run(ctx context.Context, f func() error) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	return f()
}

// Get holds a slot until the reader is closed.
func (l *Limit) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return l.open(ctx, func() (io.ReadCloser, error) { return l.st.Get(ctx, key) })
}

// GetRange holds a slot until the reader is closed.
func (l *Limit) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return l.open(ctx, func() (io.ReadCloser, error) { return l.st.GetRange(ctx, key, off, n) })
}

func (l *Limit) open(ctx context.Context, f func() (io.ReadCloser, error)) (io.ReadCloser, error) {
	if err := l.acquire(ctx); err != nil {
		return nil, err
	}
	rc, err := f()
	if err != nil {
		l.release()
		return nil, err
	}
	return &releasingReader{ReadCloser: rc, release: l.release}, nil
}

type releasingReader struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (r *releasingReader) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.release)
	return err
}

// Stat runs within the limit.
func (l *Limit) Stat(ctx context.Context, key string) (info ObjectInfo, err error) {
	err = l.run(ctx, func() error { info, err = l.st.Stat(ctx, key); return err })
	return info, err
}

// List runs within the limit.
func (l *Limit) List(ctx context.Context, prefix string) (out []ObjectInfo, err error) {
	err = l.run(ctx, func() error { out, err = l.st.List(ctx, prefix); return err })
	return out, err
}

// Put runs within the limit.
func (l *Limit) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return l.run(ctx, func() error { return l.st.Put(ctx, key, r, size) })
}

// PutIfAbsent runs within the limit.
func (l *Limit) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return l.run(ctx, func() error { return l.st.PutIfAbsent(ctx, key, r, size) })
}

// Delete runs within the limit.
func (l *Limit) Delete(ctx context.Context, key string) error {
	return l.run(ctx, func() error { return l.st.Delete(ctx, key) })
}

// Copy runs within the limit.
func (l *Limit) Copy(ctx context.Context, src, dst string) error {
	return l.run(ctx, func() error { return l.st.Copy(ctx, src, dst) })
}
