package s3_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/s3"
)

// FuzzKeys checks that no accepted key can leave a root, and that URL
// parsing never panics and yields clean locations.
func FuzzKeys(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "a/../../b", "/abs", "s3://b/k/_metadata", "file:///x/_metadata", "a\\b", "é/ü", "a//b", ""} {
		f.Add(s)
	}
	root := filepath.FromSlash("/srv/root")
	f.Fuzz(func(t *testing.T, s string) {
		if s3.ValidateKey(s) == nil {
			p := filepath.Join(root, filepath.FromSlash(s))
			if !strings.HasPrefix(p, root+string(filepath.Separator)) {
				t.Fatalf("key %q accepted but maps to %q", s, p)
			}
			for _, seg := range strings.Split(s, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("key %q accepted with segment %q", s, seg)
				}
			}
		}
		loc, err := s3.ParseURL(s)
		if err != nil {
			return
		}
		switch loc.Scheme {
		case "s3":
			if loc.Bucket == "" || (loc.Prefix != "" && s3.ValidateKey(loc.Prefix) != nil) {
				t.Fatalf("ParseURL(%q) = %+v", s, loc)
			}
		case "file":
			if !filepath.IsAbs(loc.Dir) {
				t.Fatalf("ParseURL(%q): relative dir %q", s, loc.Dir)
			}
		default:
			t.Fatalf("ParseURL(%q): scheme %q", s, loc.Scheme)
		}
	})
}
