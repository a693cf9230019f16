package command

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sfstate/sfstate/internal/bench/keygroupsbench"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:  "keygroups",
		Usage: "compute Flink key groups, subtask ranges and rescale plans",
		Description: `Flink puts each key into key group murmurHash(key.hashCode()) % maxParallelism
and gives subtask i of P the key groups [ceil(i*M/P), floor(((i+1)*M-1)/P)].
These subcommands reproduce that math exactly (see package keygroups).`,
		Subcommands: []*cli.Command{
			{
				Name:      "assign",
				Usage:     "print the key group and owning subtask of keys",
				ArgsUsage: "KEY... | -",
				Description: `Each KEY is parsed as --key-type and hashed exactly as Flink hashes it.
A single - reads the keys from standard input instead, one per line (empty
lines are skipped).

KEY TYPES (DataStream keys, hashed with Java hashCode()):
   int, bigint (alias long), smallint (short), tinyint (byte), boolean,
   float, double, string (java.lang.String)
   tuple<T1, T2, ...>    a Flink TupleN of the types above, e.g. tuple<bigint>
                         for keyBy on a Tuple1<Long>; KEY = comma-separated fields

KEY TYPES (SQL keys: a BinaryRowData of the key columns, RowKind +I):
   row<T1, T2, ...>      T = BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT,
                         DOUBLE, STRING/VARCHAR(n)/CHAR(n), BYTES/VARBINARY(n),
                         DATE, TIME, TIMESTAMP(p), TIMESTAMP_LTZ(p), DECIMAL(p, s),
                         INTERVAL YEAR TO MONTH (months), INTERVAL DAY TO SECOND (millis)

FIELD SYNTAX for tuple and row keys: fields are separated by commas. The bare
word null is SQL NULL (rows only); wrap a field in double quotes to keep
commas, surrounding spaces or the literal text "null" ("" is one quote inside
quotes); unquoted fields are trimmed.
BYTES are hex (0x optional); DATE is YYYY-MM-DD or days; TIME HH:MM:SS[.fff]
or millis; TIMESTAMP "YYYY-MM-DD HH:MM:SS[.fff...]" (UTC) or epoch millis;
DECIMAL a plain decimal literal with at most s fraction digits. Negative
numbers are keys, not flags; put -- before any other key that starts with '-'.

EXAMPLES:
   sfstate keygroups assign --max-parallelism 128 --parallelism 4 --key-type bigint 1 2 3
   sfstate keygroups assign -m 4 -p 4 -t 'tuple<bigint>' 0 1 2 3
   sfstate keygroups assign -m 128 -t 'row<int, string>' '1,pen' 'null,"a, b"'

Without --max-parallelism, Flink's default for the parallelism is used
(max(128, next power of two of 1.5*P), at most 32768). --bytes adds the key
as stored in RocksDB and canonical savepoints: key-group prefix followed by
the key serializer's bytes (Long/Int/... big-endian, String as StringValue,
rows as i32 length + BinaryRowData).`,
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "max-parallelism", Aliases: []string{"m"}, Usage: "operator max parallelism (number of key groups); 0 = Flink's default for --parallelism"},
					&cli.IntFlag{Name: "parallelism", Aliases: []string{"p"}, Value: 1, Usage: "operator parallelism"},
					&cli.StringFlag{Name: "key-type", Aliases: []string{"t"}, Value: "bigint", Usage: "key type (see description)"},
					&cli.BoolFlag{Name: "bytes", Usage: "also print the serialized key with its key-group prefix (hex)"},
				},
				Action: runKeygroupsAssign,
			},
			{
				Name:  "ranges",
				Usage: "print the key-group range of every subtask",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "max-parallelism", Aliases: []string{"m"}, Usage: "operator max parallelism; 0 = Flink's default for --parallelism"},
					&cli.IntFlag{Name: "parallelism", Aliases: []string{"p"}, Required: true, Usage: "operator parallelism"},
				},
				Action: runKeygroupsRanges,
			},
			{
				Name:  "plan",
				Usage: "print which old subtasks' key groups each new subtask restores",
				Description: `For a change of parallelism from --from to --to under a fixed max parallelism,
prints every new subtask's key-group range and the pieces (old subtask,
key-group range) it restores — the intersections Flink's
StateAssignmentOperation hands to each subtask — and, per old subtask, which
new subtasks read its state.`,
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "max-parallelism", Aliases: []string{"m"}, Required: true, Usage: "operator max parallelism (unchanged by rescaling)"},
					&cli.IntFlag{Name: "from", Required: true, Usage: "old parallelism"},
					&cli.IntFlag{Name: "to", Required: true, Usage: "new parallelism"},
				},
				Action: runKeygroupsPlan,
			},
		},
	})
}

