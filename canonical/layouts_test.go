package canonical

import (
	"context"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestImportMoreLayouts: Import reads the heap key-group layout (a Flink
// 1.15 hashmap checkpoint, a Flink 1.9 savepoint with V2 metadata) and a
// state with an unknown serializer as the reader does, at another
// parallelism, and the canonical re-export digests like the source; a
// changelog checkpoint without materialized state imports nothing and says
// why, per operator, without failing.
func TestImportMoreLayouts(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		entries int64
	}{
		{"flink1.15-hashmap-checkpoint", 32},
		{"flink1.9-heap-savepoint-metadata-v2", 32},
		{"flink1.16-rocksdb-canonical-user-serializer", 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp, err := savepoint.Open(ctx, mustLocalStore(t, fixtures.MorePath(t, c.name, "savepoint")), savepoint.MetadataName)
			if err != nil {
				t.Fatal(err)
			}
			// Operators whose max parallelism is 1 stay at 1.
			res, err := Import(ctx, sp, testFactory(t, "rocksdb", nil, nil), ImportOptions{Parallelism: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			if res.Stats.Entries != c.entries || len(res.SkippedStates) != 0 {
				t.Fatalf("imported %d entries (want %d), skipped %v", res.Stats.Entries, c.entries, res.SkippedStates)
			}
			store, _ := s3.NewLocal(t.TempDir())
			out := reexport(t, res, nil, store, "sp")
			// The export is canonical whatever the source's layout.
			for _, op := range out.Meta.Operators {
				for _, st := range op.Subtasks {
					if st.ManagedKeyed == nil {
						continue
					}
					if l, err := out.KeyedLayout(ctx, st.ManagedKeyed, int(op.MaxParallelism)); err != nil || l != savepoint.LayoutCanonical {
						t.Fatalf("re-export operator %s: layout %q, %v", op.ID, l, err)
					}
				}
			}
			if diff := mustDigest(t, sp).Diff(mustDigest(t, out), 10); diff != nil {
				t.Fatalf("digest differs after import/export:\n%v", diff)
			}
		})
	}
	t.Run("flink1.17-hashmap-changelog-checkpoint", func(t *testing.T) {
		sp, err := savepoint.Open(ctx, mustLocalStore(t, fixtures.MorePath(t, "flink1.17-hashmap-changelog-checkpoint", "savepoint")), savepoint.MetadataName)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range sp.Meta.Operators {
			for _, st := range op.Subtasks {
				if st.ManagedKeyed == nil {
					continue
				}
				if l, err := sp.KeyedLayout(ctx, st.ManagedKeyed, int(op.MaxParallelism)); err != nil || l != savepoint.LayoutChangelog {
					t.Fatalf("operator %s: layout %q, %v", op.ID, l, err)
				}
			}
		}
		res, err := Import(ctx, sp, testFactory(t, "heap", nil, nil), ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer res.Close()
		if len(res.Operators) != 0 || res.Stats.Entries != 0 || len(res.SkippedStates) != 4 {
			t.Fatalf("%d operators, %d entries, skipped %v", len(res.Operators), res.Stats.Entries, res.SkippedStates)
		}
		for _, x := range res.SkippedStates {
			if x.State != "" || x.Reason != NoteChangelogOnly {
				t.Fatalf("skipped %+v", x)
			}
		}
		if !strings.Contains(strings.Join(res.Skipped, "\n"), NoteChangelogOnly) {
			t.Fatalf("skipped lines %v", res.Skipped)
		}
	})
}
