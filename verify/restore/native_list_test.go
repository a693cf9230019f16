//go:build cgo

package restore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify"
)

const listT0 = 1_700_000_000_000

// listMergeCheckpoint appends to a TTL list and a list in three bundles
// a second apart (the first flushed, the others in the memtable when the
// checkpoint flushes), so checkpoint 1 in store holds list merge records
// no compaction has folded: 5 keys per state, 6 (TTL list) and 3 (list)
// elements per key.
func listMergeCheckpoint(t *testing.T, store s3.Storage) {
	t.Helper()
	const maxPar = 64
	states := []engine.StateDesc{
		{Name: "tl", Kind: engine.KindList, TTL: time.Hour},
		{Name: "l", Kind: engine.KindList},
	}
	l := engine.Layout{MaxParallelism: maxPar, Range: keygroups.Range{Start: 0, End: maxPar - 1}}
	clock := engine.NewManualClock(listT0)
	be, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), "task"), l, states, engine.RocksOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	op := engine.NewOperator(be, clock)
	tl, _ := op.State("tl")
	ls, _ := op.State("l")
	b := op.NewBundle()
	defer b.Close()
	for round := 0; round < 3; round++ {
		if err := b.Begin(nil); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 5; k++ {
			key := tl.Key(nil, k*12, []byte(fmt.Sprint("user-", k)), nil)
			e1, e2 := fmt.Sprintf("t%d,%d", k, round), fmt.Sprintf("u%d,%d", k, round)
			if err := b.ListAddAll(tl, key, [][]byte{[]byte(e1), []byte(e2)}); err != nil {
				t.Fatal(err)
			}
			if err := b.ListAdd(ls, key, []byte(e1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if err := be.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Second)
	}
	if _, err := checkpoint.New(store, checkpoint.Options{}).TakeSync(context.Background(), []engine.Backend{be}, 1); err != nil {
		t.Fatal(err)
	}
}

// TestNativeCheckpointListMerges: a checkpoint holding uncompacted list
// appends verifies on both backends at other parallelisms, and its
// digest holds one entry per list with the newest element's time as TTL.
func TestNativeCheckpointListMerges(t *testing.T) {
	ctx := context.Background()
	store, _ := s3.NewLocal(t.TempDir())
	listMergeCheckpoint(t, store)
	o := verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 3), TempDir: t.TempDir()}
	r, err := VerifyNative(ctx, store, 1, o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Fatalf("failures:\n%s", strings.Join(r.Failures(), "\n"))
	}
	tt, lt := r.Digest.Total("", "tl"), r.Digest.Total("", "l")
	if tt.Entries != 5 || lt.Entries != 5 {
		t.Fatalf("entries: TTL list %d, list %d, want 5 each", tt.Entries, lt.Entries)
	}
	if tt.TTLEntries != 5 || tt.TTLMin != listT0+2000 || tt.TTLMax != listT0+2000 {
		t.Fatalf("TTL list timestamps: %d in [%d, %d], want 5 at %d", tt.TTLEntries, tt.TTLMin, tt.TTLMax, listT0+2000)
	}

	// With a TTL time between the rounds' expiries: every list is still
	// live (its newest elements are), and the targets read the live
	// elements only.
	o.TTL = verify.TTLCheck{TTLMillis: time.Hour.Milliseconds(), NowMillis: listT0 + time.Hour.Milliseconds() + 500}
	r, err = VerifyNative(ctx, store, 1, o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Fatalf("with TTL, failures:\n%s", strings.Join(r.Failures(), "\n"))
	}
	if live := r.Digest.Live.Total("", "tl"); live.Entries != 5 || r.Digest.Total("", "tl").Expired != 0 {
		t.Fatalf("with TTL: %d live TTL lists, %d expired", live.Entries, r.Digest.Total("", "tl").Expired)
	}
	if got := r.Targets[0].Digest.Total("", "tl").Entries; got != 5 {
		t.Fatalf("target reads %d TTL lists", got)
	}
	// After the newest elements' expiry every TTL list is expired.
	o.TTL.NowMillis = listT0 + time.Hour.Milliseconds() + 2000
	r, err = VerifyNative(ctx, store, 1, o)
	if err != nil || !r.OK {
		t.Fatalf("all expired: %v %v", err, r.Failures())
	}
	if exp := r.Digest.Total("", "tl").Expired; exp != 5 {
		t.Fatalf("%d of 5 TTL lists expired", exp)
	}
}
