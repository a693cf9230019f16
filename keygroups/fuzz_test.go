package keygroups

import (
	"encoding/binary"
	"math/big"
	"testing"
)

// fuzzRow decodes a byte string into a schema and values: each field takes
// a kind byte, a parameter byte, a null flag and up to 16 value bytes.
func fuzzRow(data []byte) ([]FieldType, []any) {
	var types []FieldType
	var vals []any
	for len(data) >= 3 && len(types) < 200 {
		kind := Kind(data[0] % byte(numKinds))
		param := int(data[1])
		isNull := data[2]&1 == 1
		n := int(data[2]>>1) % 40
		data = data[3:]
		n = min(n, len(data))
		raw := data[:n]
		data = data[n:]
		ft := FieldType{Kind: kind}
		switch kind {
		case KindTimestamp, KindTimestampLTZ:
			ft.Precision = param % 12 // some invalid on purpose
		case KindDecimal:
			ft.Precision = param % 41
			ft.Scale = param % 7
		}
		var u8 [8]byte
		copy(u8[:], raw)
		x := int64(binary.LittleEndian.Uint64(u8[:]))
		var v any
		switch kind {
		case KindBoolean:
			v = x&1 == 1
		case KindTinyInt, KindSmallInt, KindInt, KindDate, KindTime, KindIntervalYearMonth:
			v = int32(x) // may be out of range for the narrow kinds
		case KindBigInt, KindIntervalDayTime:
			v = x
		case KindFloat:
			v = float32(x)
		case KindDouble:
			v = float64(x)
		case KindString:
			v = string(raw)
		case KindBytes:
			v = append([]byte(nil), raw...)
		case KindTimestamp, KindTimestampLTZ:
			v = Timestamp{Millis: x, NanoOfMilli: int32(param * 4093)}
		case KindDecimal:
			v = new(big.Int).SetBytes(raw)
		default:
			v = x
		}
		if isNull {
			v = nil
		}
		types = append(types, ft)
		vals = append(vals, v)
	}
	return types, vals
}

func FuzzRowBuilder(f *testing.F) {
	f.Add([]byte{byte(KindBigInt), 0, 16, 2, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{byte(KindString), 0, 20, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'})
	f.Add([]byte{byte(KindDecimal), 20, 1, byte(KindTimestamp), 6, 1})
	f.Add([]byte{byte(KindTimestamp), 9, 16, 1, 2, 3, 4, 5, 6, 7, 8, byte(KindInt), 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		types, vals := fuzzRow(data)
		b, err := NewRowBuilder(types)
		if err != nil {
			return
		}
		prefix := []byte{1, 2, 3}
		out, err := b.Append(prefix, vals)
		if err != nil {
			if len(out) != len(prefix) {
				t.Fatalf("failed append changed dst length to %d", len(out))
			}
			return
		}
		row := out[len(prefix):]
		fixed := FixedPartSize(len(types))
		if len(row)%8 != 0 || len(row) < fixed {
			t.Fatalf("row length %d (fixed part %d)", len(row), fixed)
		}
		hdr := NullBitsWidth(len(types))
		if row[0] != 0 {
			t.Fatalf("row kind %d", row[0])
		}
		// Header bits beyond the fields are zero.
		for bit := 8 + len(types); bit < hdr*8; bit++ {
			if row[bit>>3]&(1<<(bit&7)) != 0 {
				t.Fatalf("stray header bit %d", bit)
			}
		}
		for i, v := range vals {
			bit := i + 8
			null := row[bit>>3]&(1<<(bit&7)) != 0
			if null != (v == nil) {
				t.Fatalf("field %d null bit %v, value %v", i, null, v)
			}
			slot := binary.LittleEndian.Uint64(row[hdr+8*i:])
			switch {
			case v == nil && types[i].Compact():
				if slot != 0 {
					t.Fatalf("null field %d slot %#x", i, slot)
				}
			case !types[i].Compact() || types[i].Kind == KindString || types[i].Kind == KindBytes:
				if types[i].Compact() && slot>>63 == 1 {
					// Inline: length in the top byte, data below.
					n := int(slot>>56) & 0x7f
					if n > 7 {
						t.Fatalf("inline length %d", n)
					}
					continue
				}
				off, n := int(slot>>32), int(uint32(slot))
				if types[i].Kind == KindTimestamp || types[i].Kind == KindTimestampLTZ {
					n = 8 // low word is nano-of-milli
				}
				if off < fixed || off%8 != 0 || off+n > len(row) {
					t.Fatalf("field %d var part offset %d len %d row %d", i, off, n, len(row))
				}
			}
		}
		_ = HashRow(row)
		_ = Assign(Row(row), 128)
	})
}

func FuzzParseRowLiteral(f *testing.F) {
	f.Add("row<int,string>", `1,"a, b"`)
	f.Add("row<decimal(20,2),timestamp(9),date,bytes>", "-1.5,2020-10-10 00:00:35.123456789,2020-01-01,0x00ff")
	f.Add("row<bigint>", "null")
	f.Fuzz(func(t *testing.T, typ, lit string) {
		types, err := ParseRowType(typ)
		if err != nil {
			return
		}
		fields, err := SplitFields(lit)
		if err != nil || len(fields) != len(types) {
			return
		}
		vals := make([]any, len(types))
		for i, fl := range fields {
			if fl.IsNull() {
				continue
			}
			v, err := ParseValue(types[i], fl.Text)
			if err != nil {
				return
			}
			vals[i] = v
		}
		row, err := BuildRow(types, vals)
		if err != nil {
			return
		}
		if len(row)%8 != 0 {
			t.Fatalf("row length %d", len(row))
		}
	})
}
