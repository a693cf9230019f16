package command

import (
	"bytes"
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
