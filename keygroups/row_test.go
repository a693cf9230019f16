package keygroups

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRowLayout(t *testing.T) {
	ts6 := TypeTimestamp(6)
	for _, tc := range []struct {
		name   string
		types  []FieldType
		values []any
		want   string // hex, spaces ignored
	}{
		{"bigint 2", []FieldType{TypeBigInt}, []any{int64(2)},
			"0000000000000000 0200000000000000"},
		{"null int", []FieldType{TypeInt}, []any{nil},
			"0001000000000000 0000000000000000"},
		{"inline Hello", []FieldType{TypeString}, []any{"Hello"},
			"0000000000000000 48656c6c6f000085"},
		{"empty string", []FieldType{TypeString}, []any{""},
			"0000000000000000 0000000000000080"},
		{"7 bytes inline", []FieldType{TypeString}, []any{"abcdefg"},
			"0000000000000000 6162636465666787"},
		// 8 bytes go to the variable part at offset 16: slot = 16<<32 | 8.
		{"8 bytes var", []FieldType{TypeString}, []any{"abcdefgh"},
			"0000000000000000 0800000010000000 6162636465666768"},
		{"10 bytes var padded", []FieldType{TypeBytes}, []any{[]byte("BakerBaker")},
			"0000000000000000 0a00000010000000 42616b657242616b 6572000000000000"},
		{"small ints", []FieldType{TypeBoolean, TypeTinyInt, TypeSmallInt, TypeInt},
			[]any{true, int8(-1), int16(-2), int32(-3)},
			"0000000000000000 0100000000000000 ff00000000000000 feff000000000000 fdffffff00000000"},
		{"float double", []FieldType{TypeFloat, TypeDouble}, []any{float32(1), 1.0},
			"0000000000000000 0000803f00000000 000000000000f03f"},
		{"date time", []FieldType{TypeDate, TypeTime}, []any{int32(18000), int32(3600000)},
			"0000000000000000 5046000000000000 80ee360000000000"},
		{"timestamp(3)", []FieldType{TypeTimestamp(3)}, []any{Timestamp{Millis: 1602288035000}},
			"0000000000000000 b824cf0f75010000"},
		{"timestamp(6)", []FieldType{ts6}, []any{Timestamp{Millis: 1602288035000, NanoOfMilli: 123000}},
			"0000000000000000 78e0010010000000 b824cf0f75010000"},
		{"null timestamp(6) reserves 8", []FieldType{ts6}, []any{nil},
			"0001000000000000 0000000010000000 0000000000000000"},
		{"decimal(10,2) compact", []FieldType{TypeDecimal(10, 2)}, []any{int64(-12345)},
			"0000000000000000 c7cfffffffffffff"},
		{"decimal(20,2) 12345", []FieldType{TypeDecimal(20, 2)}, []any{big.NewInt(12345)},
			"0000000000000000 0200000010000000 3039000000000000 0000000000000000"},
		{"decimal(38,0) -129", []FieldType{TypeDecimal(38, 0)}, []any{int64(-129)},
			"0000000000000000 0200000010000000 ff7f000000000000 0000000000000000"},
		{"null decimal(20,2) reserves 16", []FieldType{TypeDecimal(20, 2)}, []any{nil},
			"0001000000000000 0000000010000000 0000000000000000 0000000000000000"},
		{"two var fields", []FieldType{TypeString, TypeInt, TypeString}, []any{"0123456789", nil, "abcdefghi"},
			"0002000000000000 0a00000020000000 0000000000000000 0900000030000000" +
				"3031323334353637 3839000000000000 6162636465666768 6900000000000000"},
	} {
		got, err := BuildRow(tc.types, tc.values)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if want := mustHex(t, tc.want); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got % x\nwant % x", tc.name, got, want)
		}
	}
}

