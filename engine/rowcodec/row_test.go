package rowcodec

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// allTypesSchema covers every supported type, nested struct and list included.
func allTypesSchema() *arrow.Schema {
	inner := arrow.StructOf(
		arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	)
	return arrow.NewSchema([]arrow.Field{
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
		{Name: "i16", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "u8", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
		{Name: "u16", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ls", Type: arrow.BinaryTypes.LargeString, Nullable: true},
		{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "d32", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "tsms", Type: arrow.FixedWidthTypes.Timestamp_ms, Nullable: true},
		{Name: "tsus", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 38, Scale: 4}, Nullable: true},
		{Name: "st", Type: arrow.StructOf(
			arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
			arrow.Field{Name: "in", Type: inner, Nullable: true},
		), Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "ls2", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
}

func allTypesRows() [][]any {
	big := strings.Repeat("x", 1<<20+3)
	full := []any{
		true, int8(-8), int16(-1600), int32(-320000), int64(math.MinInt64),
		uint8(200), uint16(65000), uint32(4000000000), uint64(math.MaxUint64),
		float32(-1.5), math.Inf(1), "héllo", "large", []byte{0, 1, 2, 0xff},
		arrow.Date32(19000), arrow.Timestamp(1706683111489), arrow.Timestamp(-17000000000),
		decimal128.New(-5, 12345),
		[]any{int64(42), []any{int32(7), "inner"}},
		[]any{int64(1), nil, int64(-3)},
		[]any{"a", "", nil},
	}
	nulls := make([]any, len(full))
	empty := []any{
		false, int8(0), int16(0), int32(0), int64(0), uint8(0), uint16(0), uint32(0), uint64(0),
		float32(0), 0.0, "", "", []byte{},
		arrow.Date32(0), arrow.Timestamp(0), arrow.Timestamp(0), decimal128.Num{},
		[]any{nil, nil}, []any{}, []any{},
	}
	nested := append([]any{}, empty...)
	nested[11] = big
	nested[12] = big
	nested[18] = []any{nil, []any{nil, nil}}
	nested[19] = []any{nil, nil, nil, nil, nil, nil, nil, nil, nil}
	return [][]any{full, nulls, empty, nested}
}

func TestRowRoundTripAllTypes(t *testing.T) {
	c, err := NewCodec(allTypesSchema())
	if err != nil {
		t.Fatal(err)
	}
	for ri, row := range allTypesRows() {
		ttl := int64(1706683111489 + ri)
		v, err := c.EncodeRow(nil, ttl, row)
		if err != nil {
			t.Fatalf("row %d: encode: %v", ri, err)
		}
		if got := TTL(v); got != ttl {
			t.Fatalf("row %d: TTL %d, want %d", ri, got, ttl)
		}
		gotTTL, got, err := c.DecodeRow(v)
		if err != nil {
			t.Fatalf("row %d: decode: %v", ri, err)
		}
		if gotTTL != ttl {
			t.Fatalf("row %d: decoded TTL %d", ri, gotTTL)
		}
		if !reflect.DeepEqual(got, row) {
			t.Fatalf("row %d: round trip\n got %v\nwant %v", ri, got, row)
		}
		if err := c.Validate(v); err != nil {
			t.Fatalf("row %d: validate: %v", ri, err)
		}
	}
}

// TestWireFormatExample pins the example in the package documentation: the
// bytes must never change.
func TestWireFormatExample(t *testing.T) {
	c, err := NewCodec(arrow.NewSchema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "c", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.EncodeRow(nil, NoTTL, []any{int64(7), "hi", nil})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x03, 0x04, 7, 0, 0, 0, 0, 0, 0, 0, 2, 'h', 'i'}
	if !bytes.Equal(v, want) {
		t.Fatalf("encoding changed:\n got % x\nwant % x", v, want)
	}
}

func TestTTLHelpers(t *testing.T) {
	c, _ := NewCodec(arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil))
	v, err := c.EncodeRow(nil, 1234, []any{int64(99)})
	if err != nil {
		t.Fatal(err)
	}
	if TTL(v) != 1234 {
		t.Fatalf("TTL = %d", TTL(v))
	}
	if !bytes.Equal(v[:8], []byte{0, 0, 0, 0, 0, 0, 0x04, 0xd2}) {
		t.Fatalf("prefix not big-endian: % x", v[:8])
	}
	orig := append([]byte{}, v...)
	w, err := WithTTL(nil, v, -5)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v, orig) {
		t.Fatal("WithTTL modified its input")
	}
	if TTL(w) != -5 || !bytes.Equal(w[8:], v[8:]) {
		t.Fatalf("WithTTL: % x", w)
	}
	if err := SetTTL(v, math.MaxInt64); err != nil || TTL(v) != math.MaxInt64 || !bytes.Equal(v[8:], orig[8:]) {
		t.Fatalf("SetTTL: %v % x", err, v)
	}
	ttl, row, err := SplitValue(w)
	if err != nil || ttl != -5 || !bytes.Equal(row, w[8:]) {
		t.Fatalf("SplitValue: %d % x %v", ttl, row, err)
	}
	if TTL([]byte{1, 2, 3}) != NoTTL {
		t.Fatal("short value TTL")
	}
	if err := SetTTL(make([]byte, 7), 1); !errors.Is(err, ErrTruncated) {
		t.Fatalf("SetTTL short: %v", err)
	}
	if _, err := WithTTL(nil, make([]byte, 7), 1); !errors.Is(err, ErrTruncated) {
		t.Fatalf("WithTTL short: %v", err)
	}
	if _, _, err := SplitValue(nil); !errors.Is(err, ErrTruncated) {
		t.Fatalf("SplitValue short: %v", err)
	}
}

func TestSchemaMismatch(t *testing.T) {
	s2 := arrow.NewSchema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	s3 := arrow.NewSchema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "c", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, nil)
	c2, _ := NewCodec(s2)
	c3, _ := NewCodec(s3)
	v, err := c2.EncodeRow(nil, 0, []any{int64(1), "x"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c3.DecodeRow(v)
	var de *DecodeError
	if !errors.Is(err, ErrSchemaMismatch) || !errors.As(err, &de) || de.Offset != 9 {
		t.Fatalf("decode with wrong schema: %v", err)
	}
	if _, err := c2.EncodeRow(nil, 0, []any{int64(1)}); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("short row: %v", err)
	}
	if _, err := c2.EncodeRow(nil, 0, []any{"x", int64(1)}); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("wrong Go types: %v", err)
	}
	// A failed encode leaves dst as it was.
	dst := []byte("keep")
	out, err := c2.EncodeRow(dst, 0, []any{int64(1), 5})
	if err == nil || string(out) != "keep" {
		t.Fatalf("failed encode: %q %v", out, err)
	}
	if _, err := NewCodec(arrow.NewSchema([]arrow.Field{{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64)}}, nil)); !errors.Is(err, ErrUnsupportedType) {
		t.Fatalf("map type: %v", err)
	}
	if _, err := NewCodec(nil); err == nil {
		t.Fatal("nil schema accepted")
	}
}

