//go:build !cgo

package command

import (
	"path/filepath"
	"strings"
	"testing"
)

// Without RocksDB heap snapshots still convert; RocksDB ones are refused
// with a message saying why.
func TestConvertWithoutCgo(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out")
	if _, errOut, code := run(t, "convert", fixtureSavepoint(t, "flink1.20-hashmap-NATIVE-for-contrast"), "--to", "canonical", "--out", dst); code != ExitOK {
		t.Fatalf("heap: exit %d: %s", code, errOut)
	}
	if _, errOut, code := run(t, "check", dst); code != ExitOK {
		t.Fatalf("check: exit %d: %s", code, errOut)
	}
	_, errOut, code := run(t, "convert", fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"), "--to", "canonical", "--out", filepath.Join(t.TempDir(), "out"))
	if code != ExitUsage || !strings.Contains(errOut, "built without RocksDB support") {
		t.Fatalf("rocksdb: exit %d: %s", code, errOut)
	}
}
