//go:build !linux

package s3

import (
	"errors"
	"os"
)

func renameNoReplace(src, dst string) error {
	return &os.LinkError{Op: "rename", Old: src, New: dst, Err: errors.ErrUnsupported}
}
