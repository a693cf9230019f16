//go:build linux

package savepoint

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// limitAddressSpace caps the process's address space (RLIMIT_AS, a hard
// limit) at what it maps now plus extra bytes: an allocation beyond it
// fails and the Go runtime aborts, so a decoder that trusts an absurd
// length fails the test instead of exhausting the machine. (The Go
// runtime reserves address space it has not used yet, so the cap is
// relative to the current size.) It returns the cap.
func limitAddressSpace(extra uint64) (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var vm uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, err
			}
			vm = kb << 10
		}
	}
	if vm == 0 {
		return 0, fmt.Errorf("no VmSize in /proc/self/status")
	}
	lim := vm + extra
	return lim, syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim})
}
