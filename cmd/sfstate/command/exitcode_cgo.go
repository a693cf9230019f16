//go:build cgo

package command

import (
	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/internal/bench/joinbench"
	"github.com/sfstate/sfstate/migrate"
)

// The error classes of the packages that link RocksDB (see exitcode.go).
func init() {
	usageErrs = append(usageErrs, joinbench.ErrUnknownShape)
	unsupportedErrs = append(unsupportedErrs, canonical.ErrUnsupported, rowcodec.ErrUnsupportedType, rowcodec.ErrVersion)
	corruptErrs = append(corruptErrs, checkpoint.ErrCorrupt, rowcodec.ErrCorrupt, rowcodec.ErrTruncated, canonical.ErrConvert)
	differErrs = append(differErrs, migrate.ErrMismatch)
}
