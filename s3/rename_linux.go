//go:build linux

package s3

import (
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames src to dst, failing with EEXIST when dst exists.
func renameNoReplace(src, dst string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: src, New: dst, Err: err}
	}
	return nil
}
