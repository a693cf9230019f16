package canonical

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// fixtureSavepoints opens every canonical fixture savepoint by name.
func fixtureSavepoints(t testing.TB) map[string]*savepoint.Savepoint {
	t.Helper()
	out := map[string]*savepoint.Savepoint{}
	for _, f := range fixtures.All(t) {
		if strings.Contains(f.Name, "NATIVE") {
			continue
		}
		st, err := s3.NewLocal(f.Dir)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := savepoint.Open(context.Background(), st, "_metadata")
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		out[f.Name] = sp
	}
	return out
}

// importFixtures are the Flink savepoints Import must restore.
var importFixtures = []string{
	"sql-rocksdb-canonical-groupagg-valuestate",
	"sql-rocksdb-canonical-groupagg-ttl-valuestate",
	"sql-rocksdb-canonical-join-mapstate",
	"sql-rocksdb-canonical-deduplicate-valuestate",
	"sql-rocksdb-canonical-join-ttl-valuestate",
	"flink1.20-rocksdb-canonical-valuestate-timers",
	"flink1.20-hashmap-canonical-valuestate-timers",
	"flink1.19-rocksdb-canonical-snappy-compressed",
	"flink1.15-rocksdb-canonical-metadata-v3",
	"sql-rocksdb-canonical-windowjoin-liststate-timers",
	"sql-rocksdb-canonical-udagg-liststate-mapstate",      // STRUCTURED_TYPE row, External serializers: raw
	"flink1.20-hashmap-canonical-liststate-window-inline", // Tuple2 list elements: raw, fixed length
}

// TestImportFixtures restores Flink's savepoints into both backends at
// several parallelisms, exports them again and compares logical digests.
func TestImportFixtures(t *testing.T) {
	ctx := context.Background()
	sps := fixtureSavepoints(t)
	for _, name := range importFixtures {
		sp := sps[name]
		if sp == nil {
			t.Errorf("fixture %s missing", name)
			continue
		}
		want := mustDigest(t, sp)
		if want.Total("", "").Entries == 0 {
			t.Fatalf("%s: no entries", name)
		}
		// Heap at the savepoint's parallelism, scaled in and out; RocksDB
		// (slower to open) at one rescaled parallelism.
		for _, kind := range []string{"heap", "rocksdb"} {
			pars := []int{0, 1, 3}
			if kind == "rocksdb" {
				pars = []int{2}
			}
			for _, par := range pars {
				res, err := Import(ctx, sp, testFactory(t, kind, nil, nil), ImportOptions{Parallelism: par})
				if err != nil {
					t.Fatalf("%s: import into %s at parallelism %d: %v", name, kind, par, err)
				}
				if kind == "heap" && par == 0 {
					for _, op := range res.Operators {
						var desc []string
						for _, st := range op.Subtasks[0].Schema.States {
							desc = append(desc, fmt.Sprintf("%s:%s", st.Name, st.Kind))
						}
						t.Logf("%s: operator %s p=%d: %v (skipped %d)", name, op.ID, op.Parallelism, desc, len(res.Skipped))
					}
				}
				store, _ := s3.NewLocal(t.TempDir())
				got := mustDigest(t, reexport(t, res, nil, store, "sp"))
				res.Close()
				if diff := want.Diff(got, 10); diff != nil {
					t.Errorf("%s via %s at parallelism %d:\n%s", name, kind, par, strings.Join(diff, "\n"))
				}
				if res.Stats.Entries != want.Total("", "").Entries {
					t.Errorf("%s: imported %d entries, savepoint has %d", name, res.Stats.Entries, want.Total("", "").Entries)
				}
			}
		}
	}
}

// TestTrailerMatchesFlink: the generated V4 trailer equals the bytes of
// every fixture taken as a manual canonical savepoint (forced, as Flink
// triggers savepoints unless unaligned checkpoints are enabled).
func TestTrailerMatchesFlink(t *testing.T) {
	tr, err := CheckpointPropertiesTrailer("1.20")
	if err != nil {
		t.Fatal(err)
	}
	matched := 0
	for name, sp := range fixtureSavepoints(t) {
		if sp.Meta.Version != 4 {
			continue
		}
		p, err := sp.Meta.Properties()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Name != "Savepoint" || p.FormatType != "CANONICAL" || !p.Forced {
			continue
		}
		if !bytes.Equal(sp.Meta.Trailer, tr) {
			t.Errorf("%s: trailer differs (%d vs %d bytes)", name, len(sp.Meta.Trailer), len(tr))
		}
		matched++
	}
	if matched == 0 {
		t.Fatal("no fixture with a manual canonical savepoint trailer")
	}
	for _, v := range []string{"1.16", "2.0", "2.x"} {
		if b, err := CheckpointPropertiesTrailer(v); err != nil || !bytes.Equal(b, tr) {
			t.Errorf("trailer for %s: %v (equal %v)", v, err, bytes.Equal(b, tr))
		}
	}
	for _, v := range []string{"", "1.15", "3.0", "1.14"} {
		if _, err := CheckpointPropertiesTrailer(v); err == nil {
			t.Errorf("trailer for %q", v)
		}
	}
}
