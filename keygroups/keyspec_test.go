package keygroups

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestParseKeySpec(t *testing.T) {
	cases := []struct {
		spec, key string
		hash      int32
		ser       string // hex
	}{
		{"bigint", "1", 1, "0000000000000001"},
		{"long", "-1", 0, "ffffffffffffffff"},
		{"int", " 7 ", 7, "00000007"},
		{"smallint", "-2", -2, "fffe"},
		{"tinyint", "5", 5, "05"},
		{"boolean", "true", 1231, "01"},
		{"double", "0", 0, "0000000000000000"},
		{"float", "1", 1065353216, "3f800000"},
		// "a" + U+1F600: 3 UTF-16 units (a, D83D, DE00), each a 7-bit varint, after varint(4).
		{"string", "a\U0001F600", HashString("a\U0001F600"), "0461bdb00380bc03"},
		{"tuple<bigint, string>", `3, "x, y"`, HashTuple(HashLong(3), HashString("x, y")), "000000000000000305" + "78" + "2c" + "20" + "79"},
	}
	for _, c := range cases {
		ks, err := ParseKeySpec(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		k, ser, err := ks.Parse(c.key)
		if err != nil {
			t.Fatalf("%s %q: %v", c.spec, c.key, err)
		}
		if got := k.HashCode(); got != c.hash {
			t.Errorf("%s %q: hash %d, want %d", c.spec, c.key, got, c.hash)
		}
		if got := hex.EncodeToString(ser); got != c.ser {
			t.Errorf("%s %q: bytes %s, want %s", c.spec, c.key, got, c.ser)
		}
	}
	// A row key is its length then the BinaryRowData RowBuilder writes.
	ks, err := ParseKeySpec("row<int, string>")
	if err != nil {
		t.Fatal(err)
	}
	k, ser, err := ks.Parse(`1,null`)
	if err != nil {
		t.Fatal(err)
	}
	want, err := BuildRow(ks.Row, []any{int32(1), nil})
	if err != nil {
		t.Fatal(err)
	}
	if string(ser[4:]) != string(want) || int(ser[3]) != len(want) || k.HashCode() != HashRow(want) {
		t.Errorf("row key: %x (hash %d), want length-prefixed %x (hash %d)", ser, k.HashCode(), want, HashRow(want))
	}
}

func TestParseKeySpecErrors(t *testing.T) {
	for spec, frag := range map[string]string{
		"uuid":                "unknown key type",
		"tuple<>":             "malformed tuple",
		"tuple<bigint, date>": "tuple field type",
		"tuple<" + strings.Repeat("int,", 25) + "int>": "at most 25",
		"row<nope>": "",
	} {
		if _, err := ParseKeySpec(spec); err == nil || !strings.Contains(err.Error(), frag) {
			t.Errorf("%s: %v, want an error with %q", spec, err, frag)
		}
	}
	ks, _ := ParseKeySpec("tuple<int, int>")
	for key, frag := range map[string]string{"1": "1 fields, key type has 2", "1,null": "cannot be null", "1,x": "field 1"} {
		if _, _, err := ks.Parse(key); err == nil || !strings.Contains(err.Error(), frag) {
			t.Errorf("tuple<int, int> %q: %v, want %q", key, err, frag)
		}
	}
}
