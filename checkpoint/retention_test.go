package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// faultStore fails or delays Put for keys matching a rule.
type faultStore struct {
	s3.Storage
	mu    sync.Mutex
	fail  func(key string) bool
	delay func(key string) time.Duration
	puts  []string
}

var errInjected = errors.New("injected upload failure")

func (f *faultStore) set(fail func(string) bool, delay func(string) time.Duration) {
	f.mu.Lock()
	f.fail, f.delay = fail, delay
	f.mu.Unlock()
}

func (f *faultStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	f.mu.Lock()
	fail, delay := f.fail, f.delay
	f.puts = append(f.puts, key)
	f.mu.Unlock()
	if delay != nil {
		if d := delay(key); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if fail != nil && fail(key) {
		// Consume part of the body, as a connection dying mid-upload would.
		_, _ = io.CopyN(io.Discard, r, 100)
		return fmt.Errorf("put %s: %w", key, errInjected)
	}
	return f.Storage.Put(ctx, key, r, size)
}

// assertConsistent checks the store after retention: exactly the ids
// completed, every file a retained checkpoint references present with its
// size, no shared object outside the retained checkpoints and extra.
func assertConsistent(t *testing.T, st s3.Storage, wantIDs []int64, extraShared map[string]bool) {
	t.Helper()
	ctx := context.Background()
	ids, err := Completed(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != fmt.Sprint(wantIDs) {
		t.Fatalf("completed checkpoints %v, want %v", ids, wantIDs)
	}
	refs := map[string]bool{}
	for _, id := range ids {
		m, err := ReadManifest(ctx, st, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range m.Subtasks {
			objs := append([]Object(nil), s.Private...)
			for _, f := range s.Shared {
				objs = append(objs, f.Object)
				refs[f.Key] = true
			}
			for _, o := range objs {
				info, err := st.Stat(ctx, o.Key)
				if err != nil || info.Size != o.Size {
					t.Errorf("checkpoint %d needs %s (%d B): %v, %d B", id, o.Key, o.Size, err, info.Size)
				}
			}
		}
	}
	shared, err := st.List(ctx, SharedPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range shared {
		if !refs[o.Key] && !extraShared[o.Key] {
			t.Errorf("shared object %s is referenced by no retained checkpoint", o.Key)
		}
	}
	all, _ := st.List(ctx, "chk-")
	for _, o := range all {
		ok := false
		for _, id := range ids {
			ok = ok || strings.HasPrefix(o.Key, Dir(id)+"/")
		}
		if !ok {
			t.Errorf("object %s belongs to no completed checkpoint", o.Key)
		}
	}
}

func liveShared(cp *Checkpointer) map[string]bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := map[string]bool{}
	for _, st := range cp.subtasks {
		for _, o := range st.uploaded {
			out[o.key] = true
		}
	}
	return out
}

func compactAll(t *testing.T, c *cluster) {
	for _, b := range c.backends {
		if err := engine.CompactNative(b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRetentionKeepsLastN(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newCluster(t, 2)
	cp := New(st, Options{Retain: 2})
	var wants []map[int]map[string]string
	for id := int64(1); id <= 5; id++ {
		c.write(int(id)*500, int(id)*500+1500, fmt.Sprint(id), id%2 == 0)
		if id == 3 {
			compactAll(t, c) // obsoletes every earlier file
		}
		if _, err := cp.TakeSync(ctx, c.backends, id); err != nil {
			t.Fatal(err)
		}
		wants = append(wants, copyWant(c.want))
		var want []int64
		for k := max(1, id-1); k <= id; k++ {
			want = append(want, k)
		}
		assertConsistent(t, st, want, liveShared(cp))
	}
	// The oldest retained checkpoint still restores completely.
	restored, _ := restoreAll(t, st, 4, 2, RestoreOptions{})
	checkRestored(t, wants[3], restored)
}

func TestFailedUploadLeavesNoMetadata(t *testing.T) {
	ctx := context.Background()
	fs := &faultStore{Storage: localStore(t)}
	c := newCluster(t, 2)
	cp := New(fs, Options{Retain: 1})
	c.write(0, 2000, "a", false)
	if _, err := cp.TakeSync(ctx, c.backends, 1); err != nil {
		t.Fatal(err)
	}
	want1 := copyWant(c.want)
	c.write(1500, 3000, "b", true)
	for _, what := range []string{"shared", "private", "manifest"} {
		fs.set(func(key string) bool {
			switch what {
			case "shared":
				return strings.HasPrefix(key, SharedPrefix)
			case "private":
				return strings.Contains(key, "/task-1/MANIFEST")
			}
			return strings.HasSuffix(key, ManifestName)
		}, nil)
		_, err := cp.TakeSync(ctx, c.backends, 2)
		if !errors.Is(err, errInjected) {
			t.Fatalf("%s upload failure: Take returned %v", what, err)
		}
		if _, err := fs.Stat(ctx, MetadataKey(2)); !s3.IsNotExist(err) {
			t.Fatalf("%s upload failure: chk-2/_metadata exists (%v)", what, err)
		}
		if objs, _ := fs.List(ctx, Dir(2)+"/"); len(objs) != 0 {
			t.Errorf("%s upload failure left %d private objects", what, len(objs))
		}
		// Checkpoint 1 is untouched and restorable.
		assertConsistent(t, fs, []int64{1}, liveShared(cp))
	}
	fs.set(nil, nil)
	// A published checkpoint is never written again.
	if _, err := cp.TakeSync(ctx, c.backends, 1); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("retaking checkpoint 1: %v", err)
	}
	res, err := cp.TakeSync(ctx, c.backends, 2)
	if err != nil {
		t.Fatal(err)
	}
	assertConsistent(t, fs, []int64{2}, liveShared(cp))
	restored, _ := restoreAll(t, fs, 2, 2, RestoreOptions{})
	checkRestored(t, c.want, restored)
	if res.FilesReferenced == 0 {
		t.Errorf("checkpoint after failures reused nothing")
	}
	_ = want1
}

func TestConcurrentCheckpoints(t *testing.T) {
	ctx := context.Background()
	fs := &faultStore{Storage: localStore(t)}
	c := newCluster(t, 2)
	cp := New(fs, Options{Retain: 1})
	c.write(0, 2000, "a", false)
	// Shared uploads held until checkpoint 2 is taken: it is taken while 1
	// still uploads and reuses its files (whatever the machine's load).
	release1 := holdShared(t, fs, nil)
	p1, err := cp.Take(ctx, c.backends, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.write(2000, 2600, "b", false)
	p2, err := cp.Take(ctx, c.backends, 2)
	release1()
	if err != nil {
		t.Fatal(err)
	}
	r1, err1 := p1.Wait(ctx)
	r2, err2 := p2.Wait(ctx)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if r2.FilesReferenced == 0 {
		t.Errorf("checkpoint 2 reused none of checkpoint 1's in-flight files")
	}
	_ = r1
	assertConsistent(t, fs, []int64{2}, liveShared(cp))
	restored, _ := restoreAll(t, fs, 2, 3, RestoreOptions{})
	checkRestored(t, c.want, restored)

	// A file reused while its upload fails: the reusing checkpoint fails
	// too, and the next one uploads the file again.
	c.write(2600, 3200, "c", false)
	var failOnce sync.Once
	failed := ""
	release3 := holdShared(t, fs, func(key string) bool {
		hit := false
		if strings.HasPrefix(key, SharedPrefix) {
			failOnce.Do(func() { failed, hit = key, true })
		}
		return hit
	})
	p3, err := cp.Take(ctx, c.backends, 3)
	if err != nil {
		t.Fatal(err)
	}
	p4, err := cp.Take(ctx, c.backends, 4)
	release3()
	if err != nil {
		t.Fatal(err)
	}
	_, err3 := p3.Wait(ctx)
	_, err4 := p4.Wait(ctx)
	if !errors.Is(err3, errInjected) || err4 == nil {
		t.Fatalf("failed shared upload (%s): checkpoint 3: %v, checkpoint 4 (reusing it): %v", failed, err3, err4)
	}
	fs.set(nil, nil)
	if _, err := cp.TakeSync(ctx, c.backends, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(ctx, failed); err != nil {
		t.Errorf("file whose upload failed was not uploaded again: %v", err)
	}
	assertConsistent(t, fs, []int64{5}, liveShared(cp))
	restored, _ = restoreAll(t, fs, 5, 2, RestoreOptions{})
	checkRestored(t, c.want, restored)
}

// holdShared makes fs hold every shared upload until the returned release
// is called (at most 30 s, and at the end of the test at the latest), and
// fail the uploads fail selects.
func holdShared(t *testing.T, fs *faultStore, fail func(string) bool) (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	fs.set(fail, func(key string) time.Duration {
		if strings.HasPrefix(key, SharedPrefix) {
			select {
			case <-gate:
			case <-time.After(30 * time.Second):
			}
		}
		return 0
	})
	return release
}

// TestAdoptAfterRestore: a job restored at the same parallelism keeps
// checkpointing incrementally on top of the restored checkpoint's shared
// files, and retention keeps those files while they are referenced.
func TestAdoptAfterRestore(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newCluster(t, 2)
	c.write(0, 3000, "a", false)
	r1, err := New(st, Options{}).TakeSync(ctx, c.backends, 1)
	if err != nil {
		t.Fatal(err)
	}
	restored, stats := restoreAll(t, st, 1, 2, RestoreOptions{})
	cp := New(st, Options{Retain: 1})
	for i, b := range restored {
		if len(stats[i].Reusable) == 0 {
			t.Fatalf("subtask %d: nothing reusable after a same-parallelism restore", i)
		}
		cp.Adopt(i, b, stats[i].Reusable)
	}
	// Write through the restored backends.
	c2 := &cluster{t: t, backends: restored, want: copyWant(c.want)}
	c2.write(2500, 3500, "b", true)
	r2, err := cp.TakeSync(ctx, restored, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r2.FilesReferenced < r1.FilesUploaded || r2.BytesReferenced < r1.BytesUploaded/2 {
		t.Fatalf("after adopt: %d files referenced (%d B), checkpoint 1 had %d files", r2.FilesReferenced, r2.BytesReferenced, r1.FilesUploaded)
	}
	assertConsistent(t, st, []int64{2}, liveShared(cp))
	back, _ := restoreAll(t, st, 2, 3, RestoreOptions{})
	checkRestored(t, c2.want, back)
}

// TestTakeReturnsBeforeUpload: Take returns once the local checkpoints
// exist; uploads that cannot finish yet do not hold it up.
func TestTakeReturnsBeforeUpload(t *testing.T) {
	ctx := context.Background()
	fs := &faultStore{Storage: localStore(t)}
	c := newCluster(t, 2)
	c.write(0, 2000, "a", false)
	release := make(chan struct{})
	fs.set(nil, func(string) time.Duration { <-release; return 0 })
	cp := New(fs, Options{})
	p, err := cp.Take(ctx, c.backends, 1)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		t.Fatal("checkpoint finished although no upload could complete")
	default:
	}
	// The backends are writable again right away; the checkpoint keeps
	// the state as of Take.
	want := copyWant(c.want)
	c.write(1000, 2500, "b", true)
	close(release)
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	restored, _ := restoreAll(t, fs, 1, 2, RestoreOptions{})
	checkRestored(t, want, restored)
}

func TestHeapBackendIsRefused(t *testing.T) {
	b, err := engine.OpenHeap(engine.Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}, testStates)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = New(localStore(t), Options{}).Take(context.Background(), []engine.Backend{b}, 1)
	if !errors.Is(err, engine.ErrNotNative) {
		t.Fatalf("heap backend: %v", err)
	}
}
