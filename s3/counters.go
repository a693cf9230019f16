package s3

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
)

// Op names a kind of request, for counters.
type Op int

// Operation kinds.
const (
	OpGet Op = iota
	OpGetRange
	OpStat
	OpList
	OpPut
	OpPutIfAbsent
	OpDelete
	OpCopy
	numOps
)

var opNames = [numOps]string{"get", "get_range", "stat", "list", "put", "put_if_absent", "delete", "copy"}

func (o Op) String() string {
	if o >= 0 && o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Counters accumulates traffic statistics; safe for concurrent use. Share
// one between several wrapped stores to get totals.
type Counters struct {
	bytesRead    atomic.Int64
	bytesWritten atomic.Int64
	requests     [numOps]atomic.Int64
	errors       atomic.Int64
	retries      atomic.Int64
}

// CounterSnapshot is a point-in-time copy of Counters, JSON-friendly.
type CounterSnapshot struct {
	BytesRead    int64            `json:"bytesRead"`
	BytesWritten int64            `json:"bytesWritten"`
	Requests     map[string]int64 `json:"requests"`
	Errors       int64            `json:"errors"`
	Retries      int64            `json:"retries"`
}

// Snapshot copies the current values.
func (c *Counters) Snapshot() CounterSnapshot {
	s := CounterSnapshot{
		BytesRead:    c.bytesRead.Load(),
		BytesWritten: c.bytesWritten.Load(),
		Requests:     make(map[string]int64),
		Errors:       c.errors.Load(),
		Retries:      c.retries.Load(),
	}
	for i := range c.requests {
		if v := c.requests[i].Load(); v > 0 {
			s.Requests[Op(i).String()] = v
		}
	}
	return s
}

// TotalRequests sums requests of every kind.
func (s CounterSnapshot) TotalRequests() int64 {
	var t int64
	for _, v := range s.Requests {
		t += v
	}
	return t
}

// Requests returns the count for one kind.
func (c *Counters) Requests(op Op) int64 { return c.requests[op].Load() }

// BytesRead returns the bytes delivered by readers.
func (c *Counters) BytesRead() int64 { return c.bytesRead.Load() }

// BytesWritten returns the bytes consumed by puts.
func (c *Counters) BytesWritten() int64 { return c.bytesWritten.Load() }

// CountRetry records one retry; pass it to Retry.OnRetry.
func (c *Counters) CountRetry(op, key string, err error) { c.retries.Add(1) }

// Counted is a Storage wrapper that counts requests, errors and bytes.
type Counted struct {
	st Storage
	c  *Counters
}

var _ Storage = (*Counted)(nil)

// WithCounters wraps st, adding to c.
func WithCounters(st Storage, c *Counters) *Counted { return &Counted{st: st, c: c} }

// Unwrap returns the wrapped store.
func (w *Counted) Unwrap() Storage { return w.st }

// Counters returns the counters this wrapper adds to.
func (w *Counted) Counters() *Counters { return w.c }

func (w *Counted) String() string { return w.st.String() }

func (w *Counted) count(op Op, err error) error {
	w.c.requests[op].Add(1)
	if err != nil {
		w.c.errors.Add(1)
	}
	return err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

type countingSrc struct {
	r io.Reader
	n *atomic.Int64
}

func (b countingSrc) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// Get counts the request and the bytes read.
func (w *Counted) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := w.st.Get(ctx, key)
	if w.count(OpGet, err) != nil {
		return nil, err
	}
	return countingBody{rc, &w.c.bytesRead}, nil
}

// GetRange counts the request and the bytes read.
func (w *Counted) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := w.st.GetRange(ctx, key, off, n)
	if w.count(OpGetRange, err) != nil {
		return nil, err
	}
	return countingBody{rc, &w.c.bytesRead}, nil
}

// Stat counts the request.
func (w *Counted) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	info, err := w.st.Stat(ctx, key)
	return info, w.count(OpStat, err)
}

// List counts the request.
func (w *Counted) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	out, err := w.st.List(ctx, prefix)
	return out, w.count(OpList, err)
}

// Put counts the request and the bytes consumed from r.
func (w *Counted) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return w.count(OpPut, w.st.Put(ctx, key, countingSrc{r, &w.c.bytesWritten}, size))
}

// PutIfAbsent counts the request and the bytes consumed from r.
func (w *Counted) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return w.count(OpPutIfAbsent, w.st.PutIfAbsent(ctx, key, countingSrc{r, &w.c.bytesWritten}, size))
}

// Delete counts the request.
func (w *Counted) Delete(ctx context.Context, key string) error {
	return w.count(OpDelete, w.st.Delete(ctx, key))
}

// Copy counts the request.
func (w *Counted) Copy(ctx context.Context, src, dst string) error {
	return w.count(OpCopy, w.st.Copy(ctx, src, dst))
}
