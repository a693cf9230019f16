package command

import (
	"sort"
	"sync"

	"github.com/urfave/cli/v2"
)

var (
	benchMu   sync.Mutex
	benchSubs []*cli.Command
)

// RegisterBench adds a `sfstate bench NAME` subcommand. Call it from init().
// Every bench subcommand accepts --quick and --json (the global --json).
func RegisterBench(c *cli.Command) {
	benchMu.Lock()
	defer benchMu.Unlock()
	benchSubs = append(benchSubs, c)
}

func init() {
	Register(&cli.Command{
		Name:  "bench",
		Usage: "run a benchmark and print its table (see each subcommand)",
		Before: func(c *cli.Context) error {
			return nil
		},
		Subcommands: nil, // filled lazily in benchCommands
	})
}

// benchCommands returns the registered bench subcommands, sorted.
func benchCommands() []*cli.Command {
	benchMu.Lock()
	defer benchMu.Unlock()
	out := append([]*cli.Command(nil), benchSubs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// benchEntriesRounds reads the --quick, --entries and --rounds flags shared
// by the savepoint-reading benchmarks (inspect, export): 10M entries,
// 200,000 with --quick.
func benchEntriesRounds(c *cli.Context, name string) (int64, error) {
	n := int64(10_000_000)
	if c.Bool("quick") {
		n = 200_000
	}
	if c.IsSet("entries") {
		n = c.Int64("entries")
	}
	if n <= 0 || n > 1<<32 {
		return 0, Failf(ExitUsage, "bench %s: --entries %d out of range (1..2^32)", name, n)
	}
	if c.Int("rounds") < 1 || c.Int("rounds") > 100 {
		return 0, Failf(ExitUsage, "bench %s: --rounds must be 1..100", name)
	}
	return n, nil
}
