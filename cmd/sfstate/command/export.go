package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint/native"
	"github.com/sfstate/sfstate/stateexport"
	"github.com/sfstate/sfstate/verify"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "export",
		Usage:     "write keyed and operator state as typed tables (Parquet, Arrow IPC, CSV or JSON lines)",
		ArgsUsage: "SAVEPOINT --out DIR|s3://bucket/prefix",
		Description: `Decodes the keyed and operator state of a canonical savepoint or checkpoint
and writes one table per operator and state under --out (DIR/<operator>.<state>/part-i-of-n.<ext>),
plus _operators and _states tables and a manifest (_manifest.json, written last:
a dataset with a manifest is complete). Columns are typed from the serializer
snapshots: SQL rows give one column per field, timestamps keep their precision,
decimals their precision and scale; what cannot be typed is exported as bytes
with the serializer class in the field metadata. Operator state (list, union and
broadcast states) gives one row per element or map entry. --shard i/n exports one
share of the key groups, so parallel jobs write one dataset (operator state goes
to shard 0). See docs/export.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "output directory or s3://bucket/prefix", Required: true},
			&cli.StringFlag{Name: "format", Value: "parquet", Usage: "parquet, arrow (IPC file), csv or jsonl"},
			&cli.StringFlag{Name: "compression", Value: "zstd", Usage: "Parquet compression: zstd, snappy or none (Arrow: zstd or none)"},
			&cli.BoolFlag{Name: "plain-encoding", Usage: "Parquet: PLAIN pages instead of the delta encodings, for readers without them (Spark before 3.3)"},
			&cli.IntFlag{Name: "row-group-rows", Value: stateexport.DefaultRowGroupRows, Usage: "rows per Parquet row group / Arrow record batch (bounds memory)"},
			&cli.StringFlag{Name: "shard", Usage: "export only shard `i/n` of every operator's key groups"},
			&cli.StringFlag{Name: "operator", Usage: "only this operator (id, uid or name)"},
			&cli.StringFlag{Name: "state", Usage: "only this state name (keyed or operator state)"},
			&cli.IntFlag{Name: "workers", Usage: "goroutines decoding the key groups of a file (0 = one per core)"},
			&cli.StringSliceFlag{Name: "names", Usage: "name the fields of a SQL row part instead of f0…fN: `[OPERATOR/]STATE.PART=NAME,NAME,…`, PART key, namespace, user_key or value (repeatable)"},
			&cli.BoolFlag{Name: "deep", Usage: "also read keyed state in Flink's RocksDB native layout (SST files, downloaded to a temporary directory; needs a build with RocksDB)"},
			savepointS3EndpointFlag,
		},
		Action: runExport,
	})
}

// joinNameSpecs undoes the comma split of a string slice flag for --names
// values: a piece without '=' continues the previous one (field names
// hold no '=', and every spec has one).
func joinNameSpecs(pieces []string) []string {
	var out []string
	for _, p := range pieces {
		if !strings.Contains(p, "=") && len(out) > 0 {
			out[len(out)-1] += "," + p
			continue
		}
		out = append(out, p)
	}
	return out
}

// nativeDirReader reads a RocksDB directory; set in builds with cgo
// (native_cgo.go), nil otherwise.
var nativeDirReader native.DirReader

func runExport(c *cli.Context) error {
	if c.NArg() != 1 {
		return Failf(ExitUsage, "export takes exactly one savepoint path")
	}
	g := GlobalsFrom(c)
	f, err := stateexport.ParseFormat(c.String("format"))
	if err != nil {
		return Fail(ExitUsage, err)
	}
	o := stateexport.Options{
		Format: f, Compression: stateexport.Compression(c.String("compression")), RowGroupRows: c.Int("row-group-rows"),
		PlainEncoding: c.Bool("plain-encoding"), Operator: c.String("operator"), State: c.String("state"), Workers: c.Int("workers"),
	}
	if f == stateexport.Arrow && o.Compression != stateexport.Zstd && o.Compression != stateexport.Uncompressed {
		return Failf(ExitUsage, "--compression %q: Arrow IPC files take zstd or none", o.Compression)
	}
	if _, err := stateexport.ParseCompression(c.String("compression")); err != nil {
		return Fail(ExitUsage, err)
	}
	for _, spec := range joinNameSpecs(c.StringSlice("names")) {
		fn, err := stateexport.ParseFieldNames(spec)
		if err != nil {
			return Fail(ExitUsage, err)
		}
		o.FieldNames = append(o.FieldNames, fn)
	}
	if c.Bool("deep") {
		if nativeDirReader == nil {
			return Failf(ExitUnsupported, "export --deep: this sfstate was built without RocksDB support (CGO_ENABLED=0); rebuild with cgo to read native RocksDB state")
		}
		o.NativeReader = nativeDirReader
	}
	if o.RowGroupRows < 1 {
		return Failf(ExitUsage, "--row-group-rows must be positive")
	}
	if s := c.String("shard"); s != "" {
		if o.Shard, err = verify.ParseShard(s); err != nil {
			return Fail(ExitUsage, err)
		}
	}
	ctx := c.Context
	sp, err := openSavepointArg(ctx, c, c.Args().First())
	if err != nil {
		return err
	}
	loc, err := s3.ParseURL(c.String("out"))
	if err != nil {
		return Fail(ExitUsage, fmt.Errorf("--out: %w", err))
	}
	out, err := s3.OpenLocation(ctx, loc, s3.OpenOptions{Create: true, S3: s3Options(c)})
	if err != nil {
		return Fail(ExitIO, err)
	}
	bar := progress.New(c.App.ErrWriter, g.JSON || g.Quiet || g.NoProgress, "exporting", 0, "key groups")
	o.Progress = bar
	// A failed or interrupted export removes the tables it wrote: without
	// the manifest they are no dataset. Not when another export published
	// the same manifest first (its tables have the same names).
	rec := s3.NewRecording(out, stateexport.ManifestKey(o.Shard))
	man, err := stateexport.Export(ctx, sp, rec, o)
	bar.Done()
	if err != nil {
		if !errors.Is(err, s3.ErrExists) {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			rec.Remove(cctx)
			cancel()
		}
		if errors.Is(err, stateexport.ErrFieldNames) {
			return Fail(ExitUsage, err)
		}
		return Fail(ExitIO, err)
	}
	w := c.App.Writer
	if g.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(man)
	}
	var rows, files int64
	var bytes int64
	for _, t := range man.Tables {
		rows += t.Rows
		for _, f := range t.Files {
			files++
			bytes += f.Size
		}
	}
	if !g.Quiet {
		for _, t := range man.Tables {
			if t.State == "" {
				continue
			}
			fmt.Fprintf(w, "%-60s %10d rows  %s\n", t.Name, t.Rows, t.Kind)
		}
		for _, n := range man.Notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
	}
	fmt.Fprintf(w, "exported %d tables, %d rows, %d files (%s) to %s\n", len(man.Tables), rows, files, inspectBytes(bytes), out.String())
	return nil
}
