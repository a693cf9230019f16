//go:build linux

package scanbench

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EvictFile drops a file's pages from the page cache so that the next read
// comes from disk: fsync (dirty pages cannot be dropped), then
// posix_fadvise(POSIX_FADV_DONTNEED) over the whole file. Use Resident to
// confirm it worked.
func EvictFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("scanbench: fsync %s: %w", path, err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("scanbench: fadvise %s: %w", path, err)
	}
	return nil
}

// Resident returns the fraction (0..1) of the file's pages that are in the
// page cache, from mincore(2) over a read-only mapping of the file.
func Resident(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if size == 0 {
		return 0, nil
	}
	page := int64(os.Getpagesize())
	const window = 256 << 20 // map at most this much at a time
	vec := make([]byte, window/page)
	var resident, pages int64
	for off := int64(0); off < size; off += window {
		n := min(window, size-off)
		m, err := unix.Mmap(int(f.Fd()), off, int(n), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return 0, fmt.Errorf("scanbench: mmap %s: %w", path, err)
		}
		np := (n + page - 1) / page
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
		unix.Munmap(m)
		if errno != 0 {
			return 0, fmt.Errorf("scanbench: mincore %s: %w", path, errno)
		}
		for _, b := range vec[:np] {
			resident += int64(b & 1)
		}
		pages += np
	}
	return float64(resident) / float64(pages), nil
}
