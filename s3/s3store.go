package s3

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// PathStyle selects S3 bucket addressing.
type PathStyle int

const (
	// PathStyleAuto uses path-style requests (http://host/bucket/key) when a
	// custom endpoint is configured and virtual-hosted ones on AWS.
	PathStyleAuto PathStyle = iota
	PathStyleOn
	PathStyleOff
)

// S3 multipart limits.
const (
	MinPartSize     = 5 << 20
	DefaultPartSize = 16 << 20
	maxParts        = 10000
	// MaxCopySize is the largest object CopyObject copies in one request.
	MaxCopySize = 5 << 30
)

// S3Options configures an S3 store. Zero values mean "use the default" and
// the standard AWS configuration chain (environment, shared config and
// credentials files, profiles).
type S3Options struct {
	// Endpoint overrides AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, e.g.
	// "http://127.0.0.1:7070".
	Endpoint  string
	PathStyle PathStyle
	// Region overrides AWS_REGION / the profile; "us-east-1" when none is set.
	Region string
	// Profile selects a shared-config profile (else AWS_PROFILE / default).
	Profile string
	// AccessKey and SecretKey, when set, replace the credential chain.
	AccessKey, SecretKey, SessionToken string
	// Anonymous sends unsigned requests (public buckets), like the AWS
	// CLI's --no-sign-request; the credential chain is not consulted.
	Anonymous bool
	// PartSize is the multipart part size (default 16 MiB, at least 5 MiB).
	// Objects up to one part are sent with a single PutObject.
	PartSize int64
	// Concurrency bounds the parts of one upload in flight (default 4).
	// Memory use of an upload is at most (Concurrency+1)*PartSize.
	Concurrency int
	// StallTimeout cancels a request that makes no progress (no body bytes
	// sent or received, or no response headers after the request was sent)
	// for this long; the attempt then counts as a transient failure.
	// Default 60s; negative disables. Server-side copies of very large
	// objects must answer within it.
	StallTimeout time.Duration
	// Retry bounds the retries the store does itself on requests whose body
	// it holds in memory (parts, small puts, multipart control calls).
	// Reads and listings are retried by the Retry wrapper.
	Retry RetryPolicy
	// OnRetry, when set, is called before each of those internal retries.
	OnRetry func(op, key string, err error)
	// HTTPClient replaces the default client (which keeps up to 1024 idle
	// connections per host so parallel range reads reuse them).
	HTTPClient *http.Client
}

// S3 is a Storage over an S3 bucket and key prefix.
type S3 struct {
	client *s3.Client
	bucket string
	prefix string // "" or ending in "/"
	opts   S3Options
	name   string
}

var _ Storage = (*S3)(nil)

// NewS3 connects a store to s3://bucket/prefix. It loads configuration but
// makes no request.
func NewS3(ctx context.Context, bucket, prefix string, opts S3Options) (*S3, error) {
	if bucket == "" {
		return nil, fmt.Errorf("%w: s3: empty bucket name", ErrBadKey)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		if err := validatePath(prefix); err != nil {
			return nil, err
		}
		prefix += "/"
	}
	if opts.PartSize == 0 {
		opts.PartSize = DefaultPartSize
	}
	if opts.PartSize < MinPartSize {
		return nil, fmt.Errorf("s3: part size %d below the S3 minimum %d", opts.PartSize, MinPartSize)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.StallTimeout == 0 {
		opts.StallTimeout = 60 * time.Second
	}
	if opts.StallTimeout < 0 {
		opts.StallTimeout = 0
	}
	opts.Retry = opts.Retry.norm()

	var loads []func(*config.LoadOptions) error
	if opts.Profile != "" {
		loads = append(loads, config.WithSharedConfigProfile(opts.Profile))
	}
	if opts.Region != "" {
		loads = append(loads, config.WithRegion(opts.Region))
	}
	// The SDK's own log lines (e.g. IMDS fallback warnings) are not ours to
	// print: errors reach the caller as errors.
	loads = append(loads, config.WithLogger(logging.Nop{}))
	if opts.Anonymous {
		loads = append(loads, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	} else if opts.AccessKey != "" {
		loads = append(loads, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(opts.AccessKey, opts.SecretKey, opts.SessionToken)))
	}
	if opts.HTTPClient != nil {
		loads = append(loads, config.WithHTTPClient(opts.HTTPClient))
	} else {
		stall := opts.StallTimeout
		loads = append(loads, config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = 1024
			tr.MaxIdleConnsPerHost = 1024
			tr.IdleConnTimeout = 90 * time.Second
			if stall > 0 {
				// A request whose response does not start within the stall
				// timeout (a black-holed connection) fails transiently.
				tr.ResponseHeaderTimeout = stall
			}
		})))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("s3: load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	endpoint := opts.Endpoint
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL_S3")
	}
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	pathStyle := opts.PathStyle == PathStyleOn || (opts.PathStyle == PathStyleAuto && endpoint != "")
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
		// Retries are ours (they resume reads and keep parts in memory).
		o.Retryer = aws.NopRetryer{}
		// Integrity is end to end: callers record CRC-32C in manifests.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	name := "s3://" + bucket + "/" + strings.TrimSuffix(prefix, "/")
	return &S3{client: client, bucket: bucket, prefix: prefix, opts: opts, name: strings.TrimSuffix(name, "/")}, nil
}