type assignedKey struct {
	Key      string `json:"key"`
	Hash     int32  `json:"hash"`
	KeyGroup int    `json:"keyGroup"`
	Subtask  int    `json:"subtask"`
	KeyBytes string `json:"keyBytes"`
}

type assignReport struct {
	MaxParallelism int           `json:"maxParallelism"`
	Parallelism    int           `json:"parallelism"`
	KeyType        string        `json:"keyType"`
	Keys           []assignedKey `json:"keys"`
}

func runKeygroupsAssign(c *cli.Context) error {
	g := GlobalsFrom(c)
	p := c.Int("parallelism")
	m := c.Int("max-parallelism")
	if m == 0 {
		m = keygroups.DefaultMaxParallelism(p)
		if m < 0 {
			return Failf(ExitUsage, "--parallelism %d not in [1, %d]", p, keygroups.MaxParallelismLimit)
		}
	}
	if err := keygroups.CheckParallelism(m, p); err != nil {
		return Fail(ExitUsage, err)
	}
	if c.NArg() == 0 {
		return Failf(ExitUsage, "keygroups assign: no keys given (usage: sfstate keygroups assign [flags] KEY... | -)")
	}
	spec, err := keygroups.ParseKeySpec(c.String("key-type"))
	if err != nil {
		return Fail(ExitUsage, fmt.Errorf("--key-type: %w", err))
	}
	keys := c.Args().Slice()
	if len(keys) == 1 && keys[0] == "-" {
		if keys, err = readKeyLines(c.App.Reader); err != nil {
			return err
		}
	}
	rep := assignReport{MaxParallelism: m, Parallelism: p, KeyType: c.String("key-type")}
	width := keygroups.PrefixWidth(m)
	for _, arg := range keys {
		k, ser, err := spec.Parse(arg)
		if err != nil {
			return Fail(ExitUsage, fmt.Errorf("key %q: %w", arg, err))
		}
		h := k.HashCode()
		kg := keygroups.KeyGroupFor(h, m)
		full := append(keygroups.AppendPrefix(nil, kg, width), ser...)
		rep.Keys = append(rep.Keys, assignedKey{
			Key: arg, Hash: h, KeyGroup: kg,
			Subtask:  keygroups.SubtaskForKeyGroup(m, p, kg),
			KeyBytes: hex.EncodeToString(full),
		})
	}
	w := c.App.Writer
	if g.JSON {
		return kgWriteJSON(w, rep)
	}
	if !g.Quiet {
		fmt.Fprintf(w, "max parallelism %d, parallelism %d, key type %s\n", m, p, rep.KeyType)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "KEY\tHASH\tKEY GROUP\tSUBTASK"
	if c.Bool("bytes") {
		header += "\tKEY BYTES"
	}
	fmt.Fprintln(tw, header)
	for _, k := range rep.Keys {
		line := fmt.Sprintf("%s\t%d\t%d\t%d", printableKey(k.Key), k.Hash, k.KeyGroup, k.Subtask)
		if c.Bool("bytes") {
			line += "\t" + k.KeyBytes
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// maxKeyLine bounds one line of keys read from standard input.
const maxKeyLine = 1 << 20

// readKeyLines reads one key per line, skipping empty lines and a trailing
// CR.
func readKeyLines(r io.Reader) ([]string, error) {
	if r == nil {
		return nil, Failf(ExitUsage, "keygroups assign: no standard input")
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxKeyLine)
	var keys []string
	line := 0
	for sc.Scan() {
		line++
		k := strings.TrimSuffix(sc.Text(), "\r")
		if k != "" {
			keys = append(keys, k)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, Failf(ExitUsage, "keygroups assign: standard input line %d longer than %d bytes", line+1, maxKeyLine)
		}
		return nil, Fail(ExitIO, fmt.Errorf("keygroups assign: reading standard input: %w", err))
	}
	if len(keys) == 0 {
		return nil, Failf(ExitUsage, "keygroups assign: no keys on standard input")
	}
	return keys, nil
}

func runKeygroupsRanges(c *cli.Context) error {
	g := GlobalsFrom(c)
	if c.NArg() > 0 {
		return Failf(ExitUsage, "keygroups ranges takes no arguments, got %q", c.Args().First())
	}
	p, m := c.Int("parallelism"), c.Int("max-parallelism")
	if m == 0 {
		if m = keygroups.DefaultMaxParallelism(p); m < 0 {
			return Failf(ExitUsage, "--parallelism %d not in [1, %d]", p, keygroups.MaxParallelismLimit)
		}
	}
	ranges := keygroups.Ranges(m, p)
	if ranges == nil {
		return Fail(ExitUsage, keygroups.CheckParallelism(m, p))
	}
	w := c.App.Writer
	if g.JSON {
		return kgWriteJSON(w, struct {
			MaxParallelism int               `json:"maxParallelism"`
			Parallelism    int               `json:"parallelism"`
			PrefixBytes    int               `json:"prefixBytes"`
			Subtasks       []keygroups.Range `json:"subtasks"`
		}{m, p, keygroups.PrefixWidth(m), ranges})
	}
	if !g.Quiet {
		fmt.Fprintf(w, "max parallelism %d, parallelism %d, key-group prefix %d byte(s)\n", m, p, keygroups.PrefixWidth(m))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBTASK\tKEY GROUPS\tCOUNT")
	for i, r := range ranges {
		fmt.Fprintf(tw, "%d\t%s\t%d\n", i, r, r.Len())
	}
	return tw.Flush()
}

// printableKey quotes keys that would break the table.
func printableKey(s string) string {
	if s == "" || strings.ContainsAny(s, "\t\n\r") || strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	return s
}

type planReport struct {
	*keygroups.RescalePlan
	Readers [][]int `json:"readers"`
}

func runKeygroupsPlan(c *cli.Context) error {
	g := GlobalsFrom(c)
	if c.NArg() > 0 {
		return Failf(ExitUsage, "keygroups plan takes no arguments, got %q", c.Args().First())
	}
	plan, err := keygroups.Plan(c.Int("max-parallelism"), c.Int("from"), c.Int("to"))
	if err != nil {
		return Fail(ExitUsage, err)
	}
	w := c.App.Writer
	if g.JSON {
		return kgWriteJSON(w, planReport{RescalePlan: plan, Readers: plan.Readers()})
	}
	if !g.Quiet {
		fmt.Fprintf(w, "max parallelism %d: %d -> %d subtasks", plan.MaxParallelism, plan.OldParallelism, plan.NewParallelism)
		if plan.Identity() {
			fmt.Fprint(w, " (unchanged: every subtask keeps its own state)")
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NEW SUBTASK\tKEY GROUPS\tCOUNT\tRESTORES (old subtask:key groups)")
	for _, a := range plan.Subtasks {
		pieces := make([]string, len(a.Pieces))
		for i, pc := range a.Pieces {
			pieces[i] = fmt.Sprintf("%d:%s", pc.OldSubtask, pc.Range)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", a.Subtask, a.Range, a.Range.Len(), strings.Join(pieces, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if g.Quiet {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OLD SUBTASK\tKEY GROUPS\tREAD BY (new subtasks)")
	for i, readers := range plan.Readers() {
		rs := make([]string, len(readers))
		for k, r := range readers {
			rs[k] = strconv.Itoa(r)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", i, keygroups.RangeForSubtask(plan.MaxParallelism, plan.OldParallelism, i), strings.Join(rs, ","))
	}
	return tw.Flush()
}

func kgWriteJSON(w io.Writer, v any) error {
	return writeJSON(w, v)
}

func init() {
	RegisterBench(&cli.Command{
		Name:  "keygroups",
		Usage: "key-group assignment throughput: Java keys, SQL key rows (build + hash), row hashing",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "fewer keys (well under a second)"},
			&cli.IntFlag{Name: "keys", Usage: "keys per workload (default 5000000, --quick 200000)"},
		},
		Action: runBenchKeygroups,
	})
}

func runBenchKeygroups(c *cli.Context) error {
	g := GlobalsFrom(c)
	n := 5_000_000
	if c.Bool("quick") {
		n = 200_000
	}
	if k := c.Int("keys"); k > 0 {
		n = k
	} else if c.IsSet("keys") {
		return Failf(ExitUsage, "bench keygroups: --keys must be positive")
	}
	res, err := keygroupsbench.Run(n)
	if err != nil {
		return err
	}
	w := c.App.Writer
	if g.JSON {
		return kgWriteJSON(w, res)
	}
	fmt.Fprintf(w, "key-group assignment, max parallelism %d, %d keys per workload, 1 goroutine\n", keygroupsbench.MaxParallelism, n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\trow bytes\tns/key\tMkeys/s\tMB/s\t")
	for _, r := range res {
		rb, mb := "-", "-"
		if r.RowBytes > 0 {
			rb, mb = strconv.Itoa(r.RowBytes), fmt.Sprintf("%.0f", r.MBPerS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%s\t\n", r.Workload, rb, r.NsPerKey, r.MKeysPerS, mb)
	}
	return tw.Flush()
}
