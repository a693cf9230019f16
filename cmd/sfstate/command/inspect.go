package command

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "inspect",
		Usage:     "summarize a Flink savepoint or checkpoint (local directory, _metadata file or s3:// URL)",
		ArgsUsage: "PATH|s3://bucket/prefix",
		Description: `Prints the metadata version, checkpoint id and format type, then per
operator its id, parallelism, size and state: for every keyed state its kind,
key/namespace/value types, TTL, entry count and bytes, the distribution of
entries over key groups and TTL ages. --dump prints decoded entries as JSON
lines instead. The heap backend's own key-group layout (hashmap checkpoints and
NATIVE savepoints) is decoded like the canonical one. For the changelog state
backend the state Flink restores is shown: the materialized entries with the
logged changes applied; its key serializer comes from the materialized header
or a timer queue, else from --key-type, else keys are raw bytes. Native RocksDB keyed
state is listed but not decoded unless --deep is given: then the files of every native RocksDB handle are
downloaded to a temporary directory, opened read-only with RocksDB and
decoded (Flink's or the engine's key layout, detected from the metadata).`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dump", Usage: "print decoded keyed-state entries as JSON lines"},
			&cli.BoolFlag{Name: "deep", Usage: "decode native RocksDB keyed state: download its files to a temporary directory and read them with RocksDB"},
			&cli.StringFlag{Name: "operator", Usage: "only this operator (id, uid or name)"},
			&cli.StringFlag{Name: "state", Usage: "only this keyed state name"},
			&cli.StringFlag{Name: "key-groups", Usage: "only key groups in this range, e.g. 10-20 or 7"},
			&cli.StringFlag{Name: "key-type", Usage: "key type of changelog state whose key serializer the savepoint does not record, as for keygroups assign: bigint, string, tuple<bigint>, row<int, string>, ..."},
			&cli.Int64Flag{Name: "limit", Usage: "stop --dump after this many entries (0 = all)"},
			&cli.DurationFlag{Name: "ttl", Usage: "state TTL; with it, count entries whose last access is older than now-TTL"},
			&cli.StringFlag{Name: "now", Usage: "reference time for --ttl: RFC 3339 or epoch milliseconds (default: current time)"},
			&cli.StringFlag{Name: "html", Usage: "also write a self-contained HTML report to `FILE`"},
			&cli.StringSliceFlag{Name: "names", Usage: "name operators in the summary and report: `ID=NAME` or UID=NAME (repeatable)"},
			&cli.BoolFlag{Name: "files", Usage: "list every file of native RocksDB handles (default: count and bytes per subtask)"},
			&cli.BoolFlag{Name: "metadata-only", Usage: "do not read state files; report sizes from the metadata only"},
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "state files read at once for the summary (not --dump, which keeps file order)"},
			savepointS3EndpointFlag, allowRootFlag, mapFlag, checkpointFlag,
		},
		Action: runInspect,
	})
}

// inspectKeyGroupRange parses "10-20" or "7".
func inspectKeyGroupRange(s string) (lo, hi int, err error) {
	if s == "" {
		return 0, -1, nil
	}
	a, b, found := strings.Cut(s, "-")
	lo, err = strconv.Atoi(strings.TrimSpace(a))
	if err != nil {
		return 0, 0, fmt.Errorf("--key-groups %q: %v", s, err)
	}
	hi = lo
	if found {
		if hi, err = strconv.Atoi(strings.TrimSpace(b)); err != nil {
			return 0, 0, fmt.Errorf("--key-groups %q: %v", s, err)
		}
	}
	if lo < 0 || hi < lo || hi >= 32768 {
		return 0, 0, fmt.Errorf("--key-groups %q: invalid range", s)
	}
	return lo, hi, nil
}

// inspectParseNow parses RFC 3339 or epoch millis.
func inspectParseNow(s string) (int64, error) {
	if s == "" {
		return time.Now().UnixMilli(), nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("--now %q: want RFC 3339 or epoch milliseconds", s)
	}
	return t.UnixMilli(), nil
}

