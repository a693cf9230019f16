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
