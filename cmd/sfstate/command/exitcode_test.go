package command

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

// badInputs builds one savepoint directory per input class.
type badInputs struct {
	missing, notSavepoint, corrupt, unsupported string
	ok                                          string // a readable savepoint
}

func makeBadInputs(t *testing.T) badInputs {
	t.Helper()
	dir := t.TempDir()
	b := badInputs{missing: filepath.Join(dir, "no-such-savepoint"), notSavepoint: filepath.Join(dir, "empty"),
		corrupt: filepath.Join(dir, "corrupt"), unsupported: filepath.Join(dir, "unsupported"),
		ok: copyFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers")}
	for _, d := range []string{b.notSavepoint, b.corrupt, b.unsupported} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A valid header of a future metadata version: well-formed, unsupported.
	hdr := binary.BigEndian.AppendUint32(nil, savepoint.MetadataMagic)
	if err := os.WriteFile(filepath.Join(b.unsupported, "_metadata"), binary.BigEndian.AppendUint32(hdr, 99), 0o644); err != nil {
		t.Fatal(err)
	}
	// A version 3 header cut off inside the checkpoint id: truncated.
	if err := os.WriteFile(filepath.Join(b.corrupt, "_metadata"), append(binary.BigEndian.AppendUint32(hdr, 3), 0, 0, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExitCodeClasses runs commands in-process with bad input of each
// class and checks the exit code and the one-line message.
func TestExitCodeClasses(t *testing.T) {
	b := makeBadInputs(t)
	cases := []struct {
		name string
		args []string
		code int
		msg  string // substring of stderr
	}{
		{"unknown command", []string{"inpsect", "x"}, ExitUsage, `unknown command "inpsect" (did you mean "inspect"?)`},
		{"unknown flag", []string{"check", b.corrupt, "--max-problem", "3"}, ExitUsage, "did you mean --max-problems?"},
		{"bad number", []string{"check", "--max-problems", "abc", b.corrupt}, ExitUsage, `--max-problems: "abc" is not a number`},
		{"bad duration", []string{"inspect", "--ttl", "soon", b.corrupt}, ExitUsage, `--ttl: "soon" is not a duration`},
		{"bad bool", []string{"inspect", "--dump=maybe", b.corrupt}, ExitUsage, `--dump: "maybe" is not true or false`},
		{"bad key", []string{"keygroups", "assign", "-t", "int", "abc"}, ExitUsage, `key "abc": "abc" is not a number`},
		{"bad key-group range", []string{"inspect", "--key-groups", "a-b", b.corrupt}, ExitUsage, `"a" is not a number`},
		{"missing argument", []string{"check"}, ExitUsage, "exactly one savepoint"},
		{"missing required flag", []string{"keygroups", "plan", "--from", "2"}, ExitUsage, "keygroups plan: --max-parallelism, --to required"},
		{"missing path", []string{"inspect", b.missing}, ExitIO, "no such file or directory: " + b.missing},
		{"not a savepoint", []string{"check", b.notSavepoint}, ExitIO, b.notSavepoint + ": no _metadata (not a savepoint or checkpoint directory)"},
		{"corrupt metadata", []string{"inspect", b.corrupt}, ExitIO, "at offset 8"},
		{"unsupported version", []string{"inspect", b.unsupported}, ExitUnsupported, "unsupported metadata version 99"},
		{"unsupported version check", []string{"check", b.unsupported}, ExitUnsupported, "unsupported metadata version 99"},
		{"bad s3 url", []string{"inspect", "s3://"}, ExitUsage, ""},
		{"html into a missing directory", []string{"inspect", "--html", "/nonexistent/r.html", b.ok}, ExitIO, "write /nonexistent/r.html: no such file or directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, e, code := run(t, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, o, e)
			}
			if !strings.Contains(e, c.msg) {
				t.Fatalf("stderr %q lacks %q", e, c.msg)
			}
			if n := strings.Count(strings.TrimSpace(e), "\n"); n != 0 {
				t.Fatalf("error takes %d lines:\n%s", n+1, e)
			}
			if strings.Contains(e, ".tmp-") {
				t.Fatalf("message names a temporary file: %s", e)
			}
			if strings.Count(e, "at offset") > 1 {
				t.Fatalf("offset repeated: %s", e)
			}
		})
	}
}

// TestExitCodeDifferences: check finds a truncated state file (1), and
// rescale refuses an impossible parallelism as a usage error (2).
func TestExitCodeDifferences(t *testing.T) {
	sp := copyFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	ents, err := os.ReadDir(sp)
	if err != nil {
		t.Fatal(err)
	}
	var victim string
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && e.Name() != "_metadata" && fi.Size() > 64 {
			victim = filepath.Join(sp, e.Name())
			if err := os.Truncate(victim, fi.Size()-7); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if victim == "" {
		t.Fatal("fixture has no state file")
	}
	o, e, code := run(t, "check", sp)
	if code != ExitCheckFailed || !strings.Contains(o, filepath.Base(victim)) {
		t.Fatalf("check of a truncated file: exit %d\n%s%s", code, o, e)
	}
	if !strings.Contains(e, "problem") || strings.Contains(e, "1 problems") {
		t.Fatalf("check message: %q", e)
	}
	out := filepath.Join(t.TempDir(), "out")
	_, e, code = run(t, "rescale", "-p", "100000", sp, "--out", out)
	if code != ExitUsage || !strings.Contains(e, "parallelism 100000") {
		t.Fatalf("rescale -p 100000: exit %d: %s", code, e)
	}
}

// TestExitCodeInterrupted: a cancelled context (what SIGINT/SIGTERM do)
// exits 130.
func TestExitCodeInterrupted(t *testing.T) {
	sp := copyFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := MainContext(ctx, []string{"sfstate", "check", sp}, &out, &errOut)
	if code != ExitInterrupted || !strings.Contains(errOut.String(), "interrupted") {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}

// TestEveryCommandClassifiesErrors walks every command and subcommand:
// an unknown flag is a usage error naming the command, and the commands
// that read a savepoint map a missing, a corrupt and an unsupported input to
// 3, 3 and 4.
func TestEveryCommandClassifiesErrors(t *testing.T) {
	app := NewApp(io.Discard, io.Discard)
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" {
				continue
			}
			p := append(append([]string(nil), path...), c.Name)
			t.Run(strings.Join(p, "_")+"/unknown-flag", func(t *testing.T) {
				_, e, code := run(t, append(p, "--no-such-flag-at-all")...)
				if code != ExitUsage || !strings.Contains(e, "sfstate "+strings.Join(p, " ")+": unknown flag --no-such-flag-at-all") {
					t.Fatalf("exit %d: %s", code, e)
				}
			})
			walk(p, c.Subcommands)
		}
	}
	walk(nil, app.Commands)

	b := makeBadInputs(t)
	dst := func() string { return filepath.Join(t.TempDir(), "dst") }
	readers := map[string]func(src string) []string{
		"check":   func(src string) []string { return []string{"check", src} },
		"inspect": func(src string) []string { return []string{"inspect", src} },
		"rescale": func(src string) []string { return []string{"rescale", src, "-p", "2", "--out", dst()} },
		"verify":  func(src string) []string { return []string{"verify", "--backends", "none", src} },
		"migrate": func(src string) []string { return []string{"migrate", src, dst()} },
	}
	for name, args := range readers {
		if findCommand(app.Commands, name) == nil {
			continue // not in this build
		}
		for _, in := range []struct {
			what string
			path string
			code int
		}{{"missing", b.missing, ExitIO}, {"corrupt", b.corrupt, ExitIO}, {"unsupported", b.unsupported, ExitUnsupported}} {
			if name == "migrate" && in.what == "missing" {
				continue // migrate reads a store of checkpoints: checked below
			}
			t.Run(name+"/"+in.what, func(t *testing.T) {
				_, e, code := run(t, args(in.path)...)
				if code != in.code {
					t.Fatalf("exit %d, want %d: %s", code, in.code, e)
				}
				if !strings.Contains(e, in.path) {
					t.Fatalf("message does not name the input %s: %s", in.path, e)
				}
			})
		}
	}
}

func TestExitCodeSentinels(t *testing.T) {
	cases := []struct {
		err  error
		code int
	}{
		{nil, ExitOK},
		{fmt.Errorf("x: %w", context.Canceled), ExitInterrupted},
		{Fail(ExitIO, fmt.Errorf("open: %w", savepoint.ErrUnsupported)), ExitUnsupported},
		{Fail(ExitUsage, fmt.Errorf("rescale: %w", savepoint.ErrUnsupported)), ExitUnsupported},
		{fmt.Errorf("get: %w", s3.ErrNotExist), ExitIO},
		{fmt.Errorf("parse: %w", savepoint.ErrFormat), ExitIO},
		{fmt.Errorf("p: %w", os.ErrNotExist), ExitIO},
		{errors.New("something unforeseen"), ExitIO},
		{Failf(ExitCheckFailed, "2 problems"), ExitCheckFailed},
		{&UsageError{Msg: "x"}, ExitUsage},
		{errors.New(`Required flag "parallelism" not set`), ExitUsage},
		{fmt.Errorf("%w: bad", s3.ErrBadKey), ExitUsage},
		// Classes, not lists: a sentinel of any package, by its class.
		{fmt.Errorf("x: %w", errclass.New(errclass.ErrUnsupported, "pkg: old layout")), ExitUnsupported},
		{Fail(ExitUsage, errclass.Corruptf("f", 3, "bad")), ExitUsage},
		{fmt.Errorf("open: %w", &errclass.CorruptionError{File: "m", Offset: 4, Err: savepoint.ErrUnsupported}), ExitUnsupported},
	}
	for _, c := range cases {
		if got := ExitCode(c.err); got != c.code {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.code)
		}
	}
}

