package stateexport

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/parquet-go/parquet-go"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
	"github.com/sfstate/sfstate/verify"
)

func openFixture(t testing.TB, dir string) *savepoint.Savepoint {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func export(t testing.TB, sp *savepoint.Savepoint, dir string, o Options) *Manifest {
	t.Helper()
	out, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	man, err := Export(context.Background(), sp, out, o)
	if err != nil {
		t.Fatal(err)
	}
	return man
}

// expectedRows decodes every keyed entry of sp (without the exporter's
// code) and returns per "<operator id>/<state>" the rows an export must
// hold, each as its sequence of leaf values in column order: operator,
// subtask, key group, [timer timestamp], key, namespace, [list index],
// [user key], value, [TTL timestamp]. Rows, tuples and nested rows
// contribute their fields; VoidNamespace nothing.
func expectedRows(t *testing.T, sp *savepoint.Savepoint, shard verify.Shard) map[string][][]any {
	t.Helper()
	out := map[string][][]any{}
	for _, op := range sp.Meta.Operators {
		from, to := shard.Range(int(op.MaxParallelism))
		if from > to {
			continue
		}
		err := sp.WalkKeyed(context.Background(), savepoint.ScanOptions{Operator: op.ID.String(), KeyGroupFrom: from, KeyGroupTo: to, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
			k := e.Operator.ID.String() + "/" + e.State.Name
			base := []any{e.Operator.ID.String(), int64(e.Subtask), int64(e.KeyGroup)}
			if e.State.Type == keyed.PriorityQueue {
				tm := e.Value.(*serde.Timer)
				row := append(base, tm.Timestamp)
				row = leaves(row, tm.Key)
				row = leaves(row, tm.Namespace)
				out[k] = append(out[k], row)
				return nil
			}
			row := leaves(append([]any(nil), base...), e.Key)
			row = leaves(row, e.Namespace)
			switch e.State.Kind {
			case "LIST":
				for i, el := range e.Value.(serde.List) {
					r := append(append([]any(nil), row...), int64(i))
					if tv, ok := el.(*serde.TTLValue); ok {
						r = append(leaves(r, tv.Value), tv.LastAccess)
					} else {
						r = leaves(r, el)
					}
					out[k] = append(out[k], r)
				}
				if e.Value.(serde.List) == nil {
					out[k] = append(out[k], nil)
				}
				return nil
			case "MAP":
				row = leaves(row, e.UserKey)
			}
			if tv, ok := e.Value.(*serde.TTLValue); ok {
				row = append(leaves(row, tv.Value), tv.LastAccess)
			} else {
				row = leaves(row, e.Value)
			}
			out[k] = append(out[k], row)
			return nil
		})
		if err != nil && !errors.Is(err, savepoint.ErrNativeLayout) {
			t.Fatal(err)
		}
	}
	return out
}

// leaves appends the leaf values of a decoded value.
func leaves(dst []any, v serde.Value) []any {
	switch x := v.(type) {
	case serde.Void, serde.GlobalWindow:
		return dst
	case *serde.Row:
		for _, f := range x.Fields {
			dst = leaves(dst, f)
		}
		return dst
	case serde.Tuple:
		for _, f := range x {
			dst = leaves(dst, f)
		}
		return dst
	case serde.TimeWindow:
		return append(dst, x.Start, x.End)
	case int8:
		return append(dst, int64(x))
	case int16:
		return append(dst, int64(x))
	case int32:
		return append(dst, int64(x))
	case float32:
		return append(dst, float64(x))
	case serde.Timestamp:
		if x.Precision > 3 {
			panic("fixture with TIMESTAMP(p > 3): extend the test")
		}
		return append(dst, x.Millis)
	case []byte:
		return append(dst, string(x))
	case *serde.Raw:
		return append(dst, string(x.Bytes))
	}
	return append(dst, v)
}

// parquetRows reads a Parquet file with parquet-go (independent of the
// Arrow writer) and returns its rows as leaf values and its column names.
func parquetRows(t *testing.T, path string) ([][]any, []string) {
	t.Helper()
	pf := openParquet(t, path)
	var names []string
	for _, fl := range pf.Schema().Fields() {
		names = append(names, fl.Name())
	}
	r := parquet.NewReader(pf)
	var out [][]any
	buf := make([]parquet.Row, 64)
	for {
		n, err := r.ReadRows(buf)
		for _, row := range buf[:n] {
			var vals []any
			for _, v := range row {
				vals = append(vals, parquetValue(v))
			}
			out = append(out, vals)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if int64(len(out)) != pf.NumRows() {
		t.Fatalf("%s: read %d rows, footer says %d", path, len(out), pf.NumRows())
	}
	return out, names
}

func parquetValue(v parquet.Value) any {
	if v.IsNull() {
		return nil
	}
	switch v.Kind() {
	case parquet.Boolean:
		return v.Boolean()
	case parquet.Int32:
		return int64(v.Int32())
	case parquet.Int64:
		return v.Int64()
	case parquet.Float:
		return float64(v.Float())
	case parquet.Double:
		return v.Double()
	case parquet.ByteArray, parquet.FixedLenByteArray:
		return string(v.ByteArray())
	}
	return fmt.Sprintf("unsupported kind %v", v.Kind())
}

func sameLeaf(a, b any) bool {
	if fa, ok := a.(float64); ok {
		if fb, ok := b.(float64); ok {
			return fa == fb || (math.IsNaN(fa) && math.IsNaN(fb))
		}
	}
	if ca, ok := a.(serde.Char); ok {
		a = string(rune(ca))
	}
	return reflect.DeepEqual(a, b)
}

// openParquet opens the Parquet file at path with parquet-go; the file is
// closed when the test ends.
func openParquet(t *testing.T, path string) *parquet.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, fi.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pf
}

// tableByState returns the keyed-state tables by "<operator id>/<state>".
func tableByState(man *Manifest) map[string]*ManifestTable {
	m := map[string]*ManifestTable{}
	for _, tb := range man.Tables {
		if tb.State != "" && !operatorStateKind(tb.Kind) {
			m[tb.Operator+"/"+tb.State] = tb
		}
	}
	return m
}

// TestExportFixturesParquet exports every fixture and reads each table
// back with parquet-go: the same rows, in the same order, with the same
// values as the decoded entries.
func TestExportFixturesParquet(t *testing.T) {
	for _, fx := range fixtures.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			sp := openFixture(t, fx.Dir)
			dir := t.TempDir()
			man := export(t, sp, dir, Options{RowGroupRows: 3})
			want := expectedRows(t, sp, verify.Shard{})
			byState := tableByState(man)
			for k, rows := range want {
				tb := byState[k]
				if tb == nil {
					t.Fatalf("no table for %s (%d rows expected)", k, len(rows))
				}
				got, names := parquetRows(t, filepath.Join(dir, tb.Files[0].Key))
				if !reflect.DeepEqual(names, tb.Columns) {
					t.Fatalf("%s: columns %v, manifest says %v", k, names, tb.Columns)
				}
				if len(got) != len(rows) || tb.Rows != int64(len(rows)) {
					t.Fatalf("%s: %d rows read, manifest %d, want %d", k, len(got), tb.Rows, len(rows))
				}
				for i := range rows {
					if len(got[i]) != len(rows[i]) {
						t.Fatalf("%s row %d: %d leaves %v, want %d %v", k, i, len(got[i]), got[i], len(rows[i]), rows[i])
					}
					for j := range rows[i] {
						if !sameLeaf(rows[i][j], got[i][j]) {
							t.Fatalf("%s row %d column %d: got %#v, want %#v", k, i, j, got[i][j], rows[i][j])
						}
					}
				}
			}
			// Every table with rows is expected; the others are empty.
			for k, tb := range byState {
				if _, ok := want[k]; !ok && tb.Rows != 0 {
					t.Errorf("%s: %d rows, the savepoint has none", k, tb.Rows)
				}
			}
			checkStatesTable(t, dir, man, want)
		})
	}
}

