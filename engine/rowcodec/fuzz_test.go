package rowcodec

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sfstate/sfstate/keygroups"
)

// genValue returns a random Go value (or nil) for a field of type n.
func genValue(n *node, rng *rand.Rand, depth int) any {
	if rng.IntN(5) == 0 {
		return nil
	}
	switch n.id {
	case arrow.BOOL:
		return rng.IntN(2) == 1
	case arrow.INT8:
		return int8(rng.Uint32())
	case arrow.INT16:
		return int16(rng.Uint32())
	case arrow.INT32:
		return int32(rng.Uint32())
	case arrow.INT64:
		return int64(rng.Uint64())
	case arrow.UINT8:
		return uint8(rng.Uint32())
	case arrow.UINT16:
		return uint16(rng.Uint32())
	case arrow.UINT32:
		return rng.Uint32()
	case arrow.UINT64:
		return rng.Uint64()
	case arrow.FLOAT32:
		return float32(rng.NormFloat64())
	case arrow.FLOAT64:
		return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
	case arrow.STRING, arrow.LARGE_STRING:
		b := make([]byte, rng.IntN(300)>>rng.IntN(6))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	case arrow.BINARY:
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	case arrow.DATE32:
		return arrow.Date32(rng.Uint32())
	case arrow.TIME32:
		return arrow.Time32(rng.IntN(86400000))
	case arrow.TIMESTAMP:
		return arrow.Timestamp(rng.Uint64())
	case arrow.DECIMAL128:
		return decimal128.New(int64(rng.Uint64()), rng.Uint64())
	case arrow.STRUCT:
		out := make([]any, len(n.children))
		for i, ch := range n.children {
			out[i] = genValue(ch, rng, depth+1)
		}
		return out
	case arrow.LIST:
		out := make([]any, rng.IntN(12))
		for i := range out {
			out[i] = genValue(n.children[0], rng, depth+1)
		}
		return out
	}
	panic("genValue: " + n.dt.String())
}

func fuzzSeeds(f *testing.F, c *Codec) {
	for _, row := range allTypesRows()[:3] {
		v, err := c.EncodeRow(nil, 9, row)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1})
	if v, err := c.EncodeRow(nil, 9, allTypesRows()[0]); err == nil {
		v[TTLSize] = headerByte(keygroups.UpdateAfter)
		f.Add(v)
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder. None may panic; a value
// that decodes must re-encode to exactly the same bytes, and the batch
// decoder must agree with the row decoder.
func FuzzDecode(f *testing.F) {
	c, err := NewCodec(allTypesSchema())
	if err != nil {
		f.Fatal(err)
	}
	fuzzSeeds(f, c)
	mem := memory.NewGoAllocator()
	f.Fuzz(func(t *testing.T, b []byte) {
		ttl, row, err := c.DecodeRow(b)
		verr := c.Validate(b)
		if (err == nil) != (verr == nil) {
			t.Fatalf("DecodeRow err %v, Validate err %v", err, verr)
		}
		rb := array.NewRecordBuilder(mem, c.Schema())
		defer rb.Release()
		_, berr := c.DecodeBatch([][]byte{b}, rb)
		if (berr == nil) != (err == nil) {
			t.Fatalf("DecodeBatch err %v, DecodeRow err %v", berr, err)
		}
		if err != nil {
			return
		}
		again, err := c.EncodeRow(nil, ttl, row)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		// Arrow rows carry no row kind: the re-encoding is the input with
		// the kind cleared.
		kind := Kind(b)
		if err := SetKind(again, kind); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("not canonical:\n in % x\nout % x", b, again)
		}
		rec := rb.NewRecordBatch()
		defer rec.Release()
		var a Arena
		if err := c.EncodeBatch(rec, []int64{ttl}, &a); err != nil {
			t.Fatal(err)
		}
		if err := SetKind(a.Value(0), kind); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Value(0), b) {
			t.Fatalf("batch re-encode differs:\n in % x\nout % x", b, a.Value(0))
		}
	})
}

// FuzzRoundTrip builds a random record from the fuzz seed, encodes it as a
// batch and checks that batch decode returns it and that every value equals
// the row encoder's bytes.
func FuzzRoundTrip(f *testing.F) {
	c, err := NewCodec(allTypesSchema())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint64(1), uint64(2), uint8(5))
	f.Add(uint64(99), uint64(0), uint8(0))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, nrows uint8) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		rng := rand.New(rand.NewPCG(s1, s2))
		rows := make([][]any, int(nrows)%40)
		for i := range rows {
			rows[i] = make([]any, len(c.fields))
			for j, n := range c.fields {
				rows[i][j] = genValue(n, rng, 0)
			}
		}
		rec := buildRecord(t, mem, c.Schema(), rows)
		defer rec.Release()
		ttls := make([]int64, len(rows))
		for i := range ttls {
			ttls[i] = int64(rng.Uint64())
		}
		var a Arena
		if err := c.EncodeBatch(rec, ttls, &a); err != nil {
			t.Fatal(err)
		}
		for i, row := range rows {
			want, err := c.EncodeRow(nil, ttls[i], row)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Value(i), want) {
				t.Fatalf("row %d: batch and row encodings differ", i)
			}
		}
		rb := array.NewRecordBuilder(mem, c.Schema())
		defer rb.Release()
		got, err := c.DecodeBatch(a.Values(nil), rb)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != ttls[i] {
				t.Fatalf("ttl %d", i)
			}
		}
		out := rb.NewRecordBatch()
		defer out.Release()
		if !array.RecordEqual(out, rec) {
			t.Fatalf("round trip differs")
		}
	})
}

// FuzzFromBinaryRow parses arbitrary bytes as BinaryRowData. It must not
// panic, and a row that parses must convert back and parse to the same value.
func FuzzFromBinaryRow(f *testing.F) {
	c, err := NewCodec(arrow.NewSchema(flinkAllSchema(), nil))
	if err != nil {
		f.Fatal(err)
	}
	fr, err := NewFlinkRow(c)
	if err != nil {
		f.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 4 {
		row := make([]any, len(c.fields))
		for j, n := range c.fields {
			row[j] = genValue(n, rng, 0)
			if n.id == arrow.DECIMAL128 && row[j] != nil && fr.slots[j] == fsDecCompact {
				row[j] = decimal128.FromI64(int64(rng.Uint64()))
			}
			if n.id == arrow.TIMESTAMP && row[j] != nil {
				row[j] = arrow.Timestamp(int64(rng.Uint64()) >> 12)
			}
		}
		v, err := c.EncodeRow(nil, 0, row)
		if err != nil {
			f.Fatal(err)
		}
		b, _, err := fr.ToBinaryRow(nil, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, kind, err := fr.FromBinaryRow(nil, 3, b)
		if err != nil {
			return
		}
		if err := c.Validate(v); err != nil {
			t.Fatalf("FromBinaryRow produced an invalid value: %v", err)
		}
		if Kind(v) != kind {
			t.Fatalf("value records kind %v, BinaryRowData has %v", Kind(v), kind)
		}
		b2, ttl, err := fr.ToBinaryRow(nil, v)
		if err != nil {
			t.Fatalf("ToBinaryRow of a parsed row: %v", err)
		}
		v2, kind2, err := fr.FromBinaryRow(nil, ttl, b2)
		if err != nil || kind2 != kind || !bytes.Equal(v, v2) {
			t.Fatalf("second parse: %v %v", err, kind2)
		}
	})
}
