package recordstore

import (
	"bytes"
	"errors"
	"testing"
)

func TestBucketValueRoundTripAndCorruption(t *testing.T) {
	rows := []LogicalRow{
		{Row: []byte("a"), Count: 1, Assoc: 0, TS: 10},
		{Row: []byte("bb"), Count: 300, Assoc: 2, TS: 30},
		{Row: []byte{}, Count: 2, Assoc: 0, TS: 20},
	}
	sortRows(rows)
	v := AppendBucketValue(nil, rows)
	if len(v) != BucketSize(rows) {
		t.Fatalf("size %d, BucketSize %d", len(v), BucketSize(rows))
	}
	var got []LogicalRow
	if _, err := DecodeBucketValue(v, func(r LogicalRow) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !bytes.Equal(got[2].Row, []byte("bb")) || got[2].Count != 300 || got[2].Assoc != 2 || got[0].TS != 20 {
		t.Fatalf("round trip: %+v", got)
	}
	// every truncation fails cleanly
	for i := 0; i < len(v); i++ {
		if _, err := DecodeBucketValue(v[:i], func(LogicalRow) error { return nil }); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncation at %d: %v", i, err)
		}
	}
	// every single-byte flip fails cleanly or decodes; never panics
	for i := 0; i < len(v); i++ {
		w := append([]byte(nil), v...)
		w[i] ^= 0xff
		DecodeBucketValue(w, func(LogicalRow) error { return nil })
	}
	// absurd row count is refused before allocation
	bad := append(append([]byte(nil), v[:TTLPrefix+1]...), 0xff, 0xff, 0xff, 0xff, 0x0f)
	if _, err := DecodeBucketValue(bad, func(LogicalRow) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("absurd count: %v", err)
	}
	// out-of-order rows
	swapped := AppendBucketValue(nil, []LogicalRow{rows[1], rows[0]})
	if _, err := DecodeBucketValue(swapped, func(LogicalRow) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unordered rows: %v", err)
	}
}

func TestRecordKeyAndValue(t *testing.T) {
	for _, width := range []int{1, 2} {
		k := AppendRecordKey(nil, width, 77, Right, []byte("key"), []byte("row-bytes"))
		kg, side, key, row, _, err := DecodeGroupKey(k, width)
		if err != nil || kg != 77 || side != Right || string(key) != "key" || string(row) != "row-bytes" {
			t.Fatalf("width %d: %d %v %q %q %v", width, kg, side, key, row, err)
		}
		for i := 0; i < width+2; i++ {
			if _, _, _, _, _, err := DecodeGroupKey(k[:i], width); err == nil {
				t.Fatalf("truncated key of %d bytes accepted", i)
			}
		}
	}
	v := AppendRecordValue(nil, 9, 3, 1)
	if ts, c, a, _, err := DecodeRecordValue(v); err != nil || ts != 9 || c != 3 || a != 1 {
		t.Fatalf("value: %d %d %d %v", ts, c, a, err)
	}
	if _, _, _, _, err := DecodeRecordValue(AppendRecordValue(nil, 9, 0, 0)); err == nil {
		t.Fatal("zero count accepted")
	}
	if _, _, _, _, err := DecodeRecordValue(AppendRecordValue(nil, 9, 1, -1)); err == nil {
		t.Fatal("negative association count accepted")
	}
	if _, _, _, _, err := DecodeRecordValue(v[:20]); err == nil {
		t.Fatal("short value accepted")
	}
}

func TestBucketToRecords(t *testing.T) {
	rows := []LogicalRow{{Row: []byte("a"), Count: 2, TS: 100}, {Row: []byte("b"), Count: 1, Assoc: 3, TS: 10}, {Row: []byte("c"), Count: 1, TS: 50}}
	bk := AppendGroupPrefix(nil, 2, 300, Left, []byte("key"))
	var keys []string
	err := BucketToRecords(2, bk, AppendBucketValue(nil, rows), 60, 20, func(k, v []byte) error {
		kg, side, key, row, _, err := DecodeGroupKey(k, 2)
		if err != nil || kg != 300 || side != Left || string(key) != "key" {
			t.Fatalf("record key %x: %v", k, err)
		}
		ts, c, _, _, err := DecodeRecordValue(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(row) == "a" && (c != 2 || ts != 100) {
			t.Fatalf("row a: count %d ts %d", c, ts)
		}
		keys = append(keys, string(row))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// b (ts 10) is expired at 60 under a 20 ms TTL, c (ts 50) is not
	if len(keys) != 2 || keys[0] != "a" || keys[1] != "c" {
		t.Fatalf("records %q", keys)
	}
	if err := BucketToRecords(2, append(bk, 'x'), AppendBucketValue(nil, rows), 0, 0, func(k, v []byte) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing key bytes: %v", err)
	}
	if err := BucketToRecords(2, bk, []byte{1, 2, 3}, 0, 0, func(k, v []byte) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short value: %v", err)
	}
}
