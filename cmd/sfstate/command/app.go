// Package command holds the sfstate CLI. Each subcommand lives in its own
// file, registers itself from init() with Register, fills an options struct
// from its flags and calls a library package; output goes to the app's
// Writer so tests can run commands in-process.
//
// Exit codes (documented in --help):
//
//	0  ok
//	1  check failed / differences found
//	2  usage error
//	3  I/O error or corrupt input
package command

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/urfave/cli/v2"
)

// Exit codes. Part of the CLI contract: never change their meaning.
const (
	ExitOK          = 0
	ExitCheckFailed = 1
	ExitUsage       = 2
	ExitIO          = 3
)

// ExitError carries an exit code with its cause.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Fail wraps err with an exit code.
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
}

// GlobalsFrom reads the global flags from a command context.
func GlobalsFrom(c *cli.Context) Globals {
	return Globals{
		JSON:       c.Bool("json"),
		Quiet:      c.Bool("quiet"),
		NoProgress: c.Bool("no-progress"),
	}
}

const exitHelp = `EXIT CODES:
   0  ok
   1  check failed / differences found
   2  usage error
   3  I/O error or corrupt input`

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
	app := &cli.App{
		Name:      "sfstate",
		Usage:     "inspect, migrate, rescale and verify Flink-compatible stream state",
		Writer:    out,
		ErrWriter: errOut,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output", EnvVars: []string{"SFSTATE_JSON"}},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only results and errors", EnvVars: []string{"SFSTATE_QUIET"}},
			&cli.BoolFlag{Name: "no-progress", Usage: "never draw progress bars", EnvVars: []string{"SFSTATE_NO_PROGRESS"}},
		},
		Commands:              cmds,
		CustomAppHelpTemplate: cli.AppHelpTemplate + "\n" + exitHelp + "\n",
		ExitErrHandler:        func(*cli.Context, error) {}, // Main maps errors to codes
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return Fail(ExitUsage, err)
		},
	}
	for _, c := range cmds {
		if c.Name == "bench" {
			c.Subcommands = benchCommands()
		}
		if c.OnUsageError == nil {
			c.OnUsageError = func(c *cli.Context, err error, _ bool) error { return Fail(ExitUsage, err) }
		}
	}
	return app
}

// Main runs the app and returns the process exit code.
func Main(args []string, out, errOut io.Writer) int {
	app := NewApp(out, errOut)
	err := app.Run(args)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(errOut, "sfstate: %v\n", err)
	return ExitCode(err)
}

// ExitCode maps an error to the documented exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var ce cli.ExitCoder
	if errors.As(err, &ce) {
		return ce.ExitCode()
	}
	// urfave reports unknown commands/flags as plain errors.
	return ExitUsage
}
