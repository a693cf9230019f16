package savepoint

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
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
