package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/sfstate/sfstate/s3"
)

// S3Server is a running versitygw gateway serving a posix directory.
type S3Server struct {
	// Endpoint is the server's URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	// Bucket was created at start.
	Bucket string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	// Region is the signing region ("us-east-1").
	Region string
	// Dir is the posix directory behind the gateway (buckets are its
	// subdirectories).
	Dir string
	// Store is a Storage rooted at s3://Bucket/ with default options.
	Store *s3.S3

	proc *process
}

// Test credentials for the local gateway (loopback only).
const (
	testAccessKey = "sfstate-test-access"
	testSecretKey = "sfstate-test-secret-key-0123456789"
)

// LaunchVersitygw starts versitygw on a free 127.0.0.1 port with its data
// and log under dir, creates bucket "sfstate" and waits (at most 20s) until
// it answers. The caller must Close it.
func LaunchVersitygw(ctx context.Context, dir string) (*S3Server, error) {
	bin, err := FindBinary("versitygw")
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "gw")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := freePort()
		if err != nil {
			return nil, err
		}
		proc, err := startProcess(filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt)), bin,
			[]string{"--port", addr, "--access", testAccessKey, "--secret", testSecretKey, "--quiet", "posix", root}, nil)
		if err != nil {
			return nil, err
		}
		srv := &S3Server{Endpoint: "http://" + addr, Bucket: "sfstate", AccessKey: testAccessKey, SecretKey: testSecretKey,
			Region: "us-east-1", Dir: root, proc: proc}
		srv.Store, err = srv.NewStore(ctx, "", s3.S3Options{})
		if err == nil {
			err = proc.waitReady("versitygw", 20*time.Second, func() error {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				return srv.CreateBucket(cctx, srv.Bucket)
			})
		}
		if err == nil {
			return srv, nil
		}
		proc.stop()
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// StartVersitygw starts a gateway for the test in a temporary directory and
// stops it at cleanup. It skips the test when versitygw is missing (fails
// when CI=true).
func StartVersitygw(t TB) *S3Server {
	t.Helper()
	requireBinary(t, "versitygw")
	srv, err := LaunchVersitygw(context.Background(), t.TempDir())
	if err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// Close stops the server.
func (s *S3Server) Close() {
	if s != nil && s.proc != nil {
		s.proc.stop()
	}
}

// Options returns S3Options that reach this server at endpoint (a proxy's
// URL; "" means base.Endpoint if set, else the server's own), with its
// credentials, region and path-style addressing, merged over base.
func (s *S3Server) Options(endpoint string, base s3.S3Options) s3.S3Options {
	if endpoint == "" {
		endpoint = base.Endpoint
	}
	if endpoint == "" {
		endpoint = s.Endpoint
	}
	base.Endpoint = endpoint
	base.PathStyle = s3.PathStyleOn
	base.Region = s.Region
	base.AccessKey, base.SecretKey = s.AccessKey, s.SecretKey
	return base
}

// NewStore returns a store rooted at s3://Bucket/prefix on this server
// (or at opts.Endpoint, e.g. a Toxiproxy proxy in front of it).
func (s *S3Server) NewStore(ctx context.Context, prefix string, opts s3.S3Options) (*s3.S3, error) {
	return s3.NewS3(ctx, s.Bucket, prefix, s.Options("", opts))
}

// CreateBucket creates a bucket; an existing bucket owned by us is fine.
func (s *S3Server) CreateBucket(ctx context.Context, name string) error {
	_, err := s.Store.Client().CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(name)})
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "BucketAlreadyOwnedByYou" {
		return nil
	}
	return err
}
