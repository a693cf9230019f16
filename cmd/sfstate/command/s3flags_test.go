package command

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
)

// TestGlobalS3Flags: the S3 flags are global (before or after the command,
// --endpoint-url as alias), S3 failures are one line without request ids
// and the SDK prints nothing of its own.
func TestGlobalS3Flags(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	sp := copyFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	st, err := srv.NewStore(ctx, "sp", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(sp)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(sp, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, e.Name(), bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("SFSTATE_S3_ENDPOINT", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	// No IMDS lookups: credentials come from the environment.
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	url := "s3://" + srv.Bucket + "/sp"
	for _, args := range [][]string{
		{"--s3-endpoint", srv.Endpoint, "inspect", url},
		{"inspect", url, "--s3-endpoint", srv.Endpoint, "--region", "us-east-1"},
		{"check", "--endpoint-url", srv.Endpoint, url},
	} {
		o, e, code := run(t, args...)
		if code != ExitOK || e != "" {
			t.Fatalf("%v: exit %d\n%s%s", args, code, o, e)
		}
	}
	// A missing prefix: exit 3, one line naming the URL.
	_, e, code := run(t, "inspect", url+"-missing", "--s3-endpoint", srv.Endpoint)
	t.Logf("404: %s", e)
	if code != ExitIO || strings.Count(strings.TrimSpace(e), "\n") != 0 || !strings.Contains(e, url+"-missing") {
		t.Fatalf("missing prefix: exit %d: %q", code, e)
	}
	// Wrong credentials: 403 in one line, no request ids.
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-key-0123456789")
	_, e, code = run(t, "inspect", url, "--s3-endpoint", srv.Endpoint)
	if code != ExitIO || strings.Count(strings.TrimSpace(e), "\n") != 0 || strings.Contains(e, "RequestID") ||
		strings.Contains(e, "HostID") || !strings.Contains(e, "HTTP 403") {
		t.Fatalf("wrong credentials: exit %d: %q", code, e)
	}
	t.Logf("403: %s", e)
	// Unsigned requests reach the server (which refuses them).
	_, e, code = run(t, "--no-sign-request", "inspect", url, "--s3-endpoint", srv.Endpoint)
	if code != ExitIO || !strings.Contains(e, "HTTP 403") || strings.Contains(e, "SDK") {
		t.Fatalf("--no-sign-request: exit %d: %q", code, e)
	}
}