func inspectOptions(c *cli.Context) (savepoint.ScanOptions, error) {
	var o savepoint.ScanOptions
	lo, hi, err := inspectKeyGroupRange(c.String("key-groups"))
	if err != nil {
		return o, err
	}
	o.Operator = c.String("operator")
	o.State = c.String("state")
	if kt := c.String("key-type"); kt != "" {
		if o.KeyType, err = savepoint.ParseKeyType(kt); err != nil {
			return o, fmt.Errorf("--key-type: %w", err)
		}
	}
	o.KeyGroupFrom, o.KeyGroupTo = lo, hi
	if d := c.Duration("ttl"); d != 0 {
		if d < 0 {
			return o, fmt.Errorf("--ttl must be positive")
		}
		o.TTLMillis = d.Milliseconds()
		if o.NowMillis, err = inspectParseNow(c.String("now")); err != nil {
			return o, err
		}
	} else if c.String("now") != "" {
		if o.NowMillis, err = inspectParseNow(c.String("now")); err != nil {
			return o, err
		}
	}
	return o, nil
}

func runInspect(c *cli.Context) error {
	if c.NArg() != 1 {
		return Failf(ExitUsage, "inspect takes exactly one savepoint path")
	}
	g := GlobalsFrom(c)
	opts, err := inspectOptions(c)
	if err != nil {
		return Fail(ExitUsage, err)
	}
	ctx := c.Context
	sp, err := openSavepointArg(ctx, c, c.Args().First())
	if err != nil {
		return err
	}
	out := c.App.Writer
	if opts.Operator != "" {
		op := sp.FindOperator(opts.Operator)
		if op == nil {
			return Failf(ExitUsage, "operator %q not found in %s", opts.Operator, sp.Name())
		}
		// Select by id from here on (uids of V3/V4 files are hashed).
		opts.Operator = op.ID.String()
	}
	if c.Bool("deep") {
		return runInspectDeep(c, sp, opts)
	}
	if c.Bool("dump") {
		return runDump(c, sp, opts)
	}
	sum := savepoint.Summarize(sp)
	if err := applyOperatorNames(sum, c.StringSlice("names")); err != nil {
		return Fail(ExitUsage, err)
	}
	if !c.Bool("metadata-only") {
		bar := progress.New(c.App.ErrWriter, g.JSON || g.Quiet || g.NoProgress, "reading", 0, "key groups")
		if bar != nil {
			opts.Progress = bar
		}
		opts.Concurrency = c.Int("concurrency")
		err := savepoint.ScanSummary(ctx, sp, sum, opts)
		bar.Done()
		if err != nil {
			return Fail(ExitIO, err)
		}
	}
	if h := c.String("html"); h != "" {
		if err := writeHTMLReport(h, sum); err != nil {
			return Fail(ExitIO, err)
		}
	}
	if opts.Operator != "" {
		kept := sum.Operators[:0]
		for _, op := range sum.Operators {
			if op.ID == opts.Operator {
				kept = append(kept, op)
			}
		}
		sum.Operators = kept
	}
	if g.JSON {
		if !c.IsSet("now") {
			sum.NowMillis = 0 // the current time is not part of the answer
		}
		return writeJSON(out, sum)
	}
	renderSummary(out, sum, opts, c.Bool("files"))
	return nil
}

