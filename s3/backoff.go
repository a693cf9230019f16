package s3

import (
	"context"
	"math/rand/v2"
	"time"
)

// RetryPolicy bounds retries of transient errors: at most Attempts tries in
// total, sleeping a random duration in [c/2, c] with c = min(Max, Base*2^i)
// ("equal jitter": spread out, yet a guaranteed minimum wait) before retry
// i+1.
type RetryPolicy struct {
	Attempts int           // total tries, >= 1 (default 5)
	Base     time.Duration // first backoff cap (default 100ms)
	Max      time.Duration // largest backoff cap (default 5s)
}

// DefaultRetryPolicy is used where a zero RetryPolicy is given.
var DefaultRetryPolicy = RetryPolicy{Attempts: 5, Base: 100 * time.Millisecond, Max: 5 * time.Second}

func (p RetryPolicy) norm() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = DefaultRetryPolicy.Attempts
	}
	if p.Base <= 0 {
		p.Base = DefaultRetryPolicy.Base
	}
	if p.Max <= 0 {
		p.Max = DefaultRetryPolicy.Max
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	return p
}

// backoff returns the sleep before retry number i (0-based).
func (p RetryPolicy) backoff(i int) time.Duration {
	c := p.Base
	for j := 0; j < i && c < p.Max; j++ {
		c *= 2
	}
	if c > p.Max {
		c = p.Max
	}
	return c/2 + time.Duration(rand.Int64N(int64(c/2)+1))
}

// sleepCtx sleeps d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// do runs f until it succeeds, fails with a non-transient error, the
// attempts are used up or ctx ends. onRetry (may be nil) sees each retried
// error.
func (p RetryPolicy) do(ctx context.Context, onRetry func(error), f func() error) error {
	p = p.norm()
	var err error
	for i := 0; i < p.Attempts; i++ {
		if err = f(); err == nil || !IsTransient(err) {
			return err
		}
		if ctx.Err() != nil || i == p.Attempts-1 {
			break
		}
		if onRetry != nil {
			onRetry(err)
		}
		if serr := sleepCtx(ctx, p.backoff(i)); serr != nil {
			break
		}
	}
	return err
}

// watchdog cancels a context when no progress is reported for d.
type watchdog struct {
	t *time.Timer
	d time.Duration
}

func newWatchdog(ctx context.Context, d time.Duration) (context.Context, *watchdog, context.CancelFunc) {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &watchdog{d: d}
	if d > 0 {
		w.t = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	}
	return wctx, w, func() {
		w.stop()
		cancel(context.Canceled)
	}
}

func (w *watchdog) kick() {
	if w != nil && w.t != nil {
		w.t.Reset(w.d)
	}
}

func (w *watchdog) stop() {
	if w != nil && w.t != nil {
		w.t.Stop()
	}
}
