package keygroups

import (
	"fmt"
	"strings"
	"testing"
)

var sinkInt int

func BenchmarkAssignLong(b *testing.B) {
	b.ReportAllocs()
	s := 0
	for i := 0; b.Loop(); i++ {
		s += KeyGroupFor(HashLong(int64(i)), 128)
	}
	sinkInt = s
}

func BenchmarkAssignTuple1Long(b *testing.B) {
	b.ReportAllocs()
	s := 0
	for i := 0; b.Loop(); i++ {
		s += Assign(Tuple{Long(int64(i))}, 128)
	}
	sinkInt = s
}

func BenchmarkAssignString(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%08d", i)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(keys[0])))
	s := 0
	for i := 0; b.Loop(); i++ {
		s += KeyGroupFor(HashString(keys[i&1023]), 128)
	}
	sinkInt = s
}

// BenchmarkHashRow measures BinaryRowData.hashCode over prebuilt rows.
func BenchmarkHashRow(b *testing.B) {
	for _, tc := range []struct {
		name   string
		types  []FieldType
		values []any
	}{
		{"bigint", []FieldType{TypeBigInt}, []any{int64(42)}},
		{"int,string7", []FieldType{TypeInt, TypeString}, []any{int32(1), "abcdefg"}},
		{"string32", []FieldType{TypeString}, []any{strings.Repeat("x", 32)}},
		{"bigint,string,ts,decimal", []FieldType{TypeBigInt, TypeString, TypeTimestamp(3), TypeDecimal(10, 2)},
			[]any{int64(7), "customer-0000001", Timestamp{Millis: 1602288035000}, int64(12345)}},
		{"string256", []FieldType{TypeString}, []any{strings.Repeat("y", 256)}},
	} {
		row, err := BuildRow(tc.types, tc.values)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s/%dB", tc.name, len(row)), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(row)))
			s := 0
			for b.Loop() {
				s += KeyGroupFor(HashRow(row), 128)
			}
			sinkInt = s
		})
	}
}

// BenchmarkBuildAndAssignRow is the full cost of keying one SQL record:
// build the key row into a reused buffer, hash it, take the key group.
func BenchmarkBuildAndAssignRow(b *testing.B) {
	for _, tc := range []struct {
		name   string
		types  []FieldType
		values func(i int) []any
	}{
		{"bigint", []FieldType{TypeBigInt}, func(i int) []any { return []any{int64(i)} }},
		{"int,string16", []FieldType{TypeInt, TypeString}, func(i int) []any { return []any{int32(i), "customer-0000001"} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rb, err := NewRowBuilder(tc.types)
			if err != nil {
				b.Fatal(err)
			}
			vals := tc.values(0)
			var buf []byte
			b.ReportAllocs()
			s := 0
			for i := 0; b.Loop(); i++ {
				if len(vals) > 0 {
					switch vals[0].(type) {
					case int64:
						vals[0] = int64(i)
					case int32:
						vals[0] = int32(i)
					}
				}
				buf, err = rb.Append(buf[:0], vals)
				if err != nil {
					b.Fatal(err)
				}
				s += KeyGroupFor(HashRow(buf), 128)
			}
			sinkInt = s
		})
	}
}

func BenchmarkPlan(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Plan(32768, 1000, 999); err != nil {
			b.Fatal(err)
		}
	}
}
