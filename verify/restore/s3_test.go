//go:build cgo

package restore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// rescaleTo restores sp into heap backends at parallelism p and exports
// them into store/dir.
func rescaleTo(t *testing.T, sp *savepoint.Savepoint, p int, store s3.Storage, dir string) *savepoint.Savepoint {
	t.Helper()
	ctx := context.Background()
	res, err := canonical.Import(ctx, sp, func(_ savepoint.OperatorID, _ int, l engine.Layout, d []engine.StateDesc) (engine.Backend, error) {
		return engine.OpenRocksDB(filepath.Join(t.TempDir(), "db"), l, d, engine.RocksOptions{WriteBufferSize: 4 << 20})
	}, canonical.ImportOptions{Parallelism: p})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	var ops []canonical.Operator
	for _, iop := range res.Operators {
		op := canonical.Operator{ID: iop.ID, Parallelism: iop.Parallelism, MaxParallelism: iop.MaxParallelism}
		for _, st := range iop.Subtasks {
			op.Subtasks = append(op.Subtasks, canonical.Subtask{Index: st.Index, Operator: engine.NewOperator(st.Backend, nil), Schema: st.Schema})
		}
		ops = append(ops, op)
	}
	if _, _, err := canonical.Export(ctx, ops, store, canonical.ExportOptions{Dir: dir, TempDir: t.TempDir(), InlineThreshold: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	out, err := savepoint.Open(ctx, store, dir+"/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEndToEndS3: the engine's state (group aggregate with TTL, map state,
// join records as multisets, windowed values) exported to S3 verifies on
// rocksdb and heap through parallelism 2 → 3 → 2, sharded runs merge to
// the same verdict, and a restore that loses an entry fails.
func TestEndToEndS3(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	store := srv.Store
	sp2 := generate(t, store, "e2e/p2", GenOptions{Keys: 2000, Backend: "rocksdb", Parallelism: 2, MaxParallelism: 128, InlineThreshold: 4 << 10})
	if len(sp2.Meta.Operators[0].Subtasks) != 2 {
		t.Fatalf("%d subtasks", len(sp2.Meta.Operators[0].Subtasks))
	}
	run := func(sp *savepoint.Savepoint, p int, o verify.Options) *verify.Report {
		t.Helper()
		o.Targets, o.Restorer, o.TempDir = targets([]string{"rocksdb", "heap"}, p), &Restorer{}, t.TempDir()
		r, err := verify.Run(ctx, sp, o)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			t.Fatalf("%s at parallelism %d:\n%s", sp.Name(), p, strings.Join(r.Failures(), "\n"))
		}
		return r
	}
	first := run(sp2, 3, verify.Options{})
	tot := first.Digest.Total("", "")
	if tot.Counts == 0 || tot.TTLEntries == 0 {
		t.Fatalf("generated state lacks counts or TTL: %+v", tot)
	}
	sp3 := rescaleTo(t, sp2, 3, store, "e2e/p3")
	second := run(sp3, 2, verify.Options{})
	if diffs := verify.Compare(first.Digest, second.Digest); diffs != nil {
		t.Fatalf("digest changed through 2 → 3: %v", diffs)
	}
	back := rescaleTo(t, sp3, 2, store, "e2e/p2-again")
	r, err := verify.Run(ctx, sp2, verify.Options{Against: back, AgainstName: "2→3→2"})
	if err != nil || !r.OK {
		t.Fatalf("2 → 3 → 2: %v %v", err, r.Failures())
	}
	// Shards: each restores only its key groups; merged they equal the whole.
	var shards []*verify.Report
	for i := 0; i < 2; i++ {
		shards = append(shards, run(sp2, 3, verify.Options{Shard: verify.Shard{Index: i, Count: 2}, SkipCheck: true}))
	}
	for i, s := range shards {
		if n := s.Targets[0].Digest.Total("", "").Entries; n == 0 || n == tot.Entries {
			t.Fatalf("shard %d restored %d of %d entries", i, n, tot.Entries)
		}
	}
	m, err := verify.Merge(shards)
	if err != nil || !m.OK {
		t.Fatalf("merge: %v %v", err, m.Failures())
	}
	if diffs := verify.Compare(first.Digest, m.Digest); diffs != nil {
		t.Fatalf("merged shards differ from the whole: %v", diffs)
	}
	// A lossy restore fails against S3 too.
	var h hit
	lossy := &Restorer{Mutate: mutateFirst("left-records", &h, func(r ref, key, _ []byte) error {
		b := r.st.Backend.NewBatch()
		defer b.Close()
		b.Delete(r.state, key)
		return b.Commit()
	})}
	r, err = verify.Run(ctx, sp2, verify.Options{Targets: targets([]string{"rocksdb"}, 3), Restorer: lossy, SkipCheck: true, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || len(r.Targets[0].Differences) != 1 || r.Targets[0].Differences[0].GroupKey != h.GroupKey {
		t.Fatalf("lossy restore: %v", r.Failures())
	}
	t.Logf("verified %d entries (%d TTL timestamps, counts %d) at %s", tot.Entries, tot.TTLEntries, tot.Counts, fmt.Sprint(srv.Endpoint))
}
