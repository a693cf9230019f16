//go:build cgo

package command

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/native"
	"github.com/urfave/cli/v2"
)

// deepOperator is one operator of the --deep summary.
type deepOperator struct {
	ID             string                   `json:"id"`
	MaxParallelism int                      `json:"maxParallelism"`
	Subtasks       int                      `json:"subtasks"`
	Files          int                      `json:"files"`
	FileBytes      int64                    `json:"fileBytes"`
	States         []savepoint.StateSummary `json:"states"`
	KeyGroups      *savepoint.KeyGroupDist  `json:"keyGroups,omitempty"`
	OutOfRange     int64                    `json:"outOfRangeEntries,omitempty"`

	stats *native.Stats
}

// deepSummary is the --deep --json answer.
type deepSummary struct {
	Source       string          `json:"source"`
	FormatType   string          `json:"formatType,omitempty"`
	Layout       native.Layout   `json:"layout"`
	LayoutReason string          `json:"layoutReason"`
	TTLMillis    int64           `json:"ttlMillis,omitempty"`
	NowMillis    int64           `json:"nowMillis,omitempty"`
	Operators    []*deepOperator `json:"operators"`
}

// runInspectDeep downloads the files of every native (tag 5/11) keyed
// handle into a temporary directory, reads them with RocksDB and decodes
// the entries: a summary, or with --dump JSON lines like canonical dumps.
// An interrupt cancels the walk so that the temporary directory is removed
// before the command exits.
func runInspectDeep(c *cli.Context, sp *savepoint.Savepoint, o savepoint.ScanOptions) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	c.Context = ctx
	snap, err := native.Open(ctx, sp, o)
	if err != nil {
		return Fail(ExitIO, err)
	}
	if len(snap.Handles) == 0 {
		return Failf(ExitUsage, "%s has no native keyed state (no incremental RocksDB handles); use inspect without --deep", sp.Name())
	}
	wo := native.WalkOptions{State: o.State, KeyGroupFrom: o.KeyGroupFrom, KeyGroupTo: o.KeyGroupTo}
	if c.Bool("dump") {
		return deepDump(c, sp, snap, wo)
	}
	g := GlobalsFrom(c)
	sum := &deepSummary{Source: sp.Name(), FormatType: sp.FormatType(), Layout: snap.Layout, LayoutReason: snap.LayoutReason,
		TTLMillis: o.TTLMillis, NowMillis: o.NowMillis}
	byOp := map[*savepoint.OperatorState]*deepOperator{}
	for _, h := range snap.Handles {
		op := byOp[h.Operator]
		if op == nil {
			op = &deepOperator{ID: h.Operator.ID.String(), MaxParallelism: int(h.Operator.MaxParallelism), stats: native.NewStats(o.TTLMillis, o.NowMillis)}
			if h.Header != nil {
				op.stats.KeySerializer = h.Header.KeySerializer
			}
			byOp[h.Operator] = op
			sum.Operators = append(sum.Operators, op)
		}
		lo, hi := h.KeyGroupRange()
		if hi >= lo {
			op.stats.KeyGroups += hi - lo + 1
		}
		op.Subtasks++
		op.Files += len(h.Files)
		for _, f := range h.Files {
			op.FileBytes += max(f.Size, 0)
		}
	}
	err = snap.Walk(ctx, sp, engine.ReadNativeDir, wo, func(h *native.Handle, e *keyed.Entry) error {
		byOp[h.Operator].stats.Add(e, savepoint.StateKind(e.State))
		return nil
	})
	if err != nil {
		return Fail(ExitIO, err)
	}
	for _, h := range snap.Handles {
		byOp[h.Operator].OutOfRange += h.OutOfRange
	}
	for _, op := range sum.Operators {
		op.States = op.stats.States()
		op.KeyGroups = op.stats.Total()
	}
	if g.JSON {
		if !c.IsSet("now") {
			sum.NowMillis = 0 // the current time is not part of the answer
		}
		return writeJSON(c.App.Writer, sum)
	}
	renderDeep(c.App.Writer, sum)
	return nil
}

