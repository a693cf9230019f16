package s3_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/s3"
)

func readDirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, err
}

func findTemps(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".sfstate-tmp-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestLocalDeletePrunesEmptyDirs: deleting the last object of a
// directory removes the directory and its empty parents, never the root
// or a directory still holding objects; writing there again recreates it.
func TestLocalDeletePrunesEmptyDirs(t *testing.T) {
	root := t.TempDir()
	l, err := s3.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"a/b/one", "a/b/two", "a/three", "top"} {
		if err := l.Put(ctx, k, strings.NewReader(k), -1); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, rel))
		return err == nil
	}
	if err := l.Delete(ctx, "a/b/one"); err != nil || !exists("a/b") {
		t.Fatalf("a/b removed while it holds an object (err %v)", err)
	}
	if err := l.Delete(ctx, "a/b/two"); err != nil || exists("a/b") || !exists("a") {
		t.Fatalf("after deleting a/b's last object: a/b exists %v, a exists %v (err %v)", exists("a/b"), exists("a"), err)
	}
	if err := l.Delete(ctx, "a/three"); err != nil || exists("a") {
		t.Fatalf("a left behind empty (err %v)", err)
	}
	if err := l.Delete(ctx, "top"); err != nil || !exists("") {
		t.Fatalf("the root itself was removed (err %v)", err)
	}
	if err := l.Put(ctx, "a/b/again", strings.NewReader("x"), -1); err != nil || !exists("a/b/again") {
		t.Fatalf("writing into a pruned directory: %v", err)
	}
}
