// Package command holds the sfstate CLI. Each subcommand lives in its own
// file, registers itself from init() with Register, fills an options struct
// from its flags and calls a library package; output goes to the app's
// Writer so tests can run commands in-process.
//
// Flags may be given before or after positional arguments and global flags
// after the command (see normalizeArgs). Exit codes (documented in --help and
// the README; derived from the error's class in ExitCode):
//
//	0    ok
//	1    check, verify or diff found differences
//	2    usage error: unknown command or flag, bad value
//	3    corrupt or unreadable input (names file and offset)
//	4    valid input that sfstate does not support (names the feature)
//	130  interrupted (SIGINT or SIGTERM)
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sfstate/sfstate/s3"
	"github.com/urfave/cli/v2"
)

// Exit codes. Part of the CLI contract: never change their meaning.
const (
	ExitOK          = 0
	ExitCheckFailed = 1
	ExitUsage       = 2
	ExitIO          = 3
	ExitUnsupported = 4
	ExitInterrupted = 130
)

// ExitError carries an exit code with its cause.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Fail wraps err with an exit code. The code is a hint: ExitCode lets a more
// specific library sentinel in err's chain decide the class.
func Fail(code int, err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: code, Err: err}
}

// Failf formats an error with an exit code.
func Failf(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

var (
	regMu    sync.Mutex
	registry []*cli.Command
)

// Register adds a top-level command. Call it from init() in the command's file.
func Register(c *cli.Command) {
	regMu.Lock()
	defer regMu.Unlock()
	registry = append(registry, c)
}

// Globals are the flags every command sees.
type Globals struct {
	JSON       bool
	Quiet      bool
	NoProgress bool
	Verbose    bool
}

// GlobalsFrom reads the global flags from a command context.
func GlobalsFrom(c *cli.Context) Globals {
	return Globals{
		JSON:       c.Bool("json"),
		Quiet:      c.Bool("quiet"),
		NoProgress: c.Bool("no-progress"),
		Verbose:    c.Bool("verbose"),
	}
}

// s3Options are the S3 settings of the global flags (--s3-endpoint,
// --profile, --region, --no-sign-request); the AWS SDK's chain (env,
// shared config, roles) supplies the rest.
func s3Options(c *cli.Context) s3.S3Options {
	return s3.S3Options{Endpoint: c.String("s3-endpoint"), Profile: c.String("profile"), Region: c.String("region"),
		Anonymous: c.Bool("no-sign-request")}
}

// globalFlags are accepted before or after any command.
func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "machine-readable output", EnvVars: []string{"SFSTATE_JSON"}},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only results and errors", EnvVars: []string{"SFSTATE_QUIET"}},
		&cli.BoolFlag{Name: "no-progress", Usage: "never draw progress bars", EnvVars: []string{"SFSTATE_NO_PROGRESS"}},
		&cli.BoolFlag{Name: "verbose", Usage: "on failure also print the error's cause chain", EnvVars: []string{"SFSTATE_VERBOSE"}},
		&cli.BoolFlag{Name: "version", Usage: "print the version and exit"},
		&cli.StringFlag{Name: "s3-endpoint", Aliases: []string{"endpoint-url"}, Usage: "endpoint `URL` of an S3-compatible store for s3:// paths, e.g. http://127.0.0.1:7070 (else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL)", EnvVars: []string{"SFSTATE_S3_ENDPOINT"}},
		&cli.StringFlag{Name: "profile", Usage: "AWS shared-config `PROFILE` for s3:// paths (else AWS_PROFILE / default)"},
		&cli.StringFlag{Name: "region", Usage: "AWS `REGION` for s3:// paths (else AWS_REGION / the profile's / us-east-1)"},
		&cli.BoolFlag{Name: "no-sign-request", Usage: "send unsigned S3 requests (public buckets); no credentials are looked up"},
	}
}

const exitHelp = `EXIT CODES:
   0    ok
   1    check, verify or diff found differences
   2    usage error: unknown command or flag, bad value
   3    corrupt or unreadable input (the message names the file and offset)
   4    valid input that sfstate does not support (the message names the feature)
   130  interrupted (SIGINT or SIGTERM)`

