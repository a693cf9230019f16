package keyed

// Builders for synthetic keyed-state streams (tests, fuzz seeds and
// benchmarks): serializer snapshots with hand-written Java LogicalType
// blobs, headers, BinaryRowData rows and key-group blocks.

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

func utfBytes(s string) []byte {
	var e binfmt.Encbuf
	_ = e.PutUTF(s)
	return e.B
}

// javaLogicalType writes a LogicalType subclass (no own fields besides the
// optional int "length") the way ObjectOutputStream does.
func javaLogicalType(class, root string, nullable bool, length int32, hasLength bool) []byte {
	var e binfmt.Encbuf
	e.PutU16(0xACED)
	e.PutU16(5)
	e.PutU8(0x73)
	e.PutU8(0x72)
	e.PutBytes(utfBytes("org.apache.flink.table.types.logical." + class))
	e.PutI64(1)
	e.PutU8(0x02)
	if hasLength {
		e.PutU16(1)
		e.PutU8('I')
		e.PutBytes(utfBytes("length"))
	} else {
		e.PutU16(0)
	}
	e.PutU8(0x78)
	// super class LogicalType
	e.PutU8(0x72)
	e.PutBytes(utfBytes("org.apache.flink.table.types.logical.LogicalType"))
	e.PutI64(1)
	e.PutU8(0x02)
	e.PutU16(2)
	e.PutU8('Z')
	e.PutBytes(utfBytes("isNullable"))
	e.PutU8('L')
	e.PutBytes(utfBytes("typeRoot"))
	e.PutU8(0x74)
	e.PutBytes(utfBytes("Lorg/apache/flink/table/types/logical/LogicalTypeRoot;"))
	e.PutU8(0x78)
	e.PutU8(0x70)
	// class data: LogicalType fields, then the subclass's
	e.PutBool(nullable)
	e.PutU8(0x7E)
	e.PutU8(0x72)
	e.PutBytes(utfBytes("org.apache.flink.table.types.logical.LogicalTypeRoot"))
	e.PutI64(0)
	e.PutU8(0x12)
	e.PutU16(0)
	e.PutU8(0x78)
	e.PutU8(0x72)
	e.PutBytes(utfBytes("java.lang.Enum"))
	e.PutI64(0)
	e.PutU8(0x12)
	e.PutU16(0)
	e.PutU8(0x78)
	e.PutU8(0x70)
	e.PutU8(0x74)
	e.PutBytes(utfBytes(root))
	if hasLength {
		e.PutI32(length)
	}
	return e.B
}

func versioned(class string, version int32, body ...[]byte) []byte {
	var e binfmt.Encbuf
	e.PutBytes(utfBytes(class))
	e.PutI32(version)
	for _, b := range body {
		e.PutBytes(b)
	}
	return e.B
}

func simpleSnap(class string) []byte { return versioned(class, 3) }

func nestedBlock(nested ...[]byte) []byte {
	var e binfmt.Encbuf
	e.PutI32(serde.NestedMagic)
	e.PutI32(1)
	e.PutI32(int32(len(nested)))
	for _, n := range nested {
		e.PutBytes(n)
	}
	return e.B
}

func compositeSnap(class string, outerVersion int32, outer []byte, nested ...[]byte) []byte {
	var e binfmt.Encbuf
	e.PutI32(serde.CompositeMagic)
	e.PutI32(outerVersion)
	e.PutBytes(outer)
	return versioned(class, 3, e.B, nestedBlock(nested...))
}

type sqlField struct {
	blob []byte
	snap []byte
}

