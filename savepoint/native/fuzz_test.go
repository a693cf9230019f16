package native

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/sfstate/sfstate/checkpoint/manifest"
	"testing"

	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// fuzzFamilies are the column families of testHandle, indexed by the
// fuzzer's cf byte; "default" and an undeclared family are included, and
// the engine's two join-record states (declared for the engine decoder).
var fuzzFamilies = []string{"v", "l", "m", "_timer_state/event_t", "default", "other", bucketStateName, recordStateName}

// FuzzDecodeEntry decodes one fuzzed RocksDB entry (column family, key,
// value) of a native snapshot in both layouts. Every outcome must be an
// entry that marshals to JSON, or an error wrapping ErrFormat or
// ErrOutOfRange; never a panic.
func FuzzDecodeEntry(f *testing.F) {
	ts := binary.BigEndian.AppendUint64(nil, 1700000000000)
	fk := func(kg int, key, ns string, uk []byte) []byte {
		b, err := flinkwrite.StateKey{KeyGroup: kg, PrefixLen: 2, Key: str(key), Namespace: str(ns), UserKey: uk, Ambiguous: true}.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	lv, err := flinkwrite.AppendListValue(nil, str("a"), str("bc"))
	if err != nil {
		f.Fatal(err)
	}
	tk, err := flinkwrite.AppendTimerKey(nil, 250, 2, 1000, str("dave"), str("x"))
	if err != nil {
		f.Fatal(err)
	}
	// Flink layout (false), engine layout (true).
	f.Add(false, uint8(0), fk(250, "alice", "w1", nil), flinkwrite.AppendLong(nil, 42))
	f.Add(false, uint8(1), fk(251, "bob", "", nil), lv)
	f.Add(false, uint8(2), fk(255, "carol", "n", str("uk")), flinkwrite.AppendMapEntryValue(nil, flinkwrite.AppendLong(nil, -7), false))
	f.Add(false, uint8(3), tk, []byte(nil))
	f.Add(true, uint8(0), engineKey(7, []byte("k"), nil, nil), append(append([]byte(nil), ts...), 'z'))
	f.Add(true, uint8(1), engineKey(8, []byte("k"), []byte("n"), nil), append(append([]byte(nil), ts...), 1, 'a', 2, 'b', 'c'))
	f.Add(true, uint8(2), engineKey(9, []byte("k"), nil, []byte("uk")), binary.BigEndian.AppendUint64(append([]byte(nil), ts...), 3))
	f.Add(true, uint8(3), append(binary.BigEndian.AppendUint64([]byte{0, 10}, 1<<63), 'e'), []byte(nil))
	jk := []byte{0, 9, 1, 2, 'j', 'k'}
	f.Add(true, uint8(6), jk, append(append([]byte(nil), ts...), 1, 1, 3))
	f.Add(true, uint8(7), append(jk, 'r', 'o', 'w'), binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append([]byte(nil), ts...), 2), 1))
	flinkDec, err := testHandle(f, LayoutFlink, 128, 255).NewDecoder(testMaxPar)
	if err != nil {
		f.Fatal(err)
	}
	eh := testHandle(f, LayoutEngine, 0, 255)
	eh.EngineStates = []manifest.StateInfo{{Name: "v", Kind: "value"}, {Name: "l", Kind: "list"}, {Name: "m", Kind: "multiset"}, {Name: "_timer_state/event_t", Kind: "priority-queue"},
		{Name: bucketStateName, Kind: "value"}, {Name: recordStateName, Kind: "map"}}
	for _, n := range []string{bucketStateName, recordStateName} {
		j := *eh.Header.States[0]
		j.Name = n
		eh.Header.States = append(eh.Header.States, &j)
	}
	engineDec, err := eh.NewDecoder(testMaxPar)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, engine bool, cf uint8, key, value []byte) {
		d := flinkDec
		if engine {
			d = engineDec
		}
		fam := fuzzFamilies[int(cf)%len(fuzzFamilies)]
		err := d.Decode(fam, key, value, func(e *keyed.Entry) error {
			if e.KeyGroup < 0 || e.KeyGroup >= testMaxPar {
				t.Fatalf("key group %d", e.KeyGroup)
			}
			_, err := json.Marshal(e)
			return err
		})
		if err != nil && !errors.Is(err, ErrFormat) && !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("%s: unclassified error %v", fam, err)
		}
	})
}
