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
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify"
)

type joinCluster struct {
	bes []engine.Backend
	sts []recordstore.JoinState
}

const joinMaxP = 64

func openJoin(t *testing.T, l recordstore.Layout, clock *engine.Clock) *joinCluster {
	c := &joinCluster{}
	for i, r := range keygroups.Ranges(joinMaxP, 2) {
		be, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), fmt.Sprint(i)), engine.Layout{MaxParallelism: joinMaxP, Range: r},
			[]engine.StateDesc{recordstore.StateDesc(l, time.Hour)}, engine.RocksOptions{Clock: clock, WriteBufferSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Close() })
		st, err := recordstore.Open(l, be, recordstore.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		c.bes, c.sts = append(c.bes, be), append(c.sts, st)
	}
	return c
}

// add applies one bundle of rows (side, key, row, delta) to the owning
// subtasks.
func (c *joinCluster) add(t *testing.T, rows [][4]any) {
	per := make([][]recordstore.Probe, len(c.sts))
	owner := func(key []byte) int {
		kg := recordstore.KeyGroupOf(key, joinMaxP)
		for i, be := range c.bes {
			if be.Layout().Range.Contains(kg) {
				return i
			}
		}
		t.Fatalf("no owner of key group %d", kg)
		return 0
	}
	for _, r := range rows {
		i := owner(r[1].([]byte))
		per[i] = append(per[i], recordstore.Probe{Side: r[0].(recordstore.Side), Key: r[1].([]byte), Row: r[2].([]byte)})
	}
	for i, st := range c.sts {
		if err := st.Begin(per[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rows {
		if _, err := c.sts[owner(r[1].([]byte))].Add(r[0].(recordstore.Side), r[1].([]byte), r[2].([]byte), r[3].(int64)); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range c.sts {
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func joinRows(n int) [][4]any {
	var rows [][4]any
	for i := 0; i < n; i++ {
		key, _ := keygroups.BuildRow([]keygroups.FieldType{keygroups.TypeBigInt}, []any{int64(i % 97)})
		side := recordstore.Left
		if i%3 == 0 {
			side = recordstore.Right
		}
		rows = append(rows, [4]any{side, key, []byte(fmt.Sprintf("row-%d", i%211)), int64(1 + i%2)})
	}
	return rows
}

// TestJoinLayoutsCompareEqual: the same join input kept in the bucket and
// the record layout gives equal logical digests of their native
// checkpoints (what a bucket → record migration must preserve, counts
// included), and one changed count is reported with its side and key group.
func TestJoinLayoutsCompareEqual(t *testing.T) {
	ctx := context.Background()
	clock := engine.NewManualClock(genNow)
	rows := joinRows(3000)
	var stores []s3.Storage
	var clusters []*joinCluster
	for _, l := range []recordstore.Layout{recordstore.LayoutBucket, recordstore.LayoutRecord} {
		c := openJoin(t, l, clock)
		for i := 0; i < len(rows); i += 500 {
			c.add(t, rows[i:i+500])
			clock.Advance(time.Second)
		}
		st, _ := s3.NewLocal(t.TempDir())
		if _, err := checkpoint.New(st, checkpoint.Options{}).TakeSync(ctx, c.bes, 1); err != nil {
			t.Fatal(err)
		}
		stores, clusters = append(stores, st), append(clusters, c)
		clock.Set(genNow)
	}
	o := verify.Options{TempDir: t.TempDir()}
	r, err := CompareNative(ctx, stores[0], 1, stores[1], 1, o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Fatalf("layouts differ:\n%s", strings.Join(r.Failures(), "\n"))
	}
	left, right := r.Digest.Total("", "join-left"), r.Digest.Total("", "join-right")
	if left.Entries == 0 || right.Entries == 0 || left.Counts <= left.Entries || left.TTLEntries != left.Entries {
		t.Fatalf("join digest left %+v right %+v", left, right)
	}
	// One more count of one row in the record layout.
	c := clusters[1]
	clock.Set(genNow + 10_000)
	c.add(t, rows[5:6])
	if _, err := checkpoint.New(stores[1], checkpoint.Options{}).TakeSync(ctx, c.bes, 2); err != nil {
		t.Fatal(err)
	}
	r, err = CompareNative(ctx, stores[0], 1, stores[1], 2, o)
	if err != nil {
		t.Fatal(err)
	}
	d := r.Targets[0].Differences
	kg := recordstore.KeyGroupOf(rows[5][1].([]byte), joinMaxP)
	if r.OK || len(d) != 1 || d[0].State != "join-left" || d[0].KeyGroup != kg || d[0].Field != "counts" {
		t.Fatalf("changed count: %v (want join-left key group %d counts)", d, kg)
	}
}
