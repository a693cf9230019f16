package s3

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Location is a parsed snapshot URL: where the snapshot directory is, and
// whether the URL named its _metadata file rather than the directory.
type Location struct {
	// Scheme is "file" (local paths too) or "s3".
	Scheme string
	// Dir is the absolute local snapshot directory (file scheme).
	Dir string
	// Bucket and Prefix locate the snapshot directory on S3; Prefix has no
	// leading or trailing "/" and may be empty (bucket root).
	Bucket, Prefix string
	// NamedMetadata is true when the URL ended in /_metadata.
	NamedMetadata bool
}

// String renders the snapshot directory as a URL or path.
func (l Location) String() string {
	if l.Scheme == "s3" {
		return strings.TrimSuffix("s3://"+l.Bucket+"/"+l.Prefix, "/")
	}
	return l.Dir
}

// ParseURL parses a snapshot location. Accepted forms:
//
//	/path/to/savepoint-1 or relative/path      a local directory
//	/path/to/savepoint-1/_metadata             its metadata file
//	file:///path/to/savepoint-1[/_metadata]    the same as a URL
//	s3://bucket/prefix/savepoint-1[/_metadata] an S3 "directory"
//
// Paths are cleaned; S3 keys with "." or ".." segments are rejected.
func ParseURL(raw string) (Location, error) {
	if strings.TrimSpace(raw) == "" {
		return Location{}, fmt.Errorf("%w: empty location", ErrBadKey)
	}
	if strings.ContainsAny(raw, "\x00") {
		return Location{}, fmt.Errorf("%w: location %q contains NUL", ErrBadKey, raw)
	}
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		return parseLocal(raw)
	}
	switch strings.ToLower(scheme) {
	case "file":
		u, err := url.Parse(raw)
		if err != nil {
			return Location{}, fmt.Errorf("%w: %v", ErrBadKey, err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("%w: file URL %q names host %q; only local files are supported", ErrBadKey, raw, u.Host)
		}
		if u.Path == "" {
			return Location{}, fmt.Errorf("%w: file URL %q has no path", ErrBadKey, raw)
		}
		return parseLocal(u.Path)
	case "s3", "s3a":
		bucket, key, _ := strings.Cut(rest, "/")
		if bucket == "" || strings.ContainsAny(bucket, "?#") {
			return Location{}, fmt.Errorf("%w: %q has no valid bucket", ErrBadKey, raw)
		}
		if i := strings.IndexAny(key, "?#"); i >= 0 {
			return Location{}, fmt.Errorf("%w: %q: query strings and fragments are not supported", ErrBadKey, raw)
		}
		key = strings.Trim(key, "/")
		loc := Location{Scheme: "s3", Bucket: bucket}
		if key != "" {
			if err := validatePath(key); err != nil {
				return Location{}, fmt.Errorf("location %q: %w", raw, err)
			}
		}
		if key == MetadataName || strings.HasSuffix(key, "/"+MetadataName) {
			loc.NamedMetadata = true
			key = strings.TrimSuffix(strings.TrimSuffix(key, MetadataName), "/")
		}
		loc.Prefix = key
		return loc, nil
	}
	return Location{}, fmt.Errorf("%w: unsupported scheme %q in %q (use a path, file:// or s3://)", ErrBadKey, scheme, raw)
}

func parseLocal(p string) (Location, error) {
	abs, err := filepath.Abs(filepath.Clean(p))
	if err != nil {
		return Location{}, err
	}
	loc := Location{Scheme: "file", Dir: abs}
	if filepath.Base(abs) == MetadataName {
		loc.NamedMetadata = true
		loc.Dir = filepath.Dir(abs)
	}
	return loc, nil
}

// OpenOptions configures Open.
type OpenOptions struct {
	// S3 configures S3 locations (endpoint, path style, credentials, ...).
	S3 S3Options
	// Retry is the policy of the Retry wrapper (zero: DefaultRetryPolicy).
	Retry RetryPolicy
	// NoRetry leaves out the Retry wrapper.
	NoRetry bool
	// MaxConcurrent, when > 0, adds a Limit wrapper.
	MaxConcurrent int
	// Counters, when set, adds a Counted wrapper (retries are counted too).
	Counters *Counters
	// Create allows a missing local directory (it is created); otherwise a
	// missing local directory is an ErrNotExist error.
	Create bool
}

// Open parses raw with ParseURL and returns a store rooted at the snapshot
// directory, wrapped as Retry(Limit(Counted(base))) per opts, together with
// the key of the metadata file in it ("_metadata").
func Open(ctx context.Context, raw string, opts OpenOptions) (Storage, string, error) {
	loc, err := ParseURL(raw)
	if err != nil {
		return nil, "", err
	}
	st, err := OpenLocation(ctx, loc, opts)
	if err != nil {
		return nil, "", err
	}
	return st, MetadataName, nil
}

// OpenLocation is Open for an already parsed location.
func OpenLocation(ctx context.Context, loc Location, opts OpenOptions) (Storage, error) {
	var st Storage
	switch loc.Scheme {
	case "file":
		if !opts.Create {
			info, err := os.Stat(loc.Dir)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", loc.Dir, ErrNotExist)
			}
			if !info.IsDir() {
				return nil, fmt.Errorf("%w: %s is not a directory (give a snapshot directory or its _metadata file)", ErrPermanent, loc.Dir)
			}
		}
		l, err := NewLocal(loc.Dir)
		if err != nil {
			return nil, err
		}
		st = l
	case "s3":
		s, err := NewS3(ctx, loc.Bucket, loc.Prefix, opts.S3)
		if err != nil {
			return nil, err
		}
		st = s
	default:
		return nil, fmt.Errorf("%w: unknown scheme %q", ErrBadKey, loc.Scheme)
	}
	if opts.Counters != nil {
		st = WithCounters(st, opts.Counters)
	}
	if opts.MaxConcurrent > 0 {
		st = WithLimit(st, opts.MaxConcurrent)
	}
	if !opts.NoRetry {
		r := WithRetry(st, opts.Retry)
		if opts.Counters != nil {
			r.OnRetry(opts.Counters.CountRetry)
		}
		st = r
	}
	return st, nil
}
