package s3

import (
	"context"
	"fmt"
	"io"
)

// Retry is a Storage wrapper that retries transient failures (see
// IsTransient) with capped exponential backoff and jitter. Permanent
// errors (not found, exists, access denied, bad key or range) return at once.
//
//   - Reads resume: when a Get or GetRange body fails mid-stream with a
//     transient error, the reader re-requests the remaining range from the
//     current offset, so the caller sees one uninterrupted, correct stream.
//     Resumptions are pinned to the version first read (S3: If-Match on
//     its ETag; local files: same size and modification time); if the
//     object was replaced meanwhile the read fails with ErrChanged instead
//     of splicing two versions.
//   - Puts are retried when the body can be replayed: r implements
//     io.Seeker (files, bytes.Reader), or nothing was consumed yet.
//   - A retried PutIfAbsent that reports ErrExists compares the stored
//     object with its own body (seekable bodies only): equal means the lost
//     first attempt had succeeded, and the call succeeds.
type Retry struct {
	st      Storage
	p       RetryPolicy
	onRetry func(op, key string, err error)
}

var _ Storage = (*Retry)(nil)

// WithRetry wraps st. A zero policy means DefaultRetryPolicy.
func WithRetry(st Storage, p RetryPolicy) *Retry { return &Retry{st: st, p: p.norm()} }

// OnRetry sets a hook called before each retry (for logs and counters).
func (r *Retry) OnRetry(f func(op, key string, err error)) *Retry { r.onRetry = f; return r }

// Unwrap returns the wrapped store.
func (r *Retry) Unwrap() Storage { return r.st }

func (r *Retry) String() string { return r.st.String() }

func (r *Retry) do(ctx context.Context, op, key string, f func() error) error {
	var hook func(error)
	if r.onRetry != nil {
		hook = func(err error) { r.onRetry(op, key, err) }
	}
	return r.p.do(ctx, hook, f)
}

// Stat retries transient failures.
func (r *Retry) Stat(ctx context.Context, key string) (info ObjectInfo, err error) {
	err = r.do(ctx, "stat", key, func() error { info, err = r.st.Stat(ctx, key); return err })
	return info, err
}

// List retries transient failures.
func (r *Retry) List(ctx context.Context, prefix string) (out []ObjectInfo, err error) {
	err = r.do(ctx, "list", prefix, func() error { out, err = r.st.List(ctx, prefix); return err })
	return out, err
}

// Delete retries transient failures.
func (r *Retry) Delete(ctx context.Context, key string) error {
	return r.do(ctx, "delete", key, func() error { return r.st.Delete(ctx, key) })
}

// Copy retries transient failures.
func (r *Retry) Copy(ctx context.Context, src, dst string) error {
	return r.do(ctx, "copy", src, func() error { return r.st.Copy(ctx, src, dst) })
}

// Get opens key and returns a reader that resumes after transient errors.
func (r *Retry) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return r.open(ctx, key, 0, -1, false)
}

// GetRange opens a range and returns a reader that resumes after transient
// errors.
func (r *Retry) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return r.open(ctx, key, off, n, true)
}

