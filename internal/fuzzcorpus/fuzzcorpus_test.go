package fuzzcorpus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEncode(t *testing.T) {
	b, err := Encode([]byte{0xac, 0xed, 'a'}, "x\n", true, uint8(7), int64(-3))
	if err != nil {
		t.Fatal(err)
	}
	want := "go test fuzz v1\n[]byte(\"\\xac\\xeda\")\nstring(\"x\\n\")\nbool(true)\nuint8(7)\nint64(-3)\n"
	if string(b) != want {
		t.Fatalf("got %q\nwant %q", b, want)
	}
	if _, err := Encode(1.5); err == nil {
		t.Fatal("float accepted")
	}
}

func TestWriteNamesByContent(t *testing.T) {
	dir := t.TempDir()
	p1, err := Write(dir, "FuzzX", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Write(dir, "FuzzX", []byte("a"))
	if err != nil || p1 != p2 {
		t.Fatalf("same input, different files: %s %s %v", p1, p2, err)
	}
	if !strings.HasPrefix(p1, filepath.Join(dir, "testdata", "fuzz", "FuzzX")+string(filepath.Separator)) || len(filepath.Base(p1)) != 16 {
		t.Fatalf("path %s", p1)
	}
	b, err := os.ReadFile(p1)
	if err != nil || string(b) != "go test fuzz v1\n[]byte(\"a\")\n" {
		t.Fatalf("%q %v", b, err)
	}
}