// Client returns the underlying SDK client.
func (s *S3) Client() *s3.Client { return s.client }

// Bucket returns the bucket name.
func (s *S3) Bucket() string { return s.bucket }

// Prefix returns the key prefix ("" or ending in "/").
func (s *S3) Prefix() string { return s.prefix }

func (s *S3) String() string { return s.name }

func (s *S3) full(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return s.prefix + key, nil
}

// retry runs f under the store's own retry policy.
func (s *S3) retry(ctx context.Context, op, key string, f func() error) error {
	var hook func(error)
	if s.opts.OnRetry != nil {
		hook = func(err error) { s.opts.OnRetry(op, key, err) }
	}
	return s.opts.Retry.do(ctx, hook, f)
}

func (s *S3) fail(op, key string, err error) error {
	return fmt.Errorf("%s: %s %s: %w", s.name, op, key, classify(err))
}

// stalled turns the watchdog's cancellation into a transient timeout error.
func stalled(ctx, wctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), context.DeadlineExceeded) {
		return fmt.Errorf("%w (no progress; last error: %v)", errStalled, err)
	}
	return err
}

var errStalled = fmt.Errorf("s3: request stalled: %w", context.DeadlineExceeded)

// Get returns the whole object.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.get(ctx, key, 0, -1, false)
}

// GetRange returns n bytes from off (n < 0: to the end).
func (s *S3) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n < -1 {
		return nil, rangeError(s.name, key, off, n, -1)
	}
	if n == 0 {
		info, err := s.Stat(ctx, key)
		if err != nil {
			return nil, err
		}
		if _, err := checkRange(s.name, key, off, n, info.Size); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	return s.get(ctx, key, off, n, true)
}

func (s *S3) get(ctx context.Context, key string, off, n int64, ranged bool) (io.ReadCloser, error) {
	fk, err := s.full(key)
	if err != nil {
		return nil, err
	}
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &fk}
	if ranged {
		if n < 0 {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
		} else {
			in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
		}
	}
	rv := readVersionFrom(ctx)
	pinned := rv.pinnedETag()
	if pinned != "" {
		in.IfMatch = aws.String(pinned)
	}
	wctx, wd, cancel := newWatchdog(ctx, s.opts.StallTimeout)
	out, err := s.client.GetObject(wctx, in)
	if err != nil {
		err = stalled(ctx, wctx, err)
		cancel()
		err = classify(err)
		if pinned != "" && IsExist(err) {
			return nil, fmt.Errorf("%w: %s: %s no longer has ETag %s", ErrChanged, s.name, key, pinned)
		}
		if errors.Is(err, errRange) {
			// Past the end: describe it with the object's size. Reading
			// from exactly the end to the end is an empty read.
			info, serr := s.Stat(ctx, key)
			if serr != nil {
				return nil, serr
			}
			if n < 0 && off == info.Size {
				return io.NopCloser(bytes.NewReader(nil)), nil
			}
			return nil, fmt.Errorf("%w (%v)", rangeError(s.name, key, off, n, info.Size), err)
		}
		return nil, fmt.Errorf("%s: get %s: %w", s.name, key, err)
	}
	if strings.HasSuffix(aws.ToString(out.ContentType), "x-directory") {
		out.Body.Close()
		cancel()
		return nil, fmt.Errorf("%s: get %s: %w (a directory)", s.name, key, ErrNotExist)
	}
	rv.pinETag(aws.ToString(out.ETag))
	want := aws.ToInt64(out.ContentLength)
	if out.ContentLength == nil {
		want = -1
	}
	if ranged && n >= 0 && want != n {
		out.Body.Close()
		cancel()
		return nil, rangeError(s.name, key, off, n, off+max(want, 0))
	}
	return &s3Body{body: out.Body, want: want, wd: wd, cancel: cancel, ctx: ctx, wctx: wctx, name: s.name, key: key}, nil
}

