package rowcodec

import (
	"errors"
	"iter"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

type acc struct {
	count, sum, min, max int64
	avg                  float64
	hasMin               bool
}

func field[T any](groups []acc, get func(*acc) T) iter.Seq[T] {
	return func(yield func(T) bool) {
		for i := range groups {
			if !yield(get(&groups[i])) {
				return
			}
		}
	}
}

func aggSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "count", Type: arrow.PrimitiveTypes.Int64},
		{Name: "sum", Type: arrow.PrimitiveTypes.Int64},
		{Name: "min", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "max", Type: arrow.PrimitiveTypes.Int64},
		{Name: "avg", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
}

func aggColumns(groups []acc) []Column {
	return []Column{
		Int64Col(field(groups, func(a *acc) int64 { return a.count })),
		Int64Col(field(groups, func(a *acc) int64 { return a.sum })),
		NullableInt64Col(func(yield func(int64, bool) bool) {
			for i := range groups {
				if !yield(groups[i].min, groups[i].hasMin) {
					return
				}
			}
		}),
		Int64Col(field(groups, func(a *acc) int64 { return a.max })),
		Float64Col(field(groups, func(a *acc) float64 { return a.avg })),
	}
}

func TestAggregateColumnsRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	groups := make([]acc, 100)
	for i := range groups {
		groups[i] = acc{count: int64(i), sum: int64(i * i), min: int64(-i), max: math.MaxInt64 - int64(i), avg: float64(i) / 3, hasMin: i%7 != 0}
	}
	schema := aggSchema()
	rec, err := BuildRecord(mem, schema, len(groups), aggColumns(groups)...)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if rec.Column(2).NullN() != 15 {
		t.Fatalf("min column has %d nulls", rec.Column(2).NullN())
	}

	c, _ := NewCodec(schema)
	var a Arena
	if err := c.EncodeBatch(rec, []int64{5}, &a); err != nil {
		t.Fatal(err)
	}
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	if _, err := c.DecodeBatch(a.Values(nil), rb); err != nil {
		t.Fatal(err)
	}
	out := rb.NewRecordBatch()
	defer out.Release()

	restored := make([]acc, len(groups))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ScatterInt64(out.Column(0), func(i int, v int64, _ bool) { restored[i].count = v }))
	must(ScatterInt64(out.Column(1), func(i int, v int64, _ bool) { restored[i].sum = v }))
	must(ScatterInt64(out.Column(2), func(i int, v int64, ok bool) { restored[i].min, restored[i].hasMin = v, ok }))
	must(ScatterInt64(out.Column(3), func(i int, v int64, _ bool) { restored[i].max = v }))
	must(ScatterFloat64(out.Column(4), func(i int, v float64, _ bool) { restored[i].avg = v }))
	for i := range groups {
		want := groups[i]
		if !want.hasMin {
			want.min = 0
		}
		if restored[i] != want {
			t.Fatalf("group %d: %+v, want %+v", i, restored[i], want)
		}
	}
	vals, err := Int64Values(out.Column(1))
	if err != nil || len(vals) != 100 || vals[9] != 81 {
		t.Fatalf("Int64Values: %v %v", vals, err)
	}
	if _, err := Float64Values(out.Column(1)); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("Float64Values on int64: %v", err)
	}
	if err := ScatterInt64(out.Column(4), func(int, int64, bool) {}); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("ScatterInt64 on float64: %v", err)
	}
}

func TestAggregateColumnErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	groups := make([]acc, 10)
	schema := aggSchema()
	// Too few and too many values.
	if _, err := BuildRecord(mem, schema, 11, aggColumns(groups)...); !errors.Is(err, ErrCount) {
		t.Fatalf("short iterator: %v", err)
	}
	if _, err := BuildRecord(mem, schema, 9, aggColumns(groups)...); !errors.Is(err, ErrCount) {
		t.Fatalf("long iterator: %v", err)
	}
	// Wrong column kind for a field, wrong column count.
	cols := aggColumns(groups)
	cols[0], cols[4] = cols[4], cols[0]
	if _, err := BuildRecord(mem, schema, 10, cols...); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("swapped columns: %v", err)
	}
	if _, err := BuildRecord(mem, schema, 10, cols[:2]...); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("missing columns: %v", err)
	}
	if _, err := BuildInt64(mem, -1, field(groups, func(a *acc) int64 { return a.sum })); !errors.Is(err, ErrCount) {
		t.Fatalf("negative n: %v", err)
	}
	// ArrayCol passes a prebuilt column through and checks it.
	sb := array.NewStringBuilder(mem)
	sb.AppendValues([]string{"a", "b"}, nil)
	strs := sb.NewArray()
	sb.Release()
	defer strs.Release()
	s2 := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String}, {Name: "n", Type: arrow.PrimitiveTypes.Int64}}, nil)
	rec, err := BuildRecord(mem, s2, 2, ArrayCol(strs), Int64Col(func(y func(int64) bool) { _ = y(1) && y(2) }))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Column(0).(*array.String).Value(1) != "b" || rec.Column(1).(*array.Int64).Value(1) != 2 {
		t.Fatalf("record %v", rec)
	}
	rec.Release()
	if _, err := BuildRecord(mem, s2, 3, ArrayCol(strs), Int64Col(func(func(int64) bool) {})); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("ArrayCol length: %v", err)
	}
}

func TestAppendHelpers(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ib := array.NewInt64Builder(mem)
	defer ib.Release()
	AppendInt64s(ib, 3, func(y func(int64) bool) { _ = y(1) && y(2) && y(3) })
	ia := ib.NewInt64Array()
	defer ia.Release()
	if ia.Len() != 3 || ia.Value(2) != 3 {
		t.Fatalf("AppendInt64s: %v", ia)
	}
	fb := array.NewFloat64Builder(mem)
	defer fb.Release()
	AppendFloat64s(fb, 2, func(y func(float64) bool) { _ = y(0.5) && y(-1) })
	fa := fb.NewFloat64Array()
	defer fa.Release()
	if fa.Len() != 2 || fa.Value(1) != -1 {
		t.Fatalf("AppendFloat64s: %v", fa)
	}
	f, err := BuildNullableFloat64(mem, 3, func(y func(float64, bool) bool) { _ = y(1, true) && y(9, false) && y(3, true) })
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	if f.NullN() != 1 || !f.IsNull(1) || f.Value(2) != 3 {
		t.Fatalf("BuildNullableFloat64: %v", f)
	}
	b, err := BuildFloat64(mem, 1, func(y func(float64) bool) { y(2.5) })
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	n, err := BuildNullableInt64(mem, 2, func(y func(int64, bool) bool) { _ = y(1, true) && y(2, true) })
	if err != nil {
		t.Fatal(err)
	}
	defer n.Release()
	if b.Value(0) != 2.5 || n.NullN() != 0 || n.Value(1) != 2 {
		t.Fatalf("builders: %v %v", b, n)
	}
}
