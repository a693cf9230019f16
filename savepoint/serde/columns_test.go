package serde

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// colTypes are the row field types the column plans cover.
var colTypes = []*LogicalType{
	{Root: "BOOLEAN"}, {Root: "TINYINT"}, {Root: "SMALLINT"}, {Root: "INTEGER"}, {Root: "DATE"},
	{Root: "BIGINT"}, {Root: "FLOAT"}, {Root: "DOUBLE"}, {Root: "VARCHAR"}, {Root: "CHAR"},
	{Root: "TIMESTAMP_WITHOUT_TIME_ZONE", Precision: 3}, {Root: "TIMESTAMP_WITH_LOCAL_TIME_ZONE", Precision: 0},
}

// randRow lays out a BinaryRowData of types with random values and nulls,
// with its i32 length prefix.
func randRow(r *rand.Rand, types []*LogicalType) []byte {
	w := keygroups.NullBitsWidth(len(types))
	fixed := make([]byte, w+8*len(types))
	fixed[0] = byte(r.IntN(4))
	var vari []byte
	for i, t := range types {
		if r.IntN(5) == 0 {
			fixed[(i+8)>>3] |= 1 << ((i + 8) & 7)
			continue
		}
		slot := fixed[w+8*i : w+8*i+8]
		switch t.Root {
		case "BOOLEAN":
			slot[0] = byte(r.IntN(2))
		case "TINYINT":
			slot[0] = byte(r.Uint32())
		case "SMALLINT":
			binary.LittleEndian.PutUint16(slot, uint16(r.Uint32()))
		case "INTEGER", "DATE":
			binary.LittleEndian.PutUint32(slot, r.Uint32())
		case "FLOAT":
			binary.LittleEndian.PutUint32(slot, math.Float32bits(r.Float32()*1e6-5e5))
		case "DOUBLE":
			binary.LittleEndian.PutUint64(slot, math.Float64bits(r.NormFloat64()))
		case "VARCHAR", "CHAR":
			s := fmt.Sprintf("%x", r.Uint64())[:r.IntN(16)]
			if len(s) <= 7 {
				copy(slot, s)
				slot[7] = 0x80 | byte(len(s))
				continue
			}
			off := len(fixed) + len(vari)
			vari = append(vari, s...)
			for len(vari)%8 != 0 {
				vari = append(vari, 0)
			}
			binary.LittleEndian.PutUint64(slot, uint64(off)<<32|uint64(len(s)))
		default:
			binary.LittleEndian.PutUint64(slot, r.Uint64())
		}
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(fixed)+len(vari)))
	return append(append(out, fixed...), vari...)
}

// TestColumnPlanMatchesDecoder: for SQL rows of every planned field type
// (plain and TTL-wrapped) and for the primitives, column plans yield
// exactly the generic decoder's values; for every single-byte change and
// truncation they fail exactly when it fails, with the same error, and the
// fast path accepts only what decodes.
func TestColumnPlanMatchesDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	row := &Snapshot{Class: ClassRowData, Types: colTypes}
	ttlRow := &Snapshot{Class: ClassTTL, Nested: []*Snapshot{{Class: ClassLong}, row}}
	type gen func() []byte
	cases := []struct {
		snap *Snapshot
		gen  gen
	}{
		{row, func() []byte { return randRow(r, colTypes) }},
		{ttlRow, func() []byte { return append(binary.BigEndian.AppendUint64(nil, r.Uint64()), randRow(r, colTypes)...) }},
		{&Snapshot{Class: ClassLong}, func() []byte { return binary.BigEndian.AppendUint64(nil, r.Uint64()) }},
		{&Snapshot{Class: ClassInt}, func() []byte { return binary.BigEndian.AppendUint32(nil, r.Uint32()) }},
		{&Snapshot{Class: ClassShort}, func() []byte { return binary.BigEndian.AppendUint16(nil, uint16(r.Uint32())) }},
		{&Snapshot{Class: ClassByte}, func() []byte { return []byte{byte(r.Uint32())} }},
		{&Snapshot{Class: ClassBoolean}, func() []byte { return []byte{byte(r.IntN(2))} }},
		{&Snapshot{Class: ClassDouble}, func() []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(r.NormFloat64())) }},
		{&Snapshot{Class: ClassFloat}, func() []byte { return binary.BigEndian.AppendUint32(nil, math.Float32bits(r.Float32())) }},
		{&Snapshot{Class: ClassStringData}, func() []byte {
			s := fmt.Sprintf("%x", r.Uint64())[:r.IntN(16)]
			return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...)
		}},
		{&Snapshot{Class: ClassString}, func() []byte {
			switch r.IntN(3) {
			case 0:
				return []byte{0} // null
			case 1:
				return []byte{4, 'a', 'b', 'c'}
			}
			return []byte{3, 0xC3, 0x01, 0x41} // "éA" as char varints
		}},
	}
	d := binfmt.New(nil, 0)
	for _, c := range cases {
		dec := NewDecoder(c.snap)
		p := PlanColumns(dec)
		if p == nil {
			t.Fatalf("%s: no column plan", c.snap.Class)
		}
		cols := p.NewColumns()
		for i := range 300 {
			b := c.gen()
			want, err := readerExact(dec, b, 100)
			if err != nil {
				t.Fatalf("%s: generic decode: %v", c.snap.Class, err)
			}
			for _, fast := range []bool{true, false} {
				n := cols.Len()
				if fast {
					if !p.DecodeFast(b, 100, cols) {
						if c.snap.Class == ClassString {
							continue // StringValue always takes the checked path
						}
						t.Fatalf("%s: fast path rejected a valid value", c.snap.Class)
					}
				} else if err := p.DecodeExact(d, b, 100, cols); err != nil {
					t.Fatalf("%s: %v", c.snap.Class, err)
				}
				if got := cols.Value(n); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s value %d: columns %#v, decoder %#v", c.snap.Class, i, got, want)
				}
			}
			if i%10 != 0 {
				continue
			}
			// Damaged copies: same outcome, same error; columns unchanged
			// by failures.
			mod := make([]byte, len(b))
			for j := 0; j <= len(b); j++ {
				var in []byte
				if j == len(b) {
					in = b[:r.IntN(len(b))]
				} else {
					copy(mod, b)
					mod[j] ^= byte(1 << r.IntN(8))
					in = mod
				}
				_, gerr := readerExact(dec, in, 100)
				n := cols.Len()
				cerr := p.DecodeExact(d, in, 100, cols)
				if fmt.Sprint(gerr) != fmt.Sprint(cerr) {
					t.Fatalf("%s: damaged at %d: generic %v, columns %v", c.snap.Class, j, gerr, cerr)
				}
				if cerr != nil && cols.Len() != n {
					t.Fatalf("%s: a failed decode left %d values", c.snap.Class, cols.Len()-n)
				}
				if gerr != nil && p.DecodeFast(in, 100, cols) {
					t.Fatalf("%s: fast path accepted what the decoder rejects: %v", c.snap.Class, gerr)
				}
				cols.Truncate(n)
			}
		}
	}
}

