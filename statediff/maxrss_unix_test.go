//go:build unix

package statediff

import (
	"syscall"
	"time"
)

// maxRSS returns the peak resident set size of the process in bytes (0
// when unknown).
func maxRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	if darwin {
		return ru.Maxrss
	}
	return ru.Maxrss << 10 // kilobytes elsewhere
}

// cpuTime returns the user plus system CPU time of the process so far (0
// when unknown).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
