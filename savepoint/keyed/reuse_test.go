package keyed

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/savepoint/serde"
)

// decodeJSON decodes every entry of a stream and renders each in its
// callback (where recycled values are still valid).
func decodeJSON(t *testing.T, data []byte, maxPar int, offs map[int]int64, reuse bool) []string {
	t.Helper()
	h, _, err := ReadHeader(bytes.NewReader(data), "synthetic")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var br BlockReader
	for _, kg := range sortedKGs(offs) {
		err := br.Read(bytes.NewReader(data), int64(len(data)), "synthetic", h, kg, offs[kg], ReadOptions{MaxParallelism: maxPar, ReuseValues: reuse}, func(e *Entry) error {
			b, err := json.Marshal([]any{e.KeyGroup, e.State.Name, e.Key, e.Namespace, e.UserKey, e.Value, e.TTLTimestamp})
			out = append(out, string(b))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestReuseValuesDecodesAlike: decoding into recycled memory (strings
// aliasing the read window) yields the same entries as decoding into fresh
// memory, across many arena resets and window slides (blocks of far more
// than reuseEvery entries and longer than the window, keys shared by
// consecutive entries, compressed and not).
func TestReuseValuesDecodesAlike(t *testing.T) {
	for _, c := range []struct {
		compressed   bool
		maxPar       int
		groups, keys int
	}{{false, 128, 4, 300}, {true, 128, 4, 300}, {false, 32768, 4, 300},
		// A block longer than the read window: the window slides under
		// string values that alias it.
		{false, 128, 1, 4000},
		// Same with string keys shared by consecutive entries (a cached
		// decoded key aliasing the window); keys < 0 selects it.
		{false, 128, 2, -2500}} {
		data, offs, n := sqlStream(c.compressed, c.maxPar, c.groups, c.keys)
		if c.keys < 0 {
			data, offs, n = stringKeyStream(c.maxPar, c.groups, -c.keys)
		}
		fresh := decodeJSON(t, data, c.maxPar, offs, false)
		reused := decodeJSON(t, data, c.maxPar, offs, true)
		if len(fresh) != n || len(reused) != n {
			t.Fatalf("%+v: %d and %d entries, want %d", c, len(fresh), len(reused), n)
		}
		if n/len(offs) < 2*reuseEvery {
			t.Fatalf("blocks of %d entries do not cross arena resets", n/len(offs))
		}
		for i := range fresh {
			if fresh[i] != reused[i] {
				t.Fatalf("%+v entry %d:\nfresh  %s\nreused %s", c, i, fresh[i], reused[i])
			}
		}
		// Mixing the modes on one reader keeps fresh values intact.
		h, _, _ := ReadHeader(bytes.NewReader(data), "synthetic")
		var br BlockReader
		var kept []any
		for i, kg := range sortedKGs(offs) {
			err := br.Read(bytes.NewReader(data), int64(len(data)), "synthetic", h, kg, offs[kg], ReadOptions{MaxParallelism: c.maxPar, ReuseValues: i%2 == 1}, func(e *Entry) error {
				if i%2 == 0 {
					kept = append(kept, e.Value)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		got, _ := json.Marshal(kept)
		var want []any
		for i, kg := range sortedKGs(offs) {
			if i%2 == 0 {
				ReadKeyGroup(bytes.NewReader(data), int64(len(data)), "synthetic", h, kg, offs[kg], c.maxPar, func(e *Entry) error {
					want = append(want, e.Value)
					return nil
				})
			}
		}
		if wantJSON, _ := json.Marshal(want); len(kept) == 0 || string(got) != string(wantJSON) {
			t.Fatalf("%+v: values retained from fresh reads changed after reused reads", c)
		}
	}
}

// testWindows hands out small fresh windows and records retirements.
type testWindows struct {
	size           int
	got, retired   int
	retiredUnknown bool
	handed         map[*byte]bool
}

func (w *testWindows) Get() []byte {
	b := make([]byte, w.size)
	w.handed[&b[0]] = true
	w.got++
	return b
}

func (w *testWindows) Retire(b []byte) {
	if !w.handed[&b[0]] {
		w.retiredUnknown = true
	}
	w.retired++
}

// TestPinnedWindowsKeepEntries: with ReadOptions.Windows and EntrySlot,
// entries (bytes and values) stay valid after their callbacks, across
// many small windows, key groups and both stream kinds.
func TestPinnedWindowsKeepEntries(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		data, offs, n := sqlStream(compressed, 128, 6, 40)
		want := decodeJSON(t, data, 128, offs, false)
		h, _, err := ReadHeader(bytes.NewReader(data), "synthetic")
		if err != nil {
			t.Fatal(err)
		}
		ws := &testWindows{size: 300, handed: map[*byte]bool{}}
		var kept []*Entry
		var br BlockReader
		for _, kg := range sortedKGs(offs) {
			o := ReadOptions{MaxParallelism: 128, Windows: ws, Arena: serde.NewArena(), EntrySlot: func() *Entry { return new(Entry) }}
			err := br.Read(bytes.NewReader(data), int64(len(data)), "synthetic", h, kg, offs[kg], o, func(e *Entry) error {
				kept = append(kept, e)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(kept) != n || ws.got < 10 || ws.retired != ws.got-1 || ws.retiredUnknown {
			t.Fatalf("compressed=%v: %d entries, %d windows, %d retired (unknown %v)", compressed, len(kept), ws.got, ws.retired, ws.retiredUnknown)
		}
		for i, e := range kept {
			b, _ := json.Marshal([]any{e.KeyGroup, e.State.Name, e.Key, e.Namespace, e.UserKey, e.Value, e.TTLTimestamp})
			if string(b) != want[i] {
				t.Fatalf("compressed=%v entry %d after the reads:\n got  %s\n want %s", compressed, i, b, want[i])
			}
		}
		// Damaged streams fail alike with and without pinned windows.
		failures := 0
		for _, cut := range []int{len(data) / 2, len(data) - 3} {
			for _, kg := range sortedKGs(offs) {
				if offs[kg] >= int64(cut) {
					continue
				}
				var errs [2]string
				for i, o := range []ReadOptions{{MaxParallelism: 128}, {MaxParallelism: 128, Windows: &testWindows{size: 200, handed: map[*byte]bool{}}, EntrySlot: func() *Entry { return new(Entry) }}} {
					err := br.Read(bytes.NewReader(data[:cut]), int64(cut), "synthetic", h, kg, offs[kg], o, func(*Entry) error { return nil })
					errs[i] = fmt.Sprint(err)
				}
				if errs[0] != errs[1] {
					t.Fatalf("compressed=%v cut %d kg %d: %s, pinned: %s", compressed, cut, kg, errs[0], errs[1])
				}
				if errs[0] != "<nil>" {
					failures++
				}
			}
		}
		if failures < 2 {
			t.Fatalf("compressed=%v: %d reads of cut streams failed", compressed, failures)
		}
		// The kept byte slices still frame a decodable entry.
		for _, e := range kept[:5] {
			if len(e.KeyBytes) == 0 || int(e.KeyBytes[0]) != e.KeyGroup {
				t.Fatalf("key bytes % x of key group %d", e.KeyBytes, e.KeyGroup)
			}
		}
	}
}

// stringKeyStream is a stream with ROW<BIGINT, STRING> keys, each holding
// a VALUE entry and three MAP entries (consecutive entries share the key).
func stringKeyStream(maxPar, keyGroups, keysPerGroup int) ([]byte, map[int]int64, int) {
	voidNS := simpleSnap(serde.ClassVoid)
	hdr := headerBytes(false, rowSnap(fBigInt, fString),
		kvState("v", "VALUE", voidNS, rowSnap(fString)),
		kvState("m", "MAP", voidNS, compositeSnap(serde.ClassMap, 1, nil, simpleSnap(serde.ClassInt), rowSnap(fString))),
	)
	var entries []synthEntry
	n := 0
	for g := 0; g < keyGroups; g++ {
		kg := g * maxPar / keyGroups
		for k := 0; k < keysPerGroup; k++ {
			id := int64(g*keysPerGroup + k)
			key := append(prefixBytes(kg, maxPar), rowBytes(0, id, fmt.Sprintf("key-%d-%s", id, strings.Repeat("x", int(id%200))))...)
			key = append(key, 0)
			entries = append(entries, synthEntry{kg: kg, state: 0, key: key, value: rowBytes(0, fmt.Sprintf("value-%d", id))})
			for u := 0; u < 3; u++ {
				uk := binary.BigEndian.AppendUint32(append([]byte{}, key...), uint32(u))
				entries = append(entries, synthEntry{kg: kg, state: 1, key: uk, value: append([]byte{0}, rowBytes(0, fmt.Sprintf("uv-%d-%d", id, u))...)})
			}
			n += 4
		}
	}
	data, offs := buildStream(hdr, false, maxPar, entries)
	return data, offs, n
}
