package rowcodec

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

const benchRows = 4096

// benchCase is one row shape: q17-like aggregate state, or a key with a
// 256-byte string payload.
type benchCase struct {
	name   string
	schema *arrow.Schema
	rows   [][]any
}

func benchCases() []benchCase {
	agg := arrow.NewSchema([]arrow.Field{
		{Name: "count", Type: arrow.PrimitiveTypes.Int64},
		{Name: "sum", Type: arrow.PrimitiveTypes.Int64},
		{Name: "min", Type: arrow.PrimitiveTypes.Int64},
		{Name: "max", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	payload := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "payload", Type: arrow.BinaryTypes.String},
	}, nil)
	var aggRows, payRows [][]any
	pad := strings.Repeat("p", 250)
	for i := range benchRows {
		aggRows = append(aggRows, []any{int64(i % 97), int64(i * 1000), int64(-i), int64(i * 7)})
		payRows = append(payRows, []any{int64(i), pad + strings.Repeat(string(rune('a'+i%26)), 6)})
	}
	return []benchCase{{"q17agg", agg, aggRows}, {"payload256", payload, payRows}}
}

func rowValues(rec arrow.RecordBatch, i int) []any {
	out := make([]any, rec.NumCols())
	for j := range out {
		switch a := rec.Column(j).(type) {
		case *array.Int64:
			out[j] = a.Value(i)
		case *array.String:
			out[j] = a.Value(i)
		}
	}
	return out
}

// BenchmarkEncode compares, per 4096-row batch: the one-pass batch encoder,
// a row-at-a-time encoder with fresh allocations per row, and one Arrow IPC
// stream per value.
func BenchmarkEncode(b *testing.B) {
	mem := memory.NewGoAllocator()
	for _, bc := range benchCases() {
		c, err := NewCodec(bc.schema)
		if err != nil {
			b.Fatal(err)
		}
		rec := buildRecord(b, mem, bc.schema, bc.rows)
		var sizing Arena
		if err := c.EncodeBatch(rec, []int64{1}, &sizing); err != nil {
			b.Fatal(err)
		}
		total := int64(len(sizing.Buf))

		b.Run(bc.name+"/batch", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(total)
			var a Arena
			for b.Loop() {
				a.Reset()
				if err := c.EncodeBatch(rec, []int64{1}, &a); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/per-row", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(total)
			out := make([][]byte, benchRows)
			for b.Loop() {
				for i := range benchRows {
					v, err := c.EncodeRow(nil, 1, rowValues(rec, i))
					if err != nil {
						b.Fatal(err)
					}
					out[i] = v
				}
			}
		})
		b.Run(bc.name+"/ipc-per-value", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(total)
			out := make([][]byte, benchRows)
			for b.Loop() {
				for i := range benchRows {
					row := rec.NewSlice(int64(i), int64(i+1))
					var buf bytes.Buffer
					w := ipc.NewWriter(&buf, ipc.WithSchema(bc.schema), ipc.WithAllocator(mem))
					if err := w.Write(row); err != nil {
						b.Fatal(err)
					}
					if err := w.Close(); err != nil {
						b.Fatal(err)
					}
					row.Release()
					out[i] = buf.Bytes()
				}
			}
		})
		rec.Release()
	}
}