func TestMessage(t *testing.T) {
	sdk := errors.Join(s3.ErrPermanent, errors.New("operation error S3: GetObject, https response error StatusCode: 403, RequestID: 1838A2E0D7BAA0F5, HostID: dd9025bab4ad464b049177c95eb6ebf374d3b3fd1af9251148b658df7ac2e3e8, api error AccessDenied: Access Denied"))
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("s3://b/sp: get _metadata: %w", sdk), "s3://b/sp: get _metadata: HTTP 403 AccessDenied: Access Denied"},
		{errors.New("f: at offset 11: keyed: at offset 11: binfmt: corrupt data: bad tag"), "f: at offset 11: keyed: corrupt data: bad tag"},
		{errors.New(`--key-groups "x": strconv.Atoi: parsing "x": invalid syntax`), `--key-groups "x": "x" is not a number`},
		{errors.New(`invalid value "abc" for flag -max-problems: parse error`), `--max-problems: "abc" is not a number`},
		{errors.New("a\nb"), "a; b"},
		{errors.New("savepoint: s3://b/sp/_metadata: s3://b/sp: stat _metadata: HTTP 404 NotFound"), "s3://b/sp/_metadata: stat: HTTP 404 NotFound"},
	}
	for _, c := range cases {
		if got := Message(c.err, errorContext{}); got != c.want {
			t.Errorf("Message(%q)\n got %q\nwant %q", c.err, got, c.want)
		}
	}
}
