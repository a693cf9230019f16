package s3

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// ErrChanged reports that an object was replaced while a resumed read was
// in progress; the bytes already delivered belong to the old version.
var ErrChanged = fmt.Errorf("%w: object changed while being read", ErrPermanent)

// readVersion pins the object version across the requests of one logical
// read (the first request and its resumptions): S3 resumes with If-Match on
// the first response's ETag, Local compares size and modification time.
type readVersion struct {
	mu   sync.Mutex
	set  bool
	etag string
	size int64
	mod  time.Time
}

type readVersionKey struct{}

// withReadVersion returns a context whose reads share one pinned version.
func withReadVersion(ctx context.Context) context.Context {
	return context.WithValue(ctx, readVersionKey{}, &readVersion{})
}

func readVersionFrom(ctx context.Context) *readVersion {
	rv, _ := ctx.Value(readVersionKey{}).(*readVersion)
	return rv
}

// pinned returns the recorded ETag ("" when none yet).
func (rv *readVersion) pinnedETag() string {
	if rv == nil {
		return ""
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.etag
}

// pinETag records etag if nothing is recorded yet.
func (rv *readVersion) pinETag(etag string) {
	if rv == nil || etag == "" {
		return
	}
	rv.mu.Lock()
	if !rv.set {
		rv.set, rv.etag = true, etag
	}
	rv.mu.Unlock()
}

// checkFile records (size, mod) on first use and reports whether a later
// request sees the same file version.
func (rv *readVersion) checkFile(size int64, mod time.Time) bool {
	if rv == nil {
		return true
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if !rv.set {
		rv.set, rv.size, rv.mod = true, size, mod
		return true
	}
	return rv.size == size && rv.mod.Equal(mod)
}
