// Package progress draws a one-line progress indicator on a terminal and
// stays silent when the output is not a TTY, or when disabled (--json,
// --no-progress, --quiet).
//
// Every long command shows the same compact line, redrawn in place at most
// ten times a second:
//
//	migrating 42% 54/128 key groups 1.6k/s ETA 3s
//	rescaling 12.0/96.0 MiB 40.1 MiB/s          (total unknown: no % or ETA)
//
// and erases it when the work is done (carriage return, erase line), so the
// command's own output starts on a clean line and nothing of the bar stays
// on screen.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Terminal is implemented by writers that know whether they are a terminal
// without a file descriptor (tests, wrapped writers).
type Terminal interface {
	IsTerminal() bool
}

// IsTerminal reports whether w is a terminal: an *os.File on a TTY, or a
// Terminal that says so.
func IsTerminal(w io.Writer) bool {
	switch t := w.(type) {
	case Terminal:
		return t.IsTerminal()
	case *os.File:
		return term.IsTerminal(int(t.Fd()))
	}
	return false
}

// Enabled reports whether w is a terminal and progress was not disabled.
func Enabled(w io.Writer, disabled bool) bool {
	return !disabled && IsTerminal(w)
}

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
	drawn   bool
	now     func() time.Time
}

// redraw is the shortest interval between two redraws.
const redraw = 100 * time.Millisecond

// New returns a bar writing to w, or nil (silent) when progress is disabled
// or w is not a terminal. total may be 0 when unknown. unit is "B" for bytes
// or a noun such as "key groups".
func New(w io.Writer, disabled bool, label string, total int64, unit string) *Bar {
	if !Enabled(w, disabled) {
		return nil
	}
	return &Bar{w: w, label: label, total: total, unit: unit, start: time.Now(), now: time.Now}
}

// Add advances the bar by n units.
func (b *Bar) Add(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	// The first and the final state are drawn whatever the interval.
	if now := b.now(); !b.drawn || now.Sub(b.lastOut) >= redraw || (b.total > 0 && b.done >= b.total) {
		b.lastOut = now
		b.draw(now)
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

// Line renders the bar's current line (without the carriage return and
// erase sequences).
func (b *Bar) Line() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.line(b.now())
}

func (b *Bar) line(now time.Time) string {
	var sb strings.Builder
	if b.label != "" {
		sb.WriteString(b.label)
		sb.WriteByte(' ')
	}
	done, total := float64(b.done), float64(b.total)
	if b.total > 0 {
		pct := min(100, int(done*100/total))
		fmt.Fprintf(&sb, "%d%% %s", pct, Ratio(done, total, b.unit))
	} else {
		sb.WriteString(Human(done, b.unit))
	}
	el := now.Sub(b.start).Seconds()
	if el <= 0 || b.done <= 0 {
		return sb.String()
	}
	rate := done / el
	if b.unit == "B" {
		fmt.Fprintf(&sb, " %s/s", Human(rate, "B"))
	} else {
		fmt.Fprintf(&sb, " %s/s", strings.TrimSpace(Human(rate, "")))
	}
	if b.total > b.done {
		fmt.Fprintf(&sb, " ETA %s", ETA(time.Duration((total-done)/rate*float64(time.Second))))
	}
	return sb.String()
}

func (b *Bar) draw(now time.Time) {
	fmt.Fprintf(b.w, "\r%s\x1b[K", b.line(now))
	b.drawn = true
}

// Done erases the bar's line: the work is over and the command's output
// follows on a clean line.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.drawn = false
	}
}

// Steps returns a logger for the step lines of a long command ("checking
// structure", "digesting source"): they reach w only when verbose is set or
// w is a terminal, and never when disabled (--json, --quiet). Lines are
// prefixed with prefix and end with a newline.
func Steps(w io.Writer, prefix string, verbose, disabled bool) func(format string, args ...any) {
	if disabled || !(verbose || IsTerminal(w)) {
		return nil
	}
	return func(format string, args ...any) {
		fmt.Fprintf(w, prefix+format+"\n", args...)
	}
}

// ETA formats a remaining time compactly: 3s, 4m05s, 2h07m.
func ETA(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}

// Ratio formats done/total with the unit once: "54/128 key groups",
// "1.5/3.0 MiB", "512 KiB/3.0 MiB" (prefixes differ), "950/1.2k rows".
func Ratio(done, total float64, unit string) string {
	d, t := Human(done, unit), Human(total, unit)
	if unit == "B" {
		dn, du, _ := strings.Cut(d, " ")
		if _, tu, _ := strings.Cut(t, " "); du == tu {
			return dn + "/" + t
		}
		return d + "/" + t
	}
	dn := strings.TrimSpace(strings.TrimSuffix(d, unit))
	return dn + "/" + t
}

// Human formats n in the given unit: bytes with binary prefixes, anything
// else with k/M/G (an empty unit gives the bare number).
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
	var s string
	switch {
	case n >= 1e9:
		s = fmt.Sprintf("%.2fG", n/1e9)
	case n >= 1e6:
		s = fmt.Sprintf("%.2fM", n/1e6)
	case n >= 1e3:
		s = fmt.Sprintf("%.1fk", n/1e3)
	default:
		s = fmt.Sprintf("%.0f", n)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}
