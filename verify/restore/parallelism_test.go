//go:build cgo

package restore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// withGlobalOperator returns a generated savepoint of two operators: one
// with max parallelism 32 at parallelism 2 and a global one (parallelism
// and max parallelism 1, its state inline), and the global one's id.
func withGlobalOperator(t *testing.T) (*savepoint.Savepoint, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	store, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	generate(t, store, "sp", GenOptions{Keys: 300, Parallelism: 2, MaxParallelism: 32})
	g := generate(t, store, "global", GenOptions{Keys: 40, Parallelism: 1, MaxParallelism: 1, InlineThreshold: 1 << 20})
	b, err := os.ReadFile(filepath.Join(dir, "sp", savepoint.MetadataName))
	if err != nil {
		t.Fatal(err)
	}
	md, err := savepoint.ParseMetadata(b, "sp/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	gop := *g.Meta.Operators[0]
	gop.ID = savepoint.OperatorIDFromUID("verify-generated-global")
	if gop.MaxParallelism != 1 || gop.Parallelism != 1 {
		t.Fatalf("global operator at %d/%d", gop.Parallelism, gop.MaxParallelism)
	}
	md.Operators = append(md.Operators, &gop)
	if b, err = savepoint.EncodeMetadata(md); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sp", savepoint.MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The sums file describes the _metadata written before this edit.
	if err := os.Remove(filepath.Join(dir, "sp", savepoint.SumsName)); err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(ctx, store, "sp/"+savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp, gop.ID.String()
}

// TestVerifyGlobalOperator: targets above an operator's max parallelism
// restore it at its max parallelism, verify it and say so in the table
// and JSON; the target's own parallelism applies to the other operators.
func TestVerifyGlobalOperator(t *testing.T) {
	ctx := context.Background()
	sp, global := withGlobalOperator(t)
	r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2, 3), Restorer: &Restorer{}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Fatalf("verification failed:\n%s", strings.Join(r.Failures(), "\n"))
	}
	if n := r.Digest.Total(global, "").Entries; n == 0 {
		t.Fatal("global operator has no entries")
	}
	for _, tr := range r.Targets {
		p, ok := tr.RestoredParallelism[global]
		if tr.Parallelism == 1 {
			if len(tr.RestoredParallelism) != 0 {
				t.Fatalf("%s: restored parallelism %v", tr.Name, tr.RestoredParallelism)
			}
			continue
		}
		if !ok || p != 1 || len(tr.RestoredParallelism) != 1 {
			t.Fatalf("%s: restored parallelism %v, want the global operator at 1", tr.Name, tr.RestoredParallelism)
		}
		// The other operator ran at the target's parallelism.
		for _, op := range tr.Digest.Operators {
			if op.ID != global && op.Parallelism != tr.Parallelism {
				t.Fatalf("%s: operator %s restored at %d", tr.Name, op.ID, op.Parallelism)
			}
		}
	}
	var tab, js strings.Builder
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.String(), "ok (p1)") || !strings.Contains(tab.String(), "NOTE rocksdb@p2: operator "+global+" restored at parallelism 1") {
		t.Fatalf("table does not show the restored parallelism:\n%s", tab.String())
	}
	if !strings.Contains(js.String(), `"restoredParallelism": {`) || !strings.Contains(js.String(), `"`+global+`": 1`) {
		t.Fatal("JSON does not carry restoredParallelism")
	}
	// A merged sharded run keeps it.
	var shards []*verify.Report
	for i := 0; i < 2; i++ {
		sh := verify.Shard{Index: i, Count: 2}
		r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"heap"}, 2), Restorer: &Restorer{}, Shard: sh, TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		shards = append(shards, r)
	}
	m, err := verify.Merge(shards)
	if err != nil {
		t.Fatal(err)
	}
	if !m.OK || m.Targets[0].RestoredParallelism[global] != 1 {
		t.Fatalf("merged: ok %v, restored parallelism %v: %v", m.OK, m.Targets[0].RestoredParallelism, m.Failures())
	}
}
