package serde_test

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// ttlRowDecoder returns the decoder of TTL<Row(BIGINT, DOUBLE, VARCHAR,
// TIMESTAMP(3), INT, BOOLEAN)> and n serialized values of it.
func ttlRowDecoder(t testing.TB, n int) (serde.Decoder, [][]byte) {
	t.Helper()
	types := []flinkwrite.LogicalType{flinkwrite.BigIntType{}, flinkwrite.DoubleType{Nullable: true}, flinkwrite.VarCharType{Nullable: true, Length: math.MaxInt32},
		flinkwrite.TimestampType{Nullable: true, Precision: 3}, flinkwrite.IntType{Nullable: true}, flinkwrite.BooleanType{Nullable: true}}
	snap, err := flinkwrite.AppendTopLevel(nil, flinkwrite.TtlSnapshot(flinkwrite.RowDataSnapshot{Types: types}))
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := serde.ParseSnapshot(snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeDouble, keygroups.TypeString, keygroups.TypeTimestamp(3), keygroups.TypeInt, keygroups.TypeBoolean})
	if err != nil {
		t.Fatal(err)
	}
	var vals [][]byte
	for i := range n {
		var str any = fmt.Sprintf("value-%d-%s", i, "abcdefghijklmnopqrstuvwxyz"[:i%27])
		if i%9 == 0 {
			str = nil
		}
		row, err := rb.Build([]any{int64(i) * 1_000_003, float64(i) / 7, str, keygroups.Timestamp{Millis: 1_700_000_000_000 + int64(i)}, int64(i * 31), i%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := flinkwrite.AppendRowData(flinkwrite.AppendTtlValue(nil, int64(i), nil), row)
		vals = append(vals, v)
	}
	return serde.NewDecoder(s), vals
}

// TestArenaValuesStayIntact: values decoded through an arena equal the
// plainly decoded ones, also after many later decodes through the same
// arena (slots are never reused).
func TestArenaValuesStayIntact(t *testing.T) {
	dec, vals := ttlRowDecoder(t, 3000)
	arena := serde.NewArena()
	var kept []serde.Value
	for _, b := range vals {
		d := &binfmt.Decbuf{B: b, Scratch: arena}
		kept = append(kept, dec.Decode(d))
		if d.Err() != nil || d.Len() != 0 {
			t.Fatal(d.Err())
		}
	}
	for i, b := range vals {
		want, err := serde.DecodeAll(dec, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(kept[i])
		if string(wj) != string(gj) {
			t.Fatalf("value %d: arena %s, plain %s", i, gj, wj)
		}
		r := kept[i].(*serde.TTLValue).Value.(*serde.Row)
		if r.Fields[0] != any(int64(i)*1_000_003) {
			t.Fatalf("value %d: field 0 = %#v", i, r.Fields[0])
		}
	}
}

// TestReusableArena: after Reset a reusable arena hands out the same memory
// again: decoding through it equals plain decoding in every round (nulls
// included: recycled rows start cleared), and once warm it allocates
// nothing.
func TestReusableArena(t *testing.T) {
	dec, vals := ttlRowDecoder(t, 600)
	arena := serde.NewReusableArena()
	if !arena.Reusable() || serde.NewArena().Reusable() {
		t.Fatal("Reusable")
	}
	want := make([]string, len(vals))
	for i, b := range vals {
		v, err := serde.DecodeAll(dec, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(v)
		want[i] = string(j)
	}
	// Rounds of different batch sizes and orders, so recycled slots held
	// other values (non-null where the new one is null) before.
	for round, batch := range []int{600, 37, 250, 1, 600} {
		for start := 0; start < len(vals); start += batch {
			arena.Reset()
			var got []serde.Value
			end := min(start+batch, len(vals))
			for i := start; i < end; i++ {
				j := i
				if round%2 == 1 {
					j = start + end - 1 - i
				}
				d := &binfmt.Decbuf{B: vals[j], Scratch: arena}
				got = append(got, dec.Decode(d))
				if d.Err() != nil {
					t.Fatal(d.Err())
				}
			}
			for k, v := range got {
				j := start + k
				if round%2 == 1 {
					j = end - 1 - k
				}
				g, _ := json.Marshal(v)
				if string(g) != want[j] {
					t.Fatalf("round %d value %d: %s, want %s", round, j, g, want[j])
				}
			}
		}
	}
	d := &binfmt.Decbuf{Scratch: arena}
	allocs := testing.AllocsPerRun(20, func() {
		arena.Reset()
		for _, b := range vals {
			d.Reset(b, 0)
			dec.Decode(d)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per round through a warm reusable arena", allocs)
	}
}

// BenchmarkDecodeTTLRow decodes TTL rows plainly and through an arena.
func BenchmarkDecodeTTLRow(b *testing.B) {
	dec, vals := ttlRowDecoder(b, 1024)
	for _, useArena := range []string{"none", "fresh", "reused"} {
		b.Run("arena="+useArena, func(b *testing.B) {
			var arena *serde.Arena
			switch useArena {
			case "fresh":
				arena = serde.NewArena()
			case "reused":
				arena = serde.NewReusableArena()
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%len(vals) == 0 {
					arena.Reset()
				}
				d := binfmt.Decbuf{B: vals[i%len(vals)]}
				if arena != nil {
					d.Scratch = arena
				}
				dec.Decode(&d)
				if d.Err() != nil {
					b.Fatal(d.Err())
				}
				i++
			}
		})
	}
	b.Run("validate", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			d := binfmt.Decbuf{B: vals[i%len(vals)]}
			serde.Validate(dec, &d)
			if d.Err() != nil {
				b.Fatal(d.Err())
			}
			i++
		}
	})
}
