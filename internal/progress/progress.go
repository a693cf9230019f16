// Package progress draws a one-line progress indicator on a terminal and
// stays silent when the output is not a TTY, or when disabled (--json,
// --no-progress, --quiet).
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// Bar reports progress of one long task. A nil *Bar is valid and silent.
type Bar struct {
	mu      sync.Mutex
	w       io.Writer
	label   string
	total   int64
	done    int64
	unit    string
	start   time.Time
	lastOut time.Time
}

// Enabled reports whether w is a terminal and progress was not disabled.
func Enabled(w io.Writer, disabled bool) bool {
	if disabled {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// New returns a bar writing to w, or nil (silent) when progress is disabled
// or w is not a terminal. total may be 0 when unknown. unit is "B" for bytes
// or a noun such as "entries".
func New(w io.Writer, disabled bool, label string, total int64, unit string) *Bar {
	if !Enabled(w, disabled) {
		return nil
	}
	return &Bar{w: w, label: label, total: total, unit: unit, start: time.Now()}
}

// Add advances the bar by n units.
func (b *Bar) Add(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	if now := time.Now(); now.Sub(b.lastOut) >= 100*time.Millisecond {
		b.lastOut = now
		b.draw()
	}
}

// SetTotal changes the expected total.
func (b *Bar) SetTotal(total int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.total = total
	b.mu.Unlock()
}

func (b *Bar) draw() {
	el := time.Since(b.start).Seconds()
	rate := ""
	if el > 0 {
		rate = " " + Human(float64(b.done)/el, b.unit) + "/s"
	}
	if b.total > 0 {
		pct := float64(b.done) * 100 / float64(b.total)
		fmt.Fprintf(b.w, "\r%s %5.1f%% %s/%s%s\x1b[K", b.label, pct, Human(float64(b.done), b.unit), Human(float64(b.total), b.unit), rate)
		return
	}
	fmt.Fprintf(b.w, "\r%s %s%s\x1b[K", b.label, Human(float64(b.done), b.unit), rate)
}

// Done finishes the line.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw()
	fmt.Fprintln(b.w)
}

// Human formats n in the given unit: bytes with binary prefixes, anything
// else with k/M/G.
func Human(n float64, unit string) string {
	if unit == "B" {
		const k = 1024.0
		switch {
		case n >= k*k*k:
			return fmt.Sprintf("%.2f GiB", n/(k*k*k))
		case n >= k*k:
			return fmt.Sprintf("%.1f MiB", n/(k*k))
		case n >= k:
			return fmt.Sprintf("%.1f KiB", n/k)
		}
		return fmt.Sprintf("%.0f B", n)
	}
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG %s", n/1e9, unit)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM %s", n/1e6, unit)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk %s", n/1e3, unit)
	}
	return fmt.Sprintf("%.0f %s", n, unit)
}
