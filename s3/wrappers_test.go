package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sfstate/sfstate/s3"
)

var fastRetry = s3.RetryPolicy{Attempts: 4, Base: time.Millisecond, Max: 5 * time.Millisecond}

// flaky wraps a store: the first failOps calls of each kind fail with a
// transient error, and readers break with io.ErrUnexpectedEOF every
// breakEvery bytes (at most maxBreaks times in total).
type flaky struct {
	s3.Storage
	mu         sync.Mutex
	calls      map[string]int
	failOps    int
	breakEvery int64
	breaks     atomic.Int64
	maxBreaks  int64
	putThenErr bool // PutIfAbsent stores, then reports a transient error once
	onBreak    func()
}

func (f *flaky) hit(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	if f.calls[op] <= f.failOps {
		return fmt.Errorf("%s: %w", op, syscall.ECONNRESET)
	}
	return nil
}

func (f *flaky) count(op string) int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls[op] }

type breakingReader struct {
	io.ReadCloser
	f    *flaky
	left int64
}

func (b *breakingReader) Read(p []byte) (int, error) {
	if b.left <= 0 && b.f.breaks.Load() < b.f.maxBreaks {
		b.f.breaks.Add(1)
		if b.f.onBreak != nil {
			b.f.onBreak()
		}
		return 0, fmt.Errorf("mid-body: %w", io.ErrUnexpectedEOF)
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

func (f *flaky) wrapBody(rc io.ReadCloser) io.ReadCloser {
	if f.breakEvery <= 0 {
		return rc
	}
	return &breakingReader{rc, f, f.breakEvery}
}

func (f *flaky) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := f.hit("get"); err != nil {
		return nil, err
	}
	rc, err := f.Storage.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return f.wrapBody(rc), nil
}

func (f *flaky) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := f.hit("getrange"); err != nil {
		return nil, err
	}
	rc, err := f.Storage.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	return f.wrapBody(rc), nil
}

func (f *flaky) Stat(ctx context.Context, key string) (s3.ObjectInfo, error) {
	if err := f.hit("stat"); err != nil {
		return s3.ObjectInfo{}, err
	}
	return f.Storage.Stat(ctx, key)
}

func (f *flaky) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := f.hit("put"); err != nil {
		io.CopyN(io.Discard, r, 10) // consume some of the body, like a real failed upload
		return err
	}
	return f.Storage.Put(ctx, key, r, size)
}

func (f *flaky) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if f.putThenErr && f.count("pia") == 0 {
		f.hit("pia")
		if err := f.Storage.PutIfAbsent(ctx, key, r, size); err != nil {
			return err
		}
		return fmt.Errorf("response lost: %w", syscall.ECONNRESET)
	}
	f.hit("pia")
	return f.Storage.PutIfAbsent(ctx, key, r, size)
}

func TestRetryResumesReads(t *testing.T) {
	ctx := context.Background()
	mem := s3.NewMem()
	data := detBytes(9, 100_000)
	mustPut(t, mem, "obj", data)
	f := &flaky{Storage: mem, failOps: 2, breakEvery: 7_777, maxBreaks: 30}
	var retries atomic.Int64
	st := s3.WithRetry(f, fastRetry).OnRetry(func(op, key string, err error) { retries.Add(1) })

	if got := mustGet(t, st, "obj"); !bytes.Equal(got, data) {
		t.Fatalf("resumed get returned wrong bytes (%d bytes)", len(got))
	}
	rc, err := st.GetRange(ctx, "obj", 12_345, 60_001)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data[12_345:72_346]) {
		t.Fatalf("resumed range: %d bytes, %v", len(got), err)
	}
	if f.breaks.Load() < 10 || retries.Load() < 10 {
		t.Fatalf("faults not exercised: %d breaks, %d retries", f.breaks.Load(), retries.Load())
	}
}

