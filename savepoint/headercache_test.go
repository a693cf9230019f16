package savepoint

import (
	"context"
	"testing"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// openCounted opens a fixture through a store counting its requests.
func openCounted(t *testing.T, name string) (*Savepoint, *s3.Counters) {
	t.Helper()
	var c s3.Counters
	sp, err := Open(context.Background(), s3.WithCounters(mustLocal(t, fixtureDir(t, name)), &c), MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp, &c
}

// fileHandles returns the key-groups handles of sp with a stored stream.
func fileHandles(t *testing.T, sp *Savepoint) []*KeyGroupsHandle {
	t.Helper()
	var out []*KeyGroupsHandle
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			h, ok := st.ManagedKeyed.(*KeyGroupsHandle)
			if !ok || h.Delegate == nil {
				continue
			}
			if loc, err := sp.Resolve(h.Delegate); err == nil && !loc.IsInline() {
				out = append(out, h)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no keyed stream in a file")
	}
	return out
}

// walkAll walks every keyed entry of sp and returns how many there were
// and the header each file's entries came with.
func walkAll(t *testing.T, sp *Savepoint, conc int) (int, map[string]*keyed.Header) {
	t.Helper()
	n := 0
	hdrs := map[string]*keyed.Header{}
	err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Concurrency: conc}, func(e *KeyedEntry) error {
		n++
		hdrs[e.File] = e.Header
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, hdrs
}

// TestKeyedHeaderReadOnce: KeyedHeader fetches exactly each header's
// bytes; the walks that follow ask no size again, read no byte of a
// header, reuse the parsed headers and find the entries a fresh savepoint
// finds.
func TestKeyedHeaderReadOnce(t *testing.T) {
	const name = "flink1.20-rocksdb-canonical-valuestate-timers"
	ctx := context.Background()
	wantN, _ := walkAll(t, openFixture(t, name), 1)
	if wantN == 0 {
		t.Fatal("fixture has no keyed entries")
	}
	sp, c := openCounted(t, name)
	hs := fileHandles(t, sp)
	base := c.Snapshot()
	var hdrBytes int64
	byFile := map[string]*keyed.Header{}
	for _, h := range hs {
		hdr, err := sp.KeyedHeader(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		loc, _ := sp.Resolve(h.Delegate)
		byFile[loc.Name] = hdr
		hdrBytes += int64(len(hdr.Raw))
	}
	got := c.Snapshot()
	if n := got.Requests["stat"] - base.Requests["stat"]; n != int64(len(hs)) {
		t.Fatalf("%d size look-ups for %d streams", n, len(hs))
	}
	if n := got.Requests["get_range"] - base.Requests["get_range"]; n != int64(len(hs)) {
		t.Fatalf("%d range reads for %d headers", n, len(hs))
	}
	if n := got.BytesRead - base.BytesRead; n != hdrBytes {
		t.Fatalf("read %d bytes for %d bytes of headers", n, hdrBytes)
	}
	// Walk the entries twice, in parallel the second time: only key-group
	// bytes are read, and every header is the one parsed above.
	var blockBytes int64
	for _, h := range hs {
		loc, _ := sp.Resolve(h.Delegate)
		obj, err := sp.OpenLocation(ctx, loc, 0)
		if err != nil {
			t.Fatal(err)
		}
		blockBytes += obj.Size() - keyedHeaderEndIn(h, obj.Size())
	}
	for i, conc := range []int{1, 4} {
		before := c.Snapshot()
		n, hdrs := walkAll(t, sp, conc)
		after := c.Snapshot()
		if n != wantN {
			t.Fatalf("walk %d: %d entries, want %d", i, n, wantN)
		}
		if s := after.Requests["stat"] - before.Requests["stat"]; s != 0 {
			t.Fatalf("walk %d asked %d sizes again", i, s)
		}
		if b := after.BytesRead - before.BytesRead; b != blockBytes {
			t.Fatalf("walk %d read %d bytes, want the %d bytes of the key groups", i, b, blockBytes)
		}
		for f, h := range hdrs {
			if byFile[f] != h {
				t.Fatalf("walk %d: %s: header parsed again", i, f)
			}
		}
	}
	if hits, _ := sp.hdrs.counts(); hits < int64(2*len(hs)) {
		t.Fatalf("%d cache hits for %d streams walked twice", hits, len(hs))
	}
}

// TestHeaderCacheBounded: with a budget of three headers a savepoint keeps
// the three most recently opened, drops the least recently used first,
// reads a dropped header again, and keeps no header larger than the
// budget.
func TestHeaderCacheBounded(t *testing.T) {
	const name = "flink1.20-rocksdb-canonical-valuestate-timers"
	ctx := context.Background()
	sp, c := openCounted(t, name)
	// The streams whose headers are of the most common length.
	byCost := map[int64][]*KeyGroupsHandle{}
	var cost int64
	for _, h := range fileHandles(t, sp) {
		hdr, err := sp.KeyedHeader(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		k := headerCost(int64(len(hdr.Raw)))
		byCost[k] = append(byCost[k], h)
		if len(byCost[k]) > len(byCost[cost]) {
			cost = k
		}
	}
	hs := byCost[cost]
	if len(hs) < 5 {
		t.Fatalf("%d keyed streams with equal headers, the test needs 5", len(hs))
	}
	budget := 3 * cost
	sp.hdrs = newHeaderCache(budget)
	stats := func() int64 { return c.Requests(s3.OpStat) }
	for _, h := range hs {
		if _, err := sp.KeyedHeader(ctx, h); err != nil {
			t.Fatal(err)
		}
		if n, used := sp.hdrs.held(); used > budget || n > 3 {
			t.Fatalf("%d headers of %d estimated bytes held, budget %d", n, used, budget)
		}
	}
	last := len(hs) - 1
	// The most recent is held, the first was dropped.
	s0 := stats()
	if _, err := sp.KeyedHeader(ctx, hs[last]); err != nil {
		t.Fatal(err)
	}
	if stats() != s0 {
		t.Fatal("the most recently opened header was read again")
	}
	if _, err := sp.KeyedHeader(ctx, hs[0]); err != nil {
		t.Fatal(err)
	}
	if stats() != s0+1 {
		t.Fatal("the least recently used header was not dropped")
	}
	// hs[last] was used more recently than hs[last-1] and hs[last-2]:
	// reading hs[0] again dropped hs[last-2], then hs[last-1] stays.
	if _, err := sp.KeyedHeader(ctx, hs[last-1]); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.KeyedHeader(ctx, hs[last]); err != nil {
		t.Fatal(err)
	}
	if stats() != s0+1 {
		t.Fatal("a recently used header was dropped")
	}
	if _, err := sp.KeyedHeader(ctx, hs[last-2]); err != nil {
		t.Fatal(err)
	}
	if stats() != s0+2 {
		t.Fatal("the header used longest ago was kept")
	}
	// Below one header's cost nothing is kept.
	sp.hdrs = newHeaderCache(cost - 1)
	for range 2 {
		if _, err := sp.KeyedHeader(ctx, hs[0]); err != nil {
			t.Fatal(err)
		}
	}
	if n, used := sp.hdrs.held(); n != 0 || used != 0 {
		t.Fatalf("a header over the budget was kept (%d, %d bytes)", n, used)
	}
	if stats() != s0+4 {
		t.Fatal("a header over the budget was not read again")
	}
}

// TestHeaderCacheKeyedByEnd: two handles naming one stream with different
// first key-group offsets (the end the header parse is bounded by) do not
// share a cached header.
func TestHeaderCacheKeyedByEnd(t *testing.T) {
	ctx := context.Background()
	sp, c := openCounted(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	h := fileHandles(t, sp)[0]
	if _, err := sp.KeyedHeader(ctx, h); err != nil {
		t.Fatal(err)
	}
	other := *h
	other.Offsets = nil // no key group: the header ends at the stream's end
	s0 := c.Requests(s3.OpStat)
	hdr, err := sp.KeyedHeader(ctx, &other)
	if c.Requests(s3.OpStat) != s0+1 {
		t.Fatalf("the header bounded by another end came from the cache (%v)", err)
	}
	if err == nil && hdr == nil {
		t.Fatal("no header and no error")
	}
}

// TestHeaderCacheLiteralSavepoint: a Savepoint not made by Open caches too.
func TestHeaderCacheLiteralSavepoint(t *testing.T) {
	ctx := context.Background()
	opened, c := openCounted(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	sp := &Savepoint{Store: opened.Store, Dir: opened.Dir, MetadataKey: opened.MetadataKey, Meta: opened.Meta, Props: opened.Props}
	h := fileHandles(t, sp)[0]
	a, err := sp.KeyedHeader(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	s0 := c.Requests(s3.OpStat)
	b, err := sp.KeyedHeader(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if a != b || c.Requests(s3.OpStat) != s0 {
		t.Fatal("the header was read again")
	}
}