// readerExact decodes b as exactly one value the way the keyed-state
// reader does (its leftover message is what DecodeExact reproduces).
func readerExact(dec Decoder, b []byte, base int64) (Value, error) {
	d := binfmt.New(b, base)
	v := dec.Decode(d)
	if d.Err() != nil {
		return nil, d.Err()
	}
	if d.Len() != 0 {
		return nil, &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after the %s value", binfmt.ErrCorrupt, d.Len(), dec.Snapshot().Name())}
	}
	return v, nil
}

// columnSnaps are the serializers FuzzColumns decodes.
var columnSnaps = []*Snapshot{
	{Class: ClassRowData, Types: colTypes},
	{Class: ClassTTL, Nested: []*Snapshot{{Class: ClassLong}, {Class: ClassRowData, Types: colTypes}}},
	{Class: ClassLong}, {Class: ClassInt}, {Class: ClassBoolean}, {Class: ClassStringData}, {Class: ClassString},
}

// FuzzColumns: column plans agree with the generic decoder on any input
// (same value or same error; the fast path accepts only what decodes).
func FuzzColumns(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 4 {
		f.Add(uint8(0), randRow(r, colTypes))
		f.Add(uint8(1), append(binary.BigEndian.AppendUint64(nil, r.Uint64()), randRow(r, colTypes)...))
	}
	f.Add(uint8(2), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(uint8(4), []byte{1})
	f.Add(uint8(5), []byte{0, 0, 0, 2, 'h', 'i'})
	f.Add(uint8(6), []byte{3, 0xC3, 0x01, 0x41})
	decs := make([]Decoder, len(columnSnaps))
	plans := make([]*ColumnPlan, len(columnSnaps))
	for i, s := range columnSnaps {
		decs[i] = NewDecoder(s)
		plans[i] = PlanColumns(decs[i])
		if plans[i] == nil {
			f.Fatalf("%s: no plan", s.Class)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		i := int(which) % len(decs)
		dec, p := decs[i], plans[i]
		want, gerr := readerExact(dec, b, 10)
		cols := p.NewColumns()
		cerr := p.DecodeExact(binfmt.New(nil, 0), b, 10, cols)
		if fmt.Sprint(gerr) != fmt.Sprint(cerr) {
			t.Fatalf("generic %v, columns %v", gerr, cerr)
		}
		if gerr != nil {
			if cols.Len() != 0 || p.DecodeFast(b, 10, cols) {
				t.Fatal("a failed value reached the columns")
			}
			return
		}
		// Values print alike (NaN fields are unequal to themselves).
		if got := cols.Value(0); !reflect.DeepEqual(got, want) && render(got) != render(want) {
			t.Fatalf("columns %s, decoder %s", render(got), render(want))
		}
	})
}

// render prints a value with its types, looking through rows and TTL
// wrappers.
func render(v Value) string {
	switch x := v.(type) {
	case *Row:
		out := fmt.Sprintf("row %d [", x.Kind)
		for _, f := range x.Fields {
			out += render(f) + " "
		}
		return out + "]"
	case *TTLValue:
		return fmt.Sprintf("ttl %d %s", x.LastAccess, render(x.Value))
	}
	return fmt.Sprintf("%T(%v)", v, v)
}
