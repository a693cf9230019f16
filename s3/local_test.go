package s3_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
