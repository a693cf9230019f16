//go:build cgo

package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/bench/fillstate"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/statediff"
	"github.com/sfstate/sfstate/verify"
)

const convNow = 1_750_000_000_000

// engineCheckpoint fills GenSchema backends with keys keys at parallelism
// 3 and takes engine checkpoint 7 of them with the schema into a new store.
// It also exports the same backends (nothing expired) as the reference
// canonical savepoint ref. It returns the store, the reference and the
// entries written.
func engineCheckpoint(t *testing.T, keys int) (s3.Storage, *savepoint.Savepoint, int64) {
	t.Helper()
	ctx := context.Background()
	o := GenOptions{Keys: keys, Parallelism: 3, MaxParallelism: 128, Now: convNow, TempDir: t.TempDir()}
	bes, schema, _, total, err := GenerateBackends(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, be := range bes {
			be.Close()
		}
	}()
	st, err := s3.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.New(st, checkpoint.Options{Schema: schema}).TakeSync(ctx, bes, 7); err != nil {
		t.Fatal(err)
	}
	refStore, err := s3.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clock := engine.NewManualClock(0)
	op := canonical.Operator{ID: savepoint.OperatorIDFromUID("x"), Parallelism: 3, MaxParallelism: 128}
	for i, be := range bes {
		op.Subtasks = append(op.Subtasks, canonical.Subtask{Index: i, Operator: engine.NewOperator(be, clock), Schema: schema})
	}
	if _, _, err := canonical.Export(ctx, []canonical.Operator{op}, refStore, canonical.ExportOptions{TempDir: t.TempDir(), InlineThreshold: -1}); err != nil {
		t.Fatal(err)
	}
	ref, err := savepoint.Open(ctx, refStore, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return st, ref, total
}

func emptyDir(t *testing.T, dir, what string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("%s: %v left", what, names)
	}
}

