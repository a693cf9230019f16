package command

import (
	"bytes"
	"encoding/json"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(append([]string{"sfstate"}, args...), &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestHelpListsExitCodes(t *testing.T) {
	out, _, code := run(t, "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out, "EXIT CODES") {
		t.Fatalf("help lacks exit codes:\n%s", out)
	}
}

func TestUnknownFlagIsUsageError(t *testing.T) {
	_, _, code := run(t, "--no-such-flag")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d", code, ExitUsage)
	}
}

// TestHelpText: one default per flag, zero defaults not shown, the exit
// codes in the app's and every command's help.
func TestHelpText(t *testing.T) {
	doubled := regexp.MustCompile(`\(default[^)]*\)[^\n]*\(default`)
	for _, args := range [][]string{{"--help"}, {"inspect", "--help"}, {"rescale", "--help"}, {"check", "--help"},
		{"keygroups", "assign", "--help"}, {"verify", "--help"}, {"migrate", "--help"}} {
		out, _, code := run(t, args...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d", args, code)
		}
		if m := doubled.FindString(out); m != "" {
			t.Errorf("%v: doubled default %q", args, m)
		}
		for _, zero := range []string{"(default: false)", "(default: 0)", "(default: 0s)"} {
			if strings.Contains(out, zero) {
				t.Errorf("%v: prints %s", args, zero)
			}
		}
		for _, code := range []string{"130", "valid input that sfstate does not support"} {
			if !strings.Contains(out, code) {
				t.Errorf("%v: help lacks exit code %q", args, code)
			}
		}
	}
	out, _, _ := run(t, "inspect", "--help")
	if !strings.Contains(out, "(default: 4)") {
		t.Errorf("inspect --help lost the non-zero default of --concurrency:\n%s", out)
	}
}

func TestVersion(t *testing.T) {
	out, _, code := run(t, "version", "--json")
	var v VersionInfo
	if code != ExitOK || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("exit %d: %s", code, out)
	}
	if v.Go != runtime.Version() || v.Module != "github.com/sfstate/sfstate" {
		t.Fatalf("version %+v", v)
	}
	if (rocksDBVersion != nil) != regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(v.RocksDB) {
		t.Fatalf("rocksdb %q (engine linked: %v)", v.RocksDB, rocksDBVersion != nil)
	}
	if o, _, code := run(t, "inspect", "x", "--version", "--json"); code != ExitOK || !strings.Contains(o, `"go": "`+runtime.Version()) {
		t.Fatalf("--version after a command: exit %d: %s", code, o)
	}
	text, _, _ := run(t, "--version")
	if !strings.Contains(text, runtime.Version()) || (v.RocksDB == "") != strings.Contains(text, "no RocksDB support") {
		t.Fatalf("--version:\n%s", text)
	}
}
