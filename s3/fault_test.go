package s3_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
)

// faultRig is versitygw behind a Toxiproxy proxy.
type faultRig struct {
	srv    *testutil.S3Server
	proxy  *testutil.Proxy
	direct *s3.S3 // straight to the server, for checks
	raw    *s3.S3 // through the proxy
	st     s3.Storage
	c      s3.Counters
	ctx    context.Context
	// storeRetries counts the S3 store's own retries (parts, puts).
	storeRetries atomic.Int64
}

func newFaultRig(t *testing.T, prefix string) *faultRig {
	t.Helper()
	srv := testutil.StartVersitygw(t)
	tp := testutil.StartToxiproxy(t)
	ctx := context.Background()
	proxy, err := tp.CreateProxy(ctx, "s3", strings.TrimPrefix(srv.Endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	r := &faultRig{srv: srv, proxy: proxy}
	// No fault test may hang: every operation runs under this deadline.
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel)
	r.ctx = tctx
	r.direct, err = srv.NewStore(ctx, prefix, s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.raw, err = s3.NewS3(ctx, srv.Bucket, prefix, srv.Options(proxy.URL(), s3.S3Options{
		PartSize: s3.MinPartSize, Concurrency: 3, StallTimeout: time.Second,
		Retry:   s3.RetryPolicy{Attempts: 10, Base: 100 * time.Millisecond, Max: 800 * time.Millisecond},
		OnRetry: func(op, key string, err error) { r.storeRetries.Add(1) },
	}))
	if err != nil {
		t.Fatal(err)
	}
	r.st = s3.WithRetry(s3.WithCounters(r.raw, &r.c), s3.RetryPolicy{Attempts: 10, Base: 100 * time.Millisecond, Max: 800 * time.Millisecond}).
		OnRetry(r.c.CountRetry)
	return r
}

// toxicAfter adds toxic once n bytes passed through the returned reader,
// and removes it hold later. It reports when the toxic was added.
type toxicAfter struct {
	r       io.Reader
	n       int64
	seen    int64
	once    sync.Once
	added   atomic.Bool
	proxy   *testutil.Proxy
	toxic   testutil.Toxic
	hold    time.Duration
	removed chan struct{}
	t       *testing.T
}

func newToxicAfter(t *testing.T, r io.Reader, n int64, p *testutil.Proxy, toxic testutil.Toxic, hold time.Duration) *toxicAfter {
	return &toxicAfter{r: r, n: n, proxy: p, toxic: toxic, hold: hold, removed: make(chan struct{}), t: t}
}

// fire adds the toxic in the background: toxiproxy can only insert a toxic
// into a connection whose data keeps flowing, so the transfer must go on
// (slowly, see Read) meanwhile.
func (ta *toxicAfter) fire() {
	ta.once.Do(func() {
		go func() {
			defer close(ta.removed)
			if err := ta.proxy.AddToxic(context.Background(), ta.toxic); err != nil {
				ta.t.Errorf("add toxic: %v", err)
				return
			}
			ta.added.Store(true)
			time.Sleep(ta.hold)
			if err := ta.proxy.RemoveToxic(context.Background(), ta.toxic.Name); err != nil {
				ta.t.Errorf("remove toxic: %v", err)
			}
		}()
	})
}

func (ta *toxicAfter) Read(p []byte) (int, error) {
	if ta.seen >= ta.n && !ta.added.Load() {
		// Until the toxic is in place, trickle so the fault lands mid-transfer.
		time.Sleep(time.Millisecond)
		if len(p) > 16<<10 {
			p = p[:16<<10]
		}
	}
	n, err := ta.r.Read(p)
	ta.seen += int64(n)
	if ta.seen >= ta.n {
		ta.fire()
	}
	return n, err
}

// wait returns once a fired toxic has been removed; at once if it never
// fired (the transfer ended or failed before n bytes).
func (ta *toxicAfter) wait() {
	ta.once.Do(func() { close(ta.removed) })
	select {
	case <-ta.removed:
	case <-time.After(30 * time.Second):
		ta.t.Error("toxic removal did not finish")
	}
}

func TestFaultLatency(t *testing.T) {
	r := newFaultRig(t, "lat")
	ctx := r.ctx
	for _, s := range []string{"downstream", "upstream"} {
		if err := r.proxy.AddToxic(ctx, testutil.Latency("lat-"+s, s, 40*time.Millisecond, 5*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	const size = 12<<20 + 99
	want := detCRC(t, 31, size)
	start := time.Now()
	if err := r.st.Put(ctx, "obj", hideSize{newDetReader(31, size)}, -1); err != nil {
		t.Fatal(err)
	}
	rc, err := r.st.Get(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, s3.VerifyingReader(rc, size, want)); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	data := detBytes(31, 1<<20)
	rc, err = r.st.GetRange(ctx, "obj", 777, 1<<20-777)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != string(data[777:]) {
		t.Fatalf("range under latency: %d bytes, %v", len(got), err)
	}
	// Each request crosses the proxy at least once in each direction.
	if el := time.Since(start); el < 80*time.Millisecond {
		t.Fatalf("latency toxic not in effect (%v)", el)
	}
}

func TestFaultResetMidDownload(t *testing.T) {
	r := newFaultRig(t, "rdl")
	ctx := r.ctx
	const size = 24 << 20
	want := detCRC(t, 41, size)
	if err := r.direct.Put(ctx, "obj", newDetReader(41, size), size); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		toxic testutil.Toxic
		hold  time.Duration
	}{
		{"reset_peer", testutil.ResetPeer("reset", "downstream", 0), 300 * time.Millisecond},
		{"timeout", testutil.Timeout("blackhole", "downstream", 0), 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := r.c.Snapshot().Retries
			rc, err := r.st.Get(ctx, "obj")
			if err != nil {
				t.Fatal(err)
			}
			ta := newToxicAfter(t, rc, 4<<20, r.proxy, tc.toxic, tc.hold)
			_, err = io.Copy(io.Discard, s3.VerifyingReader(ta, size, want))
			rc.Close()
			ta.wait()
			if err != nil {
				t.Fatalf("download across %s: %v", tc.name, err)
			}
			if !ta.added.Load() || r.c.Snapshot().Retries == before {
				t.Fatalf("fault not exercised (added=%v, retries=%d)", ta.added.Load(), r.c.Snapshot().Retries-before)
			}
		})
	}
}

func TestFaultMidUpload(t *testing.T) {
	r := newFaultRig(t, "rul")
	ctx := r.ctx
	const size = 30<<20 + 5
	want := detCRC(t, 51, size)
	for _, tc := range []struct {
		name  string
		toxic testutil.Toxic
		hold  time.Duration
	}{
		{"reset_peer", testutil.ResetPeer("reset", "upstream", 0), 300 * time.Millisecond},
		{"timeout", testutil.Timeout("blackhole", "upstream", 0), 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := r.storeRetries.Load()
			ta := newToxicAfter(t, newDetReader(51, size), 8<<20, r.proxy, tc.toxic, tc.hold)
			err := r.st.Put(ctx, tc.name, hideSize{ta}, -1)
			ta.wait()
			if err != nil {
				t.Fatalf("upload across %s: %v", tc.name, err)
			}
			if !ta.added.Load() || r.storeRetries.Load() == before {
				t.Fatalf("fault not exercised (added=%v, retries=%d)", ta.added.Load(), r.storeRetries.Load()-before)
			}
			rc, err := r.direct.Get(ctx, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if _, err := io.Copy(io.Discard, s3.VerifyingReader(rc, size, want)); err != nil {
				t.Fatalf("uploaded object: %v", err)
			}
			if ups, err := r.direct.PendingUploads(ctx); err != nil || len(ups) != 0 {
				t.Fatalf("pending uploads: %v, %v", ups, err)
			}
		})
	}
}

// A snapshot upload that cannot succeed leaves neither _metadata nor a
// pending multipart upload behind.
func TestFaultFailedPublishCleansUp(t *testing.T) {
	r := newFaultRig(t, "fail")
	ctx := r.ctx
	files := []s3.SnapshotFile{
		{Key: "snap/a.sst", Size: 1 << 20, Open: func() (io.ReadCloser, error) { return io.NopCloser(newDetReader(1, 1<<20)), nil }},
		{Key: "snap/big.sst", Size: 20 << 20, Open: func() (io.ReadCloser, error) { return io.NopCloser(newDetReader(2, 20<<20)), nil }},
	}
	// Slow uploads, and every connection is reset 300ms after its first
	// byte: parts never get through, small control requests do.
	if err := r.proxy.AddToxic(ctx, testutil.Bandwidth("slow", "upstream", 1024)); err != nil {
		t.Fatal(err)
	}
	if err := r.proxy.AddToxic(ctx, testutil.ResetPeer("reset", "upstream", 300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := s3.PublishSnapshot(ctx, r.st, files, "snap/_metadata", []byte("meta"), 2)
	if err == nil {
		t.Fatal("publish succeeded through a link that resets every upload")
	}
	if !strings.Contains(err.Error(), "put snap/") || !strings.Contains(err.Error(), "metadata not written") {
		t.Fatalf("publish error does not say what failed: %v", err)
	}
	if _, serr := r.direct.Stat(ctx, "snap/_metadata"); !s3.IsNotExist(serr) {
		t.Fatalf("_metadata visible after failed publish: %v (publish error %v)", serr, err)
	}
	ups, lerr := r.direct.PendingUploads(ctx)
	if lerr != nil || len(ups) != 0 {
		t.Fatalf("orphaned multipart uploads after %v: %+v, %v", err, ups, lerr)
	}
	if _, serr := r.direct.Stat(ctx, "snap/big.sst"); !s3.IsNotExist(serr) {
		t.Fatalf("partial object visible: %v", serr)
	}

}

// A cancelled upload is aborted too.
func TestFaultCancelledUploadCleansUp(t *testing.T) {
	r := newFaultRig(t, "cancel")
	ctx := r.ctx
	if err := r.proxy.AddToxic(ctx, testutil.Latency("lat", "downstream", 20*time.Millisecond, 0)); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	src := &cancelAfter{r: newDetReader(3, 40<<20), n: 12 << 20, cancel: cancel}
	if err := r.st.Put(cctx, "cancelled", hideSize{src}, -1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled upload: %v", err)
	}
	if ups, err := r.direct.PendingUploads(ctx); err != nil || len(ups) != 0 {
		t.Fatalf("pending uploads after cancel: %+v, %v", ups, err)
	}
	if _, err := r.direct.Stat(ctx, "cancelled"); !s3.IsNotExist(err) {
		t.Fatalf("cancelled object visible: %v", err)
	}
}

type cancelAfter struct {
	r      io.Reader
	n      int64
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n -= int64(n)
	if c.n <= 0 {
		c.cancel()
	}
	return n, err
}
