package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
	"github.com/urfave/cli/v2"
)

// verifyRestorer restores into engine backends; it is set by verify_cgo.go
// when the engine is built in (cgo), and nil otherwise.
var verifyRestorer verify.Restorer

// verifyNative verifies a native checkpoint of the engine (checkpoint id in
// a store rooted where shared/ and chk-<id>/ live); set by verify_cgo.go.
var verifyNative func(ctx context.Context, st s3.Storage, id int64, o verify.Options) (*verify.Report, error)

// verifyCompareNative compares two native checkpoints' logical digests
// (--against); set by verify_cgo.go.
var verifyCompareNative func(ctx context.Context, st s3.Storage, id int64, ast s3.Storage, aid int64, o verify.Options) (*verify.Report, error)

// nativeStore opens the store of a native checkpoint argument; ok is false
// when arg is not one (no chk-<id> with a manifest).
func nativeStore(c *cli.Context, arg string) (s3.Storage, int64, bool) {
	root, id, ok := nativeCheckpointArg(arg)
	if !ok {
		return nil, 0, false
	}
	st, err := savepointStore(c.Context, c, root)
	if err != nil {
		return nil, 0, false
	}
	if _, err := st.Stat(c.Context, fmt.Sprintf("chk-%d/manifest.json", id)); err != nil {
		return nil, 0, false
	}
	return st, id, true
}

// nativeCheckpointArg recognizes ".../chk-<id>" (or its _metadata) and
// returns the store root and the id.
func nativeCheckpointArg(arg string) (root string, id int64, ok bool) {
	a := strings.TrimSuffix(strings.TrimSuffix(arg, "/"), "/"+savepoint.MetadataName)
	i := strings.LastIndex(a, "/")
	if i < 0 {
		return "", 0, false
	}
	id, ok = savepoint.CheckpointDirID(a[i+1:])
	if !ok {
		return "", 0, false
	}
	root = a[:i]
	if root == "" || strings.HasSuffix(root, ":/") || strings.HasSuffix(root, ":") {
		return "", 0, false
	}
	return root, id, true
}

