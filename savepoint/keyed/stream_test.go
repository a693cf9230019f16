package keyed

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/serde"
)

func sortedKGs(offs map[int]int64) []int {
	var kgs []int
	for kg := range offs {
		kgs = append(kgs, kg)
	}
	sort.Ints(kgs)
	return kgs
}

func readAll(t testing.TB, data []byte, maxPar int, offs map[int]int64, mode Mode, fn func(*Entry)) error {
	h, _, err := ReadHeader(bytes.NewReader(data), "synthetic")
	if err != nil {
		return err
	}
	var br BlockReader
	for _, kg := range sortedKGs(offs) {
		err := br.Read(bytes.NewReader(data), int64(len(data)), "synthetic", h, kg, offs[kg], ReadOptions{MaxParallelism: maxPar, Mode: mode}, func(e *Entry) error {
			if fn != nil {
				fn(e)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func TestSyntheticSQLStream(t *testing.T) {
	for _, c := range []struct {
		compressed bool
		maxPar     int
	}{{false, 128}, {true, 128}, {false, 4096}, {true, 32768}} {
		data, offs, n := sqlStream(c.compressed, c.maxPar, 16, 5)
		counts := map[Mode]int{}
		for _, mode := range []Mode{ModeRaw, ModeSplit, ModeDecode} {
			var values []string
			seen := map[string]int{}
			err := readAll(t, data, c.maxPar, offs, mode, func(e *Entry) {
				counts[mode]++
				seen[e.State.Name]++
				if mode == ModeDecode && (seen[e.State.Name] == 1 || e.State.Name == "records" && seen[e.State.Name] == 2) {
					b, _ := json.Marshal([]any{e.State.Name, e.Key, e.Namespace, e.UserKey, e.Value})
					values = append(values, string(b))
				}
				if mode == ModeSplit && e.State.Kind == "MAP" && len(e.UserKeyBytes) == 0 {
					t.Errorf("split mode: no user key bytes")
				}
			})
			if err != nil {
				t.Fatalf("compressed=%v maxPar=%d mode=%d: %v", c.compressed, c.maxPar, mode, err)
			}
			if mode == ModeDecode {
				want := []string{
					`["accState",["+I",[0]],["void",0],null,["+I",[0,0,"value string number 0"]]]`,
					`["records",["+I",[0]],["void",0],["+I",[0,"user-0-0"]],1]`,
					`["records",["+I",[0]],["void",0],["+I",[1,"user-0-1"]],2]`,
					`["list",["+I",[0]],["void",0],null,["abc","de"]]`,
				}
				if strings.Join(values, "\n") != strings.Join(want, "\n") {
					t.Errorf("values:\n%s", strings.Join(values, "\n"))
				}
			}
		}
		if counts[ModeRaw] != n || counts[ModeSplit] != n || counts[ModeDecode] != n {
			t.Errorf("compressed=%v maxPar=%d: counts %v, want %d", c.compressed, c.maxPar, counts, n)
		}
	}
}

func TestAmbiguousKeyAndTTL(t *testing.T) {
	// String key + String namespace ⇒ both followed by length markers.
	str := simpleSnap(serde.ClassString)
	ttl := compositeSnap(serde.ClassTTL, 2, nil, simpleSnap(serde.ClassLong), simpleSnap(serde.ClassLong))
	hdr := headerBytes(false, str, kvState("s", "VALUE", str, ttl))
	sv := func(s string) []byte { return append([]byte{byte(len(s) + 1)}, s...) }
	key := append([]byte{5}, sv("key")...)
	key = append(key, 4) // marker: key length 4
	long := strings.Repeat("n", 300)
	// 300 chars: varint(301) = 0xAD 0x02, then 300 bytes ⇒ 302 bytes ⇒ marker 0x2E 0x01.
	key = append(key, 0xAD, 0x02)
	key = append(key, long...)
	key = append(key, 0x2E, 0x01)
	val := []byte{0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 7}
	data, offs := buildStream(hdr, false, 128, []synthEntry{{kg: 5, key: key, value: val}})
	var got *Entry
	err := readAll(t, data, 128, offs, ModeDecode, func(e *Entry) {
		c := *e
		got = &c
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != "key" || got.Namespace != long || got.TTLTimestamp == nil || *got.TTLTimestamp != 42 {
		t.Fatalf("entry %+v", got)
	}
	if tv := got.Value.(*serde.TTLValue); tv.Value != int64(7) {
		t.Fatalf("ttl value %+v", tv)
	}
	// A wrong marker is corruption.
	bad := append([]byte{}, data...)
	i := bytes.Index(bad, []byte{0x2E, 0x01})
	bad[i] = 0x2F
	if err := readAll(t, bad, 128, offs, ModeDecode, nil); err == nil || !strings.Contains(err.Error(), "length marker") {
		t.Fatalf("bad marker: %v", err)
	}
}

func TestCorruptionReportsFileAndOffset(t *testing.T) {
	data, offs, _ := sqlStream(false, 128, 4, 2)
	kgs := sortedKGs(offs)
	// Truncation inside a block.
	cut := data[:offs[kgs[1]]+20]
	err := readAll(t, cut, 128, offs, ModeDecode, nil)
	var e *Error
	if !errors.As(err, &e) || e.File != "synthetic" || e.KeyGroup != kgs[1] || e.Offset < offs[kgs[1]] {
		t.Fatalf("truncated: %v", err)
	}
	// A value longer than its serializer consumes is a leftover error.
	var mod []byte
	h, _, _ := ReadHeader(bytes.NewReader(data), "x")
	_ = h
	mod = append([]byte{}, data...)
	// Grow the declared length of the first accState row (i32 size) by 8:
	// the row decoder then sees more bytes than the value holds.
	first := offs[kgs[0]] + 2
	keyLen := int64(mod[first+3])
	valLenAt := first + 4 + keyLen
	mod[valLenAt+3] += 8
	err = readAll(t, mod, 128, offs, ModeDecode, nil)
	if !errors.As(err, &e) || e.KeyGroup != kgs[0] || !strings.Contains(err.Error(), "synthetic") {
		t.Fatalf("bad value length: %v", err)
	}
	// Key-group prefix mismatch.
	mod = append([]byte{}, data...)
	mod[first+4] = byte(kgs[0] + 1)
	if err := readAll(t, mod, 128, offs, ModeRaw, nil); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("prefix: %v", err)
	}
	// Bad offsets.
	h2, _, _ := ReadHeader(bytes.NewReader(data), "synthetic")
	if err := ReadKeyGroup(bytes.NewReader(data), int64(len(data)), "synthetic", h2, 0, int64(len(data))+5, 128, func(*Entry) error { return nil }); err == nil {
		t.Fatal("offset beyond EOF accepted")
	}
	// Every single-byte flip or truncation: an error or a clean decode,
	// never a panic.
	for i := range data {
		mod = append(mod[:0], data...)
		mod[i] ^= 0xFF
		_ = readAll(t, mod, 128, offs, ModeDecode, nil)
		_ = readAll(t, data[:i], 128, offs, ModeDecode, nil)
	}
}

func TestSnappyCorruption(t *testing.T) {
	data, offs, _ := sqlStream(true, 128, 2, 3)
	kgs := sortedKGs(offs)
	// Flip a payload byte of the first chunk: CRC mismatch (or a broken
	// snappy block), reported against the key group.
	mod := append([]byte{}, data...)
	mod[offs[kgs[0]]+10+8+3] ^= 0x01
	err := readAll(t, mod, 128, offs, ModeDecode, nil)
	var e *Error
	if !errors.Is(err, ErrSnappy) || !errors.As(err, &e) || e.KeyGroup != kgs[0] {
		t.Fatalf("crc flip: %v", err)
	}
	// Missing stream identifier.
	mod = append([]byte{}, data...)
	mod[offs[kgs[0]]] = 0x00
	if err := readAll(t, mod, 128, offs, ModeDecode, nil); !errors.Is(err, ErrSnappy) {
		t.Fatalf("no stream id: %v", err)
	}
	// Round trip through the framer with incompressible and large data.
	big := make([]byte, 200000)
	for i := range big {
		big[i] = byte(i * 7919 >> 3)
	}
	framed := flinkwrite.AppendSnappyFramed(nil, big)
	r := NewSnappyReader(bytes.NewReader(framed), 0)
	var out bytes.Buffer
	if _, err := out.ReadFrom(r); err != nil || !bytes.Equal(out.Bytes(), big) {
		t.Fatalf("round trip: %v", err)
	}
}

func TestSnappyFixtureCRCs(t *testing.T) {
	// Every key group of the compressed fixture passes CRC verification and
	// decodes; flipping any byte of a block is detected.
	fixtures.Require(t)
	m := readTestMetadata(t, "flink1.19-rocksdb-canonical-snappy-compressed")
	checked := 0
	for _, op := range m.operators {
		for _, st := range op.subtasks {
			if st.keyed == nil {
				continue
			}
			data := st.keyed.stream.bytes(t)
			h, hl, err := ReadHeader(bytes.NewReader(data), st.keyed.stream.name)
			if err != nil {
				t.Fatal(err)
			}
			if !h.Compressed {
				t.Fatal("fixture header not compressed")
			}
			for i, off := range st.keyed.offsets {
				if off == 0 {
					continue
				}
				kg := st.keyed.start + i
				for j := off; j < int64(len(data)); j++ {
					mod := append([]byte{}, data...)
					mod[j] ^= 0x04
					err := ReadKeyGroup(bytes.NewReader(mod), int64(len(mod)), "f", h, kg, off, op.maxParallelism, func(*Entry) error { return nil })
					if err == nil && j < off+10 {
						t.Errorf("kg %d: flipped stream-id byte %d accepted", kg, j-off)
					}
				}
				checked++
			}
			_ = hl
		}
	}
	if checked == 0 {
		t.Fatal("no key groups checked")
	}
}

func TestNativeHeapLayoutRejected(t *testing.T) {
	fixtures.Require(t)
	m := readTestMetadata(t, "flink1.20-hashmap-NATIVE-for-contrast")
	tried := 0
	for _, op := range m.operators {
		for _, st := range op.subtasks {
			k := st.keyed
			if k == nil || k.tag != 12 {
				continue
			}
			data := k.stream.bytes(t)
			h, _, err := ReadHeader(bytes.NewReader(data), k.stream.name)
			if err != nil {
				t.Fatal(err) // the header is the same as canonical
			}
			for i, off := range k.offsets {
				if off == 0 {
					continue
				}
				tried++
				err := ReadKeyGroup(bytes.NewReader(data), int64(len(data)), k.stream.name, h, k.start+i, off, op.maxParallelism, func(*Entry) error { return nil })
				if err == nil {
					t.Errorf("native block of key group %d decoded as canonical", k.start+i)
				}
			}
		}
	}
	if tried == 0 {
		t.Fatal("no native blocks found")
	}
}

func TestHeaderCorruption(t *testing.T) {
	fixtures.Require(t)
	b, err := os.ReadFile(metadataPath(t, "sql-rocksdb-canonical-join-mapstate"))
	if err != nil {
		t.Fatal(err)
	}
	_ = b
	data, _, _ := sqlStream(false, 128, 1, 1)
	_, hl, err := ReadHeader(bytes.NewReader(data), "synthetic")
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < hl; i++ {
		if _, _, err := ParseHeader(data[:i], "synthetic"); err == nil {
			t.Fatalf("header prefix %d parsed", i)
		} else if !strings.HasPrefix(err.Error(), "synthetic") {
			t.Fatalf("error does not name the file: %v", err)
		}
	}
	bad := append([]byte{}, data...)
	bad[3] = 5
	if _, _, err := ParseHeader(bad, "synthetic"); err == nil || !strings.Contains(err.Error(), "version 5") {
		t.Fatalf("version: %v", err)
	}
}

func TestUnsupportedSerializersReportedRaw(t *testing.T) {
	// WindowKeySerializer has a known snapshot but no data decoder: as the
	// key serializer the key cannot be split, as a value it stays raw.
	wk := compositeSnap(serde.ClassWindowKey, 1, nil, simpleSnap(serde.ClassLong), rowSnap(fBigInt))
	voidNS := simpleSnap(serde.ClassVoid)
	hdr := headerBytes(false, wk,
		kvState("v", "VALUE", voidNS, wk),
		kvState("l", "LIST", voidNS, compositeSnap(serde.ClassList, 1, nil, wk)))
	key := []byte{3, 1, 2, 3, 4, 0}
	data, offs := buildStream(hdr, false, 128, []synthEntry{
		{kg: 3, state: 0, key: key, value: []byte{9, 9}},
		{kg: 3, state: 1, key: key, value: []byte{7, ',', 8}},
	})
	var got []string
	err := readAll(t, data, 128, offs, ModeDecode, func(e *Entry) {
		b, _ := json.Marshal(e)
		got = append(got, string(b))
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"key":{"decoded":false,"raw":"AQIDBAA=","serializer":"` + serde.ClassWindowKey + `"},"kg":3,"ns":null,"state":"v","type":"VALUE","value":{"decoded":false,"raw":"CQk=","serializer":"` + serde.ClassWindowKey + `"}}
{"key":{"decoded":false,"raw":"AQIDBAA=","serializer":"` + serde.ClassWindowKey + `"},"kg":3,"ns":null,"state":"l","type":"LIST","value":{"decoded":false,"raw":"BywI","serializer":"` + serde.ClassList + `"}}`
	if strings.Join(got, "\n") != want {
		t.Fatalf("got\n%s", strings.Join(got, "\n"))
	}
}

func TestBlockEnd(t *testing.T) {
	data, offs, n := sqlStream(false, 128, 8, 3)
	h, _, err := ReadHeader(bytes.NewReader(data), "s")
	if err != nil {
		t.Fatal(err)
	}
	kgs := sortedKGs(offs)
	count := 0
	for i, kg := range kgs {
		end := int64(len(data))
		if i+1 < len(kgs) {
			end = offs[kgs[i+1]]
		}
		err := ReadKeyGroupWith(bytes.NewReader(data), int64(len(data)), "s", h, kg, offs[kg], ReadOptions{MaxParallelism: 128, End: end}, func(*Entry) error { count++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		// An end one byte later means a byte would be left unread.
		if i+1 < len(kgs) {
			err = ReadKeyGroupWith(bytes.NewReader(data), int64(len(data)), "s", h, kg, offs[kg], ReadOptions{MaxParallelism: 128, End: end + 1}, func(*Entry) error { return nil })
			if err == nil || !strings.Contains(err.Error(), "between the end") {
				t.Fatalf("loose end: %v", err)
			}
		}
		// An end inside the block truncates it.
		err = ReadKeyGroupWith(bytes.NewReader(data), int64(len(data)), "s", h, kg, offs[kg], ReadOptions{MaxParallelism: 128, End: end - 1}, func(*Entry) error { return nil })
		if err == nil {
			t.Fatal("short end accepted")
		}
	}
	if count != n {
		t.Fatalf("%d entries, want %d", count, n)
	}
}

func TestArrayAndMapDataValues(t *testing.T) {
	intBlob := javaLogicalType("IntType", "INTEGER", true, 0, false)
	strBlob := javaLogicalType("VarCharType", "VARCHAR", true, 1<<31-1, true)
	// The serializer objects are opaque Java streams to the reader; any
	// valid stream stands in for them here.
	arraySnap := versioned(serde.ClassArrayData, 3, intBlob, intBlob)
	mapSnap := versioned(serde.ClassMapData, 3, strBlob, intBlob, strBlob, intBlob)
	voidNS := simpleSnap(serde.ClassVoid)
	hdr := headerBytes(false, simpleSnap(serde.ClassInt),
		kvState("arr", "VALUE", voidNS, arraySnap),
		kvState("map", "VALUE", voidNS, mapSnap))
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	arr := append(le32(3), 0x02, 0, 0, 0)
	arr = append(arr, le32(1)...)
	arr = append(arr, le32(0)...)
	arr = append(arr, le32(3)...)
	keys := append(le32(1), 0, 0, 0, 0)
	keys = append(keys, 'k', 0, 0, 0, 0, 0, 0, 0x81)
	vals := append(le32(1), 0, 0, 0, 0)
	vals = append(vals, le32(5)...)
	m := append(le32(uint32(len(keys))), keys...)
	m = append(m, vals...)
	withLen := func(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }
	key := []byte{9, 0, 0, 0, 1, 0}
	data, offs := buildStream(hdr, false, 128, []synthEntry{
		{kg: 9, state: 0, key: key, value: withLen(arr)},
		{kg: 9, state: 1, key: key, value: withLen(m)},
	})
	h, _, err := ReadHeader(bytes.NewReader(data), "s")
	if err != nil {
		t.Fatal(err)
	}
	if h.States[0].Value.String() != "ARRAY<INT>" || h.States[1].Value.String() != "MAP<STRING, INT>" {
		t.Fatalf("types %s %s", h.States[0].Value, h.States[1].Value)
	}
	var got []string
	err = readAll(t, data, 128, offs, ModeDecode, func(e *Entry) {
		b, _ := json.Marshal(e.Value)
		got = append(got, string(b))
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != `[1,null,3] [{"key":"k","value":5}]` {
		t.Fatalf("got %v", got)
	}
}
