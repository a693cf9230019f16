package command

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/urfave/cli/v2"
)

// s3EndpointFlag selects an S3-compatible endpoint for s3:// paths.
var s3EndpointFlag = &cli.StringFlag{
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
	if strings.HasPrefix(arg, "s3://") || strings.HasPrefix(arg, "s3a://") {
		rest := arg[strings.Index(arg, "://")+3:]
		bucket, prefix, _ := strings.Cut(rest, "/")
		prefix = strings.Trim(prefix, "/")
		if bucket == "" {
			return nil, "", Failf(ExitUsage, "%s: no bucket", arg)
		}
		opts := s3.S3Options{Endpoint: c.String("s3-endpoint")}
		st, err := s3.NewS3(ctx, bucket, "", opts)
		if err != nil {
			return nil, "", Fail(ExitIO, err)
		}
		key := prefix
		if key == "" || !strings.HasSuffix(key, savepoint.MetadataName) {
			key = s3.JoinKey(prefix, savepoint.MetadataName)
		}
		return s3.WithRetry(st, s3.RetryPolicy{}), key, nil
	}
	p, err := filepath.Abs(arg)
	if err != nil {
		return nil, "", Fail(ExitIO, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, "", Fail(ExitIO, err)
	}
	dir, key := p, savepoint.MetadataName
	if !fi.IsDir() {
		dir, key = filepath.Dir(p), filepath.Base(p)
	}
	// The store is rooted at the savepoint directory itself: nothing
	// outside it is reachable through the store.
	st, err := s3.NewLocal(dir)
	if err != nil {
		return nil, "", Fail(ExitIO, err)
	}
	return st, key, nil
}

// fmtBytes renders a byte count in binary units.
func fmtBytes(n int64) string {
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
