package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/sfstate/sfstate/checkpoint"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// slowStore delays every read and can fail reads after a count.
type slowStore struct {
	s3.Storage
	delay     time.Duration
	failAfter int64 // fail reads of shared/ objects after this many (0 = never)
	reads     atomic.Int64
}

var errInjected = errors.New("injected read failure")

func (s *slowStore) read(key string) error {
	time.Sleep(s.delay)
	if len(key) > 7 && key[:7] == "shared/" {
		if n := s.reads.Add(1); s.failAfter > 0 && n > s.failAfter {
			return errInjected
		}
	}
	return nil
}

func (s *slowStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.read(key); err != nil {
		return nil, err
	}
	return s.Storage.Get(ctx, key)
}

func (s *slowStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := s.read(key); err != nil {
		return nil, err
	}
	return s.Storage.GetRange(ctx, key, off, n)
}

// model is the expected content of one backend: state → key → value.
type model []map[string]string

// randomCheckpoint writes a random state at oldP into store as checkpoint
// 1: several states, key-group SST files after a compaction, then (by
// chance) overwrites and deletes left in level-0 files spanning many key
// groups. It returns the model of all entries.
func randomCheckpoint(t *testing.T, rng *rand.Rand, root string, store s3.Storage, maxP, oldP, nStates int, churn bool) model {
	t.Helper()
	var states []engine.StateDesc
	for s := 0; s < nStates; s++ {
		states = append(states, engine.StateDesc{Name: fmt.Sprint("s", s), Kind: engine.KindValue})
	}
	want := make(model, nStates)
	for s := range want {
		want[s] = map[string]string{}
	}
	var bs []engine.Backend
	defer func() {
		for _, b := range bs {
			b.Close()
		}
	}()
	for i, r := range keygroups.Ranges(maxP, oldP) {
		b, err := engine.OpenRocksDBKeyGroupFiles(filepath.Join(root, fmt.Sprint("old-", i)), engine.Layout{MaxParallelism: maxP, Range: r}, states, engine.RocksOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	keys := 200 + rng.Intn(600)
	var all [][2]int // (state, key id)
	write := func(del bool) {
		batches := make([]engine.Batch, oldP)
		for i, b := range bs {
			batches[i] = b.NewBatch()
		}
		n := keys
		if del {
			n = keys / 3
		}
		for j := 0; j < n; j++ {
			k := rng.Intn(keys * 2)
			st := rng.Intn(nStates)
			kg := keygroups.KeyGroupFor(keygroups.HashInt(int32(k)), maxP)
			sub := keygroups.SubtaskForKeyGroup(maxP, oldP, kg)
			key := bs[sub].Layout().Key(nil, kg, fmt.Appendf(nil, "k%d", k), nil)
			if del && rng.Intn(2) == 0 {
				batches[sub].Delete(st, key)
				delete(want[st], string(key))
				continue
			}
			v := fmt.Sprintf("v%d-%d", k, rng.Int63())
			batches[sub].Put(st, key, []byte(v))
			want[st][string(key)] = v
			all = append(all, [2]int{st, k})
		}
		for _, bt := range batches {
			if err := bt.Commit(); err != nil {
				t.Fatal(err)
			}
			bt.Close()
		}
		for _, b := range bs {
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(false)
	for _, b := range bs {
		if err := engine.CompactNative(b); err != nil {
			t.Fatal(err)
		}
	}
	for r := rng.Intn(3); churn && r > 0; r-- {
		write(true)
	}
	cp := checkpoint.New(store, checkpoint.Options{LocalDir: root})
	p, err := cp.Take(context.Background(), bs, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	return want
}

func planFor(t testing.TB, store s3.Storage, newP int) *rescale.NativePlan {
	t.Helper()
	sp, err := savepoint.Open(context.Background(), store, checkpoint.MetadataKey(1))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := rescale.ReadNativePlan(context.Background(), sp, newP)
	if err != nil || plan == nil {
		t.Fatalf("plan: %v %v", plan, err)
	}
	return plan
}

// restrict returns the model's entries in key groups r.
func (m model) restrict(l engine.Layout) model {
	out := make(model, len(m))
	for s := range m {
		out[s] = map[string]string{}
		for k, v := range m[s] {
			if kg, _ := l.KeyGroupOf([]byte(k)); l.Range.Contains(kg) {
				out[s][k] = v
			}
		}
	}
	return out
}

func scanAll(t *testing.T, b engine.Backend, st int, lo, hi []byte) [][2]string {
	t.Helper()
	var out [][2]string
	if err := b.Scan(st, lo, hi, func(k, v []byte) bool {
		out = append(out, [2]string{string(k), string(v)})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (m model) sorted(st int, lo, hi []byte) [][2]string {
	var out [][2]string
	for k, v := range m[st] {
		if k >= string(lo) && (hi == nil || k < string(hi)) {
			out = append(out, [2]string{k, v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// TestLazyRestoreProperty: for random states and (max P, old P, new P),
// every new subtask restored lazily — with random reads, writes, deletes,
// scans and range deletes racing the background adoption — reads exactly
// its own entries plus its writes (later writes win over restored data),
// and holds exactly that once everything is local.
func TestLazyRestoreProperty(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	cases := [][3]int{{128, 2, 3}, {32, 4, 1}, {7, 3, 7}, {0, 0, 0}}
	for ci, c := range cases {
		if c[0] == 0 {
			maxP := 2 + rng.Intn(60)
			c = [3]int{maxP, 1 + rng.Intn(min(maxP, 4)), 1 + rng.Intn(min(maxP, 4))}
		}
		maxP, oldP, newP := c[0], c[1], c[2]
		t.Run(fmt.Sprintf("%d-maxP%d-%dto%d", ci, maxP, oldP, newP), func(t *testing.T) {
			root := t.TempDir()
			local, err := s3.NewLocal(filepath.Join(root, "store"))
			if err != nil {
				t.Fatal(err)
			}
			nStates := 1 + rng.Intn(3)
			all := randomCheckpoint(t, rng, root, local, maxP, oldP, nStates, true)
			store := &slowStore{Storage: local, delay: time.Duration(rng.Intn(3)) * time.Millisecond}
			plan := planFor(t, store, newP)
			waits := 0
			defer func() {
				if !t.Failed() && waits == 0 {
					t.Error("no access waited for the background adoption")
				}
			}()
			for i := 0; i < newP; i++ {
				lz, err := checkpoint.RestoreLazy(context.Background(), store, plan, i, filepath.Join(root, fmt.Sprint("new-", i)),
					checkpoint.LazyOptions{Parallel: 1 + rng.Intn(4), KeyGroupFiles: true, BatchBytes: batchBytes(rng)})
				if err != nil {
					t.Fatal(err)
				}
				l := lz.Layout()
				want := all.restrict(l)
				workload(t, rng, lz, want, nStates, 60)
				if err := lz.WaitLocal(context.Background()); err != nil {
					t.Fatal(err)
				}
				s := lz.Stats()
				waits += s.Waits
				if s.AllLocal <= 0 || s.FilesDownloaded != s.Files || s.BytesDownloaded != s.Bytes {
					t.Errorf("subtask %d: stats after WaitLocal: %+v", i, s)
				}
				for st := 0; st < nStates; st++ {
					got := scanAll(t, lz, st, nil, nil)
					exp := want.sorted(st, nil, nil)
					if fmt.Sprint(got) != fmt.Sprint(exp) {
						t.Fatalf("subtask %d state %d: %d entries, want %d", i, st, len(got), len(exp))
					}
					// The inner backend holds the same (nothing foreign).
					if g2 := scanAll(t, lz.Inner(), st, nil, nil); len(g2) != len(exp) {
						t.Fatalf("subtask %d state %d: inner holds %d entries, want %d", i, st, len(g2), len(exp))
					}
				}
				if err := lz.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(root, fmt.Sprint("new-", i)) + ".adopt"); !os.IsNotExist(err) {
					t.Errorf("scratch directory left after Close: %v", err)
				}
			}
		})
	}
}

// batchBytes: one unit per ingestion or a few.
func batchBytes(rng *rand.Rand) int64 {
	if rng.Intn(4) == 0 {
		return 1
	}
	return int64(2048 + rng.Intn(16384))
}

// workload runs n random operations against b, checking reads against
// want and applying writes to it.
func workload(t *testing.T, rng *rand.Rand, b engine.Backend, want model, nStates, n int) {
	t.Helper()
	l := b.Layout()
	var universe []string
	for s := range want {
		for k := range want[s] {
			universe = append(universe, k)
		}
	}
	sort.Strings(universe)
	randKey := func() []byte {
		if len(universe) > 0 && rng.Intn(4) > 0 {
			return []byte(universe[rng.Intn(len(universe))])
		}
		kg := l.Range.Start + rng.Intn(l.Range.End-l.Range.Start+1)
		return l.Key(nil, kg, fmt.Appendf(nil, "new%d", rng.Intn(1000)), nil)
	}
	for op := 0; op < n; op++ {
		st := rng.Intn(nStates)
		switch r := rng.Intn(10); {
		case r < 4:
			keys := make([][]byte, 1+rng.Intn(4))
			for i := range keys {
				keys[i] = randKey()
			}
			err := b.MultiGet(st, keys, func(i int, val []byte, ok bool) {
				exp, eok := want[st][string(keys[i])]
				if ok != eok || (ok && string(val) != exp) {
					t.Errorf("get %q state %d: %q %v, want %q %v", keys[i], st, val, ok, exp, eok)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		case r < 7:
			bt := b.NewBatch()
			for j := 1 + rng.Intn(3); j > 0; j-- {
				k := randKey()
				if rng.Intn(3) == 0 {
					bt.Delete(st, k)
					delete(want[st], string(k))
				} else {
					v := fmt.Sprintf("w%d", rng.Int63())
					bt.Put(st, k, []byte(v))
					want[st][string(k)] = v
				}
			}
			if err := bt.Commit(); err != nil {
				t.Fatal(err)
			}
			bt.Close()
		case r < 9:
			a := l.Range.Start + rng.Intn(l.Range.End-l.Range.Start+1)
			z := a + rng.Intn(3)
			lo, hi := l.RangeBounds(a, z)
			if rng.Intn(2) == 0 {
				lo = append(lo, byte(rng.Intn(256))) // mid-group bound
			}
			got := scanAll(t, b, st, lo, hi)
			if exp := want.sorted(st, lo, hi); fmt.Sprint(got) != fmt.Sprint(exp) {
				t.Fatalf("scan [%x, %x) state %d: %d entries, want %d", lo, hi, st, len(got), len(exp))
			}
		default:
			kg := l.Range.Start + rng.Intn(l.Range.End-l.Range.Start+1)
			lo, hi := l.RangeBounds(kg, kg)
			if err := b.DeleteRange(st, lo, hi); err != nil {
				t.Fatal(err)
			}
			for _, e := range want.sorted(st, lo, hi) {
				delete(want[st], e[0])
			}
		}
	}
}

// TestLazyRestoreCloseAndErrors: Close during adoption and a failing store
// both stop the background adoption with no goroutine left; accesses to key
// groups not adopted report the failure, and Close still succeeds.
func TestLazyRestoreCloseAndErrors(t *testing.T) {
	root := t.TempDir()
	local, err := s3.NewLocal(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(3))
	randomCheckpoint(t, rng, root, local, 64, 2, 2, false)
	var base int
	settle := func() int {
		n := 0
		for i := 0; i < 200; i++ {
			if n = runtime.NumGoroutine(); n <= base {
				return n
			}
			time.Sleep(10 * time.Millisecond)
		}
		return n
	}
	t.Run("close", func(t *testing.T) {
		store := &slowStore{Storage: local, delay: 20 * time.Millisecond}
		plan := planFor(t, store, 3)
		base = runtime.NumGoroutine()
		lz, err := checkpoint.RestoreLazy(context.Background(), store, plan, 0, filepath.Join(root, "c"), checkpoint.LazyOptions{Parallel: 2, BatchBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		if lz.Local() {
			t.Fatal("local before any download")
		}
		if err := lz.Close(); err != nil {
			t.Fatal(err)
		}
		if err := lz.WaitLocal(context.Background()); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("WaitLocal after Close: %v", err)
		}
		if err := lz.MultiGet(0, [][]byte{{0}}, func(int, []byte, bool) {}); err == nil {
			t.Error("MultiGet after Close succeeded")
		}
		if n := settle(); n > base {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines after Close, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
	})
	t.Run("error", func(t *testing.T) {
		store := &slowStore{Storage: local, failAfter: 2}
		plan := planFor(t, store, 1)
		base = runtime.NumGoroutine()
		lz, err := checkpoint.RestoreLazy(context.Background(), store, plan, 0, filepath.Join(root, "e"), checkpoint.LazyOptions{Parallel: 3, BatchBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		err = lz.WaitLocal(context.Background())
		if !errors.Is(err, checkpoint.ErrAdoption) || !errors.Is(err, errInjected) {
			t.Fatalf("WaitLocal: %v, want the injected failure", err)
		}
		// A scan of everything needs units that were never adopted.
		if err := lz.Scan(0, nil, nil, func(k, v []byte) bool { return true }); !errors.Is(err, checkpoint.ErrAdoption) {
			t.Errorf("Scan after failure: %v", err)
		}
		bt := lz.NewBatch()
		lo, _ := lz.Layout().RangeBounds(lz.Layout().Range.End, lz.Layout().Range.End)
		bt.Put(0, append(lo, 'x'), []byte("v"))
		if err := bt.Commit(); !errors.Is(err, checkpoint.ErrAdoption) {
			t.Errorf("Commit after failure: %v", err)
		}
		bt.Close()
		if err := lz.Close(); err != nil {
			t.Fatal(err)
		}
		if n := settle(); n > base {
			t.Errorf("%d goroutines after a failed adoption, %d before", n, base)
		}
	})
}

// TestLazyRestoreReadyBeforeLocal: an access to one key group waits only
// for its own unit, moved to the front of the queue: it completes while
// most units are still remote.
func TestLazyRestoreReadyBeforeLocal(t *testing.T) {
	root := t.TempDir()
	local, err := s3.NewLocal(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(5))
	want := randomCheckpoint(t, rng, root, local, 128, 1, 1, false)
	store := &slowStore{Storage: local, delay: 15 * time.Millisecond}
	plan := planFor(t, store, 1)
	lz, err := checkpoint.RestoreLazy(context.Background(), store, plan, 0, filepath.Join(root, "r"), checkpoint.LazyOptions{Parallel: 1, KeyGroupFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lz.Close()
	if lz.Stats().Units < 10 {
		t.Fatalf("only %d units: the checkpoint is not cut by key group", lz.Stats().Units)
	}
	lo, hi := lz.Layout().RangeBounds(127, 127)
	got := scanAll(t, lz, 0, lo, hi)
	if exp := want.sorted(0, lo, hi); fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Fatalf("last key group: %d entries, want %d", len(got), len(exp))
	}
	s := lz.Stats()
	if s.Prioritized == 0 || s.FilesDownloaded >= s.Files/2 {
		t.Errorf("the last key group was not fetched first: %+v", s)
	}
	if err := lz.WaitLocal(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal([]byte(fmt.Sprint(scanAll(t, lz, 0, nil, nil))), []byte(fmt.Sprint(want.sorted(0, nil, nil)))) {
		t.Fatal("content differs once local")
	}
}

// TestLazyRestoreReuse: files of an earlier incarnation's directory are
// taken instead of downloaded only when identical (size and CRC-32C); a
// same-named file with other bytes is downloaded; the content is exact
// either way.
func TestLazyRestoreReuse(t *testing.T) {
	root := t.TempDir()
	local, err := s3.NewLocal(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(7))
	want := randomCheckpoint(t, rng, root, local, 64, 2, 1, false)
	// A damaged twin of old subtask 1's directory: every SST file keeps
	// its name and size, one byte differs.
	twin := filepath.Join(root, "twin")
	if err := os.MkdirAll(twin, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "old-1"))
	damaged := 0
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".sst" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, "old-1", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(filepath.Join(twin, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
		damaged++
	}
	if damaged == 0 {
		t.Fatal("old subtask 1 has no SST files")
	}
	plan := planFor(t, local, 3)
	for i := 0; i < 3; i++ {
		reuse := []string{filepath.Join(root, "old-0")}
		if i > 0 {
			reuse = []string{twin}
		}
		lz, err := checkpoint.RestoreLazy(context.Background(), local, plan, i, filepath.Join(root, fmt.Sprint("n", i)), checkpoint.LazyOptions{Parallel: 2, ReuseDirs: reuse})
		if err != nil {
			t.Fatal(err)
		}
		if err := lz.WaitLocal(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := lz.Stats()
		if s.BytesDownloaded+s.BytesReused != s.Bytes || s.FilesDownloaded+s.FilesReused != s.Files {
			t.Errorf("subtask %d: downloaded + reused != needed: %+v", i, s)
		}
		switch {
		case i == 0 && (s.FilesReused != s.Files || s.Files == 0):
			t.Errorf("subtask 0 (inside old subtask 0's range) reused %d of %d files", s.FilesReused, s.Files)
		case i > 0 && s.FilesReused != 0:
			t.Errorf("subtask %d reused %d damaged files", i, s.FilesReused)
		}
		exp := want.restrict(lz.Layout()).sorted(0, nil, nil)
		if got := scanAll(t, lz, 0, nil, nil); fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Errorf("subtask %d: %d entries, want %d", i, len(got), len(exp))
		}
		lz.Close()
	}
}
