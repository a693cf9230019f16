package savepoint

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// smallBatches makes batches small enough for small test data to span
// several per key group; it returns the restore function.
func smallBatches() func() {
	old := batchEntries
	batchEntries = 40
	return func() { batchEntries = old }
}

// walkJSON renders every entry of a walk in its callback.
func walkJSON(t *testing.T, sp *Savepoint, o ScanOptions) ([]string, error) {
	t.Helper()
	var out []string
	err := sp.WalkKeyed(context.Background(), o, func(e *KeyedEntry) error {
		b, err := json.Marshal([]any{e.Operator.ID.String(), e.Subtask, e.KeyGroup, e.State.Name, e.Offset, e.BlockPos, e.KeyBytes, e.ValueBytes,
			e.KeyPart, e.NamespaceBytes, e.UserKeyBytes, e.Key, e.Namespace, e.UserKey, e.Value, e.TTLTimestamp})
		out = append(out, string(b))
		return err
	})
	return out, err
}

// TestWorkersMatchSequential: decode workers deliver exactly the
// sequential walk (same entries, bytes, values, order) for every mode, with
// fresh and recycled values, on fixtures and on a synthetic savepoint whose
// key groups span several batches.
func TestWorkersMatchSequential(t *testing.T) {
	defer smallBatches()()
	dir := t.TempDir()
	synthSavepoint(t, dir, 3*batchEntries*128/2, 2)
	sps := map[string]*Savepoint{"synthetic": openDir(t, dir)}
	for _, name := range []string{fixtureUDF, "sql-rocksdb-canonical-udagg-liststate-mapstate", "sql-rocksdb-canonical-windowjoin-liststate-timers"} {
		sps[name] = openFixture(t, name)
	}
	for name, sp := range sps {
		for _, mode := range []int{0, 1, 2, 3} {
			o := ScanOptions{KeyGroupTo: -1}
			o.Mode = modeOf(mode)
			want, err := walkJSON(t, sp, o)
			if err != nil || len(want) == 0 {
				t.Fatalf("%s: sequential: %d entries, %v", name, len(want), err)
			}
			for _, workers := range []int{2, 3} {
				for _, reuse := range []bool{false, true} {
					o.Workers, o.ReuseValues = workers, reuse
					got, err := walkJSON(t, sp, o)
					if err != nil {
						t.Fatalf("%s workers=%d reuse=%v: %v", name, workers, reuse, err)
					}
					if len(got) != len(want) {
						t.Fatalf("%s mode %d workers=%d reuse=%v: %d entries, want %d", name, mode, workers, reuse, len(got), len(want))
					}
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%s mode %d workers=%d reuse=%v: entry %d:\n got  %s\n want %s", name, mode, workers, reuse, i, got[i], want[i])
						}
					}
				}
			}
		}
		// Without ReuseValues, values retained past their callbacks stay
		// intact.
		var kept []any
		if err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Workers: 2}, func(e *KeyedEntry) error {
			kept = append(kept, []any{e.Key, e.Value})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var want []any
		sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1}, func(e *KeyedEntry) error {
			want = append(want, []any{e.Key, e.Value})
			return nil
		})
		g, _ := json.Marshal(kept)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Fatalf("%s: retained values differ", name)
		}
	}
}

// TestWorkersErrorsAndStop: a corrupt block fails the parallel walk with
// the sequential walk's error after the same entries; a callback's stop
// ends it early; no worker outlives the walk.
func TestWorkersErrorsAndStop(t *testing.T) {
	defer smallBatches()()
	dir := t.TempDir()
	synthSavepoint(t, dir, 3*batchEntries*128/2, 1)
	sp := openDir(t, dir)
	h := sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*KeyGroupsHandle)
	// Corrupt a value-length field in the middle of key group 70's block.
	p := filepath.Join(dir, h.Delegate.Path)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	at := h.Offsets[70] + 2 + 26*30 + 14 // kv id, 30 entries of 26 bytes, key length + key
	copy(b[at:], []byte{0x7F, 0, 0, 0})
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	want, werr := walkJSON(t, sp, ScanOptions{KeyGroupTo: -1})
	if werr == nil {
		t.Fatal("sequential walk of a corrupt block succeeded")
	}
	for _, reuse := range []bool{false, true} {
		got, err := walkJSON(t, sp, ScanOptions{KeyGroupTo: -1, Workers: 2, ReuseValues: reuse})
		if err == nil || err.Error() != werr.Error() {
			t.Fatalf("parallel error %v, sequential %v", err, werr)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("parallel walk delivered %d entries before the error, sequential %d", len(got), len(want))
		}
	}
	n := 0
	err = sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Workers: 2}, func(e *KeyedEntry) error {
		n++
		if n == 3000 {
			return StopWalk
		}
		return nil
	})
	if !IsStop(err) || n != 3000 {
		t.Fatalf("stop: %v after %d entries", err, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = sp.WalkKeyed(ctx, ScanOptions{KeyGroupTo: -1, Workers: 2}, func(e *KeyedEntry) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
	for i := 0; runtime.NumGoroutine() > before && i < 100; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Fatalf("%d goroutines after the walks, %d before", g, before)
	}
}

func modeOf(i int) keyed.Mode {
	return []keyed.Mode{keyed.ModeDecode, keyed.ModeSplit, keyed.ModeRaw, keyed.ModeValidate}[i]
}

// TestWorkersBigEntries: entries larger than a batch (framed in ModeRaw:
// values of megabytes) reach the callback intact and in order.
func TestWorkersBigEntries(t *testing.T) {
	dir := t.TempDir()
	synthSavepoint(t, dir, 10, 1) // for the keyed header
	sp0 := openDir(t, dir)
	h0 := sp0.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*KeyGroupsHandle)
	p := filepath.Join(dir, h0.Delegate.Path)
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var hdrLen int64 = -1
	for _, off := range h0.Offsets {
		if off > 0 && (hdrLen < 0 || off < hdrLen) {
			hdrLen = off
		}
	}
	data := append([]byte(nil), old[:hdrLen]...)
	offsets := make([]int64, 128)
	for kg := 3; kg < 128; kg += 20 {
		offsets[kg] = int64(len(data))
		data = append(data, 0, 0)
		sizes := []int{8, 3<<20 + kg, 8, 1<<20 + 7, 700 << 10, 8}
		for i, n := range sizes {
			key := []byte{byte(kg), 0, 0, 0, 0, 0, 0, 0, byte(i), 0}
			if i == len(sizes)-1 {
				key[0] |= 0x80
			}
			data = binary.BigEndian.AppendUint32(data, uint32(len(key)))
			data = append(data, key...)
			data = binary.BigEndian.AppendUint32(data, uint32(n))
			for j := range n {
				data = append(data, byte(j*kg+i))
			}
		}
		data = append(data, 0xFF, 0xFF)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h0.Offsets, h0.Delegate.Size = offsets, int64(len(data))
	b, err := EncodeMetadata(sp0.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sp := openDir(t, dir)
	sums := func(workers int) []string {
		var out []string
		err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeRaw, Workers: workers}, func(e *KeyedEntry) error {
			sum := sha256.Sum256(e.ValueBytes)
			out = append(out, fmt.Sprintf("%d %x %d %x", e.KeyGroup, e.KeyBytes, len(e.ValueBytes), sum[:8]))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := sums(1)
	if len(want) != 6*7 {
		t.Fatalf("%d entries", len(want))
	}
	if got := sums(3); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("parallel:\n%s\nsequential:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
