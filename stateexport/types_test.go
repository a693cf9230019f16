package stateexport

import (
	"bytes"
	"math/big"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"

	"github.com/sfstate/sfstate/savepoint/serde"
)

// TestSQLTypesKeepPrecision writes a SQL row of every type whose Arrow
// mapping carries parameters and reads it back with parquet-go: the
// Parquet logical types keep precision, scale and unit, and the values
// are exact.
func TestSQLTypesKeepPrecision(t *testing.T) {
	lt := func(root string, p, s int) *serde.LogicalType {
		return &serde.LogicalType{Root: root, Precision: p, Scale: s, Nullable: true}
	}
	types := []*serde.LogicalType{
		lt("DECIMAL", 10, 2), lt("DECIMAL", 30, 5), lt("TIMESTAMP_WITHOUT_TIME_ZONE", 6, 0),
		lt("TIMESTAMP_WITHOUT_TIME_ZONE", 9, 0), lt("TIMESTAMP_WITH_LOCAL_TIME_ZONE", 3, 0), lt("DATE", 0, 0),
		lt("TIME_WITHOUT_TIME_ZONE", 0, 0), lt("VARBINARY", 0, 0),
		{Root: "ROW", Fields: []serde.RowField{{Name: "a", Type: lt("INTEGER", 0, 0)}, {Name: "b", Type: lt("VARCHAR", 0, 0)}}},
		{Root: "ARRAY", Element: lt("BIGINT", 0, 0)},
		{Root: "MAP", Key: lt("VARCHAR", 0, 0), Value: lt("INTEGER", 0, 0)},
		{Root: "RAW", ImplClass: "com.example.Opaque"},
	}
	snap := &serde.Snapshot{Class: serde.ClassRowData, Types: types}
	cols, err := flatten("value", snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != len(types) {
		t.Fatalf("%d columns for %d fields", len(cols), len(types))
	}
	bigUnscaled, _ := new(big.Int).SetString("-123456789012345678901234567", 10)
	row := &serde.Row{Fields: []serde.Value{
		serde.Decimal{Unscaled: big.NewInt(12345), Scale: 2},
		serde.Decimal{Unscaled: bigUnscaled, Scale: 5},
		serde.Timestamp{Millis: 1000, NanoOfMill: 123456, Precision: 6},
		serde.Timestamp{Millis: -1000, NanoOfMill: 123456, Precision: 9},
		serde.Timestamp{Millis: 1700000000000, Precision: 3},
		int32(19000), int32(3600000), []byte{1, 2},
		&serde.Row{Fields: []serde.Value{int32(7), "x"}},
		serde.List{int64(5), int64(6)},
		serde.Map{{Key: "k1", Value: int32(1)}, {Key: "k2", Value: nil}},
		&serde.Raw{Serializer: "RAW", Bytes: []byte("opaque")},
	}}
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = c.node.field(c.name)
	}
	schema := arrow.NewSchema(fields, nil)
	rb := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
	defer rb.Release()
	for i, c := range cols {
		v, ok := c.get(row)
		if !ok {
			t.Fatalf("column %s: no value", c.name)
		}
		if err := c.node.app(rb.Field(i), v); err != nil {
			t.Fatalf("column %s: %v", c.name, err)
		}
	}
	if got := schema.Field(11).Metadata; got.FindKey(MetaSerializer) < 0 {
		t.Errorf("RAW column has no serializer metadata: %v", got)
	}
	var buf bytes.Buffer
	rw, err := newRecordWriter(Parquet, &buf, schema, Zstd, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	if err := rw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := map[string]string{
		"value_f0": "DECIMAL(10,2)", "value_f1": "DECIMAL(30,5)",
		"value_f2": "TIMESTAMP(isAdjustedToUTC=false,unit=MICROS)", "value_f3": "TIMESTAMP(isAdjustedToUTC=false,unit=NANOS)",
		"value_f4": "TIMESTAMP(isAdjustedToUTC=true,unit=MILLIS)", "value_f5": "DATE", "value_f6": "TIME(isAdjustedToUTC=false,unit=MILLIS)",
	}
	for _, f := range pf.Schema().Fields() {
		w, ok := wantTypes[f.Name()]
		if !ok {
			continue
		}
		got := ""
		if l := f.Type().LogicalType(); l != nil {
			got = l.String()
		}
		if !strings.EqualFold(strings.ReplaceAll(got, " ", ""), w) {
			t.Errorf("%s: logical type %q, want %q", f.Name(), got, w)
		}
	}
	prow := make([]parquet.Row, 1)
	n, _ := parquet.NewReader(pf).ReadRows(prow)
	if n != 1 {
		t.Fatalf("read %d rows", n)
	}
	var got []any
	for _, v := range prow[0] {
		got = append(got, parquetValue(v))
	}
	dec := func(s any) string {
		b := []byte(s.(string))
		v := new(big.Int).SetBytes(b)
		if len(b) > 0 && b[0]&0x80 != 0 {
			v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
		}
		return v.String()
	}
	if len(got) < 17 {
		t.Fatalf("leaves %v", got)
	}
	if dec(got[0]) != "12345" || dec(got[1]) != bigUnscaled.String() {
		t.Errorf("decimals %q %q", dec(got[0]), dec(got[1]))
	}
	want := []any{int64(1000123), int64(-1000*1000000 + 123456), int64(1700000000000), int64(19000), int64(3600000), "\x01\x02",
		int64(7), "x", int64(5), int64(6), "k1", "k2", int64(1), nil, "opaque"}
	for i, w := range want {
		if !sameLeaf(w, got[i+2]) {
			t.Errorf("leaf %d: %#v, want %#v (all %v)", i+2, got[i+2], w, got)
		}
	}
}

// TestTypeErrorsFailNotPanic feeds values of the wrong type and values out
// of range: errors, never a panic or a silently wrong value.
func TestTypeErrorsFailNotPanic(t *testing.T) {
	cases := []struct {
		n node
		v serde.Value
	}{
		{int64Node, "not a number"},
		{decimalNode(5, 2), serde.Decimal{Unscaled: big.NewInt(1234567), Scale: 2}},
		{decimalNode(5, 2), serde.Decimal{Unscaled: big.NewInt(1), Scale: 3}},
		{timestampNode(9, false), serde.Timestamp{Millis: 1 << 62, Precision: 9}},
		{mapNode(stringNode, int32Node), serde.Map{{Key: nil, Value: int32(1)}}},
		{listNode(int32Node), int32(3)},
	}
	for i, c := range cases {
		b := array.NewBuilder(memory.NewGoAllocator(), c.n.typ)
		if err := c.n.app(b, c.v); err == nil {
			t.Errorf("case %d: %T %v accepted", i, c.v, c.v)
		}
		b.Release()
	}
}
