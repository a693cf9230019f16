package engine

// #include "shim.h"
import "C"

import (
	"runtime"
	"time"
)

// Clock is the millisecond clock TTL is measured against. The same clock is
// read by Go code and by the native compaction filter. A manual clock only
// moves when told to, for tests; the zero of a manual clock is arbitrary.
type Clock struct {
	c *C.sfs_clock_t
}

var systemClock = newClock(false, 0)

func newClock(manual bool, ms int64) *Clock {
	m := C.int(0)
	if manual {
		m = 1
	}
	c := &Clock{c: C.sfs_clock_new(m, C.int64_t(ms))}
	if c.c == nil {
		panic("engine: cannot allocate a clock")
	}
	runtime.AddCleanup(c, func(p *C.sfs_clock_t) { C.sfs_clock_free(p) }, c.c)
	return c
}

// SystemClock returns the wall clock.
func SystemClock() *Clock { return systemClock }

// NewManualClock returns a clock standing at ms milliseconds.
func NewManualClock(ms int64) *Clock { return newClock(true, ms) }

// Now returns the current time in milliseconds since the epoch.
func (c *Clock) Now() int64 { return int64(C.sfs_clock_now(c.c)) }

// Set moves a manual clock to ms (no effect on the system clock).
func (c *Clock) Set(ms int64) {
	if c.c.manual != 0 {
		C.sfs_clock_set(c.c, C.int64_t(ms))
	}
}

// Advance moves a manual clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now() + d.Milliseconds()) }
