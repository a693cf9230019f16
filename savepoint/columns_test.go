package savepoint

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// columnsByState renders every entry ScanColumns delivers (batches and
// fallback entries) as JSON, per operator/subtask/state in order.
func columnsByState(t *testing.T, sp *Savepoint, o ScanOptions) (map[string][]string, int, error) {
	t.Helper()
	out := map[string][]string{}
	rows := 0
	err := sp.ScanColumns(context.Background(), o, func(b *ColumnBatch) error {
		k := fmt.Sprintf("%s/%d/%s", b.Operator.ID, b.Subtask, b.State.Name)
		for i := 0; i < b.Len(); i++ {
			ttl, ok := b.TTLTimestamp(i)
			var tp *int64
			if ok {
				tp = &ttl
			}
			j, err := json.Marshal([]any{b.KeyGroup, b.Key(i), b.Value(i), tp})
			if err != nil {
				return err
			}
			out[k] = append(out[k], string(j))
			rows++
		}
		return nil
	}, func(e *KeyedEntry) error {
		k := fmt.Sprintf("%s/%d/%s", e.Operator.ID, e.Subtask, e.State.Name)
		j, err := json.Marshal([]any{e.KeyGroup, e.Key, e.Value, e.TTLTimestamp})
		out[k] = append(out[k], string(j))
		return err
	})
	return out, rows, err
}

func walkByState(t *testing.T, sp *Savepoint, o ScanOptions) (map[string][]string, error) {
	t.Helper()
	out := map[string][]string{}
	err := sp.WalkKeyed(context.Background(), o, func(e *KeyedEntry) error {
		k := fmt.Sprintf("%s/%d/%s", e.Operator.ID, e.Subtask, e.State.Name)
		j, err := json.Marshal([]any{e.KeyGroup, e.Key, e.Value, e.TTLTimestamp})
		out[k] = append(out[k], string(j))
		return err
	})
	return out, err
}

// TestScanColumnsMatchesWalk: on fixtures (columnar and fallback states)
// ScanColumns delivers exactly WalkKeyed's entries per state, in order,
// sequentially and with workers.
func TestScanColumnsMatchesWalk(t *testing.T) {
	for _, name := range []string{"sql-rocksdb-canonical-groupagg-ttl-valuestate", "sql-rocksdb-canonical-deduplicate-valuestate",
		"sql-rocksdb-canonical-join-mapstate", "sql-rocksdb-canonical-windowjoin-liststate-timers", fixtureUDF} {
		sp := openFixture(t, name)
		want, err := walkByState(t, sp, ScanOptions{KeyGroupTo: -1})
		if err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{0, 2} {
			got, _, err := columnsByState(t, sp, ScanOptions{KeyGroupTo: -1, Workers: workers})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s workers %d: columnar scan differs from the walk:\n%v\n%v", name, workers, got, want)
			}
		}
	}
}

// TestScanColumnsErrors: a corrupt block fails ScanColumns with
// WalkKeyed's error; a callback's error ends it.
func TestScanColumnsErrors(t *testing.T) {
	dir := t.TempDir()
	synthSavepoint(t, dir, 40000, 1) // ~310 entries per key group: several fallback batches
	sp := openDir(t, dir)
	h := sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*KeyGroupsHandle)
	p := filepath.Join(dir, h.Delegate.Path)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	at := h.Offsets[70] + 2 + 26*300 + 14
	copy(b[at:], []byte{0x7F, 0, 0, 0})
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	want, werr := walkByState(t, sp, ScanOptions{KeyGroupTo: -1})
	if werr == nil {
		t.Fatal("walk of a corrupt block succeeded")
	}
	for _, workers := range []int{0, 2, 3} {
		got, _, err := columnsByState(t, sp, ScanOptions{KeyGroupTo: -1, Workers: workers})
		if err == nil || err.Error() != werr.Error() {
			t.Fatalf("workers %d: columnar error %v, walk %v", workers, err, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("workers %d: entries before the error differ from the walk's", workers)
		}
	}
	n := 0
	err = sp.ScanColumns(context.Background(), ScanOptions{KeyGroupTo: -1}, func(*ColumnBatch) error { return nil }, func(*KeyedEntry) error {
		n++
		if n == 10 {
			return StopWalk
		}
		return nil
	})
	if !IsStop(err) || n != 10 {
		t.Fatalf("stop: %v after %d entries", err, n)
	}
}

// TestSummaryColumnsMatchesGeneric: statistics read from column batches
// equal those of the validating walk, on fixtures whose TTL states are
// columnar.
func TestSummaryColumnsMatchesGeneric(t *testing.T) {
	used := 0
	for _, name := range []string{"sql-rocksdb-canonical-groupagg-ttl-valuestate", "sql-rocksdb-canonical-join-ttl-valuestate"} {
		sp := openFixture(t, name)
		allColumnar, ttl := true, false
		err := sp.WalkKeyed(context.Background(), ScanOptions{KeyGroupTo: -1, Mode: 2, SkipNative: true}, func(e *KeyedEntry) error {
			for _, m := range e.Header.States {
				allColumnar = allColumnar && m.Columnar()
				ttl = ttl || m.TTL
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if allColumnar && ttl {
			used++
		}
		var out [2]string
		for i, cols := range []bool{true, false} {
			summaryColumns = cols
			sum := Summarize(sp)
			err := ScanSummary(context.Background(), sp, sum, ScanOptions{KeyGroupTo: -1, TTLMillis: 3_600_000, NowMillis: 1_800_000_000_000})
			summaryColumns = true
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(sum)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = string(b)
		}
		if out[0] != out[1] {
			t.Fatalf("%s: columnar statistics differ:\n%s\n%s", name, out[0], out[1])
		}
	}
	if used == 0 {
		t.Fatal("no fixture took the columnar statistics path")
	}
}
