//go:build cgo

package restore

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// Outcomes of `verify` on the additional fixtures.
const (
	outcomePass      = "pass"           // every target equals the source
	outcomeNoKeyed   = "no keyed state" // nothing to restore; passes
	outcomeChangelog = "changelog only" // nothing restored: state only in the change log
)

// moreOutcomes is the expected outcome of every savepoint of the
// additional fixtures, with the keyed entries of the source (-1: from the
// reference decoding in _expected/). A fixture directory missing here
// fails the test.
var moreOutcomes = map[string]struct {
	outcome string
	entries int64
}{
	// Heap key-group layout: tag 12 of a hashmap checkpoint, tag 3 of a
	// Flink 1.9 savepoint with V2 metadata.
	"flink1.15-hashmap-checkpoint":        {outcomePass, -1},
	"flink1.9-heap-savepoint-metadata-v2": {outcomePass, -1},
	// A VALUE state whose value serializer snapshot is a test class no
	// reader knows: its 4 values restore as opaque bytes.
	"flink1.16-rocksdb-canonical-user-serializer": {outcomePass, 4},
	"flink1.17-hashmap-changelog-checkpoint":      {outcomeChangelog, 32}, // the reader rebuilds the log; the engine import does not
	"sql-rocksdb-canonical-async-calc":            {outcomeNoKeyed, 0},
	"sql-rocksdb-canonical-cep-match":             {outcomePass, 6},
}

// expectedEntries counts the lines of the reference decoding of fixture
// name (in dir/_expected).
func expectedEntries(t *testing.T, dir, name string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "_expected", name+".entries.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n
}

// TestVerifyMoreFixtures is `verify --backends rocksdb,heap --parallelism
// 1,2` on every savepoint of ../shared/flink-fixtures-more, each with its
// expected outcome: heap-layout savepoints and checkpoints restore and
// re-export (canonical) without loss, a state with an unknown serializer
// restores as opaque bytes, a changelog checkpoint without materialized
// state is reported as not restorable (state only in the change log), and
// CEP and async operator state keep passing.
func TestVerifyMoreFixtures(t *testing.T) {
	ctx := context.Background()
	dir := fixtures.MorePath(t)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range ents {
		spDir := filepath.Join(dir, e.Name(), "savepoint")
		if _, err := os.Stat(filepath.Join(spDir, savepoint.MetadataName)); err != nil {
			continue
		}
		want, ok := moreOutcomes[e.Name()]
		if !ok {
			t.Errorf("%s: no expected outcome", e.Name())
			continue
		}
		seen++
		t.Run(e.Name(), func(t *testing.T) {
			sp, err := savepoint.Open(ctx, mustLocal(t, spDir), savepoint.MetadataName)
			if err != nil {
				t.Fatal(err)
			}
			r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{}, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK {
				t.Fatalf("verification failed:\n%s", strings.Join(r.Failures(), "\n"))
			}
			if len(r.Targets) != 4 {
				t.Fatalf("%d targets", len(r.Targets))
			}
			entries := want.entries
			if entries < 0 {
				entries = expectedEntries(t, dir, e.Name())
			}
			if got := r.Digest.Total("", "").Entries; got != entries {
				t.Fatalf("source digest: %d entries, want %d", got, entries)
			}
			if r.Unsupported != (want.outcome == outcomeChangelog) {
				t.Fatalf("report unsupported = %v", r.Unsupported)
			}
			for _, tr := range r.Targets {
				switch want.outcome {
				case outcomePass:
					if tr.Skipped != "" || len(tr.SkippedStates) > 0 || tr.Digest == nil {
						t.Fatalf("%s: skipped %q %v", tr.Name, tr.Skipped, tr.SkippedStates)
					}
					if got := tr.Digest.Total("", "").Entries; got != entries {
						t.Fatalf("%s: %d entries restored, want %d", tr.Name, got, entries)
					}
				case outcomeNoKeyed:
					if tr.Skipped != "the savepoint has no keyed state to restore" || tr.Unsupported {
						t.Fatalf("%s: skipped %q, unsupported %v", tr.Name, tr.Skipped, tr.Unsupported)
					}
				case outcomeChangelog:
					if !tr.Unsupported || !strings.Contains(tr.Skipped, canonical.NoteChangelogOnly) {
						t.Fatalf("%s: skipped %q, unsupported %v", tr.Name, tr.Skipped, tr.Unsupported)
					}
					// One note per operator with keyed state.
					ops := map[string]bool{}
					for _, x := range tr.SkippedStates {
						if x.State != "" || x.Reason != canonical.NoteChangelogOnly {
							t.Fatalf("%s: skipped %v", tr.Name, x)
						}
						ops[x.Operator] = true
					}
					keyedOps := 0
					for _, op := range sp.Meta.Operators {
						for _, st := range op.Subtasks {
							if _, ok := st.ManagedKeyed.(*savepoint.ChangelogHandle); ok {
								keyedOps++
								if !ops[op.ID.String()] {
									t.Fatalf("%s: operator %s not noted", tr.Name, op.ID)
								}
								break
							}
						}
					}
					if keyedOps == 0 || len(ops) != keyedOps {
						t.Fatalf("%s: %d operators noted, %d with changelog handles", tr.Name, len(ops), keyedOps)
					}
				}
			}
		})
	}
	if seen != len(moreOutcomes) {
		t.Errorf("%d fixture savepoints, %d expected outcomes", seen, len(moreOutcomes))
	}
}

// TestVerifyMoreFixturesMutation: the restores of a heap-layout savepoint
// and of the state with an unknown serializer are really compared: one
// changed value byte in the restored backend fails verification in that
// state's key group ("content").
func TestVerifyMoreFixturesMutation(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ fixture, state string }{
		{"flink1.9-heap-savepoint-metadata-v2", "state-name"},
		{"flink1.16-rocksdb-canonical-user-serializer", "testState"},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			sp, err := savepoint.Open(ctx, mustLocal(t, fixtures.MorePath(t, c.fixture, "savepoint")), savepoint.MetadataName)
			if err != nil {
				t.Fatal(err)
			}
			var h hit
			mutate := mutateFirst(c.state, &h, func(r ref, key, val []byte) error {
				if len(val) == 0 {
					return nil
				}
				val[len(val)-1] ^= 1
				return r.apply(func(b interface {
					Put(int, []byte, []byte)
					Delete(int, []byte)
				}) {
					b.Put(r.state, key, val)
				})
			})
			// Operators are restored one by one: change the first one's.
			rs := &Restorer{Mutate: func(res *canonical.ImportResult) error {
				if h.GroupKey.State != "" {
					return nil
				}
				return mutate(res)
			}}
			r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"heap"}, 1), Restorer: rs, SkipCheck: true, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if h.GroupKey.State == "" {
				t.Fatal("nothing mutated")
			}
			if r.OK {
				t.Fatal("mutation not detected")
			}
			diffs := r.Targets[0].Differences
			if len(diffs) != 1 || diffs[0].GroupKey != h.GroupKey || diffs[0].Field != "content" {
				t.Fatalf("differences %v, want content of %v", diffs, h.GroupKey)
			}
		})
	}
}
