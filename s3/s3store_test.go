package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
)

func TestConformanceS3(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	st, err := srv.NewStore(context.Background(), "conf/run", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	runConformance(t, st, defaultConformance())
	ups, err := st.PendingUploads(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 0 {
		t.Fatalf("pending multipart uploads left: %+v", ups)
	}
	// The prefix isolates: the root store sees the keys under conf/run/.
	info, err := srv.Store.Stat(context.Background(), "conf/run/basic/a.bin")
	if err != nil || info.Size != 2 {
		t.Fatalf("root view of prefixed key: %+v, %v", info, err)
	}
}

func TestS3WrongCredentialsArePermanent(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	opts := srv.Options("", s3.S3Options{})
	opts.SecretKey = "wrong"
	st, err := s3.NewS3(context.Background(), srv.Bucket, "", opts)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Put(context.Background(), "x", bytes.NewReader([]byte("x")), 1)
	if err == nil || !s3.IsPermanent(err) || s3.IsTransient(err) {
		t.Fatalf("put with a wrong secret: %v (permanent=%v)", err, s3.IsPermanent(err))
	}
	_, err = st.Get(context.Background(), "x")
	if err == nil || !s3.IsPermanent(err) {
		t.Fatalf("get with a wrong secret: %v", err)
	}
}

func TestS3MultipartPutIfAbsent(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	st, err := srv.NewStore(ctx, "mpia", s3.S3Options{PartSize: s3.MinPartSize, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	const size = 3*s3.MinPartSize + 12345
	want := detCRC(t, 21, size)
	if err := st.PutIfAbsent(ctx, "big", hideSize{newDetReader(21, size)}, -1); err != nil {
		t.Fatal(err)
	}
	err = st.PutIfAbsent(ctx, "big", hideSize{newDetReader(22, size)}, -1)
	if !s3.IsExist(err) {
		t.Fatalf("second multipart put-if-absent: %v, want ErrExists", err)
	}
	rc, err := st.Get(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, s3.VerifyingReader(rc, size, want)); err != nil {
		t.Fatalf("first writer's object damaged: %v", err)
	}
	if ups, err := st.PendingUploads(ctx); err != nil || len(ups) != 0 {
		t.Fatalf("pending uploads after a refused complete: %v, %v", ups, err)
	}
}

// The store sends x-amz-checksum-crc32c with every upload; the server must
// refuse a body that does not match it (here: a deliberately wrong value).
func TestS3ServerVerifiesUploadChecksum(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	_, err := srv.Store.Client().PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("bad-crc"),
		Body: bytes.NewReader([]byte("payload")), ChecksumCRC32C: aws.String("AAAAAA==")})
	if err == nil {
		t.Fatal("server accepted a body with a wrong CRC-32C")
	}
	if _, err := srv.Store.Stat(ctx, "bad-crc"); !s3.IsNotExist(err) {
		t.Fatalf("object stored despite checksum mismatch: %v", err)
	}
}

func TestS3RetryDetectsReplacedObject(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	testReplacedDuringRead(t, srv.Store)
}

// TestConformanceExternalS3 runs the suite against a real bucket when
// SFSTATE_TEST_S3_URL=s3://bucket/prefix is set (credentials, region and
// endpoint from the usual AWS variables). The prefix gets a unique
// sub-prefix, deleted afterwards.
func TestConformanceExternalS3(t *testing.T) {
	u := os.Getenv("SFSTATE_TEST_S3_URL")
	if u == "" {
		t.Skip("SFSTATE_TEST_S3_URL not set")
	}
	loc, err := s3.ParseURL(u)
	if err != nil || loc.Scheme != "s3" {
		t.Fatalf("SFSTATE_TEST_S3_URL=%q: %v", u, err)
	}
	ctx := context.Background()
	st, err := s3.NewS3(ctx, loc.Bucket, s3.JoinKey(loc.Prefix, fmt.Sprintf("sfstate-test-%d", time.Now().UnixNano())), s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		objs, _ := st.List(ctx, "")
		for _, o := range objs {
			st.Delete(ctx, o.Key)
		}
	})
	runConformance(t, st, defaultConformance())
}
