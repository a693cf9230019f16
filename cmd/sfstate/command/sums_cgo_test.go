//go:build cgo

package command

import (
	"path/filepath"
	"testing"
)

// TestSumsConvertOutput: every file of a canonical savepoint written by
// convert is covered by its sums file.
func TestSumsConvertOutput(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	src := inspectCopyDir(t, fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	dst := filepath.Join(t.TempDir(), "out")
	if _, errOut, code := runKG(t, "convert", src, "--to", "canonical", "--out", dst); code != ExitOK {
		t.Fatalf("convert: exit %d: %s", code, errOut)
	}
	flipEachFile(t, dst)
}
