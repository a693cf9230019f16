package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
)

// peakRSSOf runs fn and returns the process's peak resident set size while
// it ran: the kernel's high-water mark (VmHWM), reset to the current
// resident set beforehand (writing 5 to /proc/self/clear_refs, Linux 4.0
// and later) after returning freed heap to the system. Returns -1 when the
// reset is not supported.
func peakRSSOf(fn func() error) (int64, error) {
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return -1, fn()
	}
	if err := fn(); err != nil {
		return 0, err
	}
	return vmHWM()
}

// vmHWM reads the process's peak resident set size from /proc/self/status.
func vmHWM() (int64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			f := bytes.Fields(rest)
			if len(f) != 2 || string(f[1]) != "kB" {
				return 0, fmt.Errorf("engine: /proc/self/status: unexpected VmHWM line %q", line)
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("engine: /proc/self/status: VmHWM: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("engine: /proc/self/status has no VmHWM line")
}
