package s3

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// IsTransient reports whether retrying the operation that returned err may
// succeed: timeouts, connection resets, an unexpected EOF in the middle of a
// body, HTTP 5xx and 429, and S3 throttling codes (SlowDown, ...). Not-found,
// access denied, precondition failures, invalid keys and ranges, and a
// cancelled context are never transient.
func IsTransient(err error) bool {
	if err == nil || IsPermanent(err) || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A per-request stall timeout; the retry loop separately stops when
		// the caller's own context has expired.
		return true
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeoutException",
			"InternalError", "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequests",
			"TooManyRequestsException", "ConditionalRequestConflict", "OperationAborted":
			return true
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		if c := re.HTTPStatusCode(); c >= 500 || c == 429 {
			return true
		}
	}
	if retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"connection reset", "broken pipe", "unexpected EOF", "server closed idle connection", "use of closed network connection"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// classify maps an S3 SDK error onto the package's sentinels, keeping the
// original error in the chain: NoSuchKey/404 → ErrNotExist, 412 →
// ErrExists, 403 and other 4xx (except timeouts/throttling) → ErrPermanent.
func classify(err error) error {
	if err == nil {
		return nil
	}
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchKey" || code == "NotFound" || (status == 404 && code != "NoSuchBucket" && code != "NoSuchUpload"):
		return errors.Join(ErrNotExist, err)
	case code == "PreconditionFailed" || status == 412:
		return errors.Join(ErrExists, err)
	case code == "InvalidRange" || status == 416:
		return errors.Join(errRange, err)
	case status == 403 || code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
		code == "NoSuchBucket" || code == "NoSuchUpload" || code == "InvalidBucketName":
		return errors.Join(ErrPermanent, err)
	case status >= 400 && status < 500 && status != 408 && status != 409 && status != 429 && !IsTransient(err):
		return errors.Join(ErrPermanent, err)
	}
	return err
}

// errRange marks an unsatisfiable range reported by the server.
var errRange = errors.New("s3: range not satisfiable")
