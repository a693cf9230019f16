package progress

import (
	"bytes"
	"testing"
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
