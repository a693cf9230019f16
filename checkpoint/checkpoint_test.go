package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

const testMaxPar = 128

var testStates = []engine.StateDesc{
	{Name: "counts", Kind: engine.KindValue},
	{Name: "rows", Kind: engine.KindMap},
}

// cluster is one operator's RocksDB backends at some parallelism plus the
// logical content it should hold: state → stored key → value.
type cluster struct {
	t        *testing.T
	dir      string
	backends []engine.Backend
	want     map[int]map[string]string
}

func newCluster(t *testing.T, parallelism int) *cluster {
	return newClusterWith(t, parallelism, engine.OpenRocksDB)
}

func newClusterWith(t *testing.T, parallelism int, open func(string, engine.Layout, []engine.StateDesc, engine.RocksOptions) (engine.Backend, error)) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), want: map[int]map[string]string{0: {}, 1: {}}}
	for i, r := range keygroups.Ranges(testMaxPar, parallelism) {
		b, err := open(filepath.Join(c.dir, fmt.Sprintf("task-%d", i)),
			engine.Layout{MaxParallelism: testMaxPar, Range: r},
			testStates, engine.RocksOptions{WriteBufferSize: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		c.backends = append(c.backends, b)
	}
	t.Cleanup(func() {
		for _, b := range c.backends {
			b.Close()
		}
	})
	return c
}

func (c *cluster) owner(kg int) engine.Backend {
	for _, b := range c.backends {
		if b.Layout().Range.Contains(kg) {
			return b
		}
	}
	c.t.Fatalf("no subtask owns key group %d", kg)
	return nil
}

// write puts keys [from, to) with values tagged version into both states
// (map state: two user keys per key), deleting every 10th key of state 0
// when del is set; then flushes so SST files exist.
func (c *cluster) write(from, to int, version string, del bool) {
	c.t.Helper()
	batches := map[engine.Backend]engine.Batch{}
	for _, b := range c.backends {
		batches[b] = b.NewBatch()
	}
	for i := from; i < to; i++ {
		kg := (i * 37) % testMaxPar
		b := c.owner(kg)
		l := b.Layout()
		key := l.Key(nil, kg, []byte(fmt.Sprintf("key-%07d", i)), nil)
		if del && i%10 == 0 {
			batches[b].Delete(0, key)
			delete(c.want[0], string(key))
		} else {
			v := fmt.Sprintf("v%d-%s", i, version)
			batches[b].Put(0, key, []byte(v))
			c.want[0][string(key)] = v
		}
		for u := 0; u < 2; u++ {
			mk := append(append([]byte(nil), key...), byte('a'+u))
			v := fmt.Sprintf("m%d-%d-%s", i, u, version)
			batches[b].Put(1, mk, []byte(v))
			c.want[1][string(mk)] = v
		}
	}
	for b, bt := range batches {
		if err := bt.Commit(); err != nil {
			c.t.Fatal(err)
		}
		bt.Close()
		if err := b.Flush(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// check asserts that restored backends (one per range of parallelism p)
// hold exactly the wanted entries, each in the subtask owning its key group.
func checkRestored(t *testing.T, want map[int]map[string]string, restored []engine.Backend) {
	t.Helper()
	for st := range testStates {
		got := map[string]string{}
		for i, b := range restored {
			l := b.Layout()
			err := b.Scan(st, nil, nil, func(k, v []byte) bool {
				kg, err := l.KeyGroupOf(k)
				if err != nil || !l.Range.Contains(kg) {
					t.Errorf("state %d: subtask %d holds key %x of key group %d outside [%d, %d]", st, i, k, kg, l.Range.Start, l.Range.End)
				}
				if _, dup := got[string(k)]; dup {
					t.Errorf("state %d: key %x restored twice", st, k)
				}
				got[string(k)] = string(v)
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != len(want[st]) {
			t.Errorf("state %d: restored %d entries, want %d", st, len(got), len(want[st]))
		}
		for k, v := range want[st] {
			if got[k] != v {
				t.Errorf("state %d: key %x = %q, want %q", st, k, got[k], v)
				break
			}
		}
	}
}

func restoreAll(t *testing.T, st s3.Storage, id int64, parallelism int, opts RestoreOptions) ([]engine.Backend, []*RestoreStats) {
	t.Helper()
	dir := t.TempDir()
	var out []engine.Backend
	var stats []*RestoreStats
	for i, r := range keygroups.Ranges(testMaxPar, parallelism) {
		b, s, err := Restore(context.Background(), st, id, r, filepath.Join(dir, fmt.Sprintf("r-%d", i)), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		out = append(out, b)
		stats = append(stats, s)
	}
	return out, stats
}

func localStore(t *testing.T) *s3.Local {
	st, err := s3.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRoundTripIncrementalRescaled(t *testing.T) {
	runRoundTrip(t, localStore(t))
}

func runRoundTrip(t *testing.T, st s3.Storage) {
	ctx := context.Background()
	c := newCluster(t, 2)
	c.write(0, 4000, "a", false)
	cp := New(st, Options{})
	r1, err := cp.TakeSync(ctx, c.backends, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r1.FilesReferenced != 0 || r1.FilesUploaded == 0 {
		t.Fatalf("first checkpoint: %d files uploaded, %d referenced", r1.FilesUploaded, r1.FilesReferenced)
	}
	first := map[string]bool{}
	for _, s := range r1.Manifest.Subtasks {
		for _, f := range s.Shared {
			first[f.Key] = true
		}
	}
	want1 := copyWant(c.want)

	c.write(3000, 4500, "b", true) // updates, deletes and new keys
	r2, err := cp.TakeSync(ctx, c.backends, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Only SST files not in checkpoint 1 are uploaded.
	var newBytes int64
	for _, s := range r2.Manifest.Subtasks {
		for _, f := range s.Shared {
			if f.Uploaded == first[f.Key] {
				t.Errorf("file %s: uploaded=%v but present in checkpoint 1=%v", f.Key, f.Uploaded, first[f.Key])
			}
			if f.Uploaded {
				newBytes += f.Size
			}
		}
	}
	if r2.FilesReferenced == 0 || r2.BytesReferenced == 0 {
		t.Fatalf("incremental checkpoint reused nothing: %+v", r2)
	}
	if r2.BytesUploaded < newBytes || r2.BytesUploaded > newBytes+1<<20 {
		t.Errorf("incremental checkpoint uploaded %d bytes, new SST bytes %d", r2.BytesUploaded, newBytes)
	}
	objs, _ := st.List(ctx, SharedPrefix)
	t.Logf("checkpoint 1: %d files %d B; checkpoint 2: %d new files %d B, %d reused %d B; %d shared objects",
		r1.FilesUploaded, r1.BytesUploaded, r2.FilesUploaded, r2.BytesUploaded, r2.FilesReferenced, r2.BytesReferenced, len(objs))

	for _, tc := range []struct {
		name string
		id   int64
		want map[int]map[string]string
		p    int
	}{
		{"same-parallelism", 2, c.want, 2},
		{"scale-out-2-3", 2, c.want, 3},
		{"scale-in-2-1", 2, c.want, 1},
		{"older-checkpoint", 1, want1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restored, stats := restoreAll(t, st, tc.id, tc.p, RestoreOptions{})
			checkRestored(t, tc.want, restored)
			for i, s := range stats {
				t.Logf("subtask %d: %+v", i, *s)
			}
		})
	}

	// 3 → 2: checkpoint a restored 3-way cluster, restore it at 2.
	restored, _ := restoreAll(t, st, 2, 3, RestoreOptions{})
	cp3 := New(st, Options{})
	if _, err := cp3.TakeSync(ctx, restored, 3); err != nil {
		t.Fatal(err)
	}
	back, stats := restoreAll(t, st, 3, 2, RestoreOptions{})
	checkRestored(t, c.want, back)
	if stats[0].Handles != 2 || stats[0].KeysCopied == 0 {
		t.Errorf("3→2 restore of subtask 0: %+v, want 2 handles with copied keys", *stats[0])
	}
}

func copyWant(w map[int]map[string]string) map[int]map[string]string {
	out := map[int]map[string]string{}
	for st, m := range w {
		out[st] = map[string]string{}
		for k, v := range m {
			out[st][k] = v
		}
	}
	return out
}

func TestMetadataParsesAsIncrementalHandles(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newCluster(t, 2)
	c.write(0, 1000, "a", false)
	cp := New(st, Options{})
	res, err := cp.TakeSync(ctx, c.backends, 7)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(ctx, st, MetadataKey(7))
	if err != nil {
		t.Fatal(err)
	}
	if sp.Meta.CheckpointID != 7 || len(sp.Meta.Operators) != 1 {
		t.Fatalf("metadata: id %d, %d operators", sp.Meta.CheckpointID, len(sp.Meta.Operators))
	}
	op := sp.Meta.Operators[0]
	if op.ID != DefaultOperatorID || op.Parallelism != 2 || op.MaxParallelism != testMaxPar || len(op.Subtasks) != 2 {
		t.Fatalf("operator: %+v", op)
	}
	for i, sub := range op.Subtasks {
		h, ok := sub.ManagedKeyed.(*savepoint.IncrementalHandle)
		if !ok || h.Tag != savepoint.TagIncrementalKeyGroupsV2 {
			t.Fatalf("subtask %d: keyed handle %T", i, sub.ManagedKeyed)
		}
		s, e := h.KeyGroupRange()
		ms := res.Manifest.Subtasks[i]
		if s != ms.StartKeyGroup || e != ms.EndKeyGroup || h.BackendID != ms.BackendID || h.CheckpointID != 7 {
			t.Errorf("subtask %d: handle range [%d, %d] backend %s", i, s, e, h.BackendID)
		}
		if len(h.Shared) != len(ms.Shared) || len(h.Private) != len(ms.Private) {
			t.Errorf("subtask %d: %d shared / %d private handles, manifest %d / %d", i, len(h.Shared), len(h.Private), len(ms.Shared), len(ms.Private))
		}
		for _, ns := range h.Private {
			loc, err := sp.Resolve(ns.Handle)
			if err != nil {
				t.Fatal(err)
			}
			if info, err := st.Stat(ctx, loc.Key); err != nil || info.Size != ns.Handle.Size {
				t.Errorf("private %s: %v size %d want %d", ns.Name, err, info.Size, ns.Handle.Size)
			}
		}
		for _, ns := range h.Shared {
			if ns.Handle.Tag != savepoint.TagFile || !strings.HasSuffix(ns.Handle.Path, "/shared/"+ms.BackendID+"-"+ns.Name) {
				t.Errorf("shared %s: handle %+v", ns.Name, ns.Handle)
			}
		}
		if h.Meta == nil || len(h.Meta.Data) < 8 {
			t.Errorf("subtask %d: no meta-state stream", i)
		}
	}
}

func TestCorruptObjectIsReported(t *testing.T) {
	t.Run("whole", func(t *testing.T) { testCorrupt(t) })
	t.Run("ranged", func(t *testing.T) {
		defer func(a, b int64) { rangedThreshold, rangedChunk = a, b }(rangedThreshold, rangedChunk)
		rangedThreshold, rangedChunk = 1000, 777
		testCorrupt(t)
	})
}

func testCorrupt(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newCluster(t, 1)
	c.write(0, 500, "a", false)
	res, err := New(st, Options{}).TakeSync(ctx, c.backends, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Intact: restores exactly.
	ok, _, err := Restore(ctx, st, 1, keygroups.Range{Start: 0, End: testMaxPar - 1}, filepath.Join(t.TempDir(), "ok"), RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkRestored(t, c.want, []engine.Backend{ok})
	ok.Close()
	f := res.Manifest.Subtasks[0].Shared[0]
	p := filepath.Join(st.Root(), filepath.FromSlash(f.Key))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "r")
	_, _, err = Restore(ctx, st, 1, keygroups.Range{Start: 0, End: testMaxPar - 1}, dir, RestoreOptions{})
	if err == nil || !strings.Contains(err.Error(), f.Key) || !isCorrupt(err) {
		t.Fatalf("restore of a corrupted SST: %v", err)
	}
	if _, serr := os.Stat(dir); serr == nil {
		t.Errorf("failed restore left %s behind", dir)
	}
}

// A checkpoint of some subtasks only cannot restore the others' key groups.
func TestRestoreRefusesUncoveredKeyGroups(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newCluster(t, 2)
	c.write(0, 500, "a", false)
	if _, err := New(st, Options{}).TakeSync(ctx, c.backends[:1], 1); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "r")
	_, _, err := Restore(ctx, st, 1, keygroups.Range{Start: 0, End: testMaxPar - 1}, dir, RestoreOptions{})
	if err == nil || !strings.Contains(err.Error(), "belong to no subtask") {
		t.Fatalf("restore beyond the checkpointed key groups: %v", err)
	}
	b, _, err := Restore(ctx, st, 1, keygroups.Range{Start: 0, End: 63}, dir, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

func isCorrupt(err error) bool {
	return err != nil && strings.Contains(err.Error(), ErrCorrupt.Error())
}