func TestRetryGivesUpAndSkipsPermanent(t *testing.T) {
	ctx := context.Background()
	mem := s3.NewMem()
	mustPut(t, mem, "obj", []byte("x"))
	f := &flaky{Storage: mem, failOps: 100}
	st := s3.WithRetry(f, fastRetry)
	if _, err := st.Stat(ctx, "obj"); err == nil || !s3.IsTransient(err) {
		t.Fatalf("stat through permanent outage: %v", err)
	}
	if got := f.count("stat"); got != fastRetry.Attempts {
		t.Fatalf("stat tried %d times, want %d", got, fastRetry.Attempts)
	}
	f2 := &flaky{Storage: mem}
	st2 := s3.WithRetry(f2, fastRetry)
	if _, err := st2.Get(ctx, "missing"); !s3.IsNotExist(err) {
		t.Fatal(err)
	}
	if got := f2.count("get"); got != 1 {
		t.Fatalf("not-found retried: %d calls", got)
	}
	// A read that keeps breaking without progress gives up with a clear error.
	data := detBytes(1, 5000)
	mustPut(t, mem, "big", data)
	f3 := &flaky{Storage: mem, breakEvery: 1000, maxBreaks: 1 << 30}
	f3.breakEvery = 1000
	rc, err := s3.WithRetry(&stuck{f3}, fastRetry).Get(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err == nil || !strings.Contains(err.Error(), "giving up") || !bytes.Equal(b, data[:len(b)]) {
		t.Fatalf("stuck read: %d bytes, %v", len(b), err)
	}
}

// stuck makes every resumed range fail at once (no progress).
type stuck struct{ *flaky }

func (s *stuck) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := s.flaky.Storage.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	rc.Close()
	return io.NopCloser(errReader{io.ErrUnexpectedEOF}), nil
}

func TestRetryPuts(t *testing.T) {
	ctx := context.Background()
	mem := s3.NewMem()
	f := &flaky{Storage: mem, failOps: 2}
	st := s3.WithRetry(f, fastRetry)
	data := detBytes(2, 5000)
	// Seekable body: replayed.
	if err := st.Put(ctx, "a", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, mem, "a"); !bytes.Equal(got, data) {
		t.Fatal("replayed put stored wrong bytes")
	}
	// Non-seekable body consumed by the failed attempt: not retried.
	f2 := &flaky{Storage: mem, failOps: 1}
	err := s3.WithRetry(f2, fastRetry).Put(ctx, "b", hideSize{bytes.NewReader(data)}, int64(len(data)))
	if err == nil || !s3.IsPermanent(err) || !strings.Contains(err.Error(), "not replayable") {
		t.Fatalf("non-replayable put: %v", err)
	}
	if _, err := mem.Stat(ctx, "b"); !s3.IsNotExist(err) {
		t.Fatal("non-replayable put left an object")
	}
	// A lost success of PutIfAbsent is recognised.
	f3 := &flaky{Storage: mem, putThenErr: true}
	if err := s3.WithRetry(f3, fastRetry).PutIfAbsent(ctx, "m", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("lost-success put-if-absent: %v", err)
	}
	if f3.count("pia") != 2 {
		t.Fatalf("put-if-absent calls = %d, want 2", f3.count("pia"))
	}
	// ... but a different object under the key is still a conflict.
	f4 := &flaky{Storage: mem, putThenErr: true}
	mustPut(t, mem, "n", []byte("someone else"))
	if err := s3.WithRetry(f4, fastRetry).PutIfAbsent(ctx, "n", bytes.NewReader(data), int64(len(data))); !s3.IsExist(err) {
		t.Fatalf("conflicting put-if-absent: %v", err)
	}
}

// slowStore records the maximum concurrency it sees.
type slowStore struct {
	s3.Storage
	cur, max atomic.Int64
}

func (s *slowStore) enter() func() {
	c := s.cur.Add(1)
	for {
		m := s.max.Load()
		if c <= m || s.max.CompareAndSwap(m, c) {
			break
		}
	}
	return func() { s.cur.Add(-1) }
}

func (s *slowStore) Stat(ctx context.Context, key string) (s3.ObjectInfo, error) {
	defer s.enter()()
	time.Sleep(2 * time.Millisecond)
	return s.Storage.Stat(ctx, key)
}

func TestLimitAndCounters(t *testing.T) {
	ctx := context.Background()
	mem := s3.NewMem()
	mustPut(t, mem, "k", detBytes(4, 4096))
	slow := &slowStore{Storage: mem}
	var c s3.Counters
	st := s3.WithCounters(s3.WithLimit(slow, 3), &c)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); st.Stat(ctx, "k") }()
	}
	wg.Wait()
	if m := slow.max.Load(); m > 3 || m < 1 {
		t.Fatalf("max concurrency %d, limit 3", m)
	}
	// Readers hold a slot until closed.
	lim := s3.WithLimit(mem, 1)
	rc, err := lim.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := lim.Stat(tctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second op while a reader is open: %v", err)
	}
	cancel()
	rc.Close()
	if _, err := lim.Stat(ctx, "k"); err != nil {
		t.Fatal(err)
	}

	mustGet(t, st, "k")
	rc, _ = st.GetRange(ctx, "k", 10, 100)
	io.Copy(io.Discard, rc)
	rc.Close()
	mustPut(t, st, "k2", make([]byte, 300))
	st.Get(ctx, "nope")
	snap := c.Snapshot()
	if snap.BytesRead != 4096+100 || snap.BytesWritten != 300 || snap.Requests["stat"] != 20 ||
		snap.Requests["get"] != 2 || snap.Requests["get_range"] != 1 || snap.Requests["put"] != 1 || snap.Errors != 1 {
		t.Fatalf("counters: %+v", snap)
	}
}