// NewApp builds the CLI application writing to out and errOut.
func NewApp(out, errOut io.Writer) *cli.App {
	regMu.Lock()
	cmds := append([]*cli.Command(nil), registry...)
	regMu.Unlock()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	if len(benchCommands()) == 0 {
		// Only commands that work are listed: hide bench until it has one.
		kept := cmds[:0]
		for _, c := range cmds {
			if c.Name != "bench" {
				kept = append(kept, c)
			}
		}
		cmds = kept
	}
	globals := globalFlags()
	app := &cli.App{
		Name:                  "sfstate",
		Usage:                 "inspect, migrate, rescale and verify Flink-compatible stream state",
		Writer:                out,
		ErrWriter:             errOut,
		Flags:                 globals,
		Commands:              cmds,
		HideVersion:           true,
		CustomAppHelpTemplate: cli.AppHelpTemplate + "\nFlags may be given before or after arguments; global options after the command too.\n\n" + exitHelp + "\n",
		ExitErrHandler:        func(*cli.Context, error) {}, // Main maps errors to codes
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return flagUsageError(c, err)
		},
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				return printVersion(c)
			}
			return cli.ShowAppHelp(c)
		},
	}
	names := map[string]bool{}
	for _, f := range globals {
		for _, n := range f.Names() {
			names[n] = true
		}
	}
	regMu.Lock()
	for _, c := range cmds {
		if prepared[c] {
			continue
		}
		prepared[c] = true
		if c.Name == "bench" {
			c.Subcommands = benchCommands()
		}
		prepareCommand(c, names, "")
	}
	regMu.Unlock()
	return app
}

// prepared holds the registered commands prepareCommand has adjusted (once:
// apps are built per Main call, possibly concurrently in tests).
var prepared = map[*cli.Command]bool{}

// prepareCommand drops a command's own copies of global flags (so that
// c.String("s3-endpoint") reads the global one wherever it was given),
// attaches the usage-error handler and the exit-code footer, recursively.
func prepareCommand(c *cli.Command, global map[string]bool, parent string) {
	path := strings.TrimSpace(parent + " " + c.Name)
	kept := c.Flags[:0:0]
	for _, f := range c.Flags {
		dup := false
		for _, n := range f.Names() {
			dup = dup || global[n]
		}
		if !dup {
			kept = append(kept, f)
		}
	}
	c.Flags = kept
	// Required flags are checked here, not by urfave (which prints the
	// whole help before its error): one line naming what is missing.
	var required []string
	for _, f := range c.Flags {
		if unrequire(f) {
			required = append(required, f.Names()[0])
		}
	}
	if len(required) > 0 {
		before := c.Before
		c.Before = func(ctx *cli.Context) error {
			var missing []string
			for _, n := range required {
				if !ctx.IsSet(n) {
					missing = append(missing, dashed(n))
				}
			}
			if len(missing) > 0 {
				return &UsageError{Msg: fmt.Sprintf("%s: %s required", path, strings.Join(missing, ", "))}
			}
			if before != nil {
				return before(ctx)
			}
			return nil
		}
	}
	if c.OnUsageError == nil {
		c.OnUsageError = func(c *cli.Context, err error, _ bool) error { return flagUsageError(c, err) }
	}
	if c.CustomHelpTemplate == "" && len(c.Subcommands) == 0 {
		c.CustomHelpTemplate = cli.CommandHelpTemplate + "\nGLOBAL OPTIONS (before or after the command): --json, --quiet, --no-progress, --verbose,\n   --s3-endpoint URL, --profile NAME, --region NAME, --no-sign-request (see sfstate --help)\n\n" + exitHelp + "\n"
	}
	for _, s := range c.Subcommands {
		prepareCommand(s, global, path)
	}
}

