package savepoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// TestHeapLayoutAgreesWithExpectedEntries decodes the heap-layout fixtures
// (a NATIVE hashmap savepoint and a hashmap retained checkpoint) and
// compares them with the reference decodings, sequentially and with
// parallel workers.
func TestHeapLayoutAgreesWithExpectedEntries(t *testing.T) {
	cases := []struct {
		name string
		sp   func(t *testing.T) *Savepoint
	}{
		{"flink1.20-hashmap-NATIVE-for-contrast", func(t *testing.T) *Savepoint { return openFixture(t, "flink1.20-hashmap-NATIVE-for-contrast") }},
		{"flink1.15-hashmap-checkpoint", func(t *testing.T) *Savepoint {
			return openDir(t, fixtures.MorePath(t, "flink1.15-hashmap-checkpoint", "savepoint"))
		}},
		// _metadata V2, tag-3 handles, everything inline, legacy snapshots.
		{"flink1.9-heap-savepoint-metadata-v2", func(t *testing.T) *Savepoint {
			return openDir(t, fixtures.MorePath(t, "flink1.9-heap-savepoint-metadata-v2", "savepoint"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			exp := fixtures.MorePath(t, "_expected", c.name+".entries.jsonl")
			sp := c.sp(t)
			for _, o := range []ScanOptions{{KeyGroupTo: -1}, {KeyGroupTo: -1, Workers: 4}, {KeyGroupTo: -1, ReuseValues: true, Concurrency: 3}} {
				compareExpected(t, sp, exp, o)
			}
		})
	}
}

// TestHeapLayoutMatchesCanonicalTwin reads the NATIVE hashmap fixture and
// the canonical savepoint of the same job and compares them entry by entry:
// decoded (timers without their timestamps, which differ between the two
// runs) and as raw canonical key and value bytes, which the heap reader
// synthesizes.
func TestHeapLayoutMatchesCanonicalTwin(t *testing.T) {
	heap := openFixture(t, "flink1.20-hashmap-NATIVE-for-contrast")
	canon := openFixture(t, "flink1.20-hashmap-canonical-valuestate-timers")
	collect := func(sp *Savepoint, mode keyed.Mode) []string {
		var out []string
		err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Mode: mode}, func(e *KeyedEntry) error {
			m := map[string]any{"kg": e.KeyGroup, "state": e.State.Name, "op": e.Operator.ID.String(), "subtask": e.Subtask}
			timer := e.State.Type == keyed.PriorityQueue
			switch mode {
			case keyed.ModeDecode:
				m["key"], m["ns"] = e.Key, e.Namespace
				if !timer {
					m["value"] = e.Value
				}
			default:
				if timer {
					// prefix, 8-byte timestamp, key, namespace
					m["key"] = append(append([]byte(nil), e.KeyBytes[:1]...), e.KeyBytes[9:]...)
				} else {
					m["key"], m["value"] = e.KeyBytes, e.ValueBytes
					m["parts"] = [][]byte{e.KeyPart, e.NamespaceBytes, e.UserKeyBytes}
				}
			}
			out = append(out, canonJSON(t, m))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(out)
		return out
	}
	for _, mode := range []keyed.Mode{keyed.ModeDecode, keyed.ModeSplit, keyed.ModeValidate} {
		got, want := collect(heap, mode), collect(canon, mode)
		if len(got) != 32 || !slices.Equal(got, want) {
			t.Fatalf("mode %d: heap layout\n%s\ncanonical\n%s", mode, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// probeFile wraps a keyed stream and its handle for probeNativeHeap.
func probeFile(t *testing.T, data []byte, offs []int64) (*keyedFile, *KeyGroupsHandle) {
	t.Helper()
	hdr, n, err := keyed.ReadHeader(bytes.NewReader(data), "probe")
	if err != nil {
		t.Fatal(err)
	}
	obj := &Object{Loc: Location{Name: "probe"}, size: int64(len(data)), r: bytes.NewReader(data)}
	return &keyedFile{obj: obj, header: hdr, hdrLen: n, name: "probe"}, &KeyGroupsHandle{Tag: TagKeyGroups, Offsets: offs}
}

// TestProbeParsesBothWays builds tag-12 streams whose first bytes fool a
// look at the first bytes alone: a canonical block of key group 0 starts
// with state id 0 and a short key length, i.e. the bytes of key-group id 0,
// followed by a "state id" below the state count. Parsing the block both
// ways tells the layouts apart.
func TestProbeParsesBothWays(t *testing.T) {
	var states []flinkwrite.StateMetaInfo
	for i := range 4 {
		states = append(states, flinkwrite.KeyedStateMeta(fmt.Sprintf("s%d", i), flinkwrite.KindValue, flinkwrite.VoidNamespaceSnapshot, flinkwrite.LongSnapshot))
	}
	h := flinkwrite.Header{KeySerializer: flinkwrite.ByteSnapshot, States: states}
	rng := keygroups.Range{Start: 0, End: 3}
	var cb, hb bytes.Buffer
	cw, err := flinkwrite.NewKeyedWriter(&cb, h, rng, 128)
	if err != nil {
		t.Fatal(err)
	}
	hw, err := flinkwrite.NewHeapWriter(&hb, h, rng, 128)
	if err != nil {
		t.Fatal(err)
	}
	for kg := range 4 {
		for st := range 4 {
			key := flinkwrite.AppendByte(nil, int8(kg*4+st))
			ck, _ := flinkwrite.StateKey{KeyGroup: kg, PrefixLen: 1, Key: key, Namespace: []byte{0}}.Append(nil)
			if err := cw.Add(kg, st, ck, flinkwrite.AppendLong(nil, int64(st))); err != nil {
				t.Fatal(err)
			}
			if err := hw.Add(kg, st, []byte{0}, key, flinkwrite.AppendLong(nil, int64(st))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}
	canon, coffs := cb.Bytes(), cw.Offsets()
	b := canon[coffs[0]:]
	if binary.BigEndian.Uint32(b) != 0 || binary.BigEndian.Uint16(b[4:]) >= 4 {
		t.Fatalf("the canonical block does not look like a heap one: %x", b[:8])
	}
	if f, kh := probeFile(t, canon, coffs); probeNativeHeap(f, kh, 128) {
		t.Fatal("canonical block taken for the heap layout")
	}
	if f, kh := probeFile(t, hb.Bytes(), hw.Offsets()); !probeNativeHeap(f, kh, 128) {
		t.Fatal("heap block not recognized")
	}
}

// TestCheckHeapLayout: check decodes the heap-layout fixtures (every key in
// the key group its hash assigns) and reports damage inside them.
func TestCheckHeapLayout(t *testing.T) {
	ctx := context.Background()
	for _, sp := range []*Savepoint{
		openFixture(t, heapFixture),
		openDir(t, fixtures.MorePath(t, "flink1.15-hashmap-checkpoint", "savepoint")),
		openDir(t, fixtures.MorePath(t, "flink1.9-heap-savepoint-metadata-v2", "savepoint")),
	} {
		probs, stats := Check(ctx, sp, CheckOptions{})
		if len(probs) != 0 || stats.Entries != 32 || stats.KeysVerified != 32 || stats.NativeHandles != 0 {
			t.Fatalf("%s: problems %v, stats %+v", sp.Name(), probs, stats)
		}
	}
	cases := []struct {
		name   string
		mutate func(t *testing.T, dir string, sp *Savepoint)
		kind   string
	}{
		{"change a key's group", func(t *testing.T, dir string, sp *Savepoint) {
			// Key group 2 of flatMap1: i32 key-group id, i16 state id, i32
			// count, VoidNamespace, then Tuple1<Long>(1); 2 hashes to 3.
			h, path := keyedFileOf(t, sp, dir, flatMap1, 2)
			patchFile(t, path, h.Offset(2)+18, 0x02)
		}, ProblemKeyGroup},
		{"wrong key-group id", func(t *testing.T, dir string, sp *Savepoint) {
			h, path := keyedFileOf(t, sp, dir, flatMap1, 2)
			patchFile(t, path, h.Offset(2)+3, 0x07)
		}, ProblemBlock},
		{"entry count too high", func(t *testing.T, dir string, sp *Savepoint) {
			h, path := keyedFileOf(t, sp, dir, flatMap1, 2)
			patchFile(t, path, h.Offset(2)+9, 0x09)
		}, ProblemBlock},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyFixture(t, heapFixture)
			c.mutate(t, dir, openDir(t, dir))
			probs, _ := Check(ctx, openDir(t, dir), CheckOptions{})
			found := false
			for _, p := range probs {
				if p.Kind == c.kind && p.KeyGroup == 2 && p.Offset > 0 {
					found = true
				}
			}
			if !found {
				t.Fatalf("want a %s problem in key group 2, got %v", c.kind, probs)
			}
		})
	}
}

const heapFixture = "flink1.20-hashmap-NATIVE-for-contrast"
