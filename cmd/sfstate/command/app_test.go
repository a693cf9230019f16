package command

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
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
		if args[0] != "--help" && findCommand(NewApp(io.Discard, io.Discard).Commands, args[0]) == nil {
			continue // not in this build (migrate needs cgo)
		}
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

// TestExitCodesDocumented: README's exit-code table and --help list the
// same codes as the constants ExitCode returns.
func TestExitCodesDocumented(t *testing.T) {
	root, err := fixtures.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var readme []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "| exit code |"):
			in = true
		case in && strings.HasPrefix(l, "|---"):
		case in && strings.HasPrefix(l, "| "):
			readme = append(readme, strings.TrimSpace(strings.Split(l, "|")[1]))
		default:
			in = false
		}
	}
	var want []string
	for _, c := range []int{ExitOK, ExitCheckFailed, ExitUsage, ExitIO, ExitUnsupported, ExitInterrupted} {
		want = append(want, strconv.Itoa(c))
	}
	if strings.Join(readme, " ") != strings.Join(want, " ") {
		t.Fatalf("README exit-code table lists %v, want %v", readme, want)
	}
	help, _, _ := run(t, "--help")
	for _, c := range want {
		if !regexp.MustCompile(`(?m)^   ` + c + ` +\S`).MatchString(help) {
			t.Errorf("--help lacks exit code %s", c)
		}
	}
}