func TestPublishSnapshot(t *testing.T) {
	ctx := context.Background()
	mem := s3.NewMem()
	var files []s3.SnapshotFile
	var want []uint32
	for i := 0; i < 10; i++ {
		b := detBytes(uint64(i), 1000*(i+1))
		want = append(want, s3.CRC32C(b))
		files = append(files, s3.SnapshotFile{Key: fmt.Sprintf("snap/%d.sst", i), Size: int64(len(b)),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }})
	}
	ws, err := s3.PublishSnapshot(ctx, mem, files, "snap/_metadata", []byte("meta"), 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		if w.Key != files[i].Key || w.Size != files[i].Size || w.CRC != want[i] {
			t.Fatalf("written[%d] = %+v", i, w)
		}
	}
	if string(mustGet(t, mem, "snap/_metadata")) != "meta" {
		t.Fatal("metadata not written")
	}
	// A second publisher loses.
	if _, err := s3.PublishSnapshot(ctx, mem, files[:1], "snap/_metadata", []byte("other"), 2); !s3.IsExist(err) {
		t.Fatalf("second publish: %v", err)
	}
	// One failing data file: no metadata.
	boom := errors.New("disk gone")
	bad := append([]s3.SnapshotFile(nil), files...)
	for i := range bad {
		bad[i].Key = strings.Replace(bad[i].Key, "snap/", "snap2/", 1)
	}
	bad[6].Open = func() (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(strings.NewReader("abc"), errReader{boom})), nil
	}
	if _, err := s3.PublishSnapshot(ctx, mem, bad, "snap2/_metadata", []byte("meta"), 3); !errors.Is(err, boom) {
		t.Fatalf("publish with a failing file: %v", err)
	}
	if _, err := mem.Stat(ctx, "snap2/_metadata"); !s3.IsNotExist(err) {
		t.Fatalf("metadata visible after a failed publish: %v", err)
	}
	// CommitMetadata refuses when an object has the wrong size.
	err = s3.CommitMetadata(ctx, mem, []s3.Written{{Key: "snap/0.sst", Size: 999}}, "snap3/_metadata", []byte("m"))
	if !errors.Is(err, s3.ErrIntegrity) {
		t.Fatalf("commit with wrong size: %v", err)
	}
}

// A resumed read never splices two versions of an object.
func testReplacedDuringRead(t *testing.T, st s3.Storage) {
	ctx := context.Background()
	mustPut(t, st, "ver/obj", detBytes(1, 300_000))
	replaced := false
	f := &flaky{Storage: st, breakEvery: 100_000, maxBreaks: 1, onBreak: func() {
		time.Sleep(10 * time.Millisecond) // a visible modification time change
		mustPut(t, st, "ver/obj", detBytes(2, 300_001))
		replaced = true
	}}
	rc, err := s3.WithRetry(f, fastRetry).Get(ctx, "ver/obj")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if !replaced || !errors.Is(err, s3.ErrChanged) || !s3.IsPermanent(err) {
		t.Fatalf("read across a replacement: %d bytes, %v", len(b), err)
	}
	if !bytes.Equal(b, detBytes(1, 300_000)[:len(b)]) {
		t.Fatal("delivered bytes are not the first version's")
	}
	// Without a replacement the same fault is invisible.
	f2 := &flaky{Storage: st, breakEvery: 100_000, maxBreaks: 1}
	if got := mustGet(t, s3.WithRetry(f2, fastRetry), "ver/obj"); !bytes.Equal(got, detBytes(2, 300_001)) || f2.breaks.Load() != 1 {
		t.Fatalf("resumed read: %d bytes, %d breaks", len(got), f2.breaks.Load())
	}
}

func TestRetryDetectsReplacedObject(t *testing.T) {
	t.Run("mem", func(t *testing.T) { testReplacedDuringRead(t, s3.NewMem()) })
	t.Run("local", func(t *testing.T) {
		st, err := s3.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		testReplacedDuringRead(t, st)
	})
}
