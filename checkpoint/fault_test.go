package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// Checkpoints and restores against versitygw behind Toxiproxy
// (testutil.FaultRig), with a reset or a stall injected at the N-th read
// or write request. A checkpoint either fails cleanly (no `_metadata`, no
// object of the checkpoint's directory, no pending multipart upload; a
// retake succeeds) or succeeds and restores to the written data; a restore
// either fails (leaving no directory) or returns the right data.

// faultPolicy keeps retries short and bounded.
var faultPolicy = s3.RetryPolicy{Attempts: 4, Base: 50 * time.Millisecond, Max: 400 * time.Millisecond}

type checkpointRig struct {
	*testutil.FaultRig
	ctx context.Context
}

func newCheckpointRig(t *testing.T) *checkpointRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &checkpointRig{FaultRig: testutil.StartFaultRig(t, "chk"), ctx: ctx}
}

// store returns the retrying store under prefix through the proxy, with
// 5 MiB parts so that a large SST file goes up as a multipart upload.
func (r *checkpointRig) store(t *testing.T, prefix string) s3.Storage {
	t.Helper()
	raw, err := r.Srv.NewStore(r.ctx, prefix, s3.S3Options{Endpoint: r.Endpoint, PartSize: s3.MinPartSize,
		StallTimeout: 2 * time.Second, Retry: faultPolicy})
	if err != nil {
		t.Fatal(err)
	}
	return s3.WithRetry(raw, faultPolicy)
}

