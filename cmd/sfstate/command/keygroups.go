package command

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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

// keyParser turns one command-line key into a hashable key and its
// serialized form (without the key-group prefix).
type keyParser func(text string) (keygroups.Key, []byte, error)

// javaScalar parses DataStream key classes.
func javaScalar(name string) (keyParser, bool) {
	be := binary.BigEndian
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "int", "integer":
		return func(s string) (keygroups.Key, []byte, error) {
			v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
			return keygroups.Int(v), be.AppendUint32(nil, uint32(v)), err
		}, true
	case "bigint", "long":
		return func(s string) (keygroups.Key, []byte, error) {
			v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			return keygroups.Long(v), be.AppendUint64(nil, uint64(v)), err
		}, true
	case "smallint", "short":
		return func(s string) (keygroups.Key, []byte, error) {
			v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 16)
			return keygroups.Short(v), be.AppendUint16(nil, uint16(v)), err
		}, true
	case "tinyint", "byte":
		return func(s string) (keygroups.Key, []byte, error) {
			v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 8)
			return keygroups.Byte(v), []byte{byte(v)}, err
		}, true
	case "boolean", "bool":
		return func(s string) (keygroups.Key, []byte, error) {
			v, err := strconv.ParseBool(strings.TrimSpace(s))
			b := byte(0)
			if v {
				b = 1
			}
			return keygroups.Boolean(v), []byte{b}, err
		}, true
	case "float":
		return func(s string) (keygroups.Key, []byte, error) {
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 32)
			return keygroups.Float(v), be.AppendUint32(nil, math.Float32bits(float32(v))), err
		}, true
	case "double":
		return func(s string) (keygroups.Key, []byte, error) {
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			return keygroups.Double(v), be.AppendUint64(nil, math.Float64bits(v)), err
		}, true
	case "string":
		return func(s string) (keygroups.Key, []byte, error) {
			return keygroups.String(s), javaStringValue(s), nil
		}, true
	}
	return nil, false
}

// javaStringValue is StringSerializer's encoding (StringValue.writeString):
// length+1 then each UTF-16 unit, all as 7-bit varints.
func javaStringValue(s string) []byte {
	var units []uint16
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			units = append(units, uint16(0xd800+(r>>10)), uint16(0xdc00+(r&0x3ff)))
			continue
		}
		units = append(units, uint16(r))
	}
	out := binary.AppendUvarint(nil, uint64(len(units)+1))
	for _, u := range units {
		out = binary.AppendUvarint(out, uint64(u))
	}
	return out
}

// parseKeyType builds the parser for a --key-type value.
func parseKeyType(spec string) (keyParser, error) {
	s := strings.TrimSpace(spec)
	low := strings.ToLower(s)
	switch {
	case strings.HasPrefix(low, "row"):
		types, err := keygroups.ParseRowType(s)
		if err != nil {
			return nil, err
		}
		b, err := keygroups.NewRowBuilder(types)
		if err != nil {
			return nil, err
		}
		return func(text string) (keygroups.Key, []byte, error) {
			fields, err := splitKeyFields(text, len(types))
			if err != nil {
				return nil, nil, err
			}
			vals := make([]any, len(types))
			for i, f := range fields {
				if f.IsNull() {
					continue
				}
				if vals[i], err = keygroups.ParseValue(types[i], f.Text); err != nil {
					return nil, nil, fmt.Errorf("field %d: %w", i, err)
				}
			}
			row, err := b.Build(vals)
			if err != nil {
				return nil, nil, err
			}
			ser := binary.BigEndian.AppendUint32(nil, uint32(len(row)))
			return keygroups.Row(row), append(ser, row...), nil
		}, nil
	case strings.HasPrefix(low, "tuple"):
		rest := strings.TrimSpace(s[len("tuple"):])
		if !strings.HasPrefix(rest, "<") || !strings.HasSuffix(rest, ">") || strings.TrimSpace(rest[1:len(rest)-1]) == "" {
			return nil, fmt.Errorf("malformed tuple type %q (want tuple<type, ...>)", spec)
		}
		var parts []keyParser
		for _, name := range keygroups.SplitTopLevel(rest[1 : len(rest)-1]) {
			p, ok := javaScalar(name)
			if !ok {
				return nil, fmt.Errorf("tuple field type %q: want int, bigint, smallint, tinyint, boolean, float, double or string", name)
			}
			parts = append(parts, p)
		}
		if len(parts) > 25 {
			return nil, fmt.Errorf("tuple of %d fields: Flink tuples have at most 25", len(parts))
		}
		return func(text string) (keygroups.Key, []byte, error) {
			fields, err := splitKeyFields(text, len(parts))
			if err != nil {
				return nil, nil, err
			}
			tup := make(keygroups.Tuple, len(parts))
			var ser []byte
			for i, f := range fields {
				if f.IsNull() {
					return nil, nil, fmt.Errorf("field %d: tuple fields cannot be null", i)
				}
				k, b, err := parts[i](f.Text)
				if err != nil {
					return nil, nil, fmt.Errorf("field %d: %w", i, err)
				}
				tup[i] = k
				ser = append(ser, b...)
			}
			return tup, ser, nil
		}, nil
	}
	if p, ok := javaScalar(s); ok {
		return p, nil
	}
	return nil, fmt.Errorf("unknown key type %q (want int, bigint, smallint, tinyint, boolean, float, double, string, tuple<...> or row<...>)", spec)
}

