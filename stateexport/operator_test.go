package stateexport

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/verify"
)

// opTables returns the operator-state tables of an export by
// "<operator id>/<state>", read back with parquet-go (rows and columns).
func opTables(t *testing.T, dir string, man *Manifest) map[string][][]any {
	t.Helper()
	out := map[string][][]any{}
	for _, tb := range man.Tables {
		if !operatorStateKind(tb.Kind) {
			continue
		}
		rows, names := parquetRows(t, filepath.Join(dir, tb.Files[0].Key))
		if !reflect.DeepEqual(names, tb.Columns) || names[0] != ColOperator || names[2] != ColState || names[3] != ColMode || names[4] != ColIndex {
			t.Fatalf("%s: columns %v, manifest %v", tb.Name, names, tb.Columns)
		}
		if int64(len(rows)) != tb.Rows {
			t.Fatalf("%s: %d rows, manifest %d", tb.Name, len(rows), tb.Rows)
		}
		for _, r := range rows {
			if r[0] != tb.Operator || r[2] != tb.State || r[3] != tb.Kind {
				t.Fatalf("%s: row %v", tb.Name, r)
			}
		}
		out[tb.Operator+"/"+tb.State] = rows
	}
	return out
}

// TestExportOperatorState exports the fixtures with operator state and
// checks the tables against the fixtures' documented contents (MANIFEST):
// the sources' list and union states of four strings, the broadcast maps
// (a full copy per subtask), and the Java-serialized strings of
// ListCheckpointed operators; _states lists each with its table and rows;
// shards other than the first write no operator-state table.
func TestExportOperatorState(t *testing.T) {
	dragons := []string{"Here be dragons!", "Here be more dragons!", "Here be yet more dragons!", "Here be the mostest dragons!"}
	sources := map[string]string{"69f32d314b97c6f7f9ed7873983167f2": "SPLIT_DISTRIBUTE", "1f2b5df5a66154aca61fcb26193792be": "UNION"}
	for _, name := range []string{"flink1.20-rocksdb-canonical-valuestate-timers", "flink1.20-hashmap-canonical-valuestate-timers",
		"flink1.19-rocksdb-canonical-snappy-compressed", "flink1.15-rocksdb-canonical-metadata-v3"} {
		t.Run(name, func(t *testing.T) {
			sp := openFixture(t, fixtures.Path(t, name))
			dir := t.TempDir()
			man := export(t, sp, dir, Options{RowGroupRows: 3})
			got := opTables(t, dir, man)
			for op, mode := range sources {
				rows := got[op+"/source-state"]
				if len(rows) != len(dragons) {
					t.Fatalf("%s: %d rows %v, want the 4 strings", op, len(rows), rows)
				}
				for i, r := range rows {
					want := []any{op, int64(0), "source-state", mode, int64(i), dragons[i]}
					if !reflect.DeepEqual(r, want) {
						t.Fatalf("%s row %d: %q, want %q", op, i, r, want)
					}
				}
			}
			checkOperatorStatesRows(t, dir, man, got)
		})
	}
	t.Run("broadcast", func(t *testing.T) {
		sp := openFixture(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-broadcast-operator-state"))
		dir := t.TempDir()
		man := export(t, sp, dir, Options{})
		got := opTables(t, dir, man)
		entry := map[string]func(i int) []any{
			"12d7d939fd56473cac7cff0603179a41/broadcast-state-1": func(i int) []any { return []any{int64(i), int64(i)} },
			"12d7d939fd56473cac7cff0603179a41/broadcast-state-2": func(i int) []any { return []any{fmt.Sprint(i), int64(i)} },
			"56a26c4c54bda3adf3700194db4afe93/broadcast-state-3": func(i int) []any { return []any{int64(i), fmt.Sprint(i)} },
		}
		for k, f := range entry {
			rows := got[k]
			perSubtask := map[int64][]string{}
			for _, r := range rows {
				if r[3] != "BROADCAST" || len(r) != 7 {
					t.Fatalf("%s: row %v", k, r)
				}
				perSubtask[r[1].(int64)] = append(perSubtask[r[1].(int64)], fmt.Sprint(r[5:]))
			}
			if len(perSubtask) == 0 {
				t.Fatalf("%s: no rows", k)
			}
			var want []string
			for i := 0; i < 4; i++ {
				want = append(want, fmt.Sprint(f(i)))
			}
			for st, es := range perSubtask {
				sort.Strings(es)
				if !reflect.DeepEqual(es, want) {
					t.Errorf("%s subtask %d: entries %v, want %v", k, st, es, want)
				}
			}
		}
		if len(got["81afaf64abeedc40a0f29989b81a3659/source-state"]) != 4 {
			t.Errorf("the broadcast job's source: %v", got["81afaf64abeedc40a0f29989b81a3659/source-state"])
		}
		checkOperatorStatesRows(t, dir, man, got)
	})
	t.Run("java-serialized", func(t *testing.T) {
		sp := openFixture(t, fixtures.Path(t, "flink1.20-hashmap-canonical-liststate-window-inline"))
		dir := t.TempDir()
		man := export(t, sp, dir, Options{Format: Parquet})
		got := opTables(t, dir, man)
		seen := map[string]bool{}
		for k, rows := range got {
			if !strings.HasSuffix(k, "/_default_") {
				continue
			}
			for _, r := range rows {
				v := fmt.Sprint(r[len(r)-1])
				for _, p := range []string{"first", "second"} {
					if w := fmt.Sprintf("%s%d", p, r[1]); strings.HasSuffix(v, w) {
						seen[w] = true
					}
				}
			}
		}
		if len(seen) != 8 {
			t.Fatalf("Java strings found: %v (want first0..3, second0..3) in %v", seen, got)
		}
		checkOperatorStatesRows(t, dir, man, got)
	})
	t.Run("shards", func(t *testing.T) {
		sp := openFixture(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
		dir := t.TempDir()
		for i := 0; i < 2; i++ {
			man := export(t, sp, dir, Options{Shard: verify.Shard{Index: i, Count: 2}})
			if n := len(opTables(t, dir, man)); (i == 0) != (n > 0) {
				t.Errorf("shard %d wrote %d operator-state tables", i, n)
			}
		}
	})
}

// checkOperatorStatesRows checks the _states rows of operator states:
// each names its table and the rows written.
func checkOperatorStatesRows(t *testing.T, dir string, man *Manifest, got map[string][][]any) {
	t.Helper()
	var st *ManifestTable
	for _, tb := range man.Tables {
		if tb.Name == StatesTable {
			st = tb
		}
	}
	rows, names := parquetRows(t, filepath.Join(dir, st.Files[0].Key))
	col := map[string]int{}
	for i, n := range names {
		col[n] = i
	}
	n := 0
	for _, r := range rows {
		if !operatorStateKind(r[col["kind"]].(string)) {
			continue
		}
		k := r[col["operator_id"]].(string) + "/" + r[col["state"]].(string)
		if r[col["table"]] == nil || r[col["rows"]] != int64(len(got[k])) {
			t.Errorf("_states %s: table %v rows %v, want %d rows", k, r[col["table"]], r[col["rows"]], len(got[k]))
		}
		n++
	}
	if n != len(got) {
		t.Errorf("_states lists %d operator states, %d tables written", n, len(got))
	}
}

// TestExportOperatorStateSQL: the SQL async-calc job's operator states —
// the sinks' ROW<INT, BIGINT> lists (one element each), the async
// operator's empty in-flight queue and the source reader's empty BYTES
// list — each get a table (empty ones too), typed: one column per row
// field.
func TestExportOperatorStateSQL(t *testing.T) {
	sp := openFixture(t, fixtures.MorePath(t, "sql-rocksdb-canonical-async-calc", "savepoint"))
	dir := t.TempDir()
	man := export(t, sp, dir, Options{Format: Arrow})
	want := map[string]int64{"sink-retract-results": 1, "sink-results": 1, "_async_wait_operator_state_": 0, "SourceReaderState": 0}
	seen := map[string]bool{}
	for _, tb := range man.Tables {
		if !operatorStateKind(tb.Kind) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, tb.Files[0].Key))
		if err != nil {
			t.Fatal(err)
		}
		r, err := ipc.NewFileReader(f)
		if err != nil {
			t.Fatal(err)
		}
		schema := r.Schema()
		rows := 0
		for i := 0; i < r.NumRecords(); i++ {
			rec, err := r.RecordBatch(i)
			if err != nil {
				t.Fatal(err)
			}
			rows += int(rec.NumRows())
		}
		r.Close()
		f.Close()
		n, ok := want[tb.State]
		if !ok || int64(rows) != n || tb.Rows != n || tb.Kind != "SPLIT_DISTRIBUTE" {
			t.Fatalf("%s: %d rows (manifest %d, kind %s), want %d", tb.Name, rows, tb.Rows, tb.Kind, n)
		}
		seen[tb.State] = true
		if strings.HasPrefix(tb.State, "sink-") {
			if schema.NumFields() != 7 || schema.Field(5).Type.ID() != arrow.INT32 || schema.Field(6).Type.ID() != arrow.INT64 {
				t.Fatalf("%s: schema %v, want value_f0 INT32, value_f1 INT64", tb.Name, schema)
			}
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("tables for %v, want %v", seen, want)
	}
}