var (
	fBigInt = sqlField{javaLogicalType("BigIntType", "BIGINT", true, 0, false), simpleSnap(serde.ClassLong)}
	fInt    = sqlField{javaLogicalType("IntType", "INTEGER", true, 0, false), simpleSnap(serde.ClassInt)}
	fDouble = sqlField{javaLogicalType("DoubleType", "DOUBLE", true, 0, false), simpleSnap(serde.ClassDouble)}
	fBool   = sqlField{javaLogicalType("BooleanType", "BOOLEAN", true, 0, false), simpleSnap(serde.ClassBoolean)}
	fString = sqlField{javaLogicalType("VarCharType", "VARCHAR", true, 1<<31-1, true), simpleSnap(serde.ClassStringData)}
)

func rowSnap(fields ...sqlField) []byte {
	var e binfmt.Encbuf
	e.PutI32(int32(len(fields)))
	var nested [][]byte
	for _, f := range fields {
		e.PutBytes(f.blob)
		nested = append(nested, f.snap)
	}
	return versioned(serde.ClassRowData, 3, e.B, nestedBlock(nested...))
}

func top(v []byte) []byte { return append([]byte{0, 0, 0, 2}, v...) }

type synthState struct {
	name    string
	typ     BackendStateType
	options [][2]string
	sers    [][2][]byte // key, snapshot (versioned)
}

func stateMetaBytes(s synthState) []byte {
	var e binfmt.Encbuf
	e.PutBytes(utfBytes(s.name))
	e.PutI32(int32(s.typ))
	e.PutI32(int32(len(s.options)))
	for _, o := range s.options {
		e.PutBytes(utfBytes(o[0]))
		e.PutBytes(utfBytes(o[1]))
	}
	e.PutI32(int32(len(s.sers)))
	for _, kv := range s.sers {
		e.PutBytes(utfBytes(string(kv[0])))
		e.PutBytes(top(kv[1]))
	}
	return e.B
}

func headerBytes(compressed bool, keySnap []byte, states ...synthState) []byte {
	var e binfmt.Encbuf
	e.PutI32(6)
	e.PutBool(compressed)
	e.PutBytes(top(keySnap))
	e.PutI16(int16(len(states)))
	for _, s := range states {
		e.PutBytes(stateMetaBytes(s))
	}
	return e.B
}

func kvState(name, kind string, ns, value []byte) synthState {
	return synthState{name: name, typ: KeyValue, options: [][2]string{{OptKeyedStateType, kind}},
		sers: [][2][]byte{{[]byte(SerValue), value}, {[]byte(SerNamespace), ns}}}
}

// row lays out a BinaryRowData with BIGINT/INT/STRING fields (values of
// type int64, int32, string or nil) and returns it with the i32 length
// prefix RowDataSerializer writes.
func rowBytes(kind byte, vals ...any) []byte {
	w := ((len(vals) + 63 + 8) / 64) * 8
	fixed := make([]byte, w+8*len(vals))
	fixed[0] = kind
	var vari []byte
	for i, v := range vals {
		slot := fixed[w+8*i : w+8*i+8]
		switch x := v.(type) {
		case nil:
			fixed[(i+8)>>3] |= 1 << ((i + 8) & 7)
		case int64:
			binary.LittleEndian.PutUint64(slot, uint64(x))
		case int32:
			binary.LittleEndian.PutUint32(slot, uint32(x))
		case float64:
			binary.LittleEndian.PutUint64(slot, math.Float64bits(x))
		case bool:
			if x {
				slot[0] = 1
			}
		case string:
			if len(x) <= 7 {
				copy(slot, x)
				slot[7] = 0x80 | byte(len(x))
				continue
			}
			off := len(fixed) + len(vari)
			vari = append(vari, x...)
			for len(vari)%8 != 0 {
				vari = append(vari, 0)
			}
			binary.LittleEndian.PutUint64(slot, uint64(off)<<32|uint64(len(x)))
		default:
			panic(fmt.Sprintf("rowBytes: %T", v))
		}
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(fixed)+len(vari)))
	return append(append(out, fixed...), vari...)
}

type synthEntry struct {
	kg         int
	state      int
	key, value []byte // key includes the key-group prefix
}

