//go:build cgo

package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint"
)

// TestVerifyTag3Savepoint: `verify` of a RocksDB savepoint with tag-3
// key-groups handles in the canonical layout and V3 metadata (as Flink
// 1.11 wrote it) restores on both backends, as `inspect --dump` reads it.
func TestVerifyTag3Savepoint(t *testing.T) {
	src := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	dir := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == savepoint.MetadataName {
			md, err := savepoint.ParseMetadata(b, e.Name())
			if err != nil {
				t.Fatal(err)
			}
			md.Version, md.Trailer = 3, nil
			for _, op := range md.Operators {
				for _, st := range op.Subtasks {
					if h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok {
						h.Tag = savepoint.TagKeyGroups
					}
				}
			}
			if b, err = savepoint.EncodeMetadata(md); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, errOut, code := run(t, "inspect", "--dump", dir); code != ExitOK || !strings.Contains(out, "state-name") {
		t.Fatalf("inspect --dump: exit %d: %s\n%s", code, errOut, out)
	}
	out, errOut, code := run(t, "-q", "verify", "--backends", "rocksdb,heap", "--parallelism", "1,2", "--temp-dir", t.TempDir(), dir)
	if code != ExitOK {
		t.Fatalf("verify: exit %d: %s\n%s", code, errOut, out)
	}
}

// TestVerifyMoreLayouts: `verify` of a Flink 1.9 heap savepoint (V2
// metadata, heap key-group layout) and of a state with an unknown
// serializer restores and passes; a changelog checkpoint whose state is
// only in the change log is valid but cannot be restored (exit 4, with the
// reason).
func TestVerifyMoreLayouts(t *testing.T) {
	for _, c := range []struct {
		dir  string
		code int
		want string
	}{
		{"flink1.9-heap-savepoint-metadata-v2", ExitOK, "OK: every target equals the source"},
		{"flink1.16-rocksdb-canonical-user-serializer", ExitOK, "OK: every target equals the source"},
		{"flink1.17-hashmap-changelog-checkpoint", ExitUnsupported, "state only in the change log (not applied)"},
	} {
		t.Run(c.dir, func(t *testing.T) {
			out, errOut, code := run(t, "verify", "--backends", "rocksdb,heap", "--parallelism", "1,2", "--temp-dir", t.TempDir(), fixtures.MorePath(t, c.dir, "savepoint"))
			if code != c.code || !strings.Contains(out+errOut, c.want) {
				t.Fatalf("exit %d (want %d): %s\n%s", code, c.code, errOut, out)
			}
		})
	}
}
