package canonical

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// rowKinds counts the row kinds of the value rows (values, list elements)
// of every state of sp, by state.
func rowKinds(t *testing.T, sp *savepoint.Savepoint) map[string]map[keygroups.RowKind]int {
	t.Helper()
	out := map[string]map[keygroups.RowKind]int{}
	add := func(st string, v serde.Value) {
		if tv, ok := v.(*serde.TTLValue); ok {
			v = tv.Value
		}
		if r, ok := v.(*serde.Row); ok && r != nil {
			if out[st] == nil {
				out[st] = map[keygroups.RowKind]int{}
			}
			out[st][r.Kind]++
		}
	}
	err := sp.WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
		v := e.Value
		if tv, ok := v.(*serde.TTLValue); ok {
			v = tv.Value
		}
		switch v := v.(type) {
		case serde.List:
			for _, el := range v {
				add(e.State.Name, el)
			}
		default:
			add(e.State.Name, v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// markKinds rewrites the value rows of state 0 (accState) and the list
// rows of state 4 (window-records) of every subtask of op with the row
// kinds +I, -U, +U, -D in turn.
func markKinds(t *testing.T, op Operator) {
	t.Helper()
	n := 0
	next := func() keygroups.RowKind { n++; return keygroups.RowKind(n % 4) }
	for _, st := range op.Subtasks {
		be := st.Operator.Backend()
		type kv struct{ k, v []byte }
		var puts []kv
		_ = be.Scan(0, nil, nil, func(k, v []byte) bool {
			v = append([]byte{}, v...)
			if err := rowcodec.SetKind(v, next()); err != nil {
				t.Fatal(err)
			}
			puts = append(puts, kv{append([]byte{}, k...), v})
			return true
		})
		b := be.NewBatch()
		for _, p := range puts {
			b.Put(0, p.k, p.v)
		}
		puts = puts[:0]
		_ = be.Scan(4, nil, nil, func(k, v []byte) bool {
			out := append([]byte{}, v[:8]...)
			err := engine.ListElems(v[8:], false, func(_ int64, el []byte) bool {
				row := append(make([]byte, 8), el...)
				if err := rowcodec.SetKind(row, next()); err != nil {
					t.Fatal(err)
				}
				out = binary.AppendUvarint(out, uint64(len(el)))
				out = append(out, row[8:]...)
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			puts = append(puts, kv{append([]byte{}, k...), out})
			return true
		})
		for _, p := range puts {
			b.Put(4, p.k, p.v)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}

// TestRowKindsRoundTrip: rows of every kind (+I, -U, +U, -D) in value and
// list states export with their kind in BinaryRowData's byte 0, import
// into the other backend at another parallelism and export again with the
// same entries (digest) and kinds.
func TestRowKindsRoundTrip(t *testing.T) {
	ctx := context.Background()
	clock := engine.NewManualClock(testNow)
	for _, tc := range []struct{ from, to string }{{"heap", "rocksdb"}, {"rocksdb", "heap"}} {
		t.Run(tc.from+"-"+tc.to, func(t *testing.T) {
			op, _ := genOperator(t, tc.from, 128, 2, 400)
			markKinds(t, op)
			store, _ := s3.NewLocal(t.TempDir())
			if _, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "a", TempDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			a, err := savepoint.Open(ctx, store, "a/_metadata")
			if err != nil {
				t.Fatal(err)
			}
			ka := rowKinds(t, a)
			for _, st := range []string{"accState", "window-records"} {
				for k := keygroups.RowKind(0); k < 4; k++ {
					if ka[st][k] == 0 {
						t.Fatalf("%s: no %v rows exported (%v)", st, k, ka[st])
					}
				}
			}
			res, err := Import(ctx, a, testFactory(t, tc.to, clock, nil), ImportOptions{Parallelism: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			b := reexport(t, res, clock, store, "b")
			if diff := mustDigest(t, a).Diff(mustDigest(t, b), 10); diff != nil {
				t.Fatalf("digest differs after import/export:\n%v", diff)
			}
			if kb := rowKinds(t, b); fmt.Sprint(kb) != fmt.Sprint(ka) {
				t.Fatalf("row kinds %v after the round trip, %v before", kb, ka)
			}
			// The digest sees the kind: turn one +U row into +I.
			be := res.Operators[0].Subtasks[0].Backend
			var key, val []byte
			_ = be.Scan(0, nil, nil, func(k, v []byte) bool {
				if rowcodec.Kind(v) == keygroups.UpdateAfter {
					key, val = append([]byte{}, k...), append([]byte{}, v...)
					return false
				}
				return true
			})
			if key == nil {
				t.Fatal("no +U row in subtask 0")
			}
			if err := rowcodec.SetKind(val, keygroups.Insert); err != nil {
				t.Fatal(err)
			}
			batch := be.NewBatch()
			batch.Put(0, key, val)
			if err := batch.Commit(); err != nil {
				t.Fatal(err)
			}
			batch.Close()
			c := reexport(t, res, clock, store, "c")
			if diff := mustDigest(t, a).Diff(mustDigest(t, c), 10); len(diff) != 1 {
				t.Fatalf("one changed row kind gives diff %v", diff)
			}
		})
	}
}