func TestRowHeaderWidthAndNullBits(t *testing.T) {
	for _, tc := range []struct{ arity, width int }{{0, 8}, {1, 8}, {56, 8}, {57, 16}, {120, 16}, {121, 24}} {
		if got := NullBitsWidth(tc.arity); got != tc.width {
			t.Errorf("NullBitsWidth(%d) = %d, want %d", tc.arity, got, tc.width)
		}
	}
	// Field 56 of 57 is bit 64 → byte 8, bit 0.
	types := make([]FieldType, 57)
	vals := make([]any, 57)
	for i := range types {
		types[i] = TypeInt
		vals[i] = int32(i)
	}
	vals[56] = nil
	vals[0] = nil
	row, err := BuildRow(types, vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(row) != 16+57*8 {
		t.Fatalf("len %d", len(row))
	}
	if row[1] != 1 || row[8] != 1 {
		t.Fatalf("null bits % x", row[:16])
	}
	if got := binary.LittleEndian.Uint32(row[16+8*55:]); got != 55 {
		t.Fatalf("field 55 = %d", got)
	}
}

func TestRowKindByte(t *testing.T) {
	b, err := NewRowBuilder([]FieldType{TypeBigInt})
	if err != nil {
		t.Fatal(err)
	}
	b.Kind = UpdateAfter
	row, err := b.Build([]any{int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	if row[0] != 2 {
		t.Fatalf("row kind byte %d", row[0])
	}
	// The kind is part of the hash, so a -U row differs from a +I one.
	b.Kind = Insert
	ins, _ := b.Build([]any{int64(1)})
	if HashRow(row) == HashRow(ins) {
		t.Fatal("row kind not hashed")
	}
}

func TestRowAppendKeepsOffsetsRelative(t *testing.T) {
	types := []FieldType{TypeString, TypeTimestamp(9)}
	b, err := NewRowBuilder(types)
	if err != nil {
		t.Fatal(err)
	}
	v1 := []any{"first long string", Timestamp{Millis: 1, NanoOfMilli: 2}}
	v2 := []any{"second, longer string value", nil}
	r1, _ := b.Build(v1)
	r2, _ := b.Build(v2)
	buf := []byte("prefix")
	buf, err = b.Append(buf, v1)
	if err != nil {
		t.Fatal(err)
	}
	buf, err = b.Append(buf, v2)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte("prefix"), r1...), r2...)
	if !bytes.Equal(buf, want) {
		t.Fatalf("append differs from separate builds")
	}
}

func TestRowErrorsLeaveDstUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		types  []FieldType
		values []any
		errSub string
	}{
		{"arity", []FieldType{TypeInt}, []any{int32(1), int32(2)}, "1 fields, got 2"},
		{"wrong go type", []FieldType{TypeInt}, []any{"x"}, "unsupported Go value string"},
		{"tinyint range", []FieldType{TypeTinyInt}, []any{200}, "out of range"},
		{"int range", []FieldType{TypeInt}, []any{int64(math.MaxInt32) + 1}, "out of range"},
		{"uint64 range", []FieldType{TypeBigInt}, []any{uint64(math.MaxUint64)}, "out of range"},
		{"bool type", []FieldType{TypeBoolean}, []any{1}, "unsupported"},
		{"decimal digits", []FieldType{TypeDecimal(3, 0)}, []any{1000}, "more than 3 digits"},
		{"decimal38 digits", []FieldType{TypeDecimal(20, 0)}, []any{new(big.Int).Exp(big.NewInt(10), big.NewInt(20), nil)}, "more than 20 digits"},
		{"nano range", []FieldType{TypeTimestamp(9)}, []any{Timestamp{NanoOfMilli: 1_000_000}}, "nano-of-millisecond"},
		{"float type", []FieldType{TypeFloat}, []any{1}, "unsupported"},
		{"late field", []FieldType{TypeString, TypeInt}, []any{"a long string value", "bad"}, "field 1"},
	} {
		dst := []byte{9, 9, 9}
		out, err := func() ([]byte, error) {
			b, err := NewRowBuilder(tc.types)
			if err != nil {
				return nil, err
			}
			return b.Append(dst, tc.values)
		}()
		if err == nil || !strings.Contains(err.Error(), tc.errSub) {
			t.Errorf("%s: err %v, want containing %q", tc.name, err, tc.errSub)
			continue
		}
		if !bytes.Equal(out, []byte{9, 9, 9}) {
			t.Errorf("%s: dst changed to % x", tc.name, out)
		}
	}
	for _, ft := range []FieldType{{}, {Kind: numKinds}, TypeTimestamp(10), TypeTimestampLTZ(-1), TypeDecimal(0, 0), TypeDecimal(39, 0), TypeDecimal(5, 6)} {
		if _, err := NewRowBuilder([]FieldType{ft}); err == nil {
			t.Errorf("type %v accepted", ft)
		}
	}
}