func (r *Retry) open(ctx context.Context, key string, off, n int64, ranged bool) (io.ReadCloser, error) {
	// Resumptions must read the same object version as the first request.
	ctx = withReadVersion(ctx)
	var rc io.ReadCloser
	err := r.do(ctx, "get", key, func() (err error) {
		if ranged {
			rc, err = r.st.GetRange(ctx, key, off, n)
		} else {
			rc, err = r.st.Get(ctx, key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &resumingReader{r: r, ctx: ctx, key: key, off: off, n: n, cur: rc}, nil
}

// resumingReader re-requests the rest of its range after a transient error.
type resumingReader struct {
	r      *Retry
	ctx    context.Context
	key    string
	off, n int64 // requested range; n < 0: to the end
	pos    int64 // bytes delivered
	cur    io.ReadCloser
	fails  int // consecutive failed resumptions
	err    error
}

func (rr *resumingReader) Read(p []byte) (int, error) {
	for {
		if rr.err != nil {
			return 0, rr.err
		}
		n, err := rr.cur.Read(p)
		rr.pos += int64(n)
		if n > 0 {
			rr.fails = 0
		}
		if err == nil || err == io.EOF {
			return n, err
		}
		if !IsTransient(err) || rr.ctx.Err() != nil {
			rr.err = err
			return n, err
		}
		if n > 0 {
			// Deliver what we have; resume on the next call.
			rr.cur.Close()
			rr.cur = errCloser{err}
			return n, nil
		}
		if ferr := rr.resume(err); ferr != nil {
			rr.err = ferr
			return 0, ferr
		}
	}
}

// resume opens the remaining range after a transient error cause.
func (rr *resumingReader) resume(cause error) error {
	rr.cur.Close()
	p := rr.r.p
	for {
		if rr.fails >= p.Attempts-1 {
			return fmt.Errorf("%s: read %s: giving up after %d attempts at byte %d: %w", rr.r.st, rr.key, rr.fails+1, rr.pos, cause)
		}
		if rr.r.onRetry != nil {
			rr.r.onRetry("get", rr.key, cause)
		}
		if err := sleepCtx(rr.ctx, p.backoff(rr.fails)); err != nil {
			return err
		}
		rr.fails++
		rest := int64(-1)
		if rr.n >= 0 {
			rest = rr.n - rr.pos
		}
		rc, err := rr.r.st.GetRange(rr.ctx, rr.key, rr.off+rr.pos, rest)
		if err == nil {
			rr.cur = rc
			return nil
		}
		if !IsTransient(err) {
			return err
		}
		cause = err
	}
}

func (rr *resumingReader) Close() error { return rr.cur.Close() }

// errCloser is a placeholder body that fails with a transient error, which
// makes the next Read resume.
type errCloser struct{ err error }

func (e errCloser) Read([]byte) (int, error) { return 0, e.err }
func (e errCloser) Close() error             { return nil }

// Put retries when the body can be replayed.
func (r *Retry) Put(ctx context.Context, key string, body io.Reader, size int64) error {
	return r.put(ctx, key, body, size, false)
}

// PutIfAbsent retries when the body can be replayed (see the type doc for
// how a lost success is recognised).
func (r *Retry) PutIfAbsent(ctx context.Context, key string, body io.Reader, size int64) error {
	return r.put(ctx, key, body, size, true)
}

func (r *Retry) put(ctx context.Context, key string, body io.Reader, size int64, ifAbsent bool) error {
	seeker, _ := body.(io.Seeker)
	var start int64
	if seeker != nil {
		var err error
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			seeker = nil
		}
	}
	cr := &countReader{r: body}
	attempt := 0
	var hook func(error)
	if r.onRetry != nil {
		hook = func(err error) { r.onRetry("put", key, err) }
	}
	retried := false
	var last error
	err := r.p.do(ctx, hook, func() error {
		if attempt > 0 {
			if seeker != nil {
				if _, err := seeker.Seek(start, io.SeekStart); err != nil {
					return fmt.Errorf("%w: %w (rewinding the body for a retry failed: %v)", ErrPermanent, last, err)
				}
				cr.n = 0
			} else if cr.n > 0 {
				return fmt.Errorf("%w: %w (not retried: body not replayable after %d bytes)", ErrPermanent, last, cr.n)
			}
			retried = true
		}
		attempt++
		if ifAbsent {
			last = r.st.PutIfAbsent(ctx, key, cr, size)
		} else {
			last = r.st.Put(ctx, key, cr, size)
		}
		return last
	})
	if ifAbsent && retried && IsExist(err) && seeker != nil {
		if same, cerr := r.sameContent(ctx, key, seeker, start); cerr == nil && same {
			return nil
		}
	}
	return err
}

// sameContent reports whether the stored object equals the body from start.
func (r *Retry) sameContent(ctx context.Context, key string, seeker io.Seeker, start int64) (bool, error) {
	if _, err := seeker.Seek(start, io.SeekStart); err != nil {
		return false, err
	}
	mine := NewHashingReader(seeker.(io.Reader))
	if _, err := io.Copy(io.Discard, mine); err != nil {
		return false, err
	}
	rc, err := r.Get(ctx, key)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	theirs := NewHashingReader(rc)
	if _, err := io.Copy(io.Discard, theirs); err != nil {
		return false, err
	}
	return mine.Size() == theirs.Size() && mine.Sum() == theirs.Sum(), nil
}

// countReader counts consumed bytes; it hides io.Seeker on purpose (stores
// must not seek behind the retry loop's back) but keeps small bodies cheap.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