// buildStream lays out header + blocks. Entries are grouped per key group
// (ascending) and per state (in the given order within a key group). It
// returns the stream and the offset of each key group (0 = empty).
func buildStream(header []byte, compressed bool, maxPar int, entries []synthEntry) ([]byte, map[int]int64) {
	out := append([]byte{}, header...)
	byKG := map[int][]synthEntry{}
	var kgs []int
	for _, e := range entries {
		if _, ok := byKG[e.kg]; !ok {
			kgs = append(kgs, e.kg)
		}
		byKG[e.kg] = append(byKG[e.kg], e)
	}
	sort.Ints(kgs)
	offsets := map[int]int64{}
	for _, kg := range kgs {
		es := byKG[kg]
		sort.SliceStable(es, func(i, j int) bool { return es[i].state < es[j].state })
		var blk binfmt.Encbuf
		blk.PutU16(uint16(es[0].state))
		for i, e := range es {
			key := append([]byte{}, e.key...)
			last := i == len(es)-1
			switchState := !last && es[i+1].state != e.state
			if last || switchState {
				key[0] |= 0x80
			}
			blk.PutI32(int32(len(key)))
			blk.PutBytes(key)
			blk.PutI32(int32(len(e.value)))
			blk.PutBytes(e.value)
			if last {
				blk.PutU16(0xFFFF)
			} else if switchState {
				blk.PutU16(uint16(es[i+1].state))
			}
		}
		offsets[kg] = int64(len(out))
		if compressed {
			out = flinkwrite.AppendSnappyFramed(out, blk.B)
		} else {
			out = append(out, blk.B...)
		}
	}
	_ = maxPar
	return out, offsets
}

func prefixBytes(kg, maxPar int) []byte {
	if maxPar > 128 {
		return []byte{byte(kg >> 8), byte(kg)}
	}
	return []byte{byte(kg)}
}

// sqlStream builds a SQL-like stream: key ROW<BIGINT>, VALUE state
// "accState" ROW<BIGINT, INT, STRING>, MAP state "records" with
// ROW<INT, STRING> user keys and INT values, LIST state "list" of STRING.
func sqlStream(compressed bool, maxPar, keyGroups, keysPerGroup int) ([]byte, map[int]int64, int) {
	voidNS := simpleSnap(serde.ClassVoid)
	hdr := headerBytes(compressed, rowSnap(fBigInt),
		kvState("accState", "VALUE", voidNS, rowSnap(fBigInt, fInt, fString)),
		kvState("records", "MAP", voidNS, compositeSnap(serde.ClassMap, 1, nil, rowSnap(fInt, fString), simpleSnap(serde.ClassInt))),
		kvState("list", "LIST", voidNS, compositeSnap(serde.ClassList, 1, nil, simpleSnap(serde.ClassString))),
	)
	var entries []synthEntry
	n := 0
	for g := 0; g < keyGroups; g++ {
		kg := g * maxPar / keyGroups
		for k := 0; k < keysPerGroup; k++ {
			id := int64(g*keysPerGroup + k)
			key := append(prefixBytes(kg, maxPar), rowBytes(0, id)...)
			key = append(key, 0) // void namespace
			entries = append(entries, synthEntry{kg: kg, state: 0, key: key,
				value: rowBytes(0, id*3, int32(k), fmt.Sprintf("value string number %d", id))})
			for u := 0; u < 2; u++ {
				uk := append(append([]byte{}, key...), rowBytes(0, int32(u), fmt.Sprintf("user-%d-%d", id, u))...)
				entries = append(entries, synthEntry{kg: kg, state: 1, key: uk, value: []byte{0, 0, 0, 0, byte(u + 1)}})
			}
			entries = append(entries, synthEntry{kg: kg, state: 2, key: key,
				value: []byte{4, 'a', 'b', 'c', ',', 3, 'd', 'e'}})
			n += 4
		}
	}
	data, offs := buildStream(hdr, compressed, maxPar, entries)
	return data, offs, n
}
