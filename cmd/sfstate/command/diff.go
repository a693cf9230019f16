package command

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/sfstate/sfstate/statediff"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "diff",
		Usage:     "compare the keyed state of two snapshots entry by entry (exit 1 when they differ)",
		ArgsUsage: "A B",
		Description: `Matches the keyed entries of two savepoints or checkpoints of one job by
their key, namespace and user key (the whole timer for timers), whatever
their format, parallelism or max parallelism, and reports per operator and
state the entries added (only in B), removed (only in A) and changed, with
up to --limit examples of each as decoded JSON. Entries whose value is equal
and whose TTL timestamp differs are counted apart (ttl), or not at all with
--ignore-ttl. When both sides share an operator's max parallelism, key
groups with equal digests are skipped. Exit code 1 when the snapshots
differ, 0 when they are equal.

Entries are compared by the bytes Flink's serializers wrote; values whose
bytes differ are decoded where one value can be written in several ways
(rows, maps, Kryo, ...), and a state whose serializers differ between the
two snapshots is compared by decoded values throughout (a note says so).

Each comparison sorts both sides' entries and merges them. At most --memory
of entries is held (half per side); beyond it sorted runs are spilled to a
scratch directory under --temp-dir (named sfstate-tmp-diff-*, removed when
diff ends, also on errors and interrupts), so a huge key group needs disk
space, not memory. The result is the same either way.`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "limit", Value: 5, Usage: "examples per kind of difference and state"},
			&cli.StringFlag{Name: "operator", Usage: "only this operator (id, uid or name)"},
			&cli.StringFlag{Name: "state", Usage: "only this keyed state name"},
			&cli.BoolFlag{Name: "ignore-ttl", Usage: "do not report entries that differ only in their TTL timestamp"},
			&cli.StringFlag{Name: "memory", Value: "256MiB", Usage: "entries held in memory before sorted runs spill to disk (bytes, or with KiB, MiB, GiB)"},
			&cli.StringFlag{Name: "temp-dir", Usage: "directory for spilled runs (default: system temp)"},
			savepointS3EndpointFlag,
		},
		Action: runDiff,
	})
}

func runDiff(c *cli.Context) error {
	if c.NArg() != 2 {
		return Failf(ExitUsage, "diff takes two savepoint paths")
	}
	mem, err := parseByteSize(c.String("memory"))
	if c.Int("limit") < 0 || err != nil || mem < 1 {
		return Failf(ExitUsage, "--limit must not be negative and --memory a positive size such as 256MiB (got %q)", c.String("memory"))
	}
	g := GlobalsFrom(c)
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := openSavepointArg(ctx, c, c.Args().Get(0))
	if err != nil {
		return err
	}
	b, err := openSavepointArg(ctx, c, c.Args().Get(1))
	if err != nil {
		return err
	}
	res, err := statediff.Diff(ctx, a, b, statediff.Options{
		Operator: c.String("operator"), State: c.String("state"), Limit: c.Int("limit"),
		IgnoreTTL: c.Bool("ignore-ttl"), MemoryBytes: mem, TempDir: c.String("temp-dir"),
	})
	if err != nil {
		return Fail(ExitIO, err)
	}
	w := c.App.Writer
	if g.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return Fail(ExitIO, err)
		}
	} else {
		var entries int64
		for _, s := range res.States {
			entries += s.EntriesA
			if !s.Differs() {
				continue
			}
			fmt.Fprintf(w, "%s %s: +%d added, -%d removed, ~%d changed", s.Operator, s.State, s.Added, s.Removed, s.Changed)
			if s.TTLChanged > 0 {
				fmt.Fprintf(w, ", %d TTL only", s.TTLChanged)
			}
			fmt.Fprintf(w, " (%d vs %d entries)\n", s.EntriesA, s.EntriesB)
			if g.Quiet {
				continue
			}
			for _, e := range s.AddedExamples {
				fmt.Fprintf(w, "  + %s\n", e)
			}
			for _, e := range s.RemovedExamples {
				fmt.Fprintf(w, "  - %s\n", e)
			}
			for _, ch := range s.ChangedExamples {
				fmt.Fprintf(w, "  ~ %s\n    -> %s\n", ch.Before, ch.After)
			}
			for _, ch := range s.TTLChangedExamples {
				fmt.Fprintf(w, "  ttl %s\n    -> %s\n", ch.Before, ch.After)
			}
		}
		for _, n := range res.Notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
		if res.Equal {
			what := "equal"
			if res.Incomplete {
				what = "equal where compared"
			}
			fmt.Fprintf(w, "%s: %d states, %d entries\n", what, len(res.States), entries)
		}
	}
	if !res.Equal {
		return Failf(ExitCheckFailed, "the snapshots differ")
	}
	if res.Incomplete {
		return Failf(ExitIO, "some keyed state could not be compared (see the notes)")
	}
	return nil
}

// parseByteSize reads a size: a byte count, optionally with a unit (B, KiB,
// MiB, GiB, TiB; KB, MB, GB, TB and K, M, G, T as the same powers of two).
func parseByteSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	num, unit := strings.TrimSpace(s[:i]), strings.ToUpper(strings.TrimSpace(s[i:]))
	shift := 0
	switch strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I") {
	case "":
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	case "T":
		shift = 40
	default:
		return 0, fmt.Errorf("unknown unit %q", s[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n << shift, nil
}
