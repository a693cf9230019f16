package command

import (
	"fmt"

	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "check",
		Usage:     "verify a savepoint's structure: files, sizes, offsets, key-group blocks and key placement",
		ArgsUsage: "PATH|s3://bucket/prefix",
		Description: `Checks that every referenced file exists inside the savepoint with its
recorded size, that key-group offsets lie inside their files in ascending
order, that every key-group block decodes completely and that every key is
stored in the key group its hash assigns. Exits 0 when clean, 1 listing each
problem with file and offset, 3 when the savepoint cannot be read at all,
4 when it uses a feature sfstate does not read (the message names it).`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "metadata-only", Usage: "check files and offsets only, do not decode key-group blocks"},
			&cli.IntFlag{Name: "max-problems", Value: 1000, Usage: "stop after this many problems"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "state files checked at once"},
			savepointS3EndpointFlag,
		},
		Action: runCheck,
	})
}

func runCheck(c *cli.Context) error {
	if c.NArg() != 1 {
		return Failf(ExitUsage, "check takes exactly one savepoint path")
	}
	g := GlobalsFrom(c)
	sp, err := openSavepointArg(c.Context, c, c.Args().First())
	if err != nil {
		return err
	}
	opts := savepoint.CheckOptions{MaxProblems: c.Int("max-problems"), SkipData: c.Bool("metadata-only"), Concurrency: max(1, c.Int("concurrency"))}
	bar := progress.New(c.App.ErrWriter, g.JSON || g.Quiet || g.NoProgress, "checking key groups", 0, "key groups")
	if bar != nil {
		opts.Progress = bar
	}
	probs, stats := savepoint.Check(c.Context, sp, opts)
	bar.Done()
	if err := c.Context.Err(); err != nil {
		return Fail(ExitIO, err)
	}
	savepoint.SortProblems(probs)
	w := c.App.Writer
	if g.JSON {
		if probs == nil {
			probs = []savepoint.Problem{}
		}
		if err := writeJSON(w, struct {
			Source   string               `json:"source"`
			OK       bool                 `json:"ok"`
			Problems []savepoint.Problem  `json:"problems"`
			Stats    savepoint.CheckStats `json:"stats"`
		}{sp.Name(), len(probs) == 0, probs, stats}); err != nil {
			return Fail(ExitIO, err)
		}
	} else {
		for _, p := range probs {
			fmt.Fprintln(w, oneOffset(p.String()))
		}
		if !g.Quiet {
			status := "ok"
			if len(probs) > 0 {
				status = plural(len(probs), "problem")
			}
			fmt.Fprintf(w, "%s: %s (%s, %s, %s, %s verified, %d not verifiable, %s not decoded, %s decoded, %d not decoded)\n",
				sp.Name(), status, plural(stats.Files, "file"), plural(stats.KeyGroups, "key group"), plural(int(stats.Entries), "entry"),
				plural(int(stats.KeysVerified), "key"), stats.KeysUnverified, plural(stats.NativeHandles, "native handle"),
				plural(stats.OperatorStatesVerified, "operator-state stream"), stats.OperatorStatesUnverified)
		}
	}
	if len(probs) > 0 {
		unsupported := 0
		for _, p := range probs {
			if p.Unsupported {
				unsupported++
			}
		}
		if unsupported == len(probs) {
			// Nothing found wrong, but not all of it could be checked.
			return Failf(ExitUnsupported, "%s: %s sfstate does not decode (nothing found wrong)", sp.Name(), plural(len(probs), "part"))
		}
		return Failf(ExitCheckFailed, "%s: %s found", sp.Name(), plural(len(probs), "problem"))
	}
	return nil
}
