package canonical

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// TestRawMapValues: user values carried raw keep Flink's bytes and NULL
// flag in both directions, with and without TTL; malformed flags fail.
func TestRawMapValues(t *testing.T) {
	raw := engine.Type{Kind: engine.TypeRaw, Snapshot: flinkwrite.RawSnapshot{}}
	for _, ttl := range []bool{false, true} {
		s := engine.StateSchema{Name: "m", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: engine.StringType, Value: raw}
		if ttl {
			s.TTL = joinTTL
		}
		c, err := newStateCodec(engine.LongType, s)
		if err != nil {
			t.Fatal(err)
		}
		ts := []byte{0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0}
		vals := [][]byte{{1}, {0, 1}, {0, 0xde, 0xad, 0xbe, 0xef}, {0}}
		for _, v := range vals {
			fv := v
			if ttl && v[0] == 0 {
				fv = append(append([]byte{0}, ts...), v[1:]...)
			}
			ev, err := c.engineValue(nil, fv)
			if err != nil {
				t.Fatalf("ttl %v % x: %v", ttl, fv, err)
			}
			back, err := c.flinkValue(nil, int64FromBE(ev[:8]), ev[8:])
			if err != nil || !bytes.Equal(back, fv) {
				t.Fatalf("ttl %v: % x → % x → % x (%v)", ttl, fv, ev, back, err)
			}
		}
		for _, bad := range [][]byte{{}, {2, 0}, {1, 0}} {
			if _, err := c.engineValue(nil, bad); !errors.Is(err, ErrConvert) {
				t.Errorf("ttl %v: % x: %v", ttl, bad, err)
			}
		}
	}
	// A typed user value still refuses NULL, with an error saying so.
	c, _ := newStateCodec(engine.LongType, engine.StateSchema{Name: "m", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: engine.StringType, Value: engine.LongType})
	if _, err := c.engineValue(nil, []byte{1}); !errors.Is(err, ErrConvert) {
		t.Errorf("typed NULL map value: %v", err)
	}
}

func int64FromBE(b []byte) int64 {
	var v int64
	for _, x := range b {
		v = v<<8 | int64(x)
	}
	return v
}

// TestRawWholeListAppend: a list of variable-length raw elements (the udagg
// fixture's External-serialized strings) is kept as one engine element
// holding Flink's ','-joined list; an element the engine appends after it
// (here: a copy of that element) exports as a valid longer Flink list.
func TestRawWholeListAppend(t *testing.T) {
	ctx := context.Background()
	sp := fixtureSavepoints(t)["sql-rocksdb-canonical-udagg-liststate-mapstate"]
	if sp == nil {
		t.Fatal("fixture missing")
	}
	lens := func(sp *savepoint.Savepoint) map[string]int {
		out := map[string]int{}
		err := sp.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
			if e.State.Name == "agg1$list" {
				l, ok := e.Value.(serde.List)
				if !ok {
					t.Fatalf("list value %#v", e.Value)
				}
				out[fmt.Sprint(e.Key)] = len(l)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := lens(sp)
	if len(before) == 0 {
		t.Fatal("no agg1$list entries")
	}
	res, err := Import(ctx, sp, testFactory(t, "heap", nil, nil), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	doubled := 0
	for _, st := range res.Operators[0].Subtasks {
		sid := -1
		for i, ss := range st.Schema.States {
			if ss.Name == "agg1$list" {
				sid = i
				if ss.Value.Kind != engine.TypeRaw {
					t.Fatalf("element type %s", ss.Value.Kind)
				}
			}
		}
		if sid < 0 {
			continue
		}
		var keys, vals [][]byte
		if err := st.Backend.Scan(sid, nil, nil, func(k, v []byte) bool {
			keys, vals = append(keys, append([]byte(nil), k...)), append(vals, append([]byte(nil), v...))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		b := st.Backend.NewBatch()
		for i, v := range vals {
			// v = 8-byte timestamp + one uvarint-prefixed element: append
			// the same element again.
			b.Put(sid, keys[i], append(v, v[8:]...))
			doubled++
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	if doubled != len(before) {
		t.Fatalf("doubled %d lists of %d", doubled, len(before))
	}
	store, _ := s3.NewLocal(t.TempDir())
	after := lens(reexport(t, res, nil, store, "sp"))
	for k, n := range before {
		if after[k] != 2*n {
			t.Errorf("key %s: %d elements after appending a copy of %d", k, after[k], n)
		}
	}
}