// checkStatesTable reads _states back and checks the entry and row counts
// of every exported state.
func checkStatesTable(t *testing.T, dir string, man *Manifest, want map[string][][]any) {
	t.Helper()
	var st *ManifestTable
	for _, tb := range man.Tables {
		if tb.Name == StatesTable {
			st = tb
		}
	}
	if st == nil {
		t.Fatal("no _states table")
	}
	rows, names := parquetRows(t, filepath.Join(dir, st.Files[0].Key))
	col := map[string]int{}
	for i, n := range names {
		col[n] = i
	}
	seen := 0
	for _, r := range rows {
		if r[col["table"]] == nil || operatorStateKind(r[col["kind"]].(string)) {
			continue
		}
		k := r[col["operator_id"]].(string) + "/" + r[col["state"]].(string)
		if got, w := r[col["rows"]], int64(len(want[k])); got != w {
			t.Errorf("_states %s: rows %v, want %d", k, got, w)
		}
		seen++
	}
	if seen != len(tableByState(man)) {
		t.Errorf("_states lists %d exported tables, manifest %d", seen, len(tableByState(man)))
	}
}

// TestExportShardsCoverOnce exports a fixture in three shards into one
// directory: every row appears in exactly one shard's part, and together
// they hold what a whole export holds.
func TestExportShardsCoverOnce(t *testing.T) {
	sp := openFixture(t, fixtures.Path(t, "flink1.20-hashmap-canonical-liststate-window-inline"))
	dir := t.TempDir()
	total := map[string]int{}
	for i := 0; i < 3; i++ {
		sh := verify.Shard{Index: i, Count: 3}
		man := export(t, sp, dir, Options{Shard: sh})
		want := expectedRows(t, sp, sh)
		for k, tb := range tableByState(man) {
			got, _ := parquetRows(t, filepath.Join(dir, tb.Files[0].Key))
			if len(got) != len(want[k]) {
				t.Fatalf("shard %d %s: %d rows, want %d", i, k, len(got), len(want[k]))
			}
			if !strings.HasSuffix(tb.Files[0].Key, PartName(sh, Parquet)) {
				t.Fatalf("shard %d wrote %s", i, tb.Files[0].Key)
			}
			total[k] += len(got)
		}
		if _, err := os.Stat(filepath.Join(dir, ManifestKey(sh))); err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
	}
	all := expectedRows(t, sp, verify.Shard{})
	for k, rows := range all {
		if total[k] != len(rows) {
			t.Errorf("%s: shards hold %d rows, whole export %d", k, total[k], len(rows))
		}
	}
	if total["01203aa9a12dc1ec725e03853dd7c8f2/values"] != 10 {
		t.Errorf("values: %d rows over the shards, want the fixture's 10", total["01203aa9a12dc1ec725e03853dd7c8f2/values"])
	}
	// _operators comes from shard 0 only.
	ops, _ := filepath.Glob(filepath.Join(dir, OperatorsTable, "*"))
	if len(ops) != 1 {
		t.Errorf("_operators files %v, want one", ops)
	}
}

