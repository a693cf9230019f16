package testutil

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Damaged is one damaged copy of a directory (DamagedCopies).
type Damaged struct {
	Dir string
	// What says what was done, for messages ("byte 1234 flipped",
	// "cut at 1234").
	What string
}

// DamagedCopies copies the regular files of dir into n fresh temporary
// directories, damaging file (a name inside dir) in each at offsets spread
// evenly through it: every fourth copy is cut short at the offset, the
// others have the byte there flipped. Tests of readers use them to check
// that damage gives a classed error or a result, never a panic.
func DamagedCopies(t testing.TB, dir, file string, n int) []Damaged {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []Damaged
	for i := 0; i < n; i++ {
		d := Damaged{Dir: t.TempDir()}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == file {
				off := int64(i) * int64(len(data)) / int64(n)
				b = bytes.Clone(data)
				if i%4 == 3 {
					b, d.What = b[:off], fmt.Sprintf("%s cut at %d", file, off)
				} else {
					b[off] ^= 0x5a
					d.What = fmt.Sprintf("%s byte %d flipped", file, off)
				}
			}
			if err := os.WriteFile(filepath.Join(d.Dir, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, d)
	}
	return out
}
