package testutil

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// FaultRig is an S3 gateway behind a request counter behind Toxiproxy, for
// tests that inject a network fault at the N-th read or write request:
//
//	client ──> Toxiproxy ──> RequestCounter (reverse proxy) ──> versitygw
//
// The counter sits behind Toxiproxy, so the client sees a real TCP fault
// (a reset, or a connection that stalls and closes), while the counter
// knows which request is in flight: it adds the armed toxic just before it
// forwards the N-th request of a kind, so the response of that request is
// the first traffic through the toxic.
type FaultRig struct {
	Srv     *S3Server
	Counter *RequestCounter
	Proxy   *Proxy
	// Endpoint is what clients use: the Toxiproxy listener.
	Endpoint string
}

// FaultTB is what StartFaultRig needs of a test: TB plus Errorf (the
// counter reports failures to add or remove a toxic from its handler).
type FaultTB interface {
	TB
	Errorf(format string, args ...any)
}

// StartFaultRig starts versitygw, Toxiproxy and the counter between them
// for the test; everything stops at cleanup. It skips when the binaries
// are missing (fails when CI=true).
func StartFaultRig(t FaultTB, name string) *FaultRig {
	t.Helper()
	srv := StartVersitygw(t)
	tp := StartToxiproxy(t)
	ctr := NewRequestCounter(t, srv.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proxy, err := tp.CreateProxy(ctx, name, ctr.Addr)
	if err != nil {
		t.Fatalf("create proxy: %v", err)
	}
	ctr.proxy = proxy
	return &FaultRig{Srv: srv, Counter: ctr, Proxy: proxy, Endpoint: proxy.URL()}
}

// RequestCounter is a reverse proxy to an S3 server that counts requests
// by kind and fires an armed Fault.
type RequestCounter struct {
	// Addr is the counter's listen address (host:port).
	Addr  string
	t     FaultTB
	rp    *httputil.ReverseProxy
	proxy *Proxy

	mu    sync.Mutex
	n     Counts
	fault *Fault
	hook  func(*http.Request)
}

// SetHook makes the counter call h (nil: nothing) with every request before
// forwarding it; h may block to hold the request.
func (c *RequestCounter) SetHook(h func(*http.Request)) {
	c.mu.Lock()
	c.hook = h
	c.mu.Unlock()
}

// Counts are the requests a RequestCounter saw since the last Arm.
type Counts struct {
	// Reads are object GETs (not bucket listings); Writes are PUTs and
	// POSTs (multipart control calls and parts included).
	Reads, Writes int
	// MultipartStarts counts CreateMultipartUpload calls, Parts UploadPart
	// calls, Completes CompleteMultipartUpload calls (all also writes).
	MultipartStarts, Parts, Completes int
}

// Fault adds Toxic once the At-th request of Kind arrives ("read",
// "write", or of the writes only "part" or "complete": multipart upload
// parts and completions) and removes it Hold later (Hold < 0: at Disarm).
type Fault struct {
	Kind  string
	At    int
	Toxic Toxic
	Hold  time.Duration

	fired   bool
	removed chan struct{}
}

// NewRequestCounter starts a counting reverse proxy to upstream (a URL) on
// a free 127.0.0.1 port; it stops at the test's cleanup. Without a Proxy
// (StartFaultRig sets one) armed faults cannot fire.
func NewRequestCounter(t FaultTB, upstream string) *RequestCounter {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("upstream %q: %v", upstream, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	c := &RequestCounter{t: t, Addr: l.Addr().String()}
	// The Host header is kept (the director does not change it), so the
	// SigV4 signature made for the proxy's address still verifies.
	c.rp = httputil.NewSingleHostReverseProxy(u)
	c.rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := &http.Server{Handler: c, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return c
}

// RequestKind classifies an S3 request: "read" (an object GET), "write"
// (PUT or POST), or "" (listings, HEAD, DELETE).
func RequestKind(r *http.Request) string {
	switch {
	case r.Method == http.MethodPut || r.Method == http.MethodPost:
		return "write"
	case r.Method == http.MethodGet && strings.Contains(strings.Trim(r.URL.Path, "/"), "/"):
		return "read" // an object, not a bucket-level listing
	}
	return ""
}

func (c *RequestCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := RequestKind(r)
	q := r.URL.Query()
	sub := ""
	c.mu.Lock()
	n, m := 0, 0
	switch kind {
	case "read":
		c.n.Reads++
		n = c.n.Reads
	case "write":
		c.n.Writes++
		n = c.n.Writes
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			c.n.MultipartStarts++
		case r.Method == http.MethodPut && q.Has("partNumber") && q.Has("uploadId"):
			c.n.Parts++
			sub, m = "part", c.n.Parts
		case r.Method == http.MethodPost && q.Has("uploadId"):
			c.n.Completes++
			sub, m = "complete", c.n.Completes
		}
	}
	hook := c.hook
	f := c.fault
	fire := f != nil && !f.fired && ((f.Kind == kind && f.At == n) || (sub != "" && f.Kind == sub && f.At == m))
	if fire {
		f.fired = true
	}
	c.mu.Unlock()
	if fire {
		if err := c.addToxic(f.Toxic); err != nil {
			c.t.Errorf("add toxic: %v", err)
			close(f.removed)
		} else {
			// A pause, so that Toxiproxy has the toxic on the connection
			// in use before the response flows.
			time.Sleep(20 * time.Millisecond)
			if f.Hold >= 0 {
				go func() {
					time.Sleep(f.Hold)
					c.remove(f)
				}()
			}
		}
	}
	if hook != nil {
		hook(r)
	}
	c.rp.ServeHTTP(w, r)
}

func (c *RequestCounter) addToxic(t Toxic) error {
	if c.proxy == nil {
		return fmt.Errorf("no proxy in front of the counter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.proxy.AddToxic(ctx, t)
}

func (c *RequestCounter) remove(f *Fault) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.proxy.RemoveToxic(ctx, f.Toxic.Name); err != nil {
		c.t.Errorf("remove toxic: %v", err)
	}
	close(f.removed)
}

// Arm resets the counts and arms f (nil: none).
func (c *RequestCounter) Arm(f *Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = Counts{}
	if f != nil {
		f.fired = false
		f.removed = make(chan struct{})
	}
	c.fault = f
}

// Counts returns the counts so far.
func (c *RequestCounter) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Disarm removes a fault still in place and returns the counts and
// whether the fault fired.
func (c *RequestCounter) Disarm() (n Counts, fired bool) {
	c.mu.Lock()
	f := c.fault
	c.fault = nil
	n = c.n
	fired = f != nil && f.fired
	c.mu.Unlock()
	if fired {
		if f.Hold < 0 {
			c.remove(f)
		}
		select {
		case <-f.removed:
		case <-time.After(30 * time.Second):
			c.t.Errorf("toxic removal did not finish")
		}
	}
	return n, fired
}

// FaultPoints returns the distinct request numbers first, middle and last
// of n requests.
func FaultPoints(n int) []int {
	var out []int
	for _, p := range []int{1, (n + 1) / 2, n} {
		if p >= 1 && (len(out) == 0 || out[len(out)-1] != p) {
			out = append(out, p)
		}
	}
	return out
}
