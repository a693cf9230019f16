package command

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

func TestNormalizeArgs(t *testing.T) {
	app := NewApp(io.Discard, io.Discard)
	cases := []struct {
		in   string
		want string
	}{
		// Flags after the positional argument, with values that look like paths.
		{"rescale SP --parallelism 3 --out SP-p3", "rescale --parallelism 3 --out SP-p3 -- SP"},
		{"rescale SP -p 3 -o /tmp/x", "rescale -p 3 -o /tmp/x -- SP"},
		// Global flags after the command go before it.
		{"inspect --json SP", "--json inspect -- SP"},
		{"inspect SP --json --quiet", "--json --quiet inspect -- SP"},
		{"--json inspect SP --dump", "--json inspect --dump -- SP"},
		// --flag=value, bool flags that do not swallow the next argument.
		{"inspect --dump SP --limit=5", "inspect --dump --limit=5 -- SP"},
		{"inspect --metadata-only=false SP", "inspect --metadata-only=false -- SP"},
		// -- ends the flags.
		{"inspect -- --weird-dir", "inspect -- --weird-dir"},
		{"inspect SP -- --dump", "inspect -- SP --dump"},
		// Subcommands and their own flags; negative numbers are arguments.
		{"keygroups assign -m 128 -1 5 -p 4", "keygroups assign -m 128 -p 4 -- -1 5"},
		{"keygroups assign -1 --key-type int -2.5", "keygroups assign --key-type int -- -1 -2.5"},
		{"keygroups assign --json -m 4 -", "--json keygroups assign -m 4 -- -"},
		// A negative value of a flag stays with its flag.
		{"keygroups assign -p -1 7", "keygroups assign -p -1 -- 7"},
		// Global S3 flags anywhere, alias included.
		{"inspect s3://b/p --endpoint-url http://127.0.0.1:1", "--endpoint-url http://127.0.0.1:1 inspect -- s3://b/p"},
		{"--s3-endpoint http://x inspect s3://b/p", "--s3-endpoint http://x inspect -- s3://b/p"},
		// help passes through.
		{"help inspect", "help inspect"},
		{"inspect --help", "inspect --help"},
		{"keygroups help assign", "keygroups help assign"},
		{"--version", "--version"},
		{"", ""},
	}
	if findCommand(app.Commands, "bench") != nil {
		cases = append(cases, struct{ in, want string }{"bench storage --quick --json", "--json bench storage --quick"})
	}
	for _, c := range cases {
		got, err := normalizeArgs(app, strings.Fields(c.in))
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("%q\n got %q\nwant %q", c.in, g, c.want)
		}
	}
}

func TestNormalizeArgsErrors(t *testing.T) {
	app := NewApp(io.Discard, io.Discard)
	cases := []struct{ in, want string }{
		{"rescale SP --paralelism 3", "sfstate rescale: unknown flag --paralelism (did you mean --parallelism?)"},
		{"inspect SP --jsn", "sfstate inspect: unknown flag --jsn (did you mean --json?)"},
		{"keygroups assign --max-paralelism 4 1", "sfstate keygroups assign: unknown flag --max-paralelism (did you mean --max-parallelism?)"},
		{"inspect SP --xyzzy-plugh", "sfstate inspect: unknown flag --xyzzy-plugh"},
		{"inpsect SP", `sfstate: unknown command "inpsect" (did you mean "inspect"?)`},
		{"keygroups asign 1", `sfstate keygroups: unknown subcommand "asign" (did you mean "assign"?)`},
		{"rescale SP --out", "sfstate rescale: --out needs a value"},
	}
	for _, c := range cases {
		_, err := normalizeArgs(app, strings.Fields(c.in))
		if err == nil {
			t.Errorf("%q: no error", c.in)
			continue
		}
		if !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %q, want prefix %q", c.in, err, c.want)
		}
		if c.in == "inspect SP --xyzzy-plugh" && strings.Contains(err.Error(), "did you mean") {
			t.Errorf("%q: suggests a flag far from the typo: %v", c.in, err)
		}
		if ExitCode(err) != ExitUsage {
			t.Errorf("%q: exit %d", c.in, ExitCode(err))
		}
	}
}

// copyFixture copies a fixture savepoint into a temporary directory, so
// that commands writing beside their input (rescale's default --out) never
// touch the shared fixtures.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src := fixtures.Path(t, name)
	dst := filepath.Join(t.TempDir(), filepath.Base(name))
	if filepath.Base(name) == "savepoint" {
		dst = filepath.Join(filepath.Dir(dst), filepath.Base(filepath.Dir(name))+"-sp")
	}
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestFlagsAfterArguments runs the reported invocations end to end.
func TestFlagsAfterArguments(t *testing.T) {
	sp := copyFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	out := filepath.Join(t.TempDir(), "p3")
	o, e, code := run(t, "rescale", sp, "--parallelism", "3", "--out", out)
	if code != ExitOK || !strings.Contains(o, "parallelism 4 -> 3") {
		t.Fatalf("rescale exit %d: %s%s", code, o, e)
	}
	if _, err := os.Stat(filepath.Join(out, "_metadata")); err != nil {
		t.Fatalf("rescale wrote no _metadata: %v", err)
	}
	o, e, code = run(t, "inspect", out, "--json", "--metadata-only")
	if code != ExitOK || !strings.HasPrefix(strings.TrimSpace(o), "{") {
		t.Fatalf("inspect --json after the path: exit %d: %s%s", code, o, e)
	}
	// A negative key after the flags of keygroups assign.
	o, e, code = run(t, "keygroups", "assign", "-m", "128", "-1", "-p", "4", "--json")
	if code != ExitOK || !strings.Contains(o, `"key": "-1"`) {
		t.Fatalf("keygroups assign -1: exit %d: %s%s", code, o, e)
	}
}

// FuzzNormalizeArgs: any argument list is either refused with a usage
// error or reordered into one that keeps every argument, puts positional
// arguments after "--", and normalizes to itself again.
func FuzzNormalizeArgs(f *testing.F) {
	for _, s := range []string{"rescale SP --parallelism 3 --out SP-p3", "inspect --json SP", "keygroups assign -m 128 -1 5 -p 4",
		"inspect -- --weird", "--s3-endpoint http://x inspect s3://b/p --dump", "help inspect", "bench storage --quick",
		"keygroups assign --key-type=int -- -1", "inspect --metadata-only=false SP"} {
		f.Add(s)
	}
	app := NewApp(io.Discard, io.Discard)
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Fields(s)
		if len(args) > 64 {
			return
		}
		out, err := normalizeArgs(app, args)
		if err != nil {
			if ExitCode(err) != ExitUsage {
				t.Fatalf("%q: error %v is not a usage error", s, err)
			}
			return
		}
		if len(args) > 0 && (args[0] == "help" || args[0] == "h") {
			return
		}
		count := func(xs []string) map[string]int {
			m := map[string]int{}
			for _, x := range xs {
				if x != "--" {
					m[x]++
				}
			}
			return m
		}
		a, b := count(args), count(out)
		for k, n := range a {
			if b[k] != n {
				t.Fatalf("%q -> %q: %q appears %d times, not %d", s, out, k, b[k], n)
			}
		}
		again, err := normalizeArgs(app, out)
		if err != nil || strings.Join(again, "\x00") != strings.Join(out, "\x00") {
			t.Fatalf("%q -> %q -> %q (%v): not stable", s, out, again, err)
		}
	})
}