// rawEntries restores every subtask of engine checkpoint id and returns
// its stored entries (state, key → value).
func rawEntries(t *testing.T, st s3.Storage, id int64) map[string]string {
	t.Helper()
	m, err := checkpoint.ReadManifest(context.Background(), st, id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, sub := range m.Subtasks {
		be, _, err := checkpoint.Restore(context.Background(), st, id, keygroups.Range{Start: sub.StartKeyGroup, End: sub.EndKeyGroup}, filepath.Join(t.TempDir(), "db"), checkpoint.RestoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		scanInto(t, be, out)
		be.Close()
	}
	return out
}

func scanInto(t *testing.T, be engine.Backend, out map[string]string) {
	t.Helper()
	for i, d := range be.States() {
		if err := be.Scan(i, nil, nil, func(k, v []byte) bool {
			out[d.Name+"\x00"+string(k)] = string(v)
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConvertEngineCheckpoint converts an engine checkpoint (row keys,
// TTL value rows, a map, multisets with and without TTL, a windowed
// value): the output equals the canonical export of the same backends
// (statediff), restores through canonical.Import into exactly the stored
// engine entries of the checkpoint (keys, values, TTL timestamps, counts),
// checks clean and passes verify into both backends at two parallelisms.
// Nothing is left in the scratch directory.
func TestConvertEngineCheckpoint(t *testing.T) {
	ctx := context.Background()
	st, ref, total := engineCheckpoint(t, 3000)
	dstDir, tmp := t.TempDir(), t.TempDir()
	dst, _ := s3.NewLocal(dstDir)
	res, err := ConvertNative(ctx, st, 7, dst, ConvertOptions{TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	emptyDir(t, tmp, "scratch")
	if res.Entries != total || !res.Verified || res.Parallelism != 3 || res.MaxParallelism != 128 || len(res.States) != 5 || res.Files != 3 {
		t.Fatalf("result %+v, want %d entries", res, total)
	}
	out, err := savepoint.Open(ctx, dst, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	if out.FormatType() != savepoint.FormatCanonical || out.Meta.CheckpointID != 7 {
		t.Fatalf("format %q, checkpoint %d", out.FormatType(), out.Meta.CheckpointID)
	}
	if ps, stats := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(ps) != 0 {
		t.Fatalf("check: %+v (%+v)", ps, stats)
	}
	if _, err := dst.Stat(ctx, savepoint.SumsName); err != nil {
		t.Fatalf("no sums file: %v", err)
	}

	// Against the reference export: same operator id aside, equal.
	ref.Meta.Operators[0].ID = out.Meta.Operators[0].ID
	r, err := statediff.Diff(ctx, ref, out, statediff.Options{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range r.States {
		n += s.EntriesB
	}
	if !r.Equal || n != total {
		t.Fatalf("diff against the reference export: equal %v, %d of %d entries: %+v", r.Equal, n, total, r.States)
	}

	// Back into the engine: exactly the checkpoint's stored entries.
	want := rawEntries(t, st, 7)
	imp, err := canonical.Import(ctx, out, func(_ savepoint.OperatorID, _ int, l engine.Layout, descs []engine.StateDesc) (engine.Backend, error) {
		return engine.OpenHeap(l, descs)
	}, canonical.ImportOptions{Parallelism: 3, Multisets: map[string]bool{"left-records": true, "right-records": true}, TTL: map[string]time.Duration{"accState": 24 * time.Hour, "left-records": 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, op := range imp.Operators {
		for _, sub := range op.Subtasks {
			scanInto(t, sub.Backend, got)
		}
	}
	imp.Close()
	if len(got) != len(want) || int64(len(want)) != total {
		t.Fatalf("imported %d entries, checkpoint holds %d (%d written)", len(got), len(want), total)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("entry %q: imported % x, checkpoint % x", k, got[k], v)
		}
	}

	// verify: restore into RocksDB and heap at 3 and 2 subtasks.
	rep, err := verify.Run(ctx, out, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 3, 2), Restorer: &Restorer{}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("verify: %+v", rep)
	}
}

// TestConvertEngineCheckpointFailures: a corrupt SST file, a failing
// upload and a cancelled context fail the conversion without `_metadata`,
// without the files uploaded before the failure and without scratch; a
// checkpoint without schema is refused up front; an existing `_metadata`
// is never replaced.
func TestConvertEngineCheckpointFailures(t *testing.T) {
	ctx := context.Background()
	st, _, _ := engineCheckpoint(t, 2000)

	// A failing upload after the first stream went up.
	dstDir, tmp := t.TempDir(), t.TempDir()
	dst, _ := s3.NewLocal(dstDir)
	_, err := ConvertNative(ctx, st, 7, &failingPut{Storage: dst, after: 1}, ConvertOptions{TempDir: tmp})
	if err == nil || !errors.Is(err, errInjected) {
		t.Fatalf("failing upload: %v", err)
	}
	emptyDir(t, dstDir, "destination after a failed upload")
	emptyDir(t, tmp, "scratch after a failed upload")

	// Cancelled after the first subtask was staged.
	cctx, cancel := context.WithCancel(ctx)
	_, err = ConvertNative(cctx, st, 7, dst, ConvertOptions{TempDir: tmp, Progress: cancelOnAdd(cancel)})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	emptyDir(t, dstDir, "destination after cancellation")
	emptyDir(t, tmp, "scratch after cancellation")

	// A shared SST file cut short.
	m, err := checkpoint.ReadManifest(ctx, st, 7)
	if err != nil {
		t.Fatal(err)
	}
	victim := m.Subtasks[1].Shared[0].Object.Key
	p := filepath.Join(st.String(), victim)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ConvertNative(ctx, st, 7, dst, ConvertOptions{TempDir: tmp})
	if err == nil {
		t.Fatal("corrupt SST converted")
	}
	t.Log(err)
	emptyDir(t, dstDir, "destination after a corrupt source")
	emptyDir(t, tmp, "scratch after a corrupt source")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}

	// An existing _metadata stays.
	if err := os.WriteFile(filepath.Join(dstDir, savepoint.MetadataName), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ConvertNative(ctx, st, 7, dst, ConvertOptions{TempDir: tmp}); !errors.Is(err, s3.ErrExists) {
		t.Fatalf("existing _metadata: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dstDir, savepoint.MetadataName)); string(b) != "keep" {
		t.Fatal("_metadata replaced")
	}

	// Without a schema (byte-array serializers): refused.
	plain, _ := s3.NewLocal(t.TempDir())
	id, err := fillstate.Checkpointed(ctx, fillstate.Config{MaxParallelism: 32, Parallelism: 2, Keys: 500, ValueSize: 16}, t.TempDir(), plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !IsNative(ctx, plain, id) {
		t.Fatal("fillstate checkpoint not recognised as native")
	}
	out2, _ := s3.NewLocal(t.TempDir())
	if _, err := ConvertNative(ctx, plain, id, out2, ConvertOptions{TempDir: tmp}); !errors.Is(err, ErrNoSchema) {
		t.Fatalf("checkpoint without schema: %v", err)
	}
	emptyDir(t, tmp, "scratch after refusing")
}

var errInjected = errors.New("injected upload failure")

// failingPut fails every Put after the first after ones.
type failingPut struct {
	s3.Storage
	after, n int
}

func (f *failingPut) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	f.n++
	if f.n > f.after {
		return fmt.Errorf("%s: %w", key, errInjected)
	}
	return f.Storage.Put(ctx, key, r, size)
}

type cancelOnAdd func()

func (c cancelOnAdd) Add(int64) { c() }

// BenchmarkConvertEngineCheckpoint converts an engine checkpoint of
// 100,000 GenSchema keys (about 460,000 entries) per iteration.
func BenchmarkConvertEngineCheckpoint(b *testing.B) {
	ctx := context.Background()
	bes, schema, _, total, err := GenerateBackends(GenOptions{Keys: 100000, Parallelism: 4, MaxParallelism: 128, Now: convNow, TempDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	st, _ := s3.NewLocal(b.TempDir())
	if _, err := checkpoint.New(st, checkpoint.Options{Schema: schema}).TakeSync(ctx, bes, 1); err != nil {
		b.Fatal(err)
	}
	for _, be := range bes {
		be.Close()
	}
	var size int64
	m, _ := checkpoint.ReadManifest(ctx, st, 1)
	for _, s := range m.Subtasks {
		for _, f := range s.Shared {
			size += f.Object.Size
		}
		for _, f := range s.Private {
			size += f.Size
		}
	}
	b.SetBytes(size)
	b.ResetTimer()
	var res *ConvertResult
	for i := 0; i < b.N; i++ {
		dst, _ := s3.NewLocal(b.TempDir())
		if res, err = ConvertNative(ctx, st, 1, dst, ConvertOptions{TempDir: b.TempDir()}); err != nil {
			b.Fatal(err)
		}
	}
	if res.Entries != total {
		b.Fatalf("%d entries converted, %d written", res.Entries, total)
	}
	b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(size)/(1<<20), "checkpoint-MiB")
	b.ReportMetric(float64(res.StreamBytes)/(1<<20), "canonical-MiB")
}