func splitKeyFields(text string, n int) ([]keygroups.Field, error) {
	fields, err := keygroups.SplitFields(text)
	if err != nil {
		return nil, err
	}
	if len(fields) != n {
		return nil, fmt.Errorf("%d fields, key type has %d (quote fields that contain commas)", len(fields), n)
	}
	return fields, nil
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
	parse, err := parseKeyType(c.String("key-type"))
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
		k, ser, err := parse(arg)
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

type kgBenchResult struct {
	Workload    string  `json:"workload"`
	Keys        int     `json:"keys"`
	NsPerKey    float64 `json:"nsPerKey"`
	MKeysPerS   float64 `json:"mKeysPerSec"`
	RowBytes    int     `json:"rowBytes,omitempty"`
	MBPerS      float64 `json:"mbPerSec,omitempty"`
	Checksum    int     `json:"checksum"`
	MaxParallel int     `json:"maxParallelism"`
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
	const maxP = 128
	strs := make([]string, 1024)
	for i := range strs {
		strs[i] = fmt.Sprintf("customer-%07d", i)
	}
	rowOf := func(types []keygroups.FieldType, vals ...any) []byte {
		row, err := keygroups.BuildRow(types, vals)
		if err != nil {
			panic(err) // fixed inputs above; cannot fail
		}
		return row
	}
	row56 := rowOf([]keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString, keygroups.TypeTimestamp(3), keygroups.TypeDecimal(10, 2)},
		int64(7), "customer-0000001", keygroups.Timestamp{Millis: 1602288035000}, int64(12345))
	row272 := rowOf([]keygroups.FieldType{keygroups.TypeString}, strings.Repeat("y", 256))
	bigintRow, _ := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeBigInt})
	strRow, _ := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeInt, keygroups.TypeString})

	type workload struct {
		name     string
		rowBytes int
		run      func(n int) int
	}
	workloads := []workload{
		{"java Long", 0, func(n int) int {
			s := 0
			for i := range n {
				s += keygroups.KeyGroupFor(keygroups.HashLong(int64(i)), maxP)
			}
			return s
		}},
		{"java String (16 chars)", 0, func(n int) int {
			s := 0
			for i := range n {
				s += keygroups.KeyGroupFor(keygroups.HashString(strs[i&1023]), maxP)
			}
			return s
		}},
		{"Tuple1<Long>", 0, func(n int) int {
			s := 0
			for i := range n {
				s += keygroups.Assign(keygroups.Tuple{keygroups.Long(int64(i))}, maxP)
			}
			return s
		}},
		{"SQL row<bigint> build+hash", 16, func(n int) int {
			s, buf, vals := 0, []byte(nil), []any{int64(0)}
			for i := range n {
				vals[0] = int64(i)
				buf, _ = bigintRow.Append(buf[:0], vals)
				s += keygroups.KeyGroupFor(keygroups.HashRow(buf), maxP)
			}
			return s
		}},
		{"SQL row<int,string> build+hash", 40, func(n int) int {
			s, buf, vals := 0, []byte(nil), []any{int32(0), ""}
			for i := range n {
				vals[0], vals[1] = int32(i), strs[i&1023]
				buf, _ = strRow.Append(buf[:0], vals)
				s += keygroups.KeyGroupFor(keygroups.HashRow(buf), maxP)
			}
			return s
		}},
		{"SQL row hash only", len(row56), func(n int) int {
			s := 0
			for range n {
				s += keygroups.KeyGroupFor(keygroups.HashRow(row56), maxP)
			}
			return s
		}},
		{"SQL row hash only", len(row272), func(n int) int {
			s := 0
			for range n {
				s += keygroups.KeyGroupFor(keygroups.HashRow(row272), maxP)
			}
			return s
		}},
	}
	var res []kgBenchResult
	for _, wl := range workloads {
		wl.run(min(n, 10_000)) // warm up
		start := time.Now()
		sum := wl.run(n)
		el := time.Since(start)
		r := kgBenchResult{Workload: wl.name, Keys: n, RowBytes: wl.rowBytes, Checksum: sum, MaxParallel: maxP}
		r.NsPerKey = float64(el.Nanoseconds()) / float64(n)
		if el > 0 {
			r.MKeysPerS = float64(n) / el.Seconds() / 1e6
			if wl.rowBytes > 0 {
				r.MBPerS = float64(n*wl.rowBytes) / el.Seconds() / 1e6
			}
		}
		res = append(res, r)
	}
	w := c.App.Writer
	if g.JSON {
		return kgWriteJSON(w, res)
	}
	fmt.Fprintf(w, "key-group assignment, max parallelism %d, %d keys per workload, 1 goroutine\n", maxP, n)
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