// direct returns the store under prefix without the proxy.
func (r *checkpointRig) direct(t *testing.T, prefix string) *s3.S3 {
	t.Helper()
	st, err := r.Srv.NewStore(r.ctx, prefix, s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// failedCleanly asserts what a failed checkpoint id leaves under prefix:
// no `_metadata`, no object of its directory, no pending upload.
func (r *checkpointRig) failedCleanly(t *testing.T, prefix string, id int64) {
	t.Helper()
	st := r.direct(t, prefix)
	if _, err := st.Stat(r.ctx, MetadataKey(id)); !s3.IsNotExist(err) {
		t.Errorf("%s: %s after a failed checkpoint: %v", prefix, MetadataKey(id), err)
	}
	if objs, err := st.List(r.ctx, Dir(id)+"/"); err != nil || len(objs) > 0 {
		var keys []string
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
		t.Errorf("%s: failed checkpoint left %v in %s (%v)", prefix, keys, Dir(id), err)
	}
	r.noPending(t, prefix)
}

func (r *checkpointRig) noPending(t *testing.T, prefix string) {
	t.Helper()
	if ups, err := r.direct(t, prefix).PendingUploads(r.ctx); err != nil || len(ups) > 0 {
		t.Errorf("%s: pending multipart uploads %+v (%v)", prefix, ups, err)
	}
}

// writeBlobs puts n incompressible values of size bytes into state 0 of
// subtask 0 and compacts, so that one SST file exceeds the part size.
func (c *cluster) writeBlobs(n, size int) {
	c.t.Helper()
	b := c.backends[0]
	l := b.Layout()
	rng := rand.New(rand.NewSource(7))
	bt := b.NewBatch()
	for i := 0; i < n; i++ {
		kg := l.Range.Start + i%(l.Range.End-l.Range.Start+1)
		key := l.Key(nil, kg, []byte(fmt.Sprintf("blob-%03d", i)), nil)
		v := make([]byte, size)
		rng.Read(v)
		bt.Put(0, key, v)
		c.want[0][string(key)] = string(v)
	}
	if err := bt.Commit(); err != nil {
		c.t.Fatal(err)
	}
	bt.Close()
	if err := b.Flush(); err != nil {
		c.t.Fatal(err)
	}
	if err := engine.CompactNative(b); err != nil {
		c.t.Fatal(err)
	}
}

func TestFaultCheckpointUpload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway and Toxiproxy")
	}
	r := newCheckpointRig(t)
	c := newCluster(t, 2)
	c.write(0, 3000, "a", true)
	c.writeBlobs(12, 512<<10) // a 6 MiB SST file: two parts
	n := 0
	// take checkpoints the cluster with a new Checkpointer into a new
	// prefix, the fault armed; a failed checkpoint is retaken unarmed.
	take := func(f *testutil.Fault) (testutil.Counts, bool, error) {
		t.Helper()
		n++
		prefix := fmt.Sprintf("case-%d", n)
		st := r.store(t, prefix)
		cp := New(st, Options{Parallel: 4})
		r.Counter.Arm(f)
		_, err := cp.TakeSync(r.ctx, c.backends, 1)
		cnt, fired := r.Counter.Disarm()
		if cnt.MultipartStarts == 0 {
			t.Errorf("%s: no multipart upload (%+v)", prefix, cnt)
		}
		if err != nil {
			if strings.Count(err.Error(), "\n") > 0 || !strings.Contains(err.Error(), "checkpoint 1") {
				t.Errorf("%s: error is not one line naming the checkpoint: %v", prefix, err)
			}
			_, serr := r.direct(t, prefix).Stat(r.ctx, MetadataKey(1))
			switch {
			case serr == nil:
				// `_metadata` landed, its response did not: the
				// checkpoint must be complete.
				t.Logf("%s: failed, yet `_metadata` was written", prefix)
			case f.Hold < 0:
				// The store was unreachable for the cleanup too: the
				// checkpoint's objects and pending uploads stay (the
				// retake overwrites the objects, `sfstate gc` aborts the
				// uploads).
				if !s3.IsNotExist(serr) {
					t.Errorf("%s: stat %s: %v", prefix, MetadataKey(1), serr)
				}
				ups, _ := r.direct(t, prefix).PendingUploads(r.ctx)
				left, _ := r.direct(t, prefix).List(r.ctx, Dir(1)+"/")
				t.Logf("%s: the outage left %d objects in %s and %d pending uploads", prefix, len(left), Dir(1), len(ups))
			default:
				r.failedCleanly(t, prefix, 1)
			}
			if serr != nil {
				if _, rerr := cp.TakeSync(r.ctx, c.backends, 1); rerr != nil {
					t.Fatalf("%s: retake after %v: %v", prefix, err, rerr)
				}
			}
		}
		assertConsistent(t, st, []int64{1}, liveShared(cp))
		if f == nil || f.Hold >= 0 {
			r.noPending(t, prefix)
		}
		restored, _ := restoreAll(t, r.direct(t, prefix), 1, 1, RestoreOptions{})
		checkRestored(t, c.want, restored)
		return cnt, fired, err
	}
	start := time.Now()
	clean, _, err := take(nil)
	if err != nil || clean.Parts < 2 {
		t.Fatalf("clean checkpoint: %v (%+v)", err, clean)
	}
	t.Logf("clean checkpoint and restore %v: %+v", time.Since(start).Round(time.Millisecond), clean)
	reset := testutil.ResetPeer("fault", "downstream", 0)
	stall := testutil.Timeout("fault", "downstream", 300*time.Millisecond)
	var faults []*testutil.Fault
	for _, at := range testutil.FaultPoints(clean.Writes) {
		faults = append(faults, &testutil.Fault{Kind: "write", At: at, Toxic: reset, Hold: 300 * time.Millisecond})
	}
	faults = append(faults,
		&testutil.Fault{Kind: "write", At: clean.Writes, Toxic: stall, Hold: 600 * time.Millisecond}, // `_metadata`
		&testutil.Fault{Kind: "part", At: 1, Toxic: reset, Hold: 300 * time.Millisecond},
		&testutil.Fault{Kind: "part", At: clean.Parts, Toxic: stall, Hold: 600 * time.Millisecond},
		&testutil.Fault{Kind: "complete", At: 1, Toxic: reset, Hold: 300 * time.Millisecond},
		// never heals: the checkpoint fails
		&testutil.Fault{Kind: "part", At: 1, Toxic: reset, Hold: -1},
		&testutil.Fault{Kind: "write", At: clean.Writes, Toxic: reset, Hold: -1},
	)
	for _, f := range faults {
		cnt, fired, err := take(f)
		t.Logf("%s at %s %d (hold %v): fired %v, %+v: %v", f.Toxic.Type, f.Kind, f.At, f.Hold, fired, cnt, err)
		if !fired {
			t.Errorf("%s at %s %d: the fault never fired", f.Toxic.Type, f.Kind, f.At)
		}
		if f.Hold < 0 && err == nil {
			t.Errorf("%s at %s %d never healed, yet the checkpoint succeeded", f.Toxic.Type, f.Kind, f.At)
		}
		if err == nil && cnt.Writes <= clean.Writes {
			t.Errorf("%s at %s %d: succeeded without a retry (%d writes, clean %d)", f.Toxic.Type, f.Kind, f.At, cnt.Writes, clean.Writes)
		}
	}
}

func TestFaultCheckpointRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway and Toxiproxy")
	}
	r := newCheckpointRig(t)
	c := newCluster(t, 2)
	c.write(0, 3000, "a", true)
	c.writeBlobs(12, 512<<10)
	if _, err := New(r.direct(t, "src"), Options{}).TakeSync(r.ctx, c.backends, 1); err != nil {
		t.Fatal(err)
	}
	st := r.store(t, "src")
	// restore restores every range of parallelism 3; it returns the first
	// error (after asserting that the failed restore left no directory).
	restore := func(f *testutil.Fault) (testutil.Counts, bool, error) {
		t.Helper()
		dir := t.TempDir()
		var out []engine.Backend
		defer func() {
			for _, b := range out {
				b.Close()
			}
		}()
		r.Counter.Arm(f)
		var err error
		for i, kr := range keygroups.Ranges(testMaxPar, 3) {
			d := filepath.Join(dir, fmt.Sprintf("r-%d", i))
			var b engine.Backend
			b, _, err = Restore(r.ctx, st, 1, keygroups.Range{Start: kr.Start, End: kr.End}, d, RestoreOptions{Parallel: 4})
			if err != nil {
				if _, serr := os.Stat(d); !os.IsNotExist(serr) {
					t.Errorf("failed restore left %s (%v)", d, serr)
				}
				break
			}
			out = append(out, b)
		}
		cnt, fired := r.Counter.Disarm()
		if err == nil {
			checkRestored(t, c.want, out)
		}
		return cnt, fired, err
	}
	clean, _, err := restore(nil)
	if err != nil {
		t.Fatalf("clean restore: %v", err)
	}
	reset := testutil.ResetPeer("fault", "downstream", 0)
	stall := testutil.Timeout("fault", "downstream", 300*time.Millisecond)
	var faults []*testutil.Fault
	for _, at := range testutil.FaultPoints(clean.Reads) {
		faults = append(faults, &testutil.Fault{Kind: "read", At: at, Toxic: reset, Hold: 100 * time.Millisecond})
	}
	faults = append(faults,
		&testutil.Fault{Kind: "read", At: 1, Toxic: stall, Hold: 600 * time.Millisecond},
		&testutil.Fault{Kind: "read", At: clean.Reads, Toxic: stall, Hold: 600 * time.Millisecond},
		&testutil.Fault{Kind: "read", At: (clean.Reads + 1) / 2, Toxic: reset, Hold: -1},
	)
	for _, f := range faults {
		cnt, fired, err := restore(f)
		t.Logf("%s at read %d/%d (hold %v): fired %v, %d reads: %v", f.Toxic.Type, f.At, clean.Reads, f.Hold, fired, cnt.Reads, err)
		if !fired {
			t.Errorf("%s at read %d: the fault never fired", f.Toxic.Type, f.At)
		}
		if f.Hold < 0 && err == nil {
			t.Errorf("%s at read %d never healed, yet the restore succeeded", f.Toxic.Type, f.At)
		}
		if err != nil && f.Hold >= 0 {
			t.Logf("  (a healing fault failed the restore: allowed, no data returned)")
		}
	}
}

// lostMetadataResponse writes `_metadata` and then reports a failure, as
// a connection reset after the server stored the object does.
type lostMetadataResponse struct{ s3.Storage }

func (l lostMetadataResponse) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := l.Storage.PutIfAbsent(ctx, key, r, size); err != nil || !strings.HasSuffix(key, "/"+s3.MetadataName) {
		return err
	}
	return fmt.Errorf("put %s: %w", key, errInjected)
}

// TestLostMetadataResponseKeepsCheckpoint: when `_metadata` was stored but
// its response lost, the failed checkpoint's cleanup must not delete the
// files the published `_metadata` references.
func TestLostMetadataResponseKeepsCheckpoint(t *testing.T) {
	st := localStore(t)
	c := newCluster(t, 2)
	c.write(0, 2000, "a", true)
	cp := New(lostMetadataResponse{st}, Options{})
	if _, err := cp.TakeSync(context.Background(), c.backends, 1); !errors.Is(err, errInjected) {
		t.Fatalf("take: %v", err)
	}
	assertConsistent(t, st, []int64{1}, liveShared(cp))
	restored, _ := restoreAll(t, st, 1, 3, RestoreOptions{})
	checkRestored(t, c.want, restored)
}

// TestFaultCheckpointCancel: a checkpoint whose TakeSync context ends in
// the middle of a multipart upload stops: the upload is aborted, nothing
// of the checkpoint's directory stays (nor appears later), and a retake
// succeeds.
func TestFaultCheckpointCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway and Toxiproxy")
	}
	r := newCheckpointRig(t)
	c := newCluster(t, 2)
	c.write(0, 3000, "a", true)
	c.writeBlobs(12, 512<<10)
	// Parts are held, so that the cancel lands inside the upload.
	r.Counter.SetHook(func(req *http.Request) {
		if req.URL.Query().Has("partNumber") {
			time.Sleep(time.Second)
		}
	})
	st := r.store(t, "cancel")
	cp := New(st, Options{})
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	r.Counter.Arm(nil)
	var cancelled time.Time
	go func() {
		for r.Counter.Counts().Parts == 0 && ctx.Err() == nil {
			time.Sleep(2 * time.Millisecond)
		}
		cancelled = time.Now()
		cancel()
	}()
	_, err := cp.TakeSync(ctx, c.backends, 1)
	stopped := time.Since(cancelled)
	cnt, _ := r.Counter.Disarm()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled checkpoint: %v (%+v)", err, cnt)
	}
	t.Logf("stopped %v after the cancel (%+v)", stopped.Round(time.Millisecond), cnt)
	r.failedCleanly(t, "cancel", 1)
	time.Sleep(time.Second)
	r.failedCleanly(t, "cancel", 1)
	r.Counter.SetHook(nil)
	if _, err := cp.TakeSync(r.ctx, c.backends, 1); err != nil {
		t.Fatalf("retake: %v", err)
	}
	assertConsistent(t, st, []int64{1}, liveShared(cp))
	restored, _ := restoreAll(t, r.direct(t, "cancel"), 1, 1, RestoreOptions{})
	checkRestored(t, c.want, restored)
}
