package command

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/rescale"
)

func TestRescaleCommand(t *testing.T) {
	src := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	dst := filepath.Join(t.TempDir(), "out")
	out, errOut, code := runKG(t, "--json", "rescale", "--parallelism", "3", "--copy", "--out", dst, src)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res rescale.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res.Operators) == 0 || res.MetadataBytes == 0 || res.CopiedFiles == 0 {
		t.Fatalf("unexpected result %+v", res)
	}
	for _, o := range res.Operators {
		if o.NewParallelism != 3 || o.LayoutParallelism%3 != 0 && o.LayoutParallelism != o.MaxParallelism {
			t.Fatalf("operator %+v", o)
		}
	}
	// The result is a complete savepoint.
	if _, errOut, code := runKG(t, "check", dst); code != ExitOK {
		t.Fatalf("check of the rescaled copy: exit %d: %s", code, errOut)
	}
	// Same destination again: refused, nothing overwritten.
	before, _ := os.ReadFile(filepath.Join(dst, "_metadata"))
	if _, _, code := runKG(t, "rescale", "-p", "2", "--out", dst, src); code != ExitUsage {
		t.Fatalf("existing destination: exit %d", code)
	}
	after, _ := os.ReadFile(filepath.Join(dst, "_metadata"))
	if string(before) != string(after) {
		t.Fatal("_metadata overwritten")
	}
	// Views: text output states the bytes written.
	dst2 := filepath.Join(t.TempDir(), "views")
	out, errOut, code = runKG(t, "rescale", "-p", "2", "--out", dst2, src)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "referenced in place") || !strings.Contains(out, "of state") {
		t.Fatalf("output: %s", out)
	}
}

func TestRescaleUsage(t *testing.T) {
	src := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	for _, args := range [][]string{
		{"rescale", src},
		{"rescale", "-p", "0", src},
		{"rescale", "-p", "2"},
		{"rescale", "-p", "2", "--out", src, src},
		{"rescale", "-p", "2", "--max-parallelism", "1", src},
	} {
		if _, _, code := runKG(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
	if _, _, code := runKG(t, "rescale", "-p", "2", "--out", t.TempDir(), filepath.Join(t.TempDir(), "missing")); code != ExitIO {
		t.Errorf("missing source: exit %d, want %d", code, ExitIO)
	}
}

// ttyBuffer is a stderr that says it is a terminal.
type ttyBuffer struct{ bytes.Buffer }

func (*ttyBuffer) IsTerminal() bool { return true }

// TestRescaleProgress: on a terminal rescale --copy draws the compact byte
// bar and erases it before the report; piped stderr stays empty.
func TestRescaleProgress(t *testing.T) {
	src := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	var out bytes.Buffer
	var tty ttyBuffer
	if code := Main([]string{"sfstate", "rescale", "--parallelism", "3", "--copy", "--out", filepath.Join(t.TempDir(), "out"), src}, &out, &tty); code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out.String(), tty.String())
	}
	e := tty.String()
	if !regexp.MustCompile(`^\rrescaling \d+% [0-9.]+( [KM]?i?B)?/[0-9.]+ [KM]?i?B`).MatchString(e) || !strings.HasSuffix(e, "\r\x1b[K") || !strings.Contains(e, "100% ") {
		t.Fatalf("stderr on a terminal: %q", e)
	}
	if _, errOut, code := runKG(t, "rescale", "--parallelism", "3", "--copy", "--out", filepath.Join(t.TempDir(), "out2"), src); code != ExitOK || errOut != "" {
		t.Fatalf("piped: exit %d, stderr %q", code, errOut)
	}
}
