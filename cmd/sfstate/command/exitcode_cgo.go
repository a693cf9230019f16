//go:build cgo

package command

import (
	"github.com/sfstate/sfstate/internal/bench/joinbench"
	"github.com/sfstate/sfstate/migrate"
)

// The error sentinels of the packages that link RocksDB (see exitcode.go;
// their corrupt and unsupported sentinels are classed in package errclass).
func init() {
	usageErrs = append(usageErrs, joinbench.ErrUnknownShape)
	differErrs = append(differErrs, migrate.ErrMismatch)
}
