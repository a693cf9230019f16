package keyed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// decodeOperatorStates returns "op/subtask/state" → decoded JSON values.
func decodeOperatorStates(t *testing.T, fixture string) (map[string][]string, map[int]int) {
	t.Helper()
	m := readTestMetadata(t, fixture)
	out := map[string][]string{}
	versions := map[int]int{}
	for _, op := range m.operators {
		for _, st := range op.subtasks {
			mh := st.managed
			if mh == nil || mh.stream == nil {
				continue
			}
			data := mh.stream.bytes(t)
			h, _, err := ReadOperatorHeader(bytes.NewReader(data), mh.stream.name)
			if err != nil {
				t.Fatalf("%s: %v", fixture, err)
			}
			versions[h.Version]++
			var refs []OperatorStateRef
			for _, s := range mh.states {
				refs = append(refs, OperatorStateRef{Name: s.name, Mode: s.mode, Offsets: s.offsets})
			}
			err = ReadOperatorStates(bytes.NewReader(data), int64(len(data)), mh.stream.name, h, refs, ModeDecode, func(e *OperatorEntry) error {
				k := fmt.Sprintf("%s/%d/%s", op.id, st.index, e.State.Name)
				var b []byte
				if e.Mode == ModeBroadcast {
					b, _ = json.Marshal([]any{e.Key, e.Value})
				} else {
					b, _ = json.Marshal(e.Value)
				}
				out[k] = append(out[k], string(b))
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", fixture, err)
			}
		}
	}
	return out, versions
}

func TestBroadcastOperatorState(t *testing.T) {
	fixtures.Require(t)
	got, versions := decodeOperatorStates(t, "flink1.20-rocksdb-canonical-broadcast-operator-state")
	if versions[6] == 0 || len(versions) != 1 {
		t.Errorf("proxy versions %v, want only 6", versions)
	}
	want := map[string]string{
		"12d7d939fd56473cac7cff0603179a41/0/broadcast-state-1": `[0,0] [1,1] [2,2] [3,3]`,
		"12d7d939fd56473cac7cff0603179a41/2/broadcast-state-2": `["0",0] ["1",1] ["2",2] ["3",3]`,
		"56a26c4c54bda3adf3700194db4afe93/3/broadcast-state-3": `[0,"0"] [1,"1"] [2,"2"] [3,"3"]`,
		"69f32d314b97c6f7f9ed7873983167f2/0/source-state":      `"Here be dragons!" "Here be more dragons!" "Here be the mostest dragons!" "Here be yet more dragons!"`,
	}
	for k, w := range want {
		g := append([]string{}, got[k]...)
		sort.Strings(g)
		if strings.Join(g, " ") != w {
			t.Errorf("%s = %v, want %s", k, got[k], w)
		}
	}
}

func TestListOperatorStateJavaSerializer(t *testing.T) {
	fixtures.Require(t)
	got, _ := decodeOperatorStates(t, "flink1.20-hashmap-canonical-liststate-window-inline")
	var all []string
	for k, v := range got {
		if strings.HasSuffix(k, "/_default_") {
			all = append(all, v...)
		}
	}
	sort.Strings(all)
	want := `"first0" "first1" "first2" "first3" "second0" "second1" "second2" "second3"`
	if strings.Join(all, " ") != want {
		t.Fatalf("got %v", all)
	}
}

// TestCompressedOperatorStateFixture decodes the Snappy-compressed operator
// state of the Flink 1.19 fixture (one framed stream, identifier only before
// the first offset) and compares its elements with the same job's
// uncompressed 1.20 savepoint.
func TestCompressedOperatorStateFixture(t *testing.T) {
	fixtures.Require(t)
	got, versions := decodeOperatorStates(t, "flink1.19-rocksdb-canonical-snappy-compressed")
	if versions[6] == 0 || len(versions) != 1 {
		t.Errorf("proxy versions %v, want only 6", versions)
	}
	ref, _ := decodeOperatorStates(t, "flink1.20-rocksdb-canonical-broadcast-operator-state")
	// Every (operator, subtask, state) list of the compressed savepoint
	// must equal, as a multiset, some list of the same state name in the
	// uncompressed one.
	refLists := map[string]map[string]bool{}
	for k, v := range ref {
		name := k[strings.LastIndex(k, "/")+1:]
		v = append([]string{}, v...)
		sort.Strings(v)
		if refLists[name] == nil {
			refLists[name] = map[string]bool{}
		}
		refLists[name][strings.Join(v, " ")] = true
	}
	if len(got) == 0 {
		t.Fatal("no operator state decoded")
	}
	for k, v := range got {
		name := k[strings.LastIndex(k, "/")+1:]
		v = append([]string{}, v...)
		sort.Strings(v)
		if !refLists[name][strings.Join(v, " ")] {
			t.Errorf("%s = %v; not among the uncompressed fixture's lists %v", k, v, refLists[name])
		}
	}
	want := `"Here be dragons!" "Here be more dragons!" "Here be the mostest dragons!" "Here be yet more dragons!"`
	for k, v := range got {
		if strings.HasSuffix(k, "/source-state") {
			v = append([]string{}, v...)
			sort.Strings(v)
			if strings.Join(v, " ") != want {
				t.Errorf("%s = %v", k, v)
			}
		}
	}
}

func TestOperatorStateV5(t *testing.T) {
	fixtures.Require(t)
	got, versions := decodeOperatorStates(t, "flink1.15-rocksdb-canonical-metadata-v3")
	if versions[5] == 0 || len(versions) != 1 {
		t.Errorf("proxy versions %v, want only 5", versions)
	}
	n := 0
	for k, v := range got {
		if strings.HasSuffix(k, "/source-state") {
			n += len(v)
		}
	}
	if n != 8 {
		t.Errorf("%d source-state elements, want 8 (2 sources × 4)", n)
	}
}

func TestOperatorEntryJSON(t *testing.T) {
	e := &OperatorEntry{State: &StateMeta{Name: "b"}, Mode: ModeBroadcast, Index: 2, Key: int64(1), Value: "x"}
	b, err := json.Marshal(e)
	if err != nil || string(b) != `{"index":2,"key":1,"mode":"BROADCAST","state":"b","value":"x"}` {
		t.Fatalf("%s %v", b, err)
	}
	e = &OperatorEntry{State: &StateMeta{Name: "l"}, Mode: ModeUnion, Bytes: []byte{1}}
	b, _ = json.Marshal(e)
	if string(b) != `{"bytes":"AQ==","index":0,"mode":"UNION","state":"l"}` {
		t.Fatalf("%s", b)
	}
}

// TestCompressedOperatorState lays out a compressed (proxy v6) operator
// state file the way Flink's writer does: per state one framed stream whose
// identifier precedes the first offset, flushed (chunk boundary) at every
// offset.
func TestCompressedOperatorState(t *testing.T) {
	opMeta := func(name, mode string, sers ...[2][]byte) []byte {
		s := synthState{name: name, typ: Operator, options: [][2]string{{OptDistributionMode, mode}}, sers: sers}
		return stateMetaBytes(s)
	}
	var e binfmt.Encbuf
	e.PutI32(6)
	e.PutBool(true)
	e.PutI16(1)
	e.PutBytes(opMeta("list", "SPLIT_DISTRIBUTE", [2][]byte{[]byte(SerValue), simpleSnap(serde.ClassLong)}))
	e.PutI16(1)
	bm := synthState{name: "bc", typ: Broadcast, options: [][2]string{{OptDistributionMode, "BROADCAST"}},
		sers: [][2][]byte{{[]byte(SerKey), simpleSnap(serde.ClassString)}, {[]byte(SerValue), simpleSnap(serde.ClassLong)}}}
	e.PutBytes(stateMetaBytes(bm))
	data := e.B
	chunk := func(payload []byte) []byte {
		framed := flinkwrite.AppendSnappyFramed(nil, payload)
		return framed[10:] // drop the stream identifier
	}
	var listOffs []int64
	// One stream identifier for the whole data section, as Flink's
	// CompressibleFSDataOutputStream writes it; later offsets are bare
	// chunk boundaries.
	data = append(data, flinkwrite.AppendSnappyFramed(nil, nil)...)
	for _, v := range []int64{7, 1 << 40, -3} {
		listOffs = append(listOffs, int64(len(data)))
		var el binfmt.Encbuf
		el.PutI64(v)
		data = append(data, chunk(el.B)...)
	}
	bcOff := int64(len(data))
	var m binfmt.Encbuf
	m.PutI32(2)
	m.PutBytes([]byte{2, 'a'})
	m.PutI64(1)
	m.PutBytes([]byte{3, 'b', 'b'})
	m.PutI64(2)
	data = append(data, chunk(m.B)...)

	h, _, err := ReadOperatorHeader(bytes.NewReader(data), "op")
	if err != nil || !h.Compressed {
		t.Fatalf("header: %v", err)
	}
	refs := []OperatorStateRef{{Name: "list", Mode: ModeSplitDistribute, Offsets: listOffs}, {Name: "bc", Mode: ModeBroadcast, Offsets: []int64{bcOff}}}
	var got []string
	err = ReadOperatorStates(bytes.NewReader(data), int64(len(data)), "op", h, refs, ModeDecode, func(e *OperatorEntry) error {
		b, _ := json.Marshal(e)
		got = append(got, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"index":0,"mode":"SPLIT_DISTRIBUTE","state":"list","value":7}
{"index":1,"mode":"SPLIT_DISTRIBUTE","state":"list","value":1099511627776}
{"index":2,"mode":"SPLIT_DISTRIBUTE","state":"list","value":-3}
{"index":0,"key":"a","mode":"BROADCAST","state":"bc","value":1}
{"index":1,"key":"bb","mode":"BROADCAST","state":"bc","value":2}`
	if strings.Join(got, "\n") != want {
		t.Fatalf("got\n%s", strings.Join(got, "\n"))
	}
	// A corrupted chunk is reported with the file name.
	bad := append([]byte{}, data...)
	bad[listOffs[1]+5] ^= 0xFF
	err = ReadOperatorStates(bytes.NewReader(bad), int64(len(bad)), "op", h, refs, ModeDecode, func(*OperatorEntry) error { return nil })
	if !errors.Is(err, ErrSnappy) || !strings.HasPrefix(err.Error(), "op") {
		t.Fatalf("corrupt chunk: %v", err)
	}
}

// TestAppendOperatorHeaderFlinkBytes: flinkwrite.AppendOperatorHeader,
// given the meta infos read from Flink 1.20's operator-state streams
// (serializer snapshots kept as their bytes), writes those headers byte
// for byte.
func TestAppendOperatorHeaderFlinkBytes(t *testing.T) {
	fixtures.Require(t)
	infos := func(ms []*StateMeta) []flinkwrite.StateMetaInfo {
		var out []flinkwrite.StateMetaInfo
		for _, m := range ms {
			s := flinkwrite.StateMetaInfo{Name: m.Name, Type: flinkwrite.BackendStateType(m.Type)}
			for _, o := range m.Options {
				s.Options = append(s.Options, flinkwrite.Option{Key: o[0], Value: o[1]})
			}
			for _, n := range m.Serializers {
				s.Serializers = append(s.Serializers, flinkwrite.NamedSnapshot{Key: n.Key, Snapshot: flinkwrite.RawSnapshot{Versioned: n.Snapshot.Raw}})
			}
			out = append(out, s)
		}
		return out
	}
	seen := map[string]int{}
	for _, fx := range []string{"flink1.20-rocksdb-canonical-broadcast-operator-state", "flink1.20-rocksdb-canonical-valuestate-timers"} {
		m := readTestMetadata(t, fx)
		for _, op := range m.operators {
			for _, st := range op.subtasks {
				mh := st.managed
				if mh == nil || mh.stream == nil {
					continue
				}
				h, _, err := ReadOperatorHeader(bytes.NewReader(mh.stream.bytes(t)), mh.stream.name)
				if err != nil {
					t.Fatal(err)
				}
				if h.Version != 6 {
					t.Fatalf("%s: proxy version %d", mh.stream.name, h.Version)
				}
				b, err := flinkwrite.AppendOperatorHeader(nil, h.Compressed, infos(h.States), infos(h.Broadcast))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, h.Raw) {
					t.Fatalf("%s: written header (%d bytes) differs from Flink's (%d bytes)", mh.stream.name, len(b), len(h.Raw))
				}
				seen["list"] += len(h.States)
				seen["broadcast"] += len(h.Broadcast)
			}
		}
	}
	if seen["list"] == 0 || seen["broadcast"] == 0 {
		t.Fatalf("states compared: %v", seen)
	}
}
