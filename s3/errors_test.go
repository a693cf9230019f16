package s3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/sfstate/sfstate/s3"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestIsTransient(t *testing.T) {
	transient := []error{
		io.ErrUnexpectedEOF,
		fmt.Errorf("read: %w", syscall.ECONNRESET),
		&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}},
		fmt.Errorf("x: %w", context.DeadlineExceeded),
		syscall.EPIPE,
	}
	for _, err := range transient {
		if !s3.IsTransient(err) || s3.IsPermanent(err) {
			t.Errorf("%v: transient=%v permanent=%v, want transient", err, s3.IsTransient(err), s3.IsPermanent(err))
		}
	}
	permanent := []error{
		s3.ErrNotExist, s3.ErrExists, s3.ErrBadKey, fmt.Errorf("w: %w", s3.ErrPermanent),
		errors.Join(s3.ErrPermanent, io.ErrUnexpectedEOF), context.Canceled, errors.New("weird"), nil,
	}
	for _, err := range permanent {
		if s3.IsTransient(err) {
			t.Errorf("%v: transient, want not", err)
		}
	}
}
