package proc

import (
	"runtime"
	"testing"
	"time"
)

// TestFigures: CPU grows with work; on Linux the peak RSS of a run that
// touches 64 MiB is at least that much above zero, and VmHWM agrees with
// PeakRSS.
func TestFigures(t *testing.T) {
	c0 := CPU()
	x := 0
	for t0 := time.Now(); time.Since(t0) < 30*time.Millisecond; {
		x++
	}
	if c1 := CPU(); c1 <= c0 {
		t.Fatalf("CPU did not grow: %v then %v (%d)", c0, c1, x)
	}
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is Linux only")
	}
	var keep []byte
	peak, err := PeakRSSOf(func() error {
		keep = make([]byte, 64<<20)
		for i := range keep {
			keep[i] = byte(i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak != -1 && peak < 64<<20 {
		t.Fatalf("peak RSS %d while touching 64 MiB", peak)
	}
	if hwm, err := VmHWM(); err != nil || hwm < 64<<20 || PeakRSS() < hwm {
		t.Fatalf("VmHWM %d (%v), PeakRSS %d", hwm, err, PeakRSS())
	}
	runtime.KeepAlive(keep)
}

// TestPeakRSSOf checks that the peak resident set measured around a
// function grows with what the function touches.
func TestPeakRSSOf(t *testing.T) {
	var keep []byte
	small, err := PeakRSSOf(func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if small < 0 {
		t.Skip("this kernel cannot reset the peak resident set")
	}
	big, err := PeakRSSOf(func() error {
		keep = make([]byte, 64<<20)
		for i := range keep {
			if i%4096 == 0 {
				keep[i] = 1
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if big < small+48<<20 {
		t.Fatalf("peak RSS %d around a 64 MiB allocation, %d around nothing", big, small)
	}
	keep = nil
	_ = keep
}
