package rowcodec

// Aggregate state columns.
//
// A group aggregate keeps one accumulator struct per group (count, sum,
// min, max, ...). To persist a bundle's dirty groups, each accumulator field
// becomes an Arrow column filled straight from an iterator over the groups;
// to restore, each decoded column is read straight back into the
// accumulators. Neither direction builds per-group scalar vectors or
// transposes rows: a column is one allocation of exactly n values.
//
//	rec, err := rowcodec.BuildRecord(mem, schema, len(groups),
//		rowcodec.Int64Col(func(yield func(int64) bool) {
//			for _, g := range groups { if !yield(g.count) { return } }
//		}),
//		rowcodec.Float64Col(...))
//	...
//	err = rowcodec.ScatterInt64(rec.Column(0), func(i int, v int64, valid bool) { groups[i].count = v })

import (
	"fmt"
	"iter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ErrCount is returned when an iterator yields a different number of values
// than the column length it was built for.
var ErrCount = fmt.Errorf("%w: iterator length differs from the row count", ErrSchemaMismatch)

// buildFixed fills a fresh n-value buffer from seq.
func buildFixed[T int64 | float64](mem memory.Allocator, dt arrow.DataType, n int, seq iter.Seq[T]) (arrow.Array, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: negative length %d", ErrCount, n)
	}
	buf := memory.NewResizableBuffer(mem)
	buf.Resize(n * 8)
	vals := arrow.GetData[T](buf.Bytes())
	i := 0
	over := false
	for v := range seq {
		if i == n {
			over = true
			break
		}
		vals[i] = v
		i++
	}
	if over || i != n {
		buf.Release()
		return nil, fmt.Errorf("%w: want %d values, got %s", ErrCount, n, countDesc(i, over))
	}
	data := array.NewData(dt, n, []*memory.Buffer{nil, buf}, nil, 0, 0)
	buf.Release()
	defer data.Release()
	return array.MakeFromData(data), nil
}

// buildFixedNullable is buildFixed with a validity flag per value.
func buildFixedNullable[T int64 | float64](mem memory.Allocator, dt arrow.DataType, n int, seq iter.Seq2[T, bool]) (arrow.Array, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: negative length %d", ErrCount, n)
	}
	buf := memory.NewResizableBuffer(mem)
	buf.Resize(n * 8)
	vals := arrow.GetData[T](buf.Bytes())
	valid := memory.NewResizableBuffer(mem)
	valid.Resize(int(bitutil.BytesForBits(int64(n))))
	bm := valid.Bytes()
	clear(bm)
	i, nulls := 0, 0
	over := false
	for v, ok := range seq {
		if i == n {
			over = true
			break
		}
		if ok {
			vals[i] = v
			bitutil.SetBit(bm, i)
		} else {
			vals[i] = 0
			nulls++
		}
		i++
	}
	if over || i != n {
		buf.Release()
		valid.Release()
		return nil, fmt.Errorf("%w: want %d values, got %s", ErrCount, n, countDesc(i, over))
	}
	bufs := []*memory.Buffer{valid, buf}
	if nulls == 0 {
		bufs[0] = nil
	}
	data := array.NewData(dt, n, bufs, nil, nulls, 0)
	buf.Release()
	valid.Release()
	defer data.Release()
	return array.MakeFromData(data), nil
}

func countDesc(i int, over bool) string {
	if over {
		return "more"
	}
	return fmt.Sprint(i)
}

// BuildInt64 builds an int64 column of exactly n values from seq.
func BuildInt64(mem memory.Allocator, n int, seq iter.Seq[int64]) (*array.Int64, error) {
	a, err := buildFixed(mem, arrow.PrimitiveTypes.Int64, n, seq)
	if err != nil {
		return nil, err
	}
	return a.(*array.Int64), nil
}

// BuildFloat64 builds a float64 column of exactly n values from seq.
func BuildFloat64(mem memory.Allocator, n int, seq iter.Seq[float64]) (*array.Float64, error) {
	a, err := buildFixed(mem, arrow.PrimitiveTypes.Float64, n, seq)
	if err != nil {
		return nil, err
	}
	return a.(*array.Float64), nil
}

// BuildNullableInt64 builds an int64 column of n values; a false second
// value makes the entry null.
func BuildNullableInt64(mem memory.Allocator, n int, seq iter.Seq2[int64, bool]) (*array.Int64, error) {
	a, err := buildFixedNullable(mem, arrow.PrimitiveTypes.Int64, n, seq)
	if err != nil {
		return nil, err
	}
	return a.(*array.Int64), nil
}

// BuildNullableFloat64 builds a float64 column of n values; a false second
// value makes the entry null.
func BuildNullableFloat64(mem memory.Allocator, n int, seq iter.Seq2[float64, bool]) (*array.Float64, error) {
	a, err := buildFixedNullable(mem, arrow.PrimitiveTypes.Float64, n, seq)
	if err != nil {
		return nil, err
	}
	return a.(*array.Float64), nil
}

// AppendInt64s appends every value of seq to b, reserving n up front (n is a
// hint; more values still append).
func AppendInt64s(b *array.Int64Builder, n int, seq iter.Seq[int64]) {
	b.Reserve(n)
	for v := range seq {
		b.Append(v)
	}
}