// s3Body checks the body length, kicks the stall watchdog and reports a
// stall as a transient error.
type s3Body struct {
	body      io.ReadCloser
	want, got int64
	wd        *watchdog
	cancel    context.CancelFunc
	ctx, wctx context.Context
	name, key string
}

func (b *s3Body) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.got += int64(n)
	if n > 0 {
		b.wd.kick()
	}
	if err == io.EOF && b.want >= 0 && b.got < b.want {
		err = io.ErrUnexpectedEOF
	}
	if b.want >= 0 && b.got > b.want {
		return n, fmt.Errorf("%w: %s: get %s: body longer than Content-Length %d", ErrPermanent, b.name, b.key, b.want)
	}
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%s: read %s at byte %d: %w", b.name, b.key, b.got, stalled(b.ctx, b.wctx, err))
	}
	return n, err
}

func (b *s3Body) Close() error {
	err := b.body.Close()
	b.cancel()
	return err
}

// Stat describes key.
func (s *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	fk, err := s.full(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &fk})
	if err != nil {
		return ObjectInfo{}, s.fail("stat", key, err)
	}
	if strings.HasSuffix(aws.ToString(out.ContentType), "x-directory") {
		return ObjectInfo{}, fmt.Errorf("%s: stat %s: %w (a directory)", s.name, key, ErrNotExist)
	}
	return ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

// List returns the objects under prefix, sorted, following pagination.
func (s *S3) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	full := s.prefix + prefix
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &full})
	var out []ObjectInfo
	for pages := 0; p.HasMorePages(); pages++ {
		if pages > 10_000_000 {
			return nil, fmt.Errorf("%s: list %s: too many pages", s.name, prefix)
		}
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.fail("list", prefix, err)
		}
		for _, o := range page.Contents {
			k := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			if ValidateKey(k) != nil {
				continue // directory markers and foreign names
			}
			out = append(out, ObjectInfo{Key: k, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Put uploads r to key: one PutObject when it fits in a part, otherwise a
// multipart upload with up to Concurrency parts in flight. A failed
// multipart upload is aborted, so no object and no pending upload remain.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, false)
}

// PutIfAbsent is Put with "If-None-Match: *": the server refuses to create
// the object when key exists (ErrExists), atomically.
func (s *S3) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, key, r, size, true)
}

// readPart fills buf from r; it returns the byte count and whether r ended.
func readPart(r io.Reader, buf []byte) (int, bool, error) {
	n, err := io.ReadFull(r, buf)
	switch err {
	case nil:
		return n, false, nil
	case io.EOF, io.ErrUnexpectedEOF:
		return n, true, nil
	}
	return n, false, err
}

func (s *S3) put(ctx context.Context, key string, r io.Reader, size int64, ifAbsent bool) error {
	fk, err := s.full(key)
	if err != nil {
		return err
	}
	partSize := s.opts.PartSize
	if size > partSize*maxParts {
		// Known large size: grow parts (rounded to MiB) to stay within
		// the 10000-part limit.
		partSize = ((size+maxParts-1)/maxParts + 1<<20 - 1) &^ (1<<20 - 1)
	}
	if partSize > 5<<30 {
		return fmt.Errorf("%w: %s: put %s: %d bytes exceed the S3 object size limit", ErrPermanent, s.name, key, size)
	}
	first, eof, err := readFirst(r, size, partSize)
	if err != nil {
		return fmt.Errorf("%s: put %s: %w", s.name, key, err)
	}
	n := len(first)
	if !eof && size >= 0 && int64(n) == size {
		// Known size fully read: the stream must end here.
		var one [1]byte
		m, _ := io.ReadFull(r, one[:])
		if m > 0 {
			return fmt.Errorf("%w: %s: put %s: stream longer than the declared %d bytes", ErrPermanent, s.name, key, size)
		}
		eof = true
	}
	if eof {
		if size >= 0 && int64(n) != size {
			return fmt.Errorf("%w: %s: put %s: read %d bytes, expected %d", ErrPermanent, s.name, key, n, size)
		}
		return s.putSingle(ctx, key, fk, first[:n], ifAbsent)
	}
	return s.putMultipart(ctx, key, fk, first, r, size, partSize, ifAbsent)
}

