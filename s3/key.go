package s3

import (
	"fmt"
	"strings"
)

// ScratchPrefix starts the name of every scratch directory and temporary
// file sfstate creates; the local store's in-progress files are hidden
// ("." + ScratchPrefix). `sfstate gc` recognises leftovers by it.
const ScratchPrefix = "sfstate-tmp-"

// tmpPrefix starts the name of every temporary file the local store writes.
// Keys whose segments start with it are rejected so a listing can never
// confuse an in-progress write with an object.
const tmpPrefix = "." + ScratchPrefix

// MaxKeyLen bounds key length (S3 allows 1024 bytes).
const MaxKeyLen = 1024

// ValidateKey checks that key is a clean relative object key: non-empty,
// slash-separated, no leading or trailing "/", no empty, "." or ".."
// segments, no backslashes or control characters. Errors wrap ErrBadKey.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrBadKey)
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w: %q ends with /", ErrBadKey, key)
	}
	return validatePath(key)
}

// validatePrefix checks a List prefix: "" is allowed, and a trailing "/" is
// allowed; otherwise the rules of ValidateKey apply.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validatePath(strings.TrimSuffix(prefix, "/"))
}

func validatePath(key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrBadKey, len(key), MaxKeyLen)
	}
	if key == "" || strings.HasPrefix(key, "/") {
		return fmt.Errorf("%w: %q is absolute or empty", ErrBadKey, key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x20 || c == 0x7f || c == '\\' {
			return fmt.Errorf("%w: %q contains byte 0x%02x", ErrBadKey, key, c)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w: %q has an empty segment", ErrBadKey, key)
		case seg == "." || seg == "..":
			return fmt.Errorf("%w: %q has a %q segment", ErrBadKey, key, seg)
		case strings.HasPrefix(seg, tmpPrefix):
			return fmt.Errorf("%w: %q uses the reserved prefix %q", ErrBadKey, key, tmpPrefix)
		}
	}
	return nil
}

// JoinKey joins key segments with "/", ignoring empty ones.
func JoinKey(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		p = strings.Trim(p, "/")
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(p)
	}
	return b.String()
}

// rangeError reports an invalid or unsatisfiable byte range; it is permanent.
func rangeError(store, key string, off, n, size int64) error {
	if size >= 0 {
		return fmt.Errorf("%w: %s: %s: range off=%d n=%d outside object of %d bytes", ErrPermanent, store, key, off, n, size)
	}
	return fmt.Errorf("%w: %s: %s: invalid range off=%d n=%d", ErrPermanent, store, key, off, n)
}

// checkRange validates (off, n) against an object of size bytes and returns
// the number of bytes to read.
func checkRange(store, key string, off, n, size int64) (int64, error) {
	if off < 0 || off > size {
		return 0, rangeError(store, key, off, n, size)
	}
	if n < 0 {
		return size - off, nil
	}
	if n > size-off {
		return 0, rangeError(store, key, off, n, size)
	}
	return n, nil
}
