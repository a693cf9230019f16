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

// openSavepointArg opens a savepoint named on the command line: a local
// savepoint directory, a local `_metadata` file, or s3://bucket/prefix
// (directory or `_metadata` object). Errors carry ExitIO.
func openSavepointArg(ctx context.Context, c *cli.Context, arg string) (*savepoint.Savepoint, error) {
	if arg == "" {
		return nil, Failf(ExitUsage, "missing savepoint path")
	}
	st, key, err := savepointStore(ctx, c, arg)
	if err != nil {
		return nil, err
	}
	sp, err := savepoint.Open(ctx, st, key)
	if err != nil {
		return nil, Fail(ExitIO, err)
	}
	return sp, nil
}

func savepointStore(ctx context.Context, c *cli.Context, arg string) (s3.Storage, string, error) {
	if !strings.Contains(arg, "://") {
		// A local metadata file under another name than _metadata.
		if fi, err := os.Stat(arg); err == nil && fi.Mode().IsRegular() && filepath.Base(arg) != savepoint.MetadataName {
			p, err := filepath.Abs(arg)
			if err != nil {
				return nil, "", Fail(ExitIO, err)
			}
			st, err := s3.NewLocal(filepath.Dir(p))
			if err != nil {
				return nil, "", Fail(ExitIO, err)
			}
			return st, filepath.Base(p), nil
		}
	}
	opts := s3.OpenOptions{S3: s3Options(c)}
	if loc, err := s3.ParseURL(arg); err == nil && loc.Scheme == "s3" {
		// A checkpoint in <root>/chk-N: root the store at <root> so that
		// the shared files of incremental handles (<root>/shared/...) are
		// reachable through it.
		if i := strings.LastIndex(loc.Prefix, "/"); i >= 0 && isChkName(loc.Prefix[i+1:]) {
			chk := loc.Prefix[i+1:]
			loc.Prefix = loc.Prefix[:i]
			st, err := s3.OpenLocation(ctx, loc, opts)
			if err != nil {
				return nil, "", Fail(ExitIO, err)
			}
			return st, chk + "/" + savepoint.MetadataName, nil
		}
	}
	st, key, err := s3.Open(ctx, arg, opts)
	if err != nil {
		if errors.Is(err, s3.ErrBadKey) {
			return nil, "", Fail(ExitUsage, err)
		}
		return nil, "", Fail(ExitIO, err)
	}
	return st, key, nil
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

// isChkName reports whether a directory name is a checkpoint's chk-<id>.
func isChkName(name string) bool {
	rest, ok := strings.CutPrefix(name, "chk-")
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
