package canonical

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// TestExportListElementTTL: a TTL list appended to in three bundles a
// second apart exports as Flink's TTL list, one TtlValue per live element
// with the element's own last-access time (not the list's newest).
func TestExportListElementTTL(t *testing.T) {
	ctx := context.Background()
	s := &engine.Schema{
		Key:    engine.RowType(keyFields...),
		States: []engine.StateSchema{{Name: "lst", Kind: engine.KindList, Namespace: engine.VoidType, Value: engine.LongType, TTL: time.Hour}},
	}
	for _, kind := range []string{"heap", "rocksdb"} {
		clock := engine.NewManualClock(testNow)
		l := engine.Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}
		be := openBackend(t, kind, l, s.Descs(), clock)
		eop := engine.NewOperator(be, clock)
		st := eop.States()[0]
		rb, err := keygroups.NewRowBuilder(keyFields)
		if err != nil {
			t.Fatal(err)
		}
		b := eop.NewBundle()
		want := map[int64][]string{}
		for round := int64(0); round < 3; round++ {
			if err := b.Begin(nil); err != nil {
				t.Fatal(err)
			}
			for i := int64(0); i < 4; i++ {
				row, err := rb.Build([]any{i, fmt.Sprint("k", i)})
				if err != nil {
					t.Fatal(err)
				}
				kg := keygroups.KeyGroupFor(keygroups.HashRow(row), l.MaxParallelism)
				v := 10*i + round
				if err := b.ListAdd(st, st.Key(nil, kg, row, nil), binary.BigEndian.AppendUint64(nil, uint64(v))); err != nil {
					t.Fatal(err)
				}
				if round > 0 { // the first round expires before the export
					want[i] = append(want[i], fmt.Sprintf("%d@%d", v, clock.Now()))
				}
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			clock.Advance(30 * time.Minute)
		}
		b.Close()
		clock.Set(testNow + time.Hour.Milliseconds() + 1) // round 0 expired
		op := Operator{UID: "list-ttl", Parallelism: 1, MaxParallelism: 128, Subtasks: []Subtask{{Index: 0, Operator: eop, Schema: s}}}
		store, err := s3.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "sp", FlinkVersion: "1.20", TempDir: t.TempDir()}); err != nil {
			t.Fatalf("%s: export: %v", kind, err)
		}
		sp, err := savepoint.Open(ctx, store, "sp/_metadata")
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64][]string{}
		err = sp.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
			k, ok := e.Key.(*serde.Row)
			list, ok2 := e.Value.(serde.List)
			if !ok || !ok2 {
				return fmt.Errorf("entry key %T value %T", e.Key, e.Value)
			}
			id := k.Fields[0].(int64)
			for _, el := range list {
				tv, ok := el.(*serde.TTLValue)
				if !ok {
					return fmt.Errorf("key %d: element %T, want a TtlValue", id, el)
				}
				got[id] = append(got[id], fmt.Sprintf("%v@%d", tv.Value, tv.LastAccess))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d lists, want %d: %v", kind, len(got), len(want), got)
		}
		for id, w := range want {
			if !slices.Equal(got[id], w) {
				t.Errorf("%s: key %d: %v, want %v", kind, id, got[id], w)
			}
		}
	}
}
