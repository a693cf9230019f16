package keyed

import (
	"bytes"
	"encoding/json"
	"testing"
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

// TestReuseValuesDecodesAlike: decoding into recycled memory yields the
// same entries as decoding into fresh memory, across many arena resets
// (blocks of far more than reuseEvery entries, keys shared by
// consecutive entries, compressed and not).
func TestReuseValuesDecodesAlike(t *testing.T) {
	for _, c := range []struct {
		compressed bool
		maxPar     int
	}{{false, 128}, {true, 128}, {false, 32768}} {
		data, offs, n := sqlStream(c.compressed, c.maxPar, 4, 300)
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
