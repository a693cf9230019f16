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
4 when it uses a feature sfstate does not read (the message names it).

When the directory holds a sums file (` + savepoint.SumsName + `, written by every
sfstate writer before _metadata, or by --record), every listed file's size
is compared; --read-data also reads each file and compares its SHA-256
(CRC-32C where only that is known), --read-data-subset n/t only the files
of subset n of t (chosen by a hash of the file name, so subsets 1/t..t/t
together read everything once). --record hashes every file of a savepoint
sfstate did not write and stores the sums file (nothing else is changed),
so later checks find bit rot.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "metadata-only", Usage: "check files and offsets only, do not decode key-group blocks"},
			&cli.IntFlag{Name: "max-problems", Value: 1000, Usage: "stop after this many problems"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "state files checked at once"},
			&cli.BoolFlag{Name: "read-data", Usage: "read every file listed in the sums file and compare its hash"},
			&cli.StringFlag{Name: "read-data-subset", Usage: "read only subset `n/t` of the listed files (deterministic by file name)"},
			&cli.BoolFlag{Name: "record", Usage: "write the sums file for this savepoint first (refuses to replace one)"},
			&cli.BoolFlag{Name: "record-overwrite", Usage: "with --record: replace an existing sums file"},
			savepointS3EndpointFlag, allowRootFlag, mapFlag, checkpointFlag,
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
	opts.Sums.ReadData = c.Bool("read-data")
	if s := c.String("read-data-subset"); s != "" {
		if opts.Sums.SubsetN, opts.Sums.SubsetOf, err = savepoint.ParseSubset(s); err != nil {
			return Fail(ExitUsage, err)
		}
	}
	if c.Bool("record") {
		n, err := savepoint.RecordSums(c.Context, sp, c.Bool("record-overwrite"))
		if err != nil {
			return Fail(ExitIO, err)
		}
		if !g.Quiet && !g.JSON {
			fmt.Fprintf(c.App.ErrWriter, "%s: recorded sums of %s\n", sp.Name(), plural(n, "file"))
		}
	} else if c.Bool("record-overwrite") {
		return Failf(ExitUsage, "--record-overwrite needs --record")
	}
	bar := progress.New(c.App.ErrWriter, g.JSON || g.Quiet || g.NoProgress, "checking", 0, "key groups")
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
			Picked   *savepoint.Picked    `json:"picked,omitempty"`
			OK       bool                 `json:"ok"`
			Problems []savepoint.Problem  `json:"problems"`
			Stats    savepoint.CheckStats `json:"stats"`
		}{sp.Name(), sp.Located, len(probs) == 0, probs, stats}); err != nil {
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
			if s := stats.Sums; s != nil {
				fmt.Fprintf(w, "%s: %s: %d of %d listed files sized, %d hashed (%d bytes read)\n", sp.Name(), savepoint.SumsName, s.SizesChecked, s.Listed, s.HashesChecked, s.BytesRead)
			}
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