// TestExportRefusesExisting checks that a second export into the same
// place fails before writing.
func TestExportRefusesExisting(t *testing.T) {
	sp := openFixture(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
	dir := t.TempDir()
	export(t, sp, dir, Options{})
	out, _ := s3.NewLocal(dir)
	if _, err := Export(context.Background(), sp, out, Options{}); !errors.Is(err, s3.ErrExists) {
		t.Fatalf("second export: %v, want ErrExists", err)
	}
}

// TestExportJSONLAndCSV exports the SQL fixtures as JSON lines and CSV and
// checks them against the Parquet export: same columns, rows, and the same
// values in the scalar columns.
func TestExportJSONLAndCSV(t *testing.T) {
	for _, fx := range fixtures.All(t) {
		if !strings.HasPrefix(fx.Name, "sql-") && !strings.Contains(fx.Name, "liststate") {
			continue
		}
		t.Run(fx.Name, func(t *testing.T) {
			sp := openFixture(t, fx.Dir)
			pq, js, cs := t.TempDir(), t.TempDir(), t.TempDir()
			pman := export(t, sp, pq, Options{})
			jman := export(t, sp, js, Options{Format: JSONL})
			cman := export(t, sp, cs, Options{Format: CSV})
			jt, ct := tableByState(jman), tableByState(cman)
			for k, tb := range tableByState(pman) {
				prow, _ := parquetRows(t, filepath.Join(pq, tb.Files[0].Key))
				jrows := readJSONL(t, filepath.Join(js, jt[k].Files[0].Key))
				crows := readCSV(t, filepath.Join(cs, ct[k].Files[0].Key))
				if len(jrows) != len(prow) || len(crows) != len(prow)+1 {
					t.Fatalf("%s: %d JSON rows, %d CSV lines, %d Parquet rows", k, len(jrows), len(crows), len(prow))
				}
				if !reflect.DeepEqual(crows[0], tb.Columns) {
					t.Fatalf("%s: CSV header %v, want %v", k, crows[0], tb.Columns)
				}
				for i, jr := range jrows {
					for c, name := range tb.Columns {
						if !scalarColumn(name) {
							continue
						}
						pv := prow[i][c]
						jv := jr[name]
						if n, ok := jv.(json.Number); ok {
							jv = n.String()
						}
						var cv any = crows[i+1][c]
						if pv == nil {
							if jv != nil || cv != "" {
								t.Fatalf("%s row %d %s: JSON %v CSV %q, want null", k, i, name, jv, cv)
							}
							continue
						}
						want := fmt.Sprint(pv)
						if fmt.Sprint(jv) != want || cv != want {
							t.Fatalf("%s row %d %s: JSON %v CSV %v, Parquet %v", k, i, name, jv, cv, want)
						}
					}
				}
			}
		})
	}
}

// scalarColumn reports whether a column of the fixtures holds integers or
// strings rendered alike by all formats (not timestamps, bytes or nested
// values).
func scalarColumn(name string) bool {
	switch name {
	case ColOperator, ColSubtask, ColKeyGroup, ColListIndex, "key_f0":
		return true
	}
	return false
}

func readJSONL(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		d := json.NewDecoder(strings.NewReader(sc.Text()))
		d.UseNumber()
		m := map[string]any{}
		if err := d.Decode(&m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
	return out
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

// TestExportArrowIPC exports as Arrow IPC files (zstd) and reads them back
// with Arrow's IPC reader: the rows of the Parquet export.
func TestExportArrowIPC(t *testing.T) {
	sp := openFixture(t, fixtures.Path(t, "sql-rocksdb-canonical-udagg-liststate-mapstate", "savepoint"))
	dir := t.TempDir()
	man := export(t, sp, dir, Options{Format: Arrow, Compression: Zstd, RowGroupRows: 4})
	want := expectedRows(t, sp, verify.Shard{})
	for k, tb := range tableByState(man) {
		f, err := os.Open(filepath.Join(dir, tb.Files[0].Key))
		if err != nil {
			t.Fatal(err)
		}
		r, err := ipc.NewFileReader(f)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		rows := 0
		for i := 0; i < r.NumRecords(); i++ {
			rec, err := r.RecordBatch(i)
			if err != nil {
				t.Fatal(err)
			}
			if rec.NumRows() > 4 {
				t.Fatalf("%s: batch of %d rows, limit 4", k, rec.NumRows())
			}
			rows += int(rec.NumRows())
		}
		r.Close()
		f.Close()
		if rows != len(want[k]) {
			t.Fatalf("%s: %d rows, want %d", k, rows, len(want[k]))
		}
	}
}

// TestExportToS3 exports to an S3 gateway: the objects and the manifest
// appear under the prefix, and the Parquet parts read back like local ones.
func TestExportToS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	st, err := srv.NewStore(ctx, "exports/run-1", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	sp := openFixture(t, fixtures.Path(t, "sql-rocksdb-canonical-join-mapstate", "savepoint"))
	man, err := Export(ctx, sp, st, Options{RowGroupRows: 2, Shard: verify.Shard{Index: 0, Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	want := expectedRows(t, sp, verify.Shard{})
	for k, tb := range tableByState(man) {
		rc, err := st.Get(ctx, tb.Files[0].Key)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || int64(len(b)) != tb.Files[0].Size {
			t.Fatalf("%s: %d bytes, manifest %d: %v", tb.Files[0].Key, len(b), tb.Files[0].Size, err)
		}
		p := filepath.Join(local, strings.ReplaceAll(tb.Files[0].Key, "/", "_"))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		got, _ := parquetRows(t, p)
		if len(got) != len(want[k]) {
			t.Fatalf("%s: %d rows over S3, want %d", k, len(got), len(want[k]))
		}
	}
	if _, err := st.Stat(ctx, ManifestKey(verify.Shard{})); err != nil {
		t.Fatalf("manifest: %v", err)
	}
}

// operatorStateKind reports whether a table kind is a distribution mode
// (an operator-state table).
func operatorStateKind(k string) bool {
	return k == "SPLIT_DISTRIBUTE" || k == "UNION" || k == "BROADCAST"
}
