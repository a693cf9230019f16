package checkpoint_test

import (
	"context"
	"fmt"
	"github.com/sfstate/sfstate/checkpoint"
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/fillstate"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestRestoreFromPlan: for random (max P, old P, new P), an engine
// checkpoint rescaled by reference and restored subtask by subtask from the
// plan holds exactly the keys of each new range — none lost, none twice —
// and fetches no more than the plan lists.
func TestRestoreFromPlan(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(9))
	cases := [][3]int{{128, 2, 3}, {128, 3, 2}, {16, 4, 1}, {200, 1, 5}, {7, 3, 7}}
	for _, c := range cases {
		maxP, oldP, newP := c[0], c[1], c[2]
		t.Run(fmt.Sprintf("maxP%d-%dto%d", maxP, oldP, newP), func(t *testing.T) {
			root := t.TempDir()
			store, err := s3.NewLocal(filepath.Join(root, "store"))
			if err != nil {
				t.Fatal(err)
			}
			keys := map[string]bool{}
			cfg := fillstate.Config{MaxParallelism: maxP, Parallelism: oldP, Keys: 3000, ValueSize: 64 + rng.Intn(64), KeyGroupFiles: true}
			id, err := fillstate.Checkpointed(ctx, cfg, filepath.Join(root, "db"), store, func(k []byte) { keys[string(k)] = true })
			if err != nil {
				t.Fatal(err)
			}
			sp, err := savepoint.Open(ctx, store, checkpoint.MetadataKey(id))
			if err != nil {
				t.Fatal(err)
			}
			dst, _ := s3.NewLocal(filepath.Join(root, "rescaled"))
			res, err := rescale.Run(ctx, rescale.Request{Src: sp, SrcURI: "file:" + filepath.Join(root, "store"), Dst: dst, Options: rescale.Options{Parallelism: newP}})
			if err != nil {
				t.Fatal(err)
			}
			plan := res.Native
			if plan == nil || len(plan.Subtasks) != newP {
				t.Fatalf("no plan for %d subtasks: %+v", newP, plan)
			}
			seen := map[string]int{}
			for i := 0; i < newP; i++ {
				r := keygroups.RangeForSubtask(maxP, newP, i)
				b, st, err := checkpoint.RestorePlanned(ctx, store, plan, i, filepath.Join(root, fmt.Sprint("r", i)), false, checkpoint.RestoreOptions{KeyGroupFiles: true})
				if err != nil {
					t.Fatal(err)
				}
				if st.Imported > 0 && st.Opened == 0 && st.BytesDownloaded > st.PlannedBytes {
					t.Errorf("subtask %d fetched %d bytes, plan lists %d", i, st.BytesDownloaded, st.PlannedBytes)
				}
				err = b.Scan(0, nil, nil, func(k, v []byte) bool {
					kg, err := b.Layout().KeyGroupOf(k)
					if err != nil || !r.Contains(kg) {
						t.Errorf("subtask %d (%v) holds key of group %d (%v)", i, r, kg, err)
						return false
					}
					seen[string(k)]++
					return true
				})
				b.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			for k := range keys {
				if seen[k] != 1 {
					t.Fatalf("key %q restored %d times", k, seen[k])
				}
			}
			if len(seen) != len(keys) {
				t.Fatalf("%d keys restored, %d written", len(seen), len(keys))
			}
		})
	}
}
