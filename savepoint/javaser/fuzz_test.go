package javaser

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

func FuzzParse(f *testing.F) {
	f.Add(arrayListStream(f))
	f.Add([]byte{0xac, 0xed, 0x00, 0x05, 0x70})
	if d := fixtures.Dir(); d != "" {
		for _, sp := range []string{"flink1.20-rocksdb-canonical-valuestate-timers", "sql-rocksdb-canonical-groupagg-valuestate/savepoint"} {
			b, err := os.ReadFile(filepath.Join(d, sp, "_metadata"))
			if err != nil {
				continue
			}
			// every embedded stream (trailer, LogicalType blobs)
			for i := 0; ; {
				j := bytes.Index(b[i:], []byte{0xac, 0xed, 0x00, 0x05})
				if j < 0 {
					break
				}
				end := min(len(b), i+j+2048)
				f.Add(b[i+j : end])
				i += j + 4
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b, 0)
		if err == nil && !bytes.Equal(s.Raw, b) {
			t.Fatal("raw differs")
		}
		s1, n, err := ParseOne(b, 0)
		if err == nil {
			if n > len(b) || !bytes.Equal(s1.Raw, b[:n]) {
				t.Fatal("ParseOne raw/length wrong")
			}
		}
	})
}
