package command

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "ls",
		Usage:     "list the savepoints and checkpoints under a directory or s3:// prefix, newest first",
		ArgsUsage: "PREFIX",
		Description: `Searches PREFIX for directories holding a _metadata (savepoints, chk-<id>
directories of checkpoints) down to --depth levels and prints, newest first:
the checkpoint id, when _metadata was written, the state size recorded in
the metadata, the format (CANONICAL, NATIVE or UNKNOWN), the _metadata
version, the number of operators and the path. Only directory listings and
the _metadata files are read: listings use a delimiter on S3, skip the
shared/ and taskowned/ directories of checkpoints and stop below a
_metadata, so the state files are never listed.

--json prints {"location", "snapshots": [...], "truncated"} with camelCase
keys, checkpoint ids as strings and RFC 3339 times.`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "depth", Value: 4, Usage: "directory levels below PREFIX searched"},
			&cli.IntFlag{Name: "max-dirs", Value: 10000, Usage: "stop after visiting this many directories"},
			savepointS3EndpointFlag,
		},
		Action: runLs,
	})
}

// lsEntry is one row of `sfstate ls`.
type lsEntry struct {
	Path            string    `json:"path"`
	Kind            string    `json:"kind"`
	CheckpointID    int64     `json:"checkpointId,string"`
	Time            time.Time `json:"time"`
	MetadataVersion int       `json:"metadataVersion,omitempty"`
	Format          string    `json:"format,omitempty"`
	FormatInferred  bool      `json:"formatInferred,omitempty"`
	Operators       int       `json:"operators"`
	StateBytes      int64     `json:"stateBytes"`
	MetadataBytes   int64     `json:"metadataBytes"`
	// Error is set when the `_metadata` could not be read.
	Error string `json:"error,omitempty"`
	// dirID is the id of the chk-<id> directory (ties of time).
	dirID int64
}

func runLs(c *cli.Context) error {
	if c.NArg() != 1 {
		return Failf(ExitUsage, "ls takes exactly one directory or s3:// prefix")
	}
	if d := c.Int("depth"); d < 1 || d > 16 {
		return Failf(ExitUsage, "--depth must be in [1, 16]")
	}
	if m := c.Int("max-dirs"); m < 1 {
		return Failf(ExitUsage, "--max-dirs must be at least 1")
	}
	ctx := c.Context
	g := GlobalsFrom(c)
	arg := c.Args().First()
	st, err := savepointStore(ctx, c, arg)
	if err != nil {
		return err
	}
	found, truncated, err := savepoint.FindSnapshots(ctx, st, "", savepoint.FindOptions{MaxDepth: c.Int("depth"), MaxDirs: c.Int("max-dirs")})
	if err != nil {
		return Fail(ExitIO, err)
	}
	o, err := savepointOpenOptions(c)
	if err != nil {
		return err
	}
	entries := make([]lsEntry, 0, len(found))
	for _, f := range found {
		if err := ctx.Err(); err != nil {
			return Fail(ExitIO, err)
		}
		dir := strings.TrimSuffix(strings.TrimSuffix(f.MetadataKey, savepoint.MetadataName), "/")
		e := lsEntry{Path: dir, Kind: f.Kind, CheckpointID: f.CheckpointID, Time: f.ModTime.UTC(), MetadataBytes: f.MetadataSize, dirID: f.CheckpointID}
		if e.Path == "" {
			e.Path = "."
		}
		sp, err := savepoint.OpenWith(ctx, st, f.MetadataKey, o)
		if err != nil {
			e.Error = err.Error()
			entries = append(entries, e)
			continue
		}
		if sp.Props != nil && !sp.Props.IsSavepoint() {
			e.Kind = "checkpoint"
		}
		sum := savepoint.Summarize(sp)
		e.CheckpointID = sp.Meta.CheckpointID
		e.MetadataVersion = sum.MetadataVersion
		e.Format, e.FormatInferred = sum.FormatType, sum.FormatInferred
		e.Operators = len(sp.Meta.Operators)
		e.StateBytes = sum.TotalBytes
		entries = append(entries, e)
	}
	sort.SliceStable(entries, func(i, j int) bool {
		if !entries[i].Time.Equal(entries[j].Time) {
			return entries[i].Time.After(entries[j].Time)
		}
		if entries[i].CheckpointID != entries[j].CheckpointID {
			return entries[i].CheckpointID > entries[j].CheckpointID
		}
		if entries[i].dirID != entries[j].dirID {
			return entries[i].dirID > entries[j].dirID
		}
		return entries[i].Path < entries[j].Path
	})
	w := c.App.Writer
	if g.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(struct {
			Location  string    `json:"location"`
			Snapshots []lsEntry `json:"snapshots"`
			Truncated bool      `json:"truncated"`
		}{st.String(), entries, truncated}); err != nil {
			return Fail(ExitIO, err)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tKIND\tFORMAT\tVERSION\tOPERATORS\tSIZE\tPATH")
	for _, e := range entries {
		if e.Error != "" {
			fmt.Fprintf(tw, "-\t%s\t%s\t-\t-\t-\t-\t%s (unreadable: %s)\n", e.Time.Format(time.RFC3339), e.Kind, e.Path, e.Error)
			continue
		}
		format := e.Format
		if e.FormatInferred {
			format += "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", strconv.FormatInt(e.CheckpointID, 10), e.Time.Format(time.RFC3339), e.Kind, format,
			e.MetadataVersion, e.Operators, inspectBytes(e.StateBytes), e.Path)
	}
	if err := tw.Flush(); err != nil {
		return Fail(ExitIO, err)
	}
	if !g.Quiet {
		fmt.Fprintf(w, "%d snapshots under %s", len(entries), st.String())
		if truncated {
			fmt.Fprintf(w, " (search stopped after --max-dirs %d directories)", c.Int("max-dirs"))
		}
		fmt.Fprintln(w)
	}
	return nil
}