func init() {
	Register(&cli.Command{
		Name:      "verify",
		Usage:     "prove that a savepoint restores without loss into the engine's backends",
		ArgsUsage: "SAVEPOINT | --merge DIGEST...",
		Description: `Checks the savepoint's structure, digests its keyed state per operator,
state and key group (entries, multiset and association counts, TTL
timestamps, an order-independent hash of every entry), restores it into each
backend at each parallelism (default: the savepoint's and one more; an
operator whose max parallelism is lower, such as a global one, restores at
its max parallelism and the report says so), exports what the backend returns as a canonical savepoint and compares the
digests. Any difference names the operator, state and key group and shows
the first differing entries decoded side by side.

--ttl with --now: restored backends must return exactly the entries Flink
would still return at that time; the report counts the expired ones.
--against SRC compares the logical content of another snapshot (e.g. the
result of a migration) with SAVEPOINT. --shard i/n verifies one share of the
key groups and --digest-out writes its report; --merge combines the shard
reports into the final verdict.

Flink's native RocksDB snapshots are digested from their RocksDB entries and
restored from a canonical conversion made in the scratch directory (needs a
build with cgo).

Keyed state that cannot be restored (state only in a changelog backend's
change log, a state whose serializer cannot be read and that the engine
cannot hold) is skipped with a note and left out of the comparison on both
sides.

Exit status: 0 everything equal, 1 differences or structural problems,
2 usage, 3 unreadable input, 4 nothing could be restored (valid but
unsupported keyed state; the notes say why).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "backends", Value: "rocksdb,heap", Usage: "backends to restore into (rocksdb, heap; \"none\" = source only)"},
			&cli.StringFlag{Name: "parallelism", Usage: "comma-separated parallelisms to restore at (default: the savepoint's and one more)"},
			&cli.StringFlag{Name: "junit", Usage: "write JUnit XML to `FILE` (atomically)"},
			&cli.DurationFlag{Name: "ttl", Usage: "state TTL: restored backends must return exactly the entries live at --now"},
			&cli.StringFlag{Name: "now", Usage: "reference time for --ttl: RFC 3339 or epoch milliseconds (default: current time)"},
			&cli.StringFlag{Name: "against", Usage: "compare with another snapshot `SRC` (local or s3://)"},
			&cli.StringFlag{Name: "shard", Usage: "verify only shard `i/n` of the key groups"},
			&cli.StringFlag{Name: "digest-out", Usage: "write the full report with digests to `FILE` (atomically), for --merge"},
			&cli.BoolFlag{Name: "merge", Usage: "arguments are shard reports (--digest-out files): merge them into the final verdict"},
			&cli.IntFlag{Name: "samples", Value: 5, Usage: "differing entries shown per key group (0 = none)"},
			&cli.IntFlag{Name: "concurrency", Value: 2, Usage: "state files read at once"},
			&cli.BoolFlag{Name: "skip-check", Usage: "skip the structural check"},
			&cli.StringFlag{Name: "temp-dir", Usage: "directory for restored backends (default: system temp)"},
			savepointS3EndpointFlag, allowRootFlag, mapFlag, checkpointFlag,
		},
		Action: runVerify,
	})
}

func runVerify(c *cli.Context) error {
	g := GlobalsFrom(c)
	if c.Bool("merge") {
		return runVerifyMerge(c, g)
	}
	if c.NArg() != 1 {
		return Failf(ExitUsage, "verify takes exactly one savepoint path (or --merge DIGEST...)")
	}
	o := verify.Options{Samples: c.Int("samples"), Concurrency: max(1, c.Int("concurrency")), SkipCheck: c.Bool("skip-check"), TempDir: c.String("temp-dir")}
	if o.Samples == 0 {
		o.Samples = -1
	}
	if s := c.String("shard"); s != "" {
		sh, err := verify.ParseShard(s)
		if err != nil {
			return Fail(ExitUsage, err)
		}
		o.Shard = sh
	}
	if d := c.Duration("ttl"); d != 0 {
		if d < 0 {
			return Failf(ExitUsage, "--ttl must be positive")
		}
		now, err := inspectParseNow(c.String("now"))
		if err != nil {
			return Fail(ExitUsage, err)
		}
		o.TTL = verify.TTLCheck{TTLMillis: d.Milliseconds(), NowMillis: now}
	} else if c.String("now") != "" {
		return Failf(ExitUsage, "--now needs --ttl")
	}
	arg := c.Args().First()
	backends, err := verifyBackends(c.String("backends"))
	if err != nil {
		return Fail(ExitUsage, err)
	}
	if st, id, ok := nativeStore(c, arg); ok && verifyNative != nil {
		if a := c.String("against"); a != "" {
			ast, aid, ok := nativeStore(c, a)
			if !ok {
				return Failf(ExitUsage, "--against %s: a native checkpoint compares only with another native checkpoint (.../chk-N with its manifest)", a)
			}
			r, err := verifyCompareNative(c.Context, st, id, ast, aid, o)
			if err != nil {
				return Fail(ExitIO, err)
			}
			return verifyOutput(c, g, r)
		}
		if c.IsSet("parallelism") {
			pars, err := verifyParallelisms(c.String("parallelism"), nil)
			if err != nil {
				return Fail(ExitUsage, err)
			}
			for _, b := range backends {
				for _, p := range pars {
					o.Targets = append(o.Targets, verify.Target{Backend: b, Parallelism: p})
				}
			}
		} else {
			for _, b := range backends {
				o.Targets = append(o.Targets, verify.Target{Backend: b}, verify.Target{Backend: b, Parallelism: -1})
			}
		}
		r, err := verifyNative(c.Context, st, id, o)
		if err != nil {
			return Fail(ExitIO, err)
		}
		return verifyOutput(c, g, r)
	}
	sp, err := openSavepointArg(c.Context, c, arg)
	if err != nil {
		return err
	}
	if a := c.String("against"); a != "" {
		if o.Against, err = openSavepointArg(c.Context, c, a); err != nil {
			return err
		}
		o.AgainstName = "against " + o.Against.Name()
	}
	if len(backends) > 0 {
		if verifyRestorer == nil {
			if c.IsSet("backends") {
				return Failf(ExitUsage, "this build has no engine (built without cgo): use --backends none")
			}
			fmt.Fprintln(c.App.ErrWriter, "sfstate verify: built without the engine (cgo): verifying the source only")
			backends = nil
		}
	}
	if len(backends) > 0 {
		pars, err := verifyParallelisms(c.String("parallelism"), sp)
		if err != nil {
			return Fail(ExitUsage, err)
		}
		for _, b := range backends {
			for _, p := range pars {
				o.Targets = append(o.Targets, verify.Target{Backend: b, Parallelism: p})
			}
		}
		o.Restorer = verifyRestorer
	}
	// Step lines ("checking structure", "digesting source") go to a
	// terminal, or anywhere with --verbose; never with --json or --quiet.
	if log := progress.Steps(c.App.ErrWriter, "verify: ", g.Verbose, g.JSON || g.Quiet || (g.NoProgress && !g.Verbose)); log != nil {
		o.Log = log
	}
	r, err := verify.Run(c.Context, sp, o)
	if err != nil {
		if c.Context.Err() != nil {
			return Fail(ExitIO, err)
		}
		return Fail(ExitIO, err)
	}
	return verifyOutput(c, g, r)
}

func verifyOutput(c *cli.Context, g Globals, r *verify.Report) error {
	if f := c.String("digest-out"); f != "" {
		var b strings.Builder
		if err := r.WriteJSON(&b); err != nil {
			return Fail(ExitIO, err)
		}
		if err := verify.WriteFileAtomic(f, []byte(b.String())); err != nil {
			return Fail(ExitIO, err)
		}
	}
	if f := c.String("junit"); f != "" {
		b, err := r.JUnit()
		if err != nil {
			return Fail(ExitIO, err)
		}
		if err := verify.WriteFileAtomic(f, b); err != nil {
			return Fail(ExitIO, err)
		}
	}
	w := c.App.Writer
	if g.JSON {
		if err := r.WriteJSON(w); err != nil {
			return Fail(ExitIO, err)
		}
	} else if !g.Quiet || !r.OK {
		if err := r.WriteTable(w); err != nil {
			return Fail(ExitIO, err)
		}
	}
	if !r.OK {
		return Failf(ExitCheckFailed, "%s: verification failed (%d failures)", r.Source, len(r.Failures()))
	}
	if r.Unsupported {
		return Failf(ExitUnsupported, "%s: not verified: %s", r.Source, r.Targets[0].Skipped)
	}
	return nil
}

func runVerifyMerge(c *cli.Context, g Globals) error {
	if c.NArg() == 0 {
		return Failf(ExitUsage, "--merge needs the shard reports")
	}
	var rs []*verify.Report
	for _, name := range c.Args().Slice() {
		f, err := os.Open(name)
		if err != nil {
			return Fail(ExitIO, err)
		}
		r, err := verify.ReadReport(f, name)
		f.Close()
		if err != nil {
			return Fail(ExitIO, err)
		}
		rs = append(rs, r)
	}
	r, err := verify.Merge(rs)
	if err != nil {
		return Fail(ExitIO, err)
	}
	return verifyOutput(c, g, r)
}

func verifyBackends(s string) ([]string, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		switch b {
		case "rocksdb", "heap":
		default:
			return nil, fmt.Errorf("--backends: unknown backend %q (rocksdb, heap, none)", b)
		}
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out, nil
}

// verifyParallelisms parses --parallelism; the default is the savepoint's
// own (0) and one more than the largest operator parallelism, when some
// operator's max parallelism allows it (the others restore at their max).
func verifyParallelisms(s string, sp *savepoint.Savepoint) ([]int, error) {
	if s == "" && sp != nil {
		p, maxP := 0, 0
		for _, op := range sp.Meta.Operators {
			keyed := false
			for _, st := range op.Subtasks {
				keyed = keyed || st.ManagedKeyed != nil
			}
			if keyed {
				p = max(p, int(op.Parallelism))
				maxP = max(maxP, int(op.MaxParallelism))
			}
		}
		if p > 0 && p+1 <= maxP {
			return []int{0, p + 1}, nil
		}
		return []int{0}, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 1<<15 {
			return nil, errors.New("--parallelism: want comma-separated non-negative integers")
		}
		out = append(out, n)
	}
	return out, nil
}
