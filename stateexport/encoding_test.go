package stateexport

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go/format"

	"github.com/sfstate/sfstate/internal/bench/scanbench"
)

// TestExportPageEncodings exports the benchmark's rows (BIGINT and
// VARCHAR key, a six-field value row, TTL) with the default delta
// encodings and with PlainEncoding, and reads both back with parquet-go:
// integer and time stamp columns are DELTA_BINARY_PACKED and strings
// DELTA_BYTE_ARRAY by default, PLAIN with PlainEncoding, dictionary
// columns dictionary-encoded in both, and the rows are the same.
func TestExportPageEncodings(t *testing.T) {
	g, err := scanbench.Generate(t.TempDir(), 3000)
	if err != nil {
		t.Fatal(err)
	}
	sp := openFixture(t, g.Dir)
	var rows [2][][]any
	for i, plain := range []bool{false, true} {
		dir := t.TempDir()
		man := export(t, sp, dir, Options{PlainEncoding: plain, RowGroupRows: 1000})
		var tb *ManifestTable
		for _, m := range man.Tables {
			if m.State != "" {
				tb = m
			}
		}
		if tb == nil || tb.Rows != 3000 {
			t.Fatalf("plain=%v: state table %+v", plain, tb)
		}
		path := filepath.Join(dir, tb.Files[0].Key)
		rows[i], _ = parquetRows(t, path)
		enc := columnEncodings(t, path)
		for col, want := range map[string]format.Encoding{
			"key_f0":        format.DeltaBinaryPacked, // BIGINT
			"key_f1":        format.DeltaByteArray,    // VARCHAR
			"value_f3":      format.DeltaBinaryPacked, // TIMESTAMP(3)
			"ttl_timestamp": format.DeltaBinaryPacked,
			"value_f1":      format.Plain, // DOUBLE
			"value_f5":      format.Plain, // BOOLEAN
		} {
			if plain {
				want = format.Plain
			}
			if got := enc[col]; !slices.Contains(got, want) || slices.Contains(got, otherData(want)) {
				t.Errorf("plain=%v: column %s has encodings %v, want %v", plain, col, got, want)
			}
		}
		// operator and subtask repeat: dictionary pages either way.
		for _, col := range []string{"operator", "subtask"} {
			if got := enc[col]; !slices.Contains(got, format.RLEDictionary) && !slices.Contains(got, format.PlainDictionary) {
				t.Errorf("plain=%v: column %s has encodings %v, want a dictionary", plain, col, got)
			}
		}
	}
	if len(rows[0]) != 3000 || !reflect.DeepEqual(rows[0], rows[1]) {
		t.Fatalf("delta and plain exports read back differently (%d and %d rows)", len(rows[0]), len(rows[1]))
	}
}

// otherData is the data encoding a column of want must not also use.
func otherData(want format.Encoding) format.Encoding {
	if want == format.Plain {
		return format.DeltaBinaryPacked
	}
	return format.Plain
}

// columnEncodings returns the encodings of every column chunk of the
// Parquet file at path by column name (parquet-go's footer reader).
func columnEncodings(t *testing.T, path string) map[string][]format.Encoding {
	t.Helper()
	out := map[string][]format.Encoding{}
	for _, rg := range openParquet(t, path).Metadata().RowGroups {
		for _, c := range rg.Columns {
			name := strings.Join(c.MetaData.PathInSchema, ".")
			for _, e := range c.MetaData.Encoding {
				if !slices.Contains(out[name], e) {
					out[name] = append(out[name], e)
				}
			}
		}
	}
	return out
}
