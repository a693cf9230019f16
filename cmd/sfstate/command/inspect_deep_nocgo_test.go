//go:build !cgo

package command

import (
	"strings"
	"testing"
)

func TestInspectDeepWithoutCgo(t *testing.T) {
	_, errOut, code := run(t, "inspect", "--deep", fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	if code != ExitUnsupported || !strings.Contains(errOut, "built without RocksDB support") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
