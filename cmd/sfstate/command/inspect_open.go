package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

// savepointS3EndpointFlag selects an S3-compatible endpoint for s3:// paths.
var savepointS3EndpointFlag = &cli.StringFlag{
	Name:    "s3-endpoint",
	Usage:   "endpoint URL of an S3-compatible store for s3:// paths, e.g. http://127.0.0.1:7070",
	EnvVars: []string{"SFSTATE_S3_ENDPOINT"},
}

// Flags of every command that opens a savepoint or checkpoint.
var (
	allowRootFlag = &cli.StringSliceFlag{
		Name:  "allow-root",
		Usage: "also follow absolute state-file URIs below `PREFIX` (s3://bucket/prefix or a local directory; repeatable)",
	}
	mapFlag = &cli.StringSliceFlag{
		Name:  "map",
		Usage: "read absolute state-file URIs starting with OLD from NEW instead, for a moved checkpoint (`OLD=NEW`, repeatable)",
	}
	checkpointFlag = &cli.Int64Flag{
		Name:  "checkpoint",
		Usage: "for a job's checkpoint directory or a checkpoint root: read chk-`N` (default: the newest completed)",
	}
)

// openSavepointArg opens a savepoint or checkpoint named on the command
// line: a savepoint or chk-<id> directory, its `_metadata` (or a local
// metadata file under another name), a job's checkpoint directory or a
// checkpoint root, local or s3://. For the last two savepoint.Locate picks
// a completed checkpoint (--checkpoint N, else the newest) and a note on
// stderr says which (not with --quiet or --json; JSON output carries it).
// Absolute state-file URIs are followed as --allow-root and --map allow.
// Errors carry ExitIO (ExitUsage for malformed arguments).
func openSavepointArg(ctx context.Context, c *cli.Context, arg string) (*savepoint.Savepoint, error) {
	if arg == "" {
		return nil, Failf(ExitUsage, "missing savepoint path")
	}
	o, err := savepointOpenOptions(c)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(arg, "://") {
		// A local metadata file under another name than _metadata.
		if fi, err := os.Stat(arg); err == nil && fi.Mode().IsRegular() && filepath.Base(arg) != savepoint.MetadataName {
			p, err := filepath.Abs(arg)
			if err != nil {
				return nil, Fail(ExitIO, err)
			}
			st, err := s3.NewLocal(filepath.Dir(p))
			if err != nil {
				return nil, Fail(ExitIO, err)
			}
			sp, err := savepoint.OpenWith(ctx, st, filepath.Base(p), o)
			if err != nil {
				return nil, Fail(ExitIO, err)
			}
			return sp, nil
		}
	}
	st, err := savepointStore(ctx, c, arg)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if loc, err := s3.ParseURL(arg); err == nil && loc.NamedMetadata {
		prefix = savepoint.MetadataName
	}
	tg, err := savepoint.Locate(ctx, st, prefix, savepoint.LocateOptions{Checkpoint: c.Int64("checkpoint")})
	if err != nil {
		return nil, Fail(ExitIO, err)
	}
	sp, err := savepoint.OpenWith(ctx, tg.Store, tg.MetadataKey, o)
	if err != nil {
		return nil, Fail(ExitIO, err)
	}
	sp.Located = tg.Picked
	if g := GlobalsFrom(c); tg.Picked != nil && !g.Quiet && !g.JSON {
		fmt.Fprintf(c.App.ErrWriter, "sfstate: %s\n", tg.Picked)
	}
	return sp, nil
}

// savepointOpenOptions reads --allow-root, --map and --s3-endpoint.
func savepointOpenOptions(c *cli.Context) (savepoint.OpenOptions, error) {
	o := savepoint.OpenOptions{AllowRoots: c.StringSlice("allow-root"),
		Store: s3.OpenOptions{S3: s3Options(c)}}
	for _, r := range o.AllowRoots {
		if _, err := savepoint.NormalizeRoot(r); err != nil {
			return o, Failf(ExitUsage, "--allow-root: %v", err)
		}
	}
	for _, m := range c.StringSlice("map") {
		pm, err := savepoint.ParsePathMap(m)
		if err != nil {
			return o, Failf(ExitUsage, "--map: %v", err)
		}
		o.Map = append(o.Map, pm)
	}
	return o, nil
}

// savepointStore opens a store rooted at the directory arg names (the
// directory of a named `_metadata`).
func savepointStore(ctx context.Context, c *cli.Context, arg string) (s3.Storage, error) {
	loc, err := s3.ParseURL(arg)
	if err != nil {
		return nil, Fail(ExitUsage, err)
	}
	if loc.Scheme == "file" {
		if fi, err := os.Stat(loc.Dir); err != nil {
			return nil, Failf(ExitIO, "no such file or directory: %s", loc.Dir)
		} else if !fi.IsDir() {
			return nil, Failf(ExitIO, "%s is a file, not a savepoint or checkpoint directory or a _metadata file", loc.Dir)
		}
	}
	st, err := s3.OpenLocation(ctx, loc, s3.OpenOptions{S3: s3Options(c)})
	if err != nil {
		if errors.Is(err, s3.ErrBadKey) {
			return nil, Fail(ExitUsage, err)
		}
		return nil, Fail(ExitIO, err)
	}
	return st, nil
}

// inspectBytes renders a byte count in binary units.
func inspectBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
