package keyed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
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