// readFirst reads the first part: up to partSize bytes (exactly size when
// that is known and smaller). With an unknown size it grows its buffer from
// 64 KiB by doubling, so small objects do not cost a whole part buffer. It
// reports whether r ended; a buffer that is not at EOF has len partSize.
func readFirst(r io.Reader, size, partSize int64) ([]byte, bool, error) {
	if size >= 0 && size < partSize {
		buf := make([]byte, size)
		n, eof, err := readPart(r, buf)
		return buf[:n], eof, err
	}
	if size >= 0 {
		buf := make([]byte, partSize)
		n, eof, err := readPart(r, buf)
		return buf[:n], eof, err
	}
	buf := make([]byte, min(64<<10, partSize))
	have := 0
	for {
		n, eof, err := readPart(r, buf[have:])
		have += n
		if err != nil || eof {
			return buf[:have], eof, err
		}
		if int64(len(buf)) == partSize {
			return buf, false, nil
		}
		grown := make([]byte, min(2*int64(len(buf)), partSize))
		copy(grown, buf[:have])
		buf = grown
	}
}

// progressReader is a seekable in-memory body that kicks a watchdog.
type progressReader struct {
	*bytes.Reader
	wd *watchdog
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.Reader.Read(b)
	p.wd.kick()
	return n, err
}

// withStall runs f with a context cancelled when f makes no progress for
// StallTimeout (the body reader kicks the watchdog).
func (s *S3) withStall(ctx context.Context, f func(ctx context.Context, wd *watchdog) error) error {
	wctx, wd, cancel := newWatchdog(ctx, s.opts.StallTimeout)
	defer cancel()
	return stalled(ctx, wctx, f(wctx, wd))
}

func (s *S3) putSingle(ctx context.Context, key, fk string, data []byte, ifAbsent bool) error {
	crc := crcHeader(data)
	tries := 0
	err := s.retry(ctx, "put", key, func() error {
		tries++
		err := s.withStall(ctx, func(wctx context.Context, wd *watchdog) error {
			in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &fk, Body: progressReader{bytes.NewReader(data), wd},
				ContentLength: aws.Int64(int64(len(data))), ChecksumCRC32C: aws.String(crc)}
			if ifAbsent {
				in.IfNoneMatch = aws.String("*")
			}
			_, err := s.client.PutObject(wctx, in, unsignedPayload)
			return err
		})
		return classify(err)
	})
	if err != nil && ifAbsent && tries > 1 && IsExist(err) && s.holds(ctx, key, data) {
		return nil // an earlier attempt succeeded but its response was lost
	}
	if err != nil {
		return fmt.Errorf("%s: put %s: %w", s.name, key, err)
	}
	return nil
}

func (s *S3) putMultipart(ctx context.Context, key, fk string, first []byte, r io.Reader, size, partSize int64, ifAbsent bool) error {
	var uploadID *string
	attempts, t0 := 0, time.Now()
	err := s.retry(ctx, "create_multipart", key, func() error {
		attempts++
		out, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &fk,
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
		if err == nil {
			uploadID = out.UploadId
		}
		return classify(err)
	})
	if attempts > 1 {
		// A failed attempt may have created an upload whose response was
		// lost: abort those once this upload is over (when the link is
		// likelier back), lest they stay pending.
		defer s.abortStrays(ctx, key, fk, aws.ToString(uploadID), t0)
	}
	if err != nil {
		return fmt.Errorf("%s: put %s: create multipart upload: %w", s.name, key, err)
	}
	err = s.uploadParts(ctx, key, fk, uploadID, first, r, size, partSize, ifAbsent)
	if err == nil {
		return nil
	}
	// Abort with a context of its own so a cancelled caller still cleans up.
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer acancel()
	if aerr := s.abortFully(actx, key, fk, uploadID); aerr != nil {
		return fmt.Errorf("%s: put %s: %w (and aborting upload %s failed: %v)", s.name, key, err, aws.ToString(uploadID), aerr)
	}
	return fmt.Errorf("%s: put %s: %w", s.name, key, err)
}