func TestRowAcceptedGoValues(t *testing.T) {
	// Different Go representations of one value give identical bytes.
	same := func(name string, ft FieldType, vs ...any) {
		t.Helper()
		var first []byte
		for i, v := range vs {
			row, err := BuildRow([]FieldType{ft}, []any{v})
			if err != nil {
				t.Errorf("%s #%d (%T): %v", name, i, v, err)
				return
			}
			if i == 0 {
				first = row
			} else if !bytes.Equal(row, first) {
				t.Errorf("%s: %T gives % x, want % x", name, v, row, first)
			}
		}
	}
	same("bigint", TypeBigInt, int64(7), 7, int8(7), uint32(7), uint64(7))
	same("string", TypeString, "long enough text", []byte("long enough text"))
	same("bytes", TypeBytes, []byte{1, 2, 3}, "\x01\x02\x03")
	inst := time.Date(2020, 10, 10, 0, 0, 35, 123456789, time.UTC)
	same("timestamp(9)", TypeTimestamp(9), inst, Timestamp{Millis: inst.UnixMilli(), NanoOfMilli: 456789})
	same("timestamp(3)", TypeTimestamp(3), inst.UnixMilli(), Timestamp{Millis: inst.UnixMilli()})
	same("decimal", TypeDecimal(30, 0), big.NewInt(-5), -5, *big.NewInt(-5))
	// Before the epoch the millisecond is floored, like TimestampData.
	pre := time.Date(1969, 12, 31, 23, 59, 59, 999_500_000, time.UTC)
	if ts := TimestampOf(pre); ts.Millis != -1 || ts.NanoOfMilli != 500_000 {
		t.Errorf("TimestampOf(pre-epoch) = %+v", ts)
	}
}

func TestJavaBigIntegerBytes(t *testing.T) {
	for _, tc := range []struct {
		v    int64
		want string
	}{{0, "00"}, {1, "01"}, {127, "7f"}, {128, "0080"}, {255, "00ff"}, {256, "0100"},
		{-1, "ff"}, {-128, "80"}, {-129, "ff7f"}, {-256, "ff00"}, {-257, "feff"},
		{math.MinInt64, "8000000000000000"}, {math.MaxInt64, "7fffffffffffffff"}} {
		if got := hex.EncodeToString(javaBigIntegerBytes(big.NewInt(tc.v))); got != tc.want {
			t.Errorf("%d: %s, want %s", tc.v, got, tc.want)
		}
	}
	// 10^38-1 needs 16 bytes, the space Flink reserves.
	max38, _ := new(big.Int).SetString(strings.Repeat("9", 38), 10)
	if n := len(javaBigIntegerBytes(max38)); n != 16 {
		t.Errorf("10^38-1 takes %d bytes", n)
	}
	if n := len(javaBigIntegerBytes(new(big.Int).Neg(max38))); n != 16 {
		t.Errorf("-(10^38-1) takes %d bytes", n)
	}
}

func TestDigits(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want int
	}{{"0", 1}, {"9", 1}, {"10", 2}, {"-99", 2}, {"-100", 3}, {"9223372036854775807", 19},
		{"-9223372036854775808", 19}, {"99999999999999999999", 20}, {"100000000000000000000", 21}} {
		v, _ := new(big.Int).SetString(tc.s, 10)
		if got := digits(v); got != tc.want {
			t.Errorf("digits(%s) = %d, want %d", tc.s, got, tc.want)
		}
	}
}
