package keyed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// colRec is one decoded entry in a comparable form.
type colRec struct {
	kg, state int
	key, val  any
	ttl       int64
	hasTTL    bool
}

func (c colRec) String() string {
	k, _ := json.Marshal(c.key)
	v, _ := json.Marshal(c.val)
	return fmt.Sprintf("kg %d state %d key %s value %s ttl %v/%d", c.kg, c.state, k, v, c.hasTTL, c.ttl)
}

// readGeneric decodes the blocks (kg -> offset) with Read (ModeDecode),
// per state in file order.
func readGeneric(data []byte, name string, h *Header, maxPar int, blocks [][2]int64) (map[int][]colRec, error) {
	out := map[int][]colRec{}
	var br BlockReader
	for _, b := range blocks {
		err := br.Read(bytes.NewReader(data), int64(len(data)), name, h, int(b[0]), b[1], ReadOptions{MaxParallelism: maxPar}, func(e *Entry) error {
			r := colRec{kg: e.KeyGroup, state: e.State.ID, key: e.Key, val: e.Value}
			if e.State.Type == PriorityQueue || e.State.Kind == "MAP" {
				r.key = [3]any{e.Key, e.Namespace, e.UserKey}
			}
			if e.TTLTimestamp != nil {
				r.ttl, r.hasTTL = *e.TTLTimestamp, true
			}
			out[e.State.ID] = append(out[e.State.ID], r)
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// readColumnar decodes the same blocks with ReadColumns (columnar states
// into batches, the others through the fallback).
func readColumnar(data []byte, name string, h *Header, maxPar, maxRows int, blocks [][2]int64) (map[int][]colRec, int, error) {
	out := map[int][]colRec{}
	var br BlockReader
	rows := 0
	for _, b := range blocks {
		err := br.ReadColumns(bytes.NewReader(data), int64(len(data)), name, h, int(b[0]), b[1], ColumnOptions{MaxParallelism: maxPar, MaxRows: maxRows}, func(cb *ColumnBatch) error {
			if cb.Keys.Len() != cb.Len() {
				return fmt.Errorf("batch with %d keys and %d values", cb.Keys.Len(), cb.Len())
			}
			for i := 0; i < cb.Len(); i++ {
				r := colRec{kg: cb.KeyGroup, state: cb.State.ID, key: cb.Key(i), val: cb.Value(i)}
				if cb.State.Type == PriorityQueue {
					r.key = [3]any{cb.Key(i), serde.Void{}, nil}
				}
				r.ttl, r.hasTTL = cb.TTLTimestamp(i)
				out[cb.State.ID] = append(out[cb.State.ID], r)
				rows++
			}
			return nil
		}, func(e *Entry) error {
			if e.State.Columnar() {
				return fmt.Errorf("columnar state %q in the fallback", e.State.Name)
			}
			// Values are recycled: compare their JSON form.
			r := colRec{kg: e.KeyGroup, state: e.State.ID, key: jsonOf(e.Key), val: jsonOf(e.Value)}
			if e.State.Type == PriorityQueue || e.State.Kind == "MAP" {
				r.key = jsonOf([3]any{e.Key, e.Namespace, e.UserKey})
			}
			if e.TTLTimestamp != nil {
				r.ttl, r.hasTTL = *e.TTLTimestamp, true
			}
			out[e.State.ID] = append(out[e.State.ID], r)
			return nil
		})
		if err != nil {
			return out, rows, err
		}
	}
	return out, rows, nil
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// sameEntries compares generic and columnar decodes: exactly the same
// values (Go values for columnar states, JSON for fallback ones).
func sameEntries(t *testing.T, what string, h *Header, gen, col map[int][]colRec) {
	t.Helper()
	for id, st := range h.States {
		g, c := gen[id], col[id]
		if len(g) != len(c) {
			t.Fatalf("%s: state %q: %d generic entries, %d columnar", what, st.Name, len(g), len(c))
		}
		for i := range g {
			a := g[i]
			if !st.Columnar() {
				a.key, a.val = jsonOf(a.key), jsonOf(a.val)
				if st.Type == PriorityQueue || st.Kind == "MAP" {
					a.key = g[i].key.([3]any)
					a.key = jsonOf(a.key)
				}
			}
			if !reflect.DeepEqual(a, c[i]) {
				t.Fatalf("%s: state %q entry %d:\ngeneric  %v\ncolumnar %v", what, st.Name, i, a, c[i])
			}
		}
	}
}

func blocksOf(offs map[int]int64) [][2]int64 {
	var out [][2]int64
	for _, kg := range sortedKGs(offs) {
		out = append(out, [2]int64{int64(kg), offs[kg]})
	}
	return out
}

// ttlStream builds a stream of one TTL VALUE state ROW<BIGINT, STRING> ->
// TTL(ROW<BIGINT, DOUBLE, STRING, INT, BOOLEAN>) with nulls, and a LIST
// state (fallback).
func ttlStream(compressed bool, maxPar, keyGroups, keysPerGroup int) ([]byte, map[int]int64, int) {
	voidNS := simpleSnap(serde.ClassVoid)
	ttl := compositeSnap(serde.ClassTTL, 2, nil, simpleSnap(serde.ClassLong), rowSnap(fBigInt, fDouble, fString, fInt, fBool))
	hdr := headerBytes(compressed, rowSnap(fBigInt, fString),
		kvState("acc", "VALUE", voidNS, ttl),
		kvState("list", "LIST", voidNS, compositeSnap(serde.ClassList, 1, nil, simpleSnap(serde.ClassString))),
		synthState{name: "timers", typ: PriorityQueue, sers: [][2][]byte{{[]byte(SerValue), compositeSnap(serde.ClassTimer, 2, nil, rowSnap(fBigInt, fString), voidNS)}}},
	)
	var entries []synthEntry
	n := 0
	for g := 0; g < keyGroups; g++ {
		kg := g * maxPar / keyGroups
		for k := 0; k < keysPerGroup; k++ {
			id := int64(g*keysPerGroup + k)
			var name any = fmt.Sprintf("user-%d-é", id)
			if id%5 == 0 {
				name = nil
			}
			key := append(prefixBytes(kg, maxPar), rowBytes(0, id, name)...)
			key = append(key, 0)
			var s any = fmt.Sprintf("s%d", id%13)
			if id%3 == 0 {
				s = "a longer string than seven bytes"
			}
			var b any = id%2 == 0
			if id%7 == 0 {
				b, s = nil, nil
			}
			val := binaryLong(1_700_000_000_000 + id)
			val = append(val, rowBytes(byte(id%4), id*3, float64(id)/3, s, int32(id), b)...)
			entries = append(entries, synthEntry{kg: kg, state: 0, key: key, value: val})
			n++
			if k%3 == 0 {
				entries = append(entries, synthEntry{kg: kg, state: 1, key: key, value: []byte{4, 'a', 'b', 'c'}})
				n++
			}
			if k%2 == 0 {
				tk := append(prefixBytes(kg, maxPar), binaryLong((1_700_000_000_000+id)^(-1<<63))...)
				tk = append(append(tk, rowBytes(0, id, name)...), 0)
				entries = append(entries, synthEntry{kg: kg, state: 2, key: tk})
				n++
			}
		}
	}
	data, offs := buildStream(hdr, compressed, maxPar, entries)
	return data, offs, n
}

func binaryLong(v int64) []byte {
	var b [8]byte
	for i := range 8 {
		b[i] = byte(uint64(v) >> (56 - 8*i))
	}
	return b[:]
}

func TestColumnsMatchGeneric(t *testing.T) {
	type stream struct {
		name     string
		build    func(bool, int, int, int) ([]byte, map[int]int64, int)
		columnar string
	}
	for _, s := range []stream{{"sql", sqlStream, "accState"}, {"ttl", ttlStream, "acc"}, {"timers", ttlStream, "timers"}} {
		for _, comp := range []bool{false, true} {
			for _, maxPar := range []int{128, 4096} {
				data, offs, n := s.build(comp, maxPar, 5, 40)
				h, _, err := ReadHeader(bytes.NewReader(data), "synthetic")
				if err != nil {
					t.Fatal(err)
				}
				if st := h.State(s.columnar); st == nil || !st.Columnar() {
					t.Fatalf("%s: state %q is not columnar", s.name, s.columnar)
				}
				blocks := blocksOf(offs)
				gen, err := readGeneric(data, "synthetic", h, maxPar, blocks)
				if err != nil {
					t.Fatal(err)
				}
				for _, maxRows := range []int{0, 7} {
					col, rows, err := readColumnar(data, "synthetic", h, maxPar, maxRows, blocks)
					if err != nil {
						t.Fatal(err)
					}
					if rows == 0 || rows >= n {
						t.Fatalf("%s: %d columnar rows of %d entries", s.name, rows, n)
					}
					sameEntries(t, fmt.Sprintf("%s comp=%v maxPar=%d maxRows=%d", s.name, comp, maxPar, maxRows), h, gen, col)
				}
			}
		}
	}
}

// TestColumnsErrorsMatchGeneric flips and truncates every byte of the
// blocks: the columnar read fails exactly when the generic one does, with
// the same error.
func TestColumnsErrorsMatchGeneric(t *testing.T) {
	for _, build := range []func(bool, int, int, int) ([]byte, map[int]int64, int){sqlStream, ttlStream} {
		for _, comp := range []bool{false, true} {
			data, offs, _ := build(comp, 128, 2, 3)
			h, hl, err := ReadHeader(bytes.NewReader(data), "synthetic")
			if err != nil {
				t.Fatal(err)
			}
			blocks := blocksOf(offs)
			mod := make([]byte, len(data))
			check := func(what string, b []byte) {
				_, gerr := readGeneric(b, "synthetic", h, 128, blocks)
				_, _, cerr := readColumnar(b, "synthetic", h, 128, 0, blocks)
				if fmt.Sprint(gerr) != fmt.Sprint(cerr) {
					t.Fatalf("%s (compressed %v):\ngeneric  %v\ncolumnar %v", what, comp, gerr, cerr)
				}
			}
			for i := int(hl); i < len(data); i++ {
				for _, x := range []byte{0xFF, 0x01} {
					copy(mod, data)
					mod[i] ^= x
					check(fmt.Sprintf("byte %d ^ %#x", i, x), mod)
				}
				check(fmt.Sprintf("truncated at %d", i), data[:i])
			}
		}
	}
}

// TestColumnsMatchGenericFixtures: on every canonical fixture the columnar
// read yields exactly the generic decode's entries.
func TestColumnsMatchGenericFixtures(t *testing.T) {
	fixtures.Require(t)
	columnar := 0
	for _, fx := range canonicalFixtures {
		m := readTestMetadata(t, fx)
		for _, op := range m.operators {
			for _, st := range op.subtasks {
				k := st.keyed
				if k == nil {
					continue
				}
				data := k.stream.bytes(t)
				h, _, err := ReadHeader(bytes.NewReader(data), k.stream.name)
				if err != nil {
					t.Fatal(err)
				}
				var blocks [][2]int64
				for i, off := range k.offsets {
					if off != 0 {
						blocks = append(blocks, [2]int64{int64(k.start + i), off})
					}
				}
				gen, err := readGeneric(data, k.stream.name, h, op.maxParallelism, blocks)
				if err != nil {
					t.Fatalf("%s: %v", fx, err)
				}
				col, rows, err := readColumnar(data, k.stream.name, h, op.maxParallelism, 0, blocks)
				if err != nil {
					t.Fatalf("%s: %v", fx, err)
				}
				columnar += rows
				sameEntries(t, fx, h, gen, col)
			}
		}
	}
	if columnar == 0 {
		t.Fatal("no fixture entry was decoded into columns")
	}
	t.Logf("%d fixture entries decoded into columns", columnar)
}

// TestColumnsBigEntries: multi-MiB string fields split batches by size
// and decode exactly as the generic path does.
func TestColumnsBigEntries(t *testing.T) {
	voidNS := simpleSnap(serde.ClassVoid)
	hdr := headerBytes(false, rowSnap(fBigInt), kvState("big", "VALUE", voidNS, rowSnap(fBigInt, fString)))
	var entries []synthEntry
	for i := range 6 {
		key := append(prefixBytes(3, 128), rowBytes(0, int64(i))...)
		key = append(key, 0)
		s := string(bytes.Repeat([]byte{byte('a' + i)}, (1+i%3)<<20))
		entries = append(entries, synthEntry{kg: 3, state: 0, key: key, value: rowBytes(0, int64(i), s)})
	}
	data, offs := buildStream(hdr, false, 128, entries)
	h, _, err := ReadHeader(bytes.NewReader(data), "big")
	if err != nil {
		t.Fatal(err)
	}
	blocks := blocksOf(offs)
	gen, err := readGeneric(data, "big", h, 128, blocks)
	if err != nil {
		t.Fatal(err)
	}
	var br BlockReader
	batches, rows := 0, 0
	err = br.ReadColumns(bytes.NewReader(data), int64(len(data)), "big", h, 3, offs[3], ColumnOptions{MaxParallelism: 128}, func(b *ColumnBatch) error {
		batches++
		for i := 0; i < b.Len(); i++ {
			if !reflect.DeepEqual(b.Value(i), gen[0][rows].val) {
				t.Fatalf("entry %d differs", rows)
			}
			rows++
		}
		return nil
	}, nil)
	if err != nil || rows != 6 || batches < 2 {
		t.Fatalf("%d rows in %d batches, %v", rows, batches, err)
	}
}
