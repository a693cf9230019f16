//go:build !cgo

package command

import (
	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

// runInspectDeep needs RocksDB, which only cgo builds link.
func runInspectDeep(_ *cli.Context, _ *savepoint.Savepoint, _ savepoint.ScanOptions) error {
	return Failf(ExitUnsupported, "inspect --deep: this sfstate was built without RocksDB support (CGO_ENABLED=0); rebuild with cgo to decode native RocksDB state")
}
