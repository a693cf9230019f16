package rowcodec

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// appendGoToBuilder appends a Go value (EncodeRow's conventions) to an Arrow
// builder. It is independent of the codec, so records built with it are an
// outside reference for the batch paths.
func appendGoToBuilder(t testing.TB, b array.Builder, v any) {
	if !appendGoB(b, v) {
		t.Helper()
		t.Fatalf("test helper: builder %T", b)
	}
}

func appendGoB(b array.Builder, v any) bool {
	if v == nil {
		b.AppendNull()
		return true
	}
	switch b := b.(type) {
	case *array.BooleanBuilder:
		b.Append(v.(bool))
	case *array.Int8Builder:
		b.Append(v.(int8))
	case *array.Int16Builder:
		b.Append(v.(int16))
	case *array.Int32Builder:
		b.Append(v.(int32))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Uint8Builder:
		b.Append(v.(uint8))
	case *array.Uint16Builder:
		b.Append(v.(uint16))
	case *array.Uint32Builder:
		b.Append(v.(uint32))
	case *array.Uint64Builder:
		b.Append(v.(uint64))
	case *array.Float32Builder:
		b.Append(v.(float32))
	case *array.Float64Builder:
		b.Append(v.(float64))
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.LargeStringBuilder:
		b.Append(v.(string))
	case *array.BinaryBuilder:
		b.Append(v.([]byte))
	case *array.Date32Builder:
		b.Append(v.(arrow.Date32))
	case *array.TimestampBuilder:
		b.Append(v.(arrow.Timestamp))
	case *array.Decimal128Builder:
		b.Append(v.(decimal128.Num))
	case *array.StructBuilder:
		b.Append(true)
		for k, x := range v.([]any) {
			if !appendGoB(b.FieldBuilder(k), x) {
				return false
			}
		}
	case *array.ListBuilder:
		b.Append(true)
		for _, x := range v.([]any) {
			if !appendGoB(b.ValueBuilder(), x) {
				return false
			}
		}
	default:
		return false
	}
	return true
}

func buildRecord(t testing.TB, mem memory.Allocator, schema *arrow.Schema, rows [][]any) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for _, row := range rows {
		for j, v := range row {
			appendGoToBuilder(t, b.Field(j), v)
		}
	}
	return b.NewRecordBatch()
}

func TestBatchRoundTripAllTypes(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	schema := allTypesSchema()
	c, err := NewCodec(schema)
	if err != nil {
		t.Fatal(err)
	}
	rows := allTypesRows()
	rec := buildRecord(t, mem, schema, rows)
	defer rec.Release()

	// Whole record and a slice with a non-zero offset.
	for _, tc := range []struct {
		name   string
		lo, hi int64
	}{{"all", 0, int64(len(rows))}, {"slice", 1, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			sub := rec.NewSlice(tc.lo, tc.hi)
			defer sub.Release()
			ttls := make([]int64, sub.NumRows())
			for i := range ttls {
				ttls[i] = int64(1000 + i)
			}
			var a Arena
			if err := c.EncodeBatch(sub, ttls, &a); err != nil {
				t.Fatal(err)
			}
			if a.Len() != int(sub.NumRows()) {
				t.Fatalf("arena has %d values", a.Len())
			}
			// Byte-identical to the row-at-a-time encoder.
			for i := 0; i < a.Len(); i++ {
				want, err := c.EncodeRow(nil, ttls[i], rows[int(tc.lo)+i])
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a.Value(i), want) {
					t.Fatalf("row %d: batch % x\nrow % x", i, a.Value(i), want)
				}
			}
			rb := array.NewRecordBuilder(mem, schema)
			defer rb.Release()
			got, err := c.DecodeBatch(a.Values(nil), rb)
			if err != nil {
				t.Fatal(err)
			}
			for i, ts := range got {
				if ts != ttls[i] {
					t.Fatalf("ttl %d = %d", i, ts)
				}
			}
			out := rb.NewRecordBatch()
			defer out.Release()
			if !array.RecordEqual(out, sub) {
				t.Fatalf("decoded record differs\n got %v\nwant %v", out, sub)
			}
		})
	}
}