func renderDeep(w io.Writer, s *deepSummary) {
	fmt.Fprintf(w, "savepoint    %s\n", s.Source)
	if s.FormatType != "" {
		fmt.Fprintf(w, "format       %s\n", s.FormatType)
	}
	fmt.Fprintf(w, "key layout   %s (%s)\n", s.Layout, s.LayoutReason)
	for _, op := range s.Operators {
		fmt.Fprintf(w, "\noperator %s\n", op.ID)
		fmt.Fprintf(w, "  max parallelism %d, %d subtasks, %d files, %s read with RocksDB\n", op.MaxParallelism, op.Subtasks, op.Files, inspectBytes(op.FileBytes))
		nameW := 0
		for _, st := range op.States {
			nameW = max(nameW, len(st.Name))
		}
		sort.SliceStable(op.States, func(i, j int) bool { return op.States[i].Name < op.States[j].Name })
		for _, st := range op.States {
			fmt.Fprintf(w, "    %-*s  %-11s ttl %s  %d entries  %s", nameW, st.Name, st.Kind, inspectYesNo(st.TTL || st.TTLEntries > 0), st.Entries, inspectBytes(st.Bytes))
			if d := st.KeyGroups; d != nil {
				fmt.Fprintf(w, "  in %d key groups", d.NonEmpty)
			}
			fmt.Fprintln(w)
			if st.KeyType != "" || st.ValueType != "" {
				fmt.Fprintf(w, "      key %s", st.KeyType)
				if st.NamespaceType != "" {
					fmt.Fprintf(w, "  namespace %s", st.NamespaceType)
				}
				if st.UserKeyType != "" {
					fmt.Fprintf(w, "  user key %s", st.UserKeyType)
				}
				fmt.Fprintf(w, "  value %s\n", st.ValueType)
			}
			if st.TTLEntries > 0 && st.TTLOldest != nil {
				fmt.Fprintf(w, "      ttl last access: oldest %s, newest %s", inspectMillis(*st.TTLOldest), inspectMillis(*st.TTLNewest))
				if s.TTLMillis > 0 {
					fmt.Fprintf(w, "; %d of %d expired (ttl %s at %s)", st.Expired, st.TTLEntries, time.Duration(s.TTLMillis)*time.Millisecond, inspectMillis(s.NowMillis))
				}
				fmt.Fprintln(w)
			}
		}
		if len(op.States) == 0 {
			fmt.Fprintf(w, "    no entries\n")
		}
		if d := op.KeyGroups; d != nil {
			renderKeyGroupLine(w, d)
		}
		if op.OutOfRange > 0 {
			fmt.Fprintf(w, "  note: %d entries lie outside their subtask's key-group range (skipped)\n", op.OutOfRange)
		}
	}
}

// deepDump prints the decoded entries as JSON lines in the shape of
// canonical dumps (inspectDumpLine).
func deepDump(c *cli.Context, sp *savepoint.Savepoint, snap *native.Snapshot, wo native.WalkOptions) error {
	w := bufio.NewWriterSize(c.App.Writer, 64<<10)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	limit := c.Int64("limit")
	var n int64
	err := snap.Walk(c.Context, sp, engine.ReadNativeDir, wo, func(h *native.Handle, e *keyed.Entry) error {
		if limit > 0 && n >= limit {
			return savepoint.StopWalk
		}
		line := newDumpLine(h.Operator, h.Subtask, e)
		if err := enc.Encode(&line); err != nil {
			return fmt.Errorf("writing entry: %w", err)
		}
		n++
		return nil
	})
	if ferr := w.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil && !savepoint.IsStop(err) {
		return Fail(ExitIO, err)
	}
	return nil
}
