//go:build !cgo

package command

import (
	"strings"
	"testing"
)

func TestExportDeepWithoutCgo(t *testing.T) {
	_, errOut, code := run(t, "export", "--deep", "--out", t.TempDir(), fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	if code != ExitUnsupported || !strings.Contains(errOut, "built without RocksDB support") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
