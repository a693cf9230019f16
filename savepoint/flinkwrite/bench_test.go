package flinkwrite

import (
	"fmt"
	"io"
	"math"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
)

// BenchmarkKeyedWriter measures entry throughput: 4 states, 128 key groups,
// 16-byte keys and 64-byte values, with and without Snappy framing.
func BenchmarkKeyedWriter(b *testing.B) {
	for _, compressed := range []bool{false, true} {
		b.Run(fmt.Sprintf("compressed=%v", compressed), func(b *testing.B) {
			const perGroup, states, groups = 64, 4, 128
			h := testHeader(compressed, states)
			val := make([]byte, 64)
			for i := range val {
				val[i] = byte(i * 7)
			}
			k := make([]byte, 16)
			b.SetBytes(int64(groups * states * perGroup * (len(k) + len(val) + 8)))
			b.ReportAllocs()
			for b.Loop() {
				w, err := NewKeyedWriter(io.Discard, h, keygroups.Range{Start: 0, End: groups - 1}, groups)
				if err != nil {
					b.Fatal(err)
				}
				for kg := range groups {
					k[0] = byte(kg)
					for st := range states {
						for i := range perGroup {
							k[1], k[2] = byte(i), byte(st)
							if err := w.Add(kg, st, k, val); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRowDataSnapshot measures building the header snapshot of a
// 4-field SQL row (four Java object streams plus nested snapshots).
func BenchmarkRowDataSnapshot(b *testing.B) {
	s := RowDataSnapshot{Types: []LogicalType{BigIntType{true}, BigIntType{true}, TimestampType{true, 3, ""}, VarCharType{true, math.MaxInt32}}}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = AppendTopLevel(buf[:0], s); err != nil {
			b.Fatal(err)
		}
	}
}
