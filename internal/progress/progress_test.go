package progress

import (
	"bytes"
	"io"
	"testing"
	"time"
)

func TestSilentWhenNotTTY(t *testing.T) {
	var buf bytes.Buffer
	if b := New(&buf, false, "x", 10, "B"); b != nil {
		t.Fatal("bar on a non-terminal writer")
	}
	var nilBar *Bar
	nilBar.Add(5) // must not panic
	nilBar.Done()
}

func TestHuman(t *testing.T) {
	for _, c := range []struct {
		n    float64
		unit string
		want string
	}{
		{512, "B", "512 B"},
		{1536, "B", "1.5 KiB"},
		{3 << 20, "B", "3.0 MiB"},
		{2500, "entries", "2.5k entries"},
		{12e6, "rows", "12.00M rows"},
	} {
		if got := Human(c.n, c.unit); got != c.want {
			t.Errorf("Human(%v,%q)=%q want %q", c.n, c.unit, got, c.want)
		}
	}
}

// fakeTTY is a writer that says it is a terminal.
type fakeTTY struct{ bytes.Buffer }

func (*fakeTTY) IsTerminal() bool { return true }

// clock is a settable time source for the bar.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestBar(w io.Writer, c *clock, label string, total int64, unit string) *Bar {
	b := New(w, false, label, total, unit)
	if b != nil {
		b.start, b.now = c.t, c.now
	}
	return b
}

func TestBarRendersCompactLine(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var w fakeTTY
	b := newTestBar(&w, c, "migrating", 128, "key groups")
	if b == nil {
		t.Fatal("no bar on a terminal")
	}
	c.t = c.t.Add(time.Second)
	b.Add(54)
	if got, want := w.String(), "\rmigrating 42% 54/128 key groups 54/s ETA 1s\x1b[K"; got != want {
		t.Fatalf("drawn %q\nwant  %q", got, want)
	}
	// throttled: a second Add within 100 ms draws nothing
	w.Reset()
	b.Add(1)
	if w.Len() != 0 {
		t.Fatalf("redrawn within the interval: %q", w.String())
	}
	c.t = c.t.Add(30 * time.Second)
	b.Add(1945)
	if got := b.Line(); got != "migrating 100% 2.0k/128 key groups 65/s" {
		t.Fatalf("line %q", got)
	}
	w.Reset()
	b.Done()
	if got := w.String(); got != "\r\x1b[K" {
		t.Fatalf("Done wrote %q, want carriage return + erase line", got)
	}
	w.Reset()
	b.Done()
	if w.Len() != 0 {
		t.Fatalf("second Done wrote %q", w.String())
	}
}

func TestBarBytesAndUnknownTotal(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	var w fakeTTY
	b := newTestBar(&w, c, "rescaling", 96<<20, "B")
	c.t = c.t.Add(2 * time.Second)
	b.Add(12 << 20)
	if got, want := b.Line(), "rescaling 12% 12.0/96.0 MiB 6.0 MiB/s ETA 14s"; got != want {
		t.Fatalf("line %q want %q", got, want)
	}
	u := newTestBar(&w, c, "reading", 0, "key groups")
	if got := u.Line(); got != "reading 0 key groups" {
		t.Fatalf("before any progress: %q", got)
	}
	c.t = c.t.Add(4 * time.Second)
	u.Add(6400)
	if got := u.Line(); got != "reading 6.4k key groups 1.6k/s" {
		t.Fatalf("unknown total: %q", got)
	}
	// a bar that never drew erases nothing
	w.Reset()
	newTestBar(&w, c, "idle", 10, "files").Done()
	if w.Len() != 0 {
		t.Fatalf("idle bar wrote %q", w.String())
	}
	if New(&w, true, "x", 1, "B") != nil {
		t.Fatal("bar although disabled")
	}
}

func TestSteps(t *testing.T) {
	var piped bytes.Buffer
	if log := Steps(&piped, "verify: ", false, false); log != nil {
		t.Fatal("step lines on a pipe without --verbose")
	}
	if log := Steps(&piped, "verify: ", true, true); log != nil {
		t.Fatal("step lines although disabled")
	}
	Steps(&piped, "verify: ", true, false)("checking %s", "structure")
	if piped.String() != "verify: checking structure\n" {
		t.Fatalf("verbose on a pipe: %q", piped.String())
	}
	var tty fakeTTY
	Steps(&tty, "v: ", false, false)("x")
	if tty.String() != "v: x\n" {
		t.Fatalf("terminal: %q", tty.String())
	}
}

func TestETAAndRatio(t *testing.T) {
	for d, want := range map[time.Duration]string{3 * time.Second: "3s", 245 * time.Second: "4m05s", 7620 * time.Second: "2h07m", 400 * time.Millisecond: "0s"} {
		if got := ETA(d); got != want {
			t.Errorf("ETA(%v)=%q want %q", d, got, want)
		}
	}
	for _, c := range []struct {
		d, t float64
		unit string
		want string
	}{
		{54, 128, "key groups", "54/128 key groups"},
		{512 << 10, 3 << 20, "B", "512.0 KiB/3.0 MiB"},
		{950, 1200, "rows", "950/1.2k rows"},
	} {
		if got := Ratio(c.d, c.t, c.unit); got != c.want {
			t.Errorf("Ratio(%v,%v,%q)=%q want %q", c.d, c.t, c.unit, got, c.want)
		}
	}
}

func TestBarDrawsFinalState(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	var w fakeTTY
	b := newTestBar(&w, c, "", 10, "files")
	c.t = c.t.Add(time.Second)
	b.Add(5)
	w.Reset()
	b.Add(5) // within the redraw interval, but the total is reached
	if got := w.String(); got != "\r100% 10/10 files 10/s\x1b[K" {
		t.Fatalf("final state %q", got)
	}
}
