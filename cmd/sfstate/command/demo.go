//go:build cgo

package command

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/urfave/cli/v2"

	"github.com/sfstate/sfstate/demo"
)

func init() {
	Register(&cli.Command{
		Name:  "demo",
		Usage: "run the whole toolkit end to end on a generated Nexmark-shaped job (local store, or loopback S3 with --s3)",
		Description: "Runs a stateful job at parallelism 2, snapshots it as a native checkpoint and a canonical savepoint,\n" +
			"then inspects, migrates (bucket -> record join layout), rescales (2 -> 3) and verifies them with the\n" +
			"same commands users run, and finally inspects and verifies a savepoint written by Flink itself\n" +
			"(when the fixtures are present). Exits non-zero naming the step that failed.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: "out/demo", Usage: "directory for every artifact (report.html stays there)"},
			&cli.BoolFlag{Name: "keep", Usage: "keep every intermediate store under --dir"},
			&cli.BoolFlag{Name: "quick", Usage: "small scale (under 2 minutes on 2 busy cores)"},
			&cli.BoolFlag{Name: "s3", Usage: "put the stores on a loopback versitygw S3 server the demo starts and stops"},
			&cli.Int64Flag{Name: "events", Usage: "events fed through the job (default 1000000, 200000 with --quick)"},
		},
		Action: runDemo,
	})
}

func runDemo(c *cli.Context) error {
	if c.NArg() != 0 {
		return Failf(ExitUsage, "demo takes no arguments")
	}
	if n := c.Int64("events"); c.IsSet("events") && (n < 1000 || n > 1<<34) {
		return Failf(ExitUsage, "--events must be in [1000, 2^34]")
	}
	g := GlobalsFrom(c)
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
	defer stop()
	var prog io.Writer
	if !g.NoProgress && !g.Quiet && !g.JSON {
		prog = c.App.ErrWriter
	}
	cfg := demo.Config{
		Dir: c.String("dir"), Events: c.Int64("events"), Quick: c.Bool("quick"), Keep: c.Bool("keep"), S3: c.Bool("s3"),
		Out: c.App.Writer, Progress: prog, Seed: 42,
		Exec: func(args []string, out, errOut io.Writer) int { return Main(args, out, errOut) },
	}
	if g.JSON {
		// The step report goes to stderr, the figures as JSON to stdout.
		cfg.Out = c.App.ErrWriter
	}
	res, err := demo.Run(ctx, cfg)
	if g.JSON && res != nil {
		if jerr := writeJSON(c.App.Writer, res); jerr != nil && err == nil {
			return Fail(ExitIO, jerr)
		}
	}
	if err != nil {
		var se *demo.StepError
		if errors.As(err, &se) {
			code := ExitIO
			if se.Step == 6 || se.Step == 4 {
				code = ExitCheckFailed
			}
			return Fail(code, fmt.Errorf("demo: %w", err))
		}
		return Fail(ExitIO, fmt.Errorf("demo: %w", err))
	}
	return nil
}