// AppendFloat64s appends every value of seq to b, reserving n up front.
func AppendFloat64s(b *array.Float64Builder, n int, seq iter.Seq[float64]) {
	b.Reserve(n)
	for v := range seq {
		b.Append(v)
	}
}

// Column is one accumulator field for BuildRecord.
type Column struct {
	id    arrow.Type
	build func(mem memory.Allocator, dt arrow.DataType, n int) (arrow.Array, error)
}

// Int64Col is a non-null int64 column.
func Int64Col(seq iter.Seq[int64]) Column {
	return Column{arrow.INT64, func(mem memory.Allocator, dt arrow.DataType, n int) (arrow.Array, error) {
		return buildFixed(mem, dt, n, seq)
	}}
}

// NullableInt64Col is an int64 column with per-value validity.
func NullableInt64Col(seq iter.Seq2[int64, bool]) Column {
	return Column{arrow.INT64, func(mem memory.Allocator, dt arrow.DataType, n int) (arrow.Array, error) {
		return buildFixedNullable(mem, dt, n, seq)
	}}
}

// Float64Col is a non-null float64 column.
func Float64Col(seq iter.Seq[float64]) Column {
	return Column{arrow.FLOAT64, func(mem memory.Allocator, dt arrow.DataType, n int) (arrow.Array, error) {
		return buildFixed(mem, dt, n, seq)
	}}
}

// NullableFloat64Col is a float64 column with per-value validity.
func NullableFloat64Col(seq iter.Seq2[float64, bool]) Column {
	return Column{arrow.FLOAT64, func(mem memory.Allocator, dt arrow.DataType, n int) (arrow.Array, error) {
		return buildFixedNullable(mem, dt, n, seq)
	}}
}

// ArrayCol wraps an already built column (e.g. decimal or string state made
// with an ordinary builder). BuildRecord takes its own reference.
func ArrayCol(a arrow.Array) Column {
	return Column{a.DataType().ID(), func(mem memory.Allocator, dt arrow.DataType, n int) (arrow.Array, error) {
		if !arrow.TypeEqual(a.DataType(), dt) || a.Len() != n {
			return nil, fmt.Errorf("%w: column %s of %d rows for %s of %d", ErrSchemaMismatch, a.DataType(), a.Len(), dt, n)
		}
		a.Retain()
		return a, nil
	}}
}

// BuildRecord builds an n-row record of schema, column j from cols[j]. The
// int64/float64 constructors only fit INT64/FLOAT64 fields.
func BuildRecord(mem memory.Allocator, schema *arrow.Schema, n int, cols ...Column) (arrow.RecordBatch, error) {
	if len(cols) != schema.NumFields() {
		return nil, fmt.Errorf("%w: %d columns for %d fields", ErrSchemaMismatch, len(cols), schema.NumFields())
	}
	arrs := make([]arrow.Array, 0, len(cols))
	release := func() {
		for _, a := range arrs {
			a.Release()
		}
	}
	for j, c := range cols {
		f := schema.Field(j)
		if c.build == nil || c.id != f.Type.ID() {
			release()
			return nil, fmt.Errorf("%w: column %d does not fit field %s (%s)", ErrSchemaMismatch, j, f.Name, f.Type)
		}
		a, err := c.build(mem, f.Type, n)
		if err != nil {
			release()
			return nil, fmt.Errorf("field %s: %w", f.Name, err)
		}
		arrs = append(arrs, a)
	}
	rec := array.NewRecordBatch(schema, arrs, int64(n))
	release()
	return rec, nil
}

// Int64Values returns the values of an int64 column without copying (null
// entries hold unspecified values; check col.IsNull).
func Int64Values(col arrow.Array) ([]int64, error) {
	a, ok := col.(*array.Int64)
	if !ok {
		return nil, fmt.Errorf("%w: column is %s, not int64", ErrSchemaMismatch, col.DataType())
	}
	return a.Int64Values(), nil
}

// Float64Values returns the values of a float64 column without copying.
func Float64Values(col arrow.Array) ([]float64, error) {
	a, ok := col.(*array.Float64)
	if !ok {
		return nil, fmt.Errorf("%w: column is %s, not float64", ErrSchemaMismatch, col.DataType())
	}
	return a.Float64Values(), nil
}

// ScatterInt64 calls fn for every entry of an int64 column, in order, to
// restore accumulators from a decoded column.
func ScatterInt64(col arrow.Array, fn func(i int, v int64, valid bool)) error {
	vals, err := Int64Values(col)
	if err != nil {
		return err
	}
	scatter(col, vals, fn)
	return nil
}

// ScatterFloat64 calls fn for every entry of a float64 column, in order.
func ScatterFloat64(col arrow.Array, fn func(i int, v float64, valid bool)) error {
	vals, err := Float64Values(col)
	if err != nil {
		return err
	}
	scatter(col, vals, fn)
	return nil
}

func scatter[T int64 | float64](col arrow.Array, vals []T, fn func(int, T, bool)) {
	if col.NullN() == 0 {
		for i, v := range vals {
			fn(i, v, true)
		}
		return
	}
	for i, v := range vals {
		if col.IsNull(i) {
			fn(i, 0, false)
		} else {
			fn(i, v, true)
		}
	}
}