// unrequire clears a flag's Required mark (noting it in its usage) and
// reports whether it was set.
func unrequire(f cli.Flag) bool {
	switch x := f.(type) {
	case *cli.IntFlag:
		if x.Required {
			x.Required, x.Usage = false, x.Usage+" (required)"
			return true
		}
	case *cli.Int64Flag:
		if x.Required {
			x.Required, x.Usage = false, x.Usage+" (required)"
			return true
		}
	case *cli.StringFlag:
		if x.Required {
			x.Required, x.Usage = false, x.Usage+" (required)"
			return true
		}
	case *cli.Float64Flag:
		if x.Required {
			x.Required, x.Usage = false, x.Usage+" (required)"
			return true
		}
	}
	return false
}

// defaultRE finds urfave's " (default: X)" suffix in a flag's help line.
var defaultRE = regexp.MustCompile(` \(default: ([^()]*)\)`)

func init() {
	// One default per flag: a usage text that states its own default keeps
	// it, and zero defaults (false, 0, 0s) are not printed.
	orig := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string {
		s := orig(f)
		locs := defaultRE.FindAllStringSubmatchIndex(s, -1)
		if len(locs) == 0 {
			return s
		}
		last := locs[len(locs)-1]
		val := s[last[2]:last[3]]
		if len(locs) > 1 || val == "false" || val == "0" || val == "0s" || val == `""` || strings.Contains(s[:last[0]], "(default") {
			s = s[:last[0]] + s[last[1]:]
		}
		return s
	}
}

// interruptGrace is how long a command may take to stop (and remove its
// temporary files) after SIGINT/SIGTERM cancelled its context.
const interruptGrace = 10 * time.Second

// Main runs the app and returns the process exit code. SIGINT and SIGTERM
// cancel the context commands run with; the run then exits 130. A second
// signal, or a command still running interruptGrace after the first, ends
// the process at once (also 130).
func Main(args []string, out, errOut io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
		case <-time.After(interruptGrace):
		case <-done:
			return
		}
		fmt.Fprintln(errOut, "sfstate: interrupted")
		os.Exit(ExitInterrupted)
	}()
	return MainContext(ctx, args, out, errOut)
}

// MainContext is Main with the caller's context: its cancellation counts
// as an interrupt (exit 130).
func MainContext(ctx context.Context, args []string, out, errOut io.Writer) int {
	app := NewApp(out, errOut)
	rest, err := normalizeArgs(app, args[1:])
	if err != nil {
		// The message starts with the command path ("sfstate rescale: ...").
		fmt.Fprintf(errOut, "%s\n", err)
		return ExitUsage
	}
	if versionRequested(rest) {
		// --version anywhere prints the version, whatever the command.
		rest = []string{"--version"}
		if GlobalsFromArgs(args[1:]).JSON {
			rest = append(rest, "--json")
		}
	}
	err = app.RunContext(ctx, append([]string{args[0]}, rest...))
	if err == nil {
		return ExitOK
	}
	code := ExitCode(err)
	if ctx.Err() != nil {
		code = ExitInterrupted
		err = errors.Join(context.Canceled, err)
	}
	fmt.Fprintf(errOut, "sfstate: %s\n", Message(err, errorContext{args: positional(rest)}))
	if verboseRequested(rest) {
		prev := ""
		for _, l := range causeChain(err) {
			// Wrappers that add nothing to the message are skipped.
			if msg := l[strings.Index(l, ": ")+2:]; msg != prev {
				fmt.Fprintf(errOut, "  cause: %s\n", l)
				prev = msg
			}
		}
	}
	return code
}

// positional returns the arguments after the "--" normalizeArgs inserts.
func positional(args []string) []string {
	for i, a := range args {
		if a == "--" {
			return args[i+1:]
		}
	}
	return nil
}

func versionRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--version" || a == "-version" || a == "--version=true" {
			return true
		}
	}
	return false
}

// GlobalsFromArgs reads --json from raw arguments (before a command ran).
func GlobalsFromArgs(args []string) Globals {
	var g Globals
	for _, a := range args {
		if a == "--" {
			break
		}
		g.JSON = g.JSON || a == "--json" || a == "-json" || a == "--json=true"
	}
	return g
}

func verboseRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--verbose" || a == "-verbose" || a == "--verbose=true" {
			return true
		}
	}
	return os.Getenv("SFSTATE_VERBOSE") == "true" || os.Getenv("SFSTATE_VERBOSE") == "1"
}
