package serde

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

func FuzzSnapshot(f *testing.F) {
	if d := fixtures.Dir(); d != "" {
		dirs, _ := os.ReadDir(filepath.Join(d, "serializer-snapshots-1.20"))
		for _, e := range dirs {
			s, err1 := os.ReadFile(filepath.Join(d, "serializer-snapshots-1.20", e.Name(), "serializer-snapshot"))
			v, err2 := os.ReadFile(filepath.Join(d, "serializer-snapshots-1.20", e.Name(), "test-data"))
			if err1 == nil && err2 == nil {
				f.Add(s, v)
			}
		}
	}
	f.Add([]byte{0, 0, 0, 2}, []byte{})
	f.Add(pojoSnapshotBytes(f, map[string][]byte{"id": versionedBytes(ClassLong, 3), "x": versionedBytes("a.B", 1, 7)}, []string{"id", "x"}),
		[]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1})
	f.Fuzz(func(t *testing.T, snap, data []byte) {
		s, n, err := ParseSnapshot(snap, 0)
		if err != nil {
			return
		}
		if n > len(snap) || len(s.Raw) != n-4 {
			t.Fatalf("consumed %d, raw %d", n, len(s.Raw))
		}
		_ = s.String()
		dec := NewDecoder(s)
		_, _ = DecodeAll(dec, data, 0)
		d := binfmt.New(data, 0)
		dec.Skip(d)
	})
}

func FuzzBinaryRow(f *testing.F) {
	types := []*LogicalType{
		{Root: "BIGINT"}, {Root: "VARCHAR", Length: 1<<31 - 1}, {Root: "DECIMAL", Precision: 30, Scale: 2},
		{Root: "TIMESTAMP_WITHOUT_TIME_ZONE", Precision: 9}, {Root: "ROW", Fields: []RowField{{Name: "x", Type: &LogicalType{Root: "INTEGER"}}}}, {Root: "MAP", Key: &LogicalType{Root: "VARCHAR"}, Value: &LogicalType{Root: "ARRAY", Element: &LogicalType{Root: "SMALLINT"}}},
		{Root: "ARRAY", Element: &LogicalType{Root: "INTEGER"}},
	}
	dec := NewDecoder(&Snapshot{Class: ClassRowData, Types: types, Nested: make([]*Snapshot, len(types))})
	r := newRowBuilder(len(types), keygroups.Insert)
	r.long(0, 7)
	r.bytes(1, []byte("a string longer than seven"))
	seed := r.done()
	f.Add(binary.BigEndian.AppendUint32(nil, uint32(len(seed))), seed)
	f.Fuzz(func(t *testing.T, prefix, row []byte) {
		b := append(append([]byte{}, prefix...), row...)
		_, _ = DecodeAll(dec, b, 0)
	})
}