// abortStrays aborts, best effort, the pending uploads of exactly key fk
// other than keep that were started since t0 (less a minute for clock
// skew): those a retried CreateMultipartUpload left behind.
func (s *S3) abortStrays(ctx context.Context, key, fk, keep string, t0 time.Time) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var out *s3.ListMultipartUploadsOutput
	if s.retry(actx, "list_multipart", key, func() error {
		var err error
		out, err = s.client.ListMultipartUploads(actx, &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: &fk})
		return classify(err)
	}) != nil {
		return
	}
	for _, u := range out.Uploads {
		if aws.ToString(u.Key) != fk || aws.ToString(u.UploadId) == keep || aws.ToTime(u.Initiated).Before(t0.Add(-time.Minute)) {
			continue
		}
		_ = s.retry(actx, "abort_multipart", key, func() error {
			_, err := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &fk, UploadId: u.UploadId})
			if err != nil && isCode(err, "NoSuchUpload") {
				return nil
			}
			return classify(err)
		})
	}
}

// abortFully aborts a multipart upload and makes sure it stays gone. A part
// upload the client gave up on may still be running on the server and can
// land after the abort (S3 documents the same: an abort may have to be
// repeated), so the upload is checked a few times over about two seconds
// and aborted again when it reappears.
func (s *S3) abortFully(ctx context.Context, key, fk string, uploadID *string) error {
	abort := func() error {
		return s.retry(ctx, "abort_multipart", key, func() error {
			_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &fk, UploadId: uploadID})
			if err != nil && isCode(err, "NoSuchUpload") {
				return nil // already gone
			}
			return classify(err)
		})
	}
	if err := abort(); err != nil {
		return err
	}
	for _, wait := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond, time.Second} {
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
		_, err := s.client.ListParts(ctx, &s3.ListPartsInput{Bucket: &s.bucket, Key: &fk, UploadId: uploadID, MaxParts: aws.Int32(1)})
		if err != nil && (isCode(err, "NoSuchUpload") || IsNotExist(classify(err))) {
			continue // still gone
		}
		if err := abort(); err != nil {
			return err
		}
	}
	return nil
}

func (s *S3) uploadParts(ctx context.Context, key, fk string, uploadID *string, first []byte, r io.Reader, size, partSize int64, ifAbsent bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu    sync.Mutex
		parts []types.CompletedPart
		wg    sync.WaitGroup
		total int64
	)
	conc := s.opts.Concurrency
	free := make(chan []byte, conc+1)
	allocated := 1 // first
	sem := make(chan struct{}, conc)
	buf, n, eof := first, len(first), false
	for num := int32(1); ; num++ {
		if num > maxParts {
			cancel(fmt.Errorf("%w: more than %d parts of %d bytes (give the size to Put for larger objects)", ErrPermanent, maxParts, partSize))
			break
		}
		total += int64(n)
		if size >= 0 && total > size {
			cancel(fmt.Errorf("%w: stream longer than the declared %d bytes", ErrPermanent, size))
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(num int32, data []byte, full []byte) {
			defer func() { <-sem; free <- full; wg.Done() }()
			var etag *string
			crc := crcHeader(data)
			err := s.retry(ctx, "upload_part", key, func() error {
				return classify(s.withStall(ctx, func(wctx context.Context, wd *watchdog) error {
					out, err := s.client.UploadPart(wctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: &fk, UploadId: uploadID,
						PartNumber: aws.Int32(num), Body: progressReader{bytes.NewReader(data), wd}, ContentLength: aws.Int64(int64(len(data))),
						ChecksumCRC32C: aws.String(crc)}, unsignedPayload)
					if err == nil {
						etag = out.ETag
					}
					return err
				}))
			})
			if err != nil {
				cancel(fmt.Errorf("part %d: %w", num, err))
				return
			}
			mu.Lock()
			parts = append(parts, types.CompletedPart{ETag: etag, PartNumber: aws.Int32(num), ChecksumCRC32C: aws.String(crc)})
			mu.Unlock()
		}(num, buf[:n], buf)
		if eof {
			break
		}
		// Next buffer: reuse a free one or allocate up to conc+1.
		select {
		case buf = <-free:
		default:
			if allocated < conc+1 {
				buf = make([]byte, partSize)
				allocated++
			} else {
				select {
				case buf = <-free:
				case <-ctx.Done():
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
		var err error
		n, eof, err = readPart(ctxReader{ctx, r}, buf)
		if err != nil {
			cancel(err)
			break
		}
		if n == 0 && eof {
			break
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if size >= 0 && total != size {
		return fmt.Errorf("%w: read %d bytes, expected %d", ErrPermanent, total, size)
	}
	sort.Slice(parts, func(i, j int) bool { return *parts[i].PartNumber < *parts[j].PartNumber })
	in := &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: &fk, UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	tries := 0
	err := s.retry(ctx, "complete_multipart", key, func() error {
		tries++
		_, err := s.client.CompleteMultipartUpload(ctx, in)
		return classify(err)
	})
	if err != nil && tries > 1 && isCode(err, "NoSuchUpload") {
		// An earlier attempt completed but its response was lost.
		if info, serr := s.Stat(ctx, key); serr == nil && info.Size == total {
			return nil
		}
	}
	return err
}

// holds reports whether key currently stores exactly data.
func (s *S3) holds(ctx context.Context, key string, data []byte) bool {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return false
	}
	defer rc.Close()
	got, err := io.ReadAll(io.LimitReader(rc, int64(len(data))+1))
	return err == nil && bytes.Equal(got, data)
}

// uriEncode percent-encodes every byte of key except unreserved characters
// and "/", as S3 expects in x-amz-copy-source (a bare "+" would be read as a
// space).
func uriEncode(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~/", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// crcHeader is the x-amz-checksum-crc32c value of data: the server checks
// every uploaded body against it, so transfer corruption fails the request
// instead of being stored.
func crcHeader(data []byte) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], CRC32C(data))
	return base64.StdEncoding.EncodeToString(b[:])
}

// unsignedPayload signs upload requests with UNSIGNED-PAYLOAD instead of
// hashing the body with SHA-256 (the CRC-32C header protects the body, at a
// fraction of the CPU cost).
func unsignedPayload(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
}

func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// Delete removes key; a missing key is not an error.
func (s *S3) Delete(ctx context.Context, key string) error {
	fk, err := s.full(key)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &fk})
	if err = classify(err); err != nil && !IsNotExist(err) {
		return fmt.Errorf("%s: delete %s: %w", s.name, key, err)
	}
	return nil
}