// TestDecodeCorrupt checks that every truncation and a set of targeted
// corruptions give a *DecodeError, never a panic or a silent success.
func TestDecodeCorrupt(t *testing.T) {
	c, err := NewCodec(allTypesSchema())
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.EncodeRow(nil, 77, allTypesRows()[0])
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(v); n++ {
		_, _, err := c.DecodeRow(v[:n])
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("truncated to %d: err %v", n, err)
		}
		if de.Offset > n {
			t.Fatalf("truncated to %d: offset %d past the end", n, de.Offset)
		}
	}
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, v...)) }
	cases := []struct {
		name string
		val  []byte
		want error
	}{
		{"version", mut(func(b []byte) []byte { b[8] = 2; return b }), ErrVersion},
		{"row kind 4", mut(func(b []byte) []byte { b[8] = 0x41; return b }), ErrVersion},
		{"header bits 6-7", mut(func(b []byte) []byte { b[8] = 0x81; return b }), ErrVersion},
		{"-D kind decodes", mut(func(b []byte) []byte { b[8] = 0x31; return b }), nil},
		{"trailing", mut(func(b []byte) []byte { return append(b, 0) }), ErrCorrupt},
		{"bool", mut(func(b []byte) []byte { b[8+1+1+3] = 2; return b }), ErrCorrupt},
		{"bitmap padding", mut(func(b []byte) []byte { b[8+1+1+2] |= 0x80; return b }), ErrCorrupt},
		{"count", mut(func(b []byte) []byte { b[9] = 20; return b }), ErrSchemaMismatch},
	}
	for _, tc := range cases {
		if _, _, err := c.DecodeRow(tc.val); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	// A string length far beyond the value must be rejected, not allocated.
	cs, _ := NewCodec(arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String}}, nil))
	huge := []byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 'a'}
	_, _, err = cs.DecodeRow(huge)
	var de *DecodeError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &de) || de.Field != "s" || de.Offset != 11 {
		t.Fatalf("huge length: %v", err)
	}
	// A list count far beyond the value.
	cl, _ := NewCodec(arrow.NewSchema([]arrow.Field{{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int8)}}, nil))
	if _, _, err := cl.DecodeRow([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0xff, 0xff, 0xff, 0x7f}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("huge list count: %v", err)
	}
}
