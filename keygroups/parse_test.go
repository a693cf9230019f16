package keygroups

import (
	"math/big"
	"reflect"
	"strings"
	"testing"
)

func TestParseFieldType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want FieldType
	}{
		{"BIGINT", TypeBigInt}, {"int", TypeInt}, {"Integer", TypeInt}, {"bool", TypeBoolean},
		{"tinyint", TypeTinyInt}, {"smallint", TypeSmallInt}, {"real", TypeFloat}, {"double", TypeDouble},
		{"double precision", TypeDouble}, {"string", TypeString}, {"varchar(20)", TypeString},
		{"CHAR(3)", TypeString}, {"bytes", TypeBytes}, {"varbinary(5)", TypeBytes}, {"date", TypeDate},
		{"time(3)", TypeTime}, {"timestamp", TypeTimestamp(6)}, {"TIMESTAMP(3)", TypeTimestamp(3)},
		{"timestamp_ltz(9)", TypeTimestampLTZ(9)}, {"timestamp(3) with local time zone", TypeTimestampLTZ(3)},
		{"decimal", TypeDecimal(10, 0)}, {"decimal(5)", TypeDecimal(5, 0)}, {"DECIMAL(20, 4)", TypeDecimal(20, 4)},
		{"numeric(38,38)", TypeDecimal(38, 38)},
		{"INTERVAL YEAR TO MONTH", FieldType{Kind: KindIntervalYearMonth}},
		{"interval day to second(3)", FieldType{Kind: KindIntervalDayTime}},
		{"interval  minute", FieldType{Kind: KindIntervalDayTime}},
	} {
		got, err := ParseFieldType(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseFieldType(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "number", "int(3)", "decimal(40)", "decimal(5,6)", "timestamp(10)",
		"decimal(1,2,3)", "varchar(x)", "int with local time zone", "decimal(5", "bigint)"} {
		if _, err := ParseFieldType(bad); err == nil {
			t.Errorf("ParseFieldType(%q) accepted", bad)
		}
	}
}

func TestParseRowType(t *testing.T) {
	got, err := ParseRowType("row<int, decimal(10, 2), string>")
	want := []FieldType{TypeInt, TypeDecimal(10, 2), TypeString}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v %v", got, err)
	}
	if got, err := ParseRowType("ROW<bigint>"); err != nil || !reflect.DeepEqual(got, []FieldType{TypeBigInt}) {
		t.Fatalf("got %v %v", got, err)
	}
	for _, bad := range []string{"row<>", "row<int", "row(int)", "row<int,,int>", "row<foo>"} {
		if _, err := ParseRowType(bad); err == nil {
			t.Errorf("ParseRowType(%q) accepted", bad)
		}
	}
}

func TestSplitFields(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Field
	}{
		{"1", []Field{{Text: "1"}}},
		{"", []Field{{Text: ""}}},
		{"1,abc,null", []Field{{Text: "1"}, {Text: "abc"}, {Text: "null"}}},
		{`1,"a, b",null`, []Field{{Text: "1"}, {Text: "a, b", Quoted: true}, {Text: "null"}}},
		{`"null"`, []Field{{Text: "null", Quoted: true}}},
		{`"say ""hi"""`, []Field{{Text: `say "hi"`, Quoted: true}}},
		{`a,`, []Field{{Text: "a"}, {Text: ""}}},
		{` "x" , y `, []Field{{Text: "x", Quoted: true}, {Text: "y"}}},
		{`" padded ", 2`, []Field{{Text: " padded ", Quoted: true}, {Text: "2"}}},
	} {
		got, err := SplitFields(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitFields(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`"open`, `"a"b`} {
		if _, err := SplitFields(bad); err == nil {
			t.Errorf("SplitFields(%q) accepted", bad)
		}
	}
	if !(Field{Text: " NULL "}).IsNull() || (Field{Text: "null", Quoted: true}).IsNull() {
		t.Error("IsNull")
	}
}

func TestParseValue(t *testing.T) {
	for _, tc := range []struct {
		t    FieldType
		in   string
		want any
	}{
		{TypeBoolean, "TRUE", true},
		{TypeTinyInt, "-128", int8(-128)},
		{TypeSmallInt, " 300 ", int16(300)},
		{TypeInt, "-7", int32(-7)},
		{TypeBigInt, "9223372036854775807", int64(9223372036854775807)},
		{TypeFloat, "1.5", float32(1.5)},
		{TypeDouble, "-2.25", -2.25},
		{TypeString, " keep spaces ", " keep spaces "},
		{TypeBytes, "0x0aff", []byte{0x0a, 0xff}},
		{TypeDate, "1970-01-02", int32(1)},
		{TypeDate, "1969-12-31", int32(-1)},
		{TypeDate, "18000", int32(18000)},
		{TypeTime, "01:00:00.5", int32(3600500)},
		{TypeTimestamp(3), "2020-10-10 00:00:35", Timestamp{Millis: 1602288035000}},
		{TypeTimestamp(3), "2020-10-10T00:00:35.123", Timestamp{Millis: 1602288035123}},
		{TypeTimestamp(9), "2020-10-10 00:00:35.123456789", Timestamp{Millis: 1602288035123, NanoOfMilli: 456789}},
		{TypeTimestamp(3), "1602288035000", Timestamp{Millis: 1602288035000}},
		{TypeTimestampLTZ(3), "2020-10-10T02:00:35+02:00", Timestamp{Millis: 1602288035000}},
		{TypeDecimal(10, 2), "-123.4", big.NewInt(-12340)},
		{TypeDecimal(10, 2), "7", big.NewInt(700)},
		{TypeDecimal(10, 0), "+0012", big.NewInt(12)},
	} {
		got, err := ParseValue(tc.t, tc.in)
		if err != nil {
			t.Errorf("ParseValue(%v, %q): %v", tc.t, tc.in, err)
			continue
		}
		if bi, ok := got.(*big.Int); ok {
			if bi.Cmp(tc.want.(*big.Int)) != 0 {
				t.Errorf("ParseValue(%v, %q) = %v, want %v", tc.t, tc.in, bi, tc.want)
			}
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseValue(%v, %q) = %#v, want %#v", tc.t, tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		t  FieldType
		in string
	}{
		{TypeBoolean, "yes"}, {TypeTinyInt, "128"}, {TypeInt, "1.5"}, {TypeBigInt, ""}, {TypeFloat, "x"},
		{TypeBytes, "zz"}, {TypeDate, "2020-13-01"}, {TypeTime, "25:00:00"},
		{TypeTimestamp(3), "2020-10-10 00:00:35.1234"}, {TypeTimestamp(3), "2020-10-10T00:00:35Z"},
		{TypeDecimal(10, 2), "1.234"}, {TypeDecimal(3, 0), "1000"}, {TypeDecimal(10, 2), "1e5"},
		{TypeDecimal(10, 2), "-"}, {TypeDecimal(10, 2), "."},
	} {
		if v, err := ParseValue(tc.t, tc.in); err == nil {
			t.Errorf("ParseValue(%v, %q) = %v, want error", tc.t, tc.in, v)
		} else if !strings.Contains(err.Error(), tc.in) && tc.in != "" {
			t.Errorf("error %q does not quote the input", err)
		}
	}
}