// BenchmarkDecode compares batch decode into one RecordBuilder with a
// row-at-a-time decode (Go values, then builders) and one IPC stream read
// per value.
func BenchmarkDecode(b *testing.B) {
	mem := memory.NewGoAllocator()
	for _, bc := range benchCases() {
		c, err := NewCodec(bc.schema)
		if err != nil {
			b.Fatal(err)
		}
		rec := buildRecord(b, mem, bc.schema, bc.rows)
		var a Arena
		if err := c.EncodeBatch(rec, []int64{1}, &a); err != nil {
			b.Fatal(err)
		}
		values := a.Values(nil)
		total := int64(len(a.Buf))
		ipcValues := make([][]byte, benchRows)
		for i := range benchRows {
			row := rec.NewSlice(int64(i), int64(i+1))
			var buf bytes.Buffer
			w := ipc.NewWriter(&buf, ipc.WithSchema(bc.schema))
			if err := w.Write(row); err != nil {
				b.Fatal(err)
			}
			_ = w.Close()
			row.Release()
			ipcValues[i] = buf.Bytes()
		}
		rec.Release()

		b.Run(bc.name+"/batch", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(total)
			rb := array.NewRecordBuilder(mem, bc.schema)
			defer rb.Release()
			ttls := make([]int64, 0, benchRows)
			for b.Loop() {
				var err error
				if ttls, err = c.AppendBatch(ttls[:0], values, rb); err != nil {
					b.Fatal(err)
				}
				rb.NewRecordBatch().Release()
			}
		})
		b.Run(bc.name+"/per-row", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(total)
			rb := array.NewRecordBuilder(mem, bc.schema)
			defer rb.Release()
			for b.Loop() {
				for _, v := range values {
					_, row, err := c.DecodeRow(v)
					if err != nil {
						b.Fatal(err)
					}
					for j, x := range row {
						appendGoToBuilder(b, rb.Field(j), x)
					}
				}
				rb.NewRecordBatch().Release()
			}
		})
		b.Run(bc.name+"/ipc-per-value", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(total)
			rb := array.NewRecordBuilder(mem, bc.schema)
			defer rb.Release()
			for b.Loop() {
				for _, v := range ipcValues {
					r, err := ipc.NewReader(bytes.NewReader(v), ipc.WithAllocator(mem))
					if err != nil {
						b.Fatal(err)
					}
					if !r.Next() {
						b.Fatal(r.Err())
					}
					row := r.RecordBatch()
					for j := range row.NumCols() {
						switch col := row.Column(int(j)).(type) {
						case *array.Int64:
							rb.Field(int(j)).(*array.Int64Builder).Append(col.Value(0))
						case *array.String:
							rb.Field(int(j)).(*array.StringBuilder).Append(col.Value(0))
						}
					}
					r.Release()
				}
				rb.NewRecordBatch().Release()
			}
		})
	}
}

// BenchmarkAggregateState measures the q17 persist path end to end: build
// the four columns straight from accumulators, then encode the batch.
func BenchmarkAggregateState(b *testing.B) {
	mem := memory.NewGoAllocator()
	schema := benchCases()[0].schema
	c, _ := NewCodec(schema)
	groups := make([]acc, benchRows)
	for i := range groups {
		groups[i] = acc{count: int64(i), sum: int64(i) * 3, min: -int64(i), max: int64(i) * 9}
	}
	cols := []Column{
		Int64Col(field(groups, func(a *acc) int64 { return a.count })),
		Int64Col(field(groups, func(a *acc) int64 { return a.sum })),
		Int64Col(field(groups, func(a *acc) int64 { return a.min })),
		Int64Col(field(groups, func(a *acc) int64 { return a.max })),
	}
	b.ReportAllocs()
	var a Arena
	for b.Loop() {
		rec, err := BuildRecord(mem, schema, len(groups), cols...)
		if err != nil {
			b.Fatal(err)
		}
		a.Reset()
		if err := c.EncodeBatch(rec, []int64{1}, &a); err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
	b.SetBytes(int64(len(a.Buf)))
}

// BenchmarkToBinaryRow converts 4096 values to BinaryRowData (what a
// canonical savepoint does per value), into a reused buffer.
func BenchmarkToBinaryRow(b *testing.B) {
	mixed := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}},
		{Name: "amount", Type: &arrow.Decimal128Type{Precision: 28, Scale: 2}},
	}, nil)
	var mixedRows [][]any
	for i := range benchRows {
		var n any
		if i%3 != 0 {
			n = int32(i)
		}
		mixedRows = append(mixedRows, []any{int64(i), n, strings.Repeat("x", i%20), arrow.Timestamp(int64(i) * 1_000_003), decimal128.FromI64(int64(i) * 12345)})
	}
	for _, bc := range append(benchCases(), benchCase{"mixed", mixed, mixedRows}) {
		c, err := NewCodec(bc.schema)
		if err != nil {
			b.Fatal(err)
		}
		f, err := NewFlinkRow(c)
		if err != nil {
			b.Fatal(err)
		}
		var vals [][]byte
		for _, r := range bc.rows {
			v, err := c.EncodeRow(nil, 0, r)
			if err != nil {
				b.Fatal(err)
			}
			vals = append(vals, v)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var out []byte
			for b.Loop() {
				for _, v := range vals {
					if out, _, err = f.ToBinaryRow(out[:0], v); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
