package digest

import (
	"bytes"
	"math/big"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/serde"
)

func TestAppendValueDistinguishes(t *testing.T) {
	vals := []any{
		nil, true, false, int8(1), int16(1), serde.Char(1), int32(1), int64(1), float32(1), float64(1),
		"1", []byte("1"), "", []byte{},
		&serde.Row{Kind: keygroups.Insert, Fields: []serde.Value{int32(1), "a"}},
		&serde.Row{Kind: keygroups.Insert, Fields: []serde.Value{int32(1), "a", nil}},
		&serde.Row{Kind: keygroups.Insert, Fields: []serde.Value{"a", int32(1)}},
		serde.Tuple{int32(1), "a"}, serde.List{int32(1), "a"}, serde.List{serde.List{int32(1)}, "a"},
		&serde.TTLValue{LastAccess: 5, Value: int64(1)}, &serde.TTLValue{LastAccess: 6, Value: int64(1)},
		serde.Map{{Key: "a", Value: int32(1)}}, serde.Map{{Key: "a", Value: int32(2)}},
		serde.TimeWindow{Start: 0, End: 1}, serde.TimeWindow{Start: 0, End: 2}, serde.TimeWindow{Start: 1, End: 1},
		serde.Void{}, serde.GlobalWindow{}, serde.CountWindow{ID: 1},
		serde.Timestamp{Millis: 5}, serde.Timestamp{Millis: 5, NanoOfMill: 1},
		serde.Decimal{Unscaled: big.NewInt(12), Scale: 1}, serde.Decimal{Unscaled: big.NewInt(12), Scale: 2}, serde.Decimal{Unscaled: big.NewInt(-12), Scale: 1},
		&serde.Timer{Timestamp: 1, Key: int64(1), Namespace: serde.Void{}}, &serde.Timer{Timestamp: 2, Key: int64(1), Namespace: serde.Void{}},
	}
	seen := map[string]int{}
	for i, v := range vals {
		k := string(AppendValue(nil, v))
		if j, ok := seen[k]; ok {
			t.Errorf("values %d (%#v) and %d (%#v) encode alike", i, v, j, vals[j])
		}
		seen[k] = i
	}
	// Map order does not matter.
	a := serde.Map{{Key: "a", Value: int32(1)}, {Key: "b", Value: int32(2)}}
	b := serde.Map{{Key: "b", Value: int32(2)}, {Key: "a", Value: int32(1)}}
	if !bytes.Equal(AppendValue(nil, a), AppendValue(nil, b)) {
		t.Error("map order changes the encoding")
	}
}
