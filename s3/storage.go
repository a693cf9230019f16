package s3

import (
	"context"
	"errors"
	"io"
	"time"
)

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Storage is the interface every tool and the engine use to reach
// savepoints and checkpoints.
//
// Contracts:
//   - Get and GetRange return a reader the caller must close; errors for a
//     missing key satisfy IsNotExist.
//   - GetRange(off, n) returns exactly n bytes or an error (a short object is
//     an error satisfying IsPermanent); n < 0 means "to the end".
//   - Put streams r to key; size may be -1 when unknown. The object becomes
//     visible only once complete (never a partial object under key).
//   - PutIfAbsent is Put that fails with ErrExists when key exists.
//   - List returns every object whose key starts with prefix, sorted by key.
//   - Delete of a missing key is not an error.
//   - Copy is server-side where the store supports it.
type Storage interface {
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error
	Delete(ctx context.Context, key string) error
	Copy(ctx context.Context, srcKey, dstKey string) error
	// String names the store for messages, e.g. "s3://bucket/prefix" or a path.
	String() string
}

// Sentinel errors. Match with errors.Is or the Is* helpers.
var (
	ErrNotExist  = errors.New("s3: object does not exist")
	ErrExists    = errors.New("s3: object already exists")
	ErrPermanent = errors.New("s3: permanent error")
	ErrBadKey    = errors.New("s3: invalid key")
)

// IsNotExist reports whether err says the object is missing.
func IsNotExist(err error) bool { return errors.Is(err, ErrNotExist) }

// IsExist reports whether err is a put-if-absent conflict.
func IsExist(err error) bool { return errors.Is(err, ErrExists) }

// IsPermanent reports whether retrying err cannot help.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, ErrNotExist) ||
		errors.Is(err, ErrExists) || errors.Is(err, ErrBadKey) || errors.Is(err, errRange)
}
