package stateexport

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
)

func TestParseFieldNames(t *testing.T) {
	good := map[string]FieldNames{
		"left-records.user_key=id,amount,item":         {Target: "left-records", Part: PartUserKey, Names: []string{"id", "amount", "item"}},
		"op-uid/left-records.key=id":                   {Target: "op-uid/left-records", Part: PartKey, Names: []string{"id"}},
		"_timer_state/event_timer.namespace=start,end": {Target: "_timer_state/event_timer", Part: PartNamespace, Names: []string{"start", "end"}},
		"a.b.value=x": {Target: "a.b", Part: PartValue, Names: []string{"x"}},
	}
	for spec, want := range good {
		got, err := ParseFieldNames(spec)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for _, spec := range []string{"", "state=a", ".value=a", "s.values=a", "s.value=", "s.value=a,,b", "s.value=a,a", "s.value=a b", "s.value=a=b"} {
		if _, err := ParseFieldNames(spec); err == nil {
			t.Errorf("%q accepted", spec)
		}
	}
}

// TestExportFieldNames names the key and user-key fields of a join
// fixture's left-records state (one operator-qualified entry), and checks
// the columns of that table, of right-records (untouched) and that
// entries which do not fit fail with ErrFieldNames before a manifest is
// written.
func TestExportFieldNames(t *testing.T) {
	sp := openFixture(t, fixtures.Path(t, "sql-rocksdb-canonical-join-mapstate", "savepoint"))
	op := "7c2e2faa042538c9c6536014ee065870"
	names := []FieldNames{}
	for _, spec := range []string{"left-records.user_key=id,amount,item", op + "/left-records.key=order_id"} {
		f, err := ParseFieldNames(spec)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, f)
	}
	dir := t.TempDir()
	man := export(t, sp, dir, Options{FieldNames: names})
	cols := map[string][]string{}
	for _, tb := range man.Tables {
		cols[tb.State] = tb.Columns
	}
	want := []string{ColOperator, ColSubtask, ColKeyGroup, "key_order_id", "user_key_id", "user_key_amount", "user_key_item", "value"}
	if !reflect.DeepEqual(cols["left-records"], want) {
		t.Fatalf("left-records columns %v, want %v", cols["left-records"], want)
	}
	if got := cols["right-records"]; len(got) != 8 || got[3] != "key_f0" || got[4] != "user_key_f0" {
		t.Fatalf("right-records columns %v", got)
	}
	for _, tb := range man.Tables {
		if tb.State == "left-records" {
			rows, got := parquetRows(t, filepath.Join(dir, tb.Files[0].Key))
			if !reflect.DeepEqual(got, want) || len(rows) != 7 {
				t.Fatalf("left-records file: columns %v, %d rows", got, len(rows))
			}
		}
	}
	for _, spec := range []string{"left-records.user_key=a,b", "nosuch.value=a", "left-records.value=a,b", "left-records.namespace=a"} {
		f, err := ParseFieldNames(spec)
		if err != nil {
			t.Fatal(err)
		}
		out, err := s3.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		_, err = Export(t.Context(), sp, out, Options{FieldNames: []FieldNames{f}})
		if !errors.Is(err, ErrFieldNames) {
			t.Errorf("%s: %v, want ErrFieldNames", spec, err)
		}
		if _, serr := out.Stat(t.Context(), ManifestKey(Options{}.Shard)); serr == nil {
			t.Errorf("%s: manifest written", spec)
		}
	}
}