// renderSummary prints the human-readable summary.
// With files, native (RocksDB) handles list every file; else one line per
// subtask.
func renderSummary(w io.Writer, s *savepoint.Summary, o savepoint.ScanOptions, files bool) {
	fmt.Fprintf(w, "savepoint    %s\n", s.Source)
	kind := s.FormatType
	if s.FormatInferred {
		kind += " (inferred)"
	}
	if s.SnapshotName != "" && s.PostCheckpointAction != "" {
		kind += fmt.Sprintf(" (%s, action %s)", s.SnapshotName, s.PostCheckpointAction)
	} else if s.SnapshotName != "" {
		kind += fmt.Sprintf(" (%s)", s.SnapshotName)
	}
	fmt.Fprintf(w, "metadata     version %d, checkpoint %d, %s\n", s.MetadataVersion, s.CheckpointID, inspectBytes(s.MetadataBytes))
	fmt.Fprintf(w, "format       %s\n", kind)
	fmt.Fprintf(w, "state        %s in %s + %s inline, %s\n", inspectBytes(s.TotalBytes), plural(s.Files, "file"), inspectBytes(s.InlineBytes), plural(len(s.Operators), "operator"))
	for _, n := range s.Notes {
		fmt.Fprintf(w, "note         %s\n", n)
	}
	for _, op := range s.Operators {
		fmt.Fprintf(w, "\noperator %s", op.ID)
		if op.UID != "" {
			fmt.Fprintf(w, "  uid=%q", op.UID)
		}
		if op.Name != "" {
			fmt.Fprintf(w, "  name=%q", op.Name)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  parallelism %d, max parallelism %d, %s with state, %s", op.Parallelism, op.MaxParallelism, plural(op.SubtasksWithState, "subtask"), inspectBytes(op.Bytes))
		if op.FinishedSubtasks > 0 {
			fmt.Fprintf(w, ", %d finished subtasks", op.FinishedSubtasks)
		}
		if op.FullyFinished {
			fmt.Fprintf(w, ", finished")
		}
		fmt.Fprintln(w)
		if op.KeyedLayout != "" {
			fmt.Fprintf(w, "  keyed state: %s (handle tags %v), %s\n", op.KeyedLayout, op.KeyedTags, inspectBytes(op.KeyedBytes))
		}
		if op.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", op.Note)
		}
		nameW := 0
		for _, st := range op.KeyedStates {
			nameW = max(nameW, len(st.Name))
		}
		for _, st := range op.KeyedStates {
			if o.State != "" && st.Name != o.State {
				continue
			}
			fmt.Fprintf(w, "    %-*s  %-11s key %s", nameW, st.Name, st.Kind, st.KeyType)
			if st.NamespaceType != "" {
				fmt.Fprintf(w, "  namespace %s", st.NamespaceType)
			}
			if st.UserKeyType != "" {
				fmt.Fprintf(w, "  user key %s", st.UserKeyType)
			}
			fmt.Fprintf(w, "  value %s  ttl %s", st.ValueType, inspectYesNo(st.TTL))
			if s.Scanned && inspectDecoded(op.KeyedLayout) {
				fmt.Fprintf(w, "  %s  %s", plural(int(st.Entries), "entry"), inspectBytes(st.Bytes))
			}
			fmt.Fprintln(w)
			if st.Partial != "" {
				fmt.Fprintf(w, "      partial: %s\n", st.Partial)
			}
			if st.TTLEntries > 0 && st.TTLOldest != nil {
				fmt.Fprintf(w, "      ttl last access: oldest %s, newest %s", inspectMillis(*st.TTLOldest), inspectMillis(*st.TTLNewest))
				if s.TTLMillis > 0 {
					fmt.Fprintf(w, "; %d of %d expired (ttl %s at %s)", st.Expired, st.TTLEntries, time.Duration(s.TTLMillis)*time.Millisecond, inspectMillis(s.NowMillis))
				}
				fmt.Fprintln(w)
			}
		}
		if d := op.KeyGroups; d != nil && s.Scanned && inspectDecoded(op.KeyedLayout) {
			renderKeyGroupLine(w, d)
		}
		if len(op.NativeFiles) > 0 {
			renderNativeFiles(w, op.NativeFiles, files)
		}
		for _, os := range op.OperatorStates {
			typ := ""
			if os.Type != "" {
				typ = " " + os.Type
			}
			if os.Partial != "" {
				typ += " (partial: " + os.Partial + ")"
			}
			if os.Mode == "BROADCAST" {
				entries := "map"
				if os.MapEntries >= 0 {
					entries = plural(os.MapEntries, "map entry")
				}
				fmt.Fprintf(w, "  operator state %-24s %-16s %s, copied in %s%s\n", os.Name, os.Mode, entries, plural(os.Subtasks, "subtask"), typ)
				continue
			}
			fmt.Fprintf(w, "  operator state %-24s %-16s %s in %s%s\n", os.Name, os.Mode, plural(os.Elements, "element"), plural(os.Subtasks, "subtask"), typ)
		}
	}
}

func inspectYesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func inspectMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// renderKeyGroupLine prints an operator's key-group distribution: non-empty
// key groups, min, median and max entries per key group, the hottest.
func renderKeyGroupLine(w io.Writer, d *savepoint.KeyGroupDist) {
	fmt.Fprintf(w, "  key groups: %d of %d non-empty; entries per key group min %d, median %d, max %d", d.NonEmpty, d.KeyGroups, d.Min, d.Median, d.Max)
	if len(d.Hottest) > 0 {
		parts := make([]string, len(d.Hottest))
		for i, h := range d.Hottest {
			parts[i] = fmt.Sprintf("%d (%d)", h.KeyGroup, h.Entries)
		}
		fmt.Fprintf(w, "; hottest %s", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}

// inspectDecoded reports whether keyed state in layout is decoded by the
// summary scan (canonical and heap layouts).
func inspectDecoded(layout string) bool {
	return layout == savepoint.LayoutCanonical || layout == savepoint.LayoutNativeHeap || layout == savepoint.LayoutChangelog
}

// renderNativeFiles prints the files of an operator's native (RocksDB)
// handles: a total line, then per subtask the number of files, how many
// are SST files and how many are shared with other checkpoints (Flink's
// incremental handles keep the SST files shared and MANIFEST, CURRENT and
// OPTIONS private), and their bytes. The files' RocksDB levels live in the
// MANIFEST, not in the metadata (--deep reads them with RocksDB). With list,
// every file follows its subtask's line.
func renderNativeFiles(w io.Writer, files []savepoint.FileSummary, list bool) {
	type agg struct {
		files, sst, shared int
		bytes              int64
		names              []savepoint.FileSummary
	}
	var order []int
	per := map[int]*agg{}
	var total int64
	for _, f := range files {
		a := per[f.Subtask]
		if a == nil {
			a = &agg{}
			per[f.Subtask] = a
			order = append(order, f.Subtask)
		}
		a.files++
		a.bytes += f.Bytes
		total += f.Bytes
		if strings.HasSuffix(f.Name, ".sst") {
			a.sst++
		}
		if f.Shared {
			a.shared++
		}
		if list {
			a.names = append(a.names, f)
		}
	}
	sort.Ints(order)
	hint := "; --files lists each"
	if list {
		hint = ""
	}
	fmt.Fprintf(w, "  native files: %s, %s in %s%s\n", plural(len(files), "file"), inspectBytes(total), plural(len(order), "subtask"), hint)
	if list {
		for _, st := range order {
			a := per[st]
			fmt.Fprintf(w, "    subtask %d: %s (%d SST, %d shared), %s\n", st, plural(a.files, "file"), a.sst, a.shared, inspectBytes(a.bytes))
			for _, f := range a.names {
				sh := ""
				if f.Shared {
					sh = " (shared)"
				}
				fmt.Fprintf(w, "      %-20s %10d B%s\n", f.Name, f.Bytes, sh)
			}
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "    subtask\tfiles\tsst\tshared\tbytes\t")
	for _, st := range order {
		a := per[st]
		fmt.Fprintf(tw, "    %d\t%d\t%d\t%d\t%s\t\n", st, a.files, a.sst, a.shared, inspectBytes(a.bytes))
	}
	tw.Flush()
}
