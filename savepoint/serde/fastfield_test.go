package serde

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestFastFieldMatchesValueAt: the row fast path decodes every scalar kind
// exactly like valueAt (values, types and errors), with and without an
// arena.
func TestFastFieldMatchesValueAt(t *testing.T) {
	roots := []LogicalType{{Root: "BOOLEAN"}, {Root: "TINYINT"}, {Root: "SMALLINT"}, {Root: "INTEGER"}, {Root: "DATE"},
		{Root: "FLOAT"}, {Root: "BIGINT"}, {Root: "INTERVAL_DAY_TIME"}, {Root: "DOUBLE"}, {Root: "CHAR"}, {Root: "VARCHAR"},
		{Root: "TIMESTAMP_WITHOUT_TIME_ZONE", Precision: 0}, {Root: "TIMESTAMP_WITHOUT_TIME_ZONE", Precision: 3},
		{Root: "TIMESTAMP_WITH_LOCAL_TIME_ZONE", Precision: 2}}
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 64)
	for i := range roots {
		lt := &roots[i]
		k := fieldKinds([]*LogicalType{lt})[0]
		if k == fkOther {
			t.Fatalf("%s has no fast kind", lt.Root)
		}
		for n := range 2000 {
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			if n%3 == 0 { // plausible var-part pointers too
				binary.LittleEndian.PutUint64(b[8:], uint64(rng.IntN(70))<<32|uint64(rng.IntN(70)))
			}
			slot := binary.LittleEndian.Uint64(b[8:])
			want, werr := valueAt(lt, nil, b, 8, 100, 0, nil)
			for _, a := range []*Arena{nil, NewArena()} {
				got, gerr := fastField(k, b, 8, slot, 100, a)
				same := reflect.DeepEqual(want, got) || fmt.Sprintf("%T %#v", want, want) == fmt.Sprintf("%T %#v", got, got) // NaN
				if fmt.Sprint(werr) != fmt.Sprint(gerr) || !same {
					t.Fatalf("%s slot %x: fast %#v/%v, valueAt %#v/%v", lt.Root, slot, got, gerr, want, werr)
				}
			}
		}
	}
}