// Copy copies srcKey to dstKey server-side (CopyObject). Objects above 5 GiB
// would need a multipart copy, which is not implemented: they fail with a
// permanent error.
func (s *S3) Copy(ctx context.Context, srcKey, dstKey string) error {
	src, err := s.full(srcKey)
	if err != nil {
		return err
	}
	dst, err := s.full(dstKey)
	if err != nil {
		return err
	}
	info, err := s.Stat(ctx, srcKey)
	if err != nil {
		return err
	}
	if info.Size > MaxCopySize {
		return fmt.Errorf("%w: %s: copy %s: %d bytes exceed the %d-byte single-request copy limit (multipart copy not supported)",
			ErrPermanent, s.name, srcKey, info.Size, int64(MaxCopySize))
	}
	source := s.bucket + "/" + uriEncode(src)
	_, err = s.client.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &s.bucket, Key: &dst, CopySource: &source})
	if err != nil {
		return s.fail("copy to "+dstKey, srcKey, err)
	}
	return nil
}

// PendingUpload is an unfinished multipart upload.
type PendingUpload struct {
	Key      string
	UploadID string
	Started  time.Time
}

// PendingUploads lists unfinished multipart uploads under the store's
// prefix (uploads a crashed writer left behind; they cost storage until
// aborted).
func (s *S3) PendingUploads(ctx context.Context) ([]PendingUpload, error) {
	var out []PendingUpload
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: aws.String(s.prefix)}
	for pages := 0; pages < 100000; pages++ {
		page, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, s.fail("list multipart uploads", s.prefix, err)
		}
		for _, u := range page.Uploads {
			out = append(out, PendingUpload{Key: strings.TrimPrefix(aws.ToString(u.Key), s.prefix),
				UploadID: aws.ToString(u.UploadId), Started: aws.ToTime(u.Initiated)})
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
	return out, nil
}

// AbortPending aborts one unfinished multipart upload.
func (s *S3) AbortPending(ctx context.Context, u PendingUpload) error {
	fk := s.prefix + u.Key
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &fk, UploadId: &u.UploadID})
	if err != nil {
		return s.fail("abort upload", u.Key, err)
	}
	return nil
}