func TestBatchArenaAppendsAndTTLForms(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	c, _ := NewCodec(schema)
	rec := buildRecord(t, mem, schema, [][]any{{int64(1), "a"}, {int64(2), nil}, {int64(3), ""}})
	defer rec.Release()

	var a Arena
	if err := c.EncodeBatch(rec, nil, &a); err != nil {
		t.Fatal(err)
	}
	if err := c.EncodeBatch(rec, []int64{42}, &a); err != nil {
		t.Fatal(err)
	}
	if a.Len() != 6 {
		t.Fatalf("arena len %d", a.Len())
	}
	for i := 0; i < 6; i++ {
		want := NoTTL
		if i >= 3 {
			want = 42
		}
		if TTL(a.Value(i)) != want {
			t.Fatalf("value %d ttl %d", i, TTL(a.Value(i)))
		}
		if !bytes.Equal(a.Value(i)[8:], a.Value(i % 3)[8:]) {
			t.Fatalf("value %d differs from its first copy", i)
		}
	}
	if err := c.EncodeBatch(rec, []int64{1, 2}, &a); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("wrong ttl count: %v", err)
	}
	a.Reset()
	if a.Len() != 0 {
		t.Fatal("reset")
	}
	if err := c.EncodeBatch(rec, nil, &a); err != nil || a.Len() != 3 || a.Offs[0] != 0 {
		t.Fatalf("after reset: %v %v", err, a.Offs)
	}
}

func TestBatchSchemaMismatch(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s1 := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	s2 := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int32}}, nil)
	s3 := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}, {Name: "b", Type: arrow.PrimitiveTypes.Int64}}, nil)
	c1, _ := NewCodec(s1)
	rec := buildRecord(t, mem, s2, [][]any{{int32(1)}})
	defer rec.Release()
	var a Arena
	if err := c1.EncodeBatch(rec, nil, &a); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("encode int32 column with int64 codec: %v", err)
	}
	for _, s := range []*arrow.Schema{s2, s3} {
		rb := array.NewRecordBuilder(mem, s)
		if _, err := c1.DecodeBatch(nil, rb); !errors.Is(err, ErrSchemaMismatch) {
			t.Fatalf("decode into %v: %v", s, err)
		}
		rb.Release()
	}
}

// TestDecodeBatchErrorAppendsNothing checks that a corrupt value fails the
// batch with its index and leaves the builder untouched.
func TestDecodeBatchErrorAppendsNothing(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.String},
	}, nil)
	c, _ := NewCodec(schema)
	var vals [][]byte
	for i := range 5 {
		v, err := c.EncodeRow(nil, 0, []any{int64(i), fmt.Sprint("v", i)})
		if err != nil {
			t.Fatal(err)
		}
		vals = append(vals, v)
	}
	vals[3] = vals[3][:len(vals[3])-1] // truncate the string
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	ttls, err := c.DecodeBatch(vals, rb)
	var de *DecodeError
	if !errors.As(err, &de) || de.Index != 3 || de.Field != "s" || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v", err)
	}
	if len(ttls) != 0 {
		t.Fatalf("%d ttls", len(ttls))
	}
	rec := rb.NewRecordBatch()
	if rec.NumRows() != 0 || rec.Column(0).Len() != 0 || rec.Column(1).Len() != 0 {
		t.Fatalf("builder holds %d rows", rec.NumRows())
	}
	rec.Release()
	// The builder is still usable: the good values decode.
	if _, err := c.DecodeBatch(vals[:3], rb); err != nil {
		t.Fatal(err)
	}
	rec = rb.NewRecordBatch()
	defer rec.Release()
	if rec.NumRows() != 3 || rec.Column(1).(*array.String).Value(2) != "v2" {
		t.Fatalf("after retry: %v", rec)
	}
}

func TestBatchLargeStrings(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.Binary, Nullable: true},
	}, nil)
	c, _ := NewCodec(schema)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16+1) // > 1 MiB
	rows := [][]any{{string(big), big}, {"", []byte{}}, {nil, nil}, {string(big[:300]), big[:2]}}
	rec := buildRecord(t, mem, schema, rows)
	defer rec.Release()
	var a Arena
	if err := c.EncodeBatch(rec, nil, &a); err != nil {
		t.Fatal(err)
	}
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	if _, err := c.DecodeBatch(a.Values(nil), rb); err != nil {
		t.Fatal(err)
	}
	out := rb.NewRecordBatch()
	defer out.Release()
	if !array.RecordEqual(out, rec) {
		t.Fatal("large strings did not round trip")
	}
}

// TestCodecConcurrentUse shares one Codec between goroutines (run with
// -race to check the claim that a Codec is safe for concurrent use).
func TestCodecConcurrentUse(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := allTypesSchema()
	c, err := NewCodec(schema)
	if err != nil {
		t.Fatal(err)
	}
	rec := buildRecord(t, mem, schema, allTypesRows())
	defer rec.Release()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			var a Arena
			for range 5 {
				a.Reset()
				if err := c.EncodeBatch(rec, nil, &a); err != nil {
					errs <- err
					return
				}
				rb := array.NewRecordBuilder(mem, schema)
				_, err := c.DecodeBatch(a.Values(nil), rb)
				out := rb.NewRecordBatch()
				rb.Release()
				eq := array.RecordEqual(out, rec)
				out.Release()
				if err != nil {
					errs <- err
					return
				}
				if !eq {
					errs <- fmt.Errorf("concurrent round trip differs")
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
