// Package proc reads the process figures the benchmark harnesses report:
// CPU time and peak resident set size.
package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"
)

// CPU is the user plus system CPU time the process has used (0 when
// getrusage fails).
func CPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ResetPeakRSS resets the kernel's peak-RSS mark (VmHWM) of this process to
// its current resident set (Linux 4.0 and later: "5" into
// /proc/self/clear_refs); it reports whether the reset is supported.
func ResetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// PeakRSS returns the process's peak resident set in bytes: VmHWM from
// /proc/self/status, else getrusage's maximum RSS, else 0.
func PeakRSS() int64 {
	if n, err := VmHWM(); err == nil {
		return n
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		return int64(ru.Maxrss) << 10
	}
	return 0
}

// PeakRSSOf runs fn and returns the process's peak resident set size while
// it ran: VmHWM, reset beforehand after returning freed heap to the
// system. It returns -1 when the reset is not supported.
func PeakRSSOf(fn func() error) (int64, error) {
	debug.FreeOSMemory()
	if !ResetPeakRSS() {
		return -1, fn()
	}
	if err := fn(); err != nil {
		return 0, err
	}
	return VmHWM()
}

// VmHWM reads the process's peak resident set size from /proc/self/status.
func VmHWM() (int64, error) {
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
				return 0, fmt.Errorf("/proc/self/status: unexpected VmHWM line %q", line)
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/self/status: VmHWM: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/self/status has no VmHWM line")
}
