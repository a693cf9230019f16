package s3

import (
	"fmt"
	"strings"
)

// At returns a store over s3://bucket/prefix that shares this store's
// client: the same endpoint, credentials and options. It makes no request.
// Readers use it to follow a URI that names another prefix (or bucket) of
// the same service.
func (s *S3) At(bucket, prefix string) (*S3, error) {
	if bucket == "" {
		return nil, fmt.Errorf("%w: s3: empty bucket name", ErrBadKey)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		if err := validatePath(prefix); err != nil {
			return nil, err
		}
		prefix += "/"
	}
	name := strings.TrimSuffix("s3://"+bucket+"/"+strings.TrimSuffix(prefix, "/"), "/")
	return &S3{client: s.client, bucket: bucket, prefix: prefix, opts: s.opts, name: name}, nil
}
