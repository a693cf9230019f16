//go:build cgo

package command

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
)

// exportTables reads a JSON-lines export: per table directory, its rows
// (sorted) with the processing-time timers' wall-clock stamps removed,
// which differ between the runs that took a native snapshot and its
// canonical twin.
func exportTables(t *testing.T, dir string) map[string][]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, d := range ents {
		if !d.IsDir() || strings.HasPrefix(d.Name(), "_") {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, d.Name(), "*.jsonl"))
		var rows []string
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l == "" {
					continue
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if strings.Contains(d.Name(), "_timer_state_processing") {
					delete(m, "timestamp")
				}
				b, _ := json.Marshal(m)
				rows = append(rows, string(b))
			}
		}
		sort.Strings(rows)
		out[d.Name()] = rows
	}
	return out
}

// TestExportDeepNativeEqualsCanonicalTwin exports Flink's RocksDB native
// (incremental) fixture with --deep: every keyed and operator state table
// holds what the export of the canonical savepoint Flink took of the same
// job holds (processing-time timer stamps aside). Without --deep the
// keyed state is skipped with a note naming the flag; the source is not
// modified and no download directory is left behind.
func TestExportDeepNativeEqualsCanonicalTwin(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	src := inspectCopyDir(t, fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	before := inspectHashTree(t, src)
	deep := filepath.Join(t.TempDir(), "deep")
	if _, errOut, code := run(t, "export", "--deep", "--format", "jsonl", "--out", deep, src); code != ExitOK {
		t.Fatalf("export --deep: exit %d: %s", code, errOut)
	}
	twin := filepath.Join(t.TempDir(), "twin")
	if _, errOut, code := run(t, "export", "--format", "jsonl", "--out", twin, fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers")); code != ExitOK {
		t.Fatalf("export of the twin: exit %d: %s", code, errOut)
	}
	got, want := exportTables(t, deep), exportTables(t, twin)
	keyed := 0
	for name, rows := range want {
		if !strings.HasSuffix(name, ".source-state") {
			keyed++
		}
		if len(rows) == 0 {
			t.Errorf("twin table %s is empty", name)
		}
		if !reflect.DeepEqual(got[name], rows) {
			t.Errorf("table %s: --deep export\n%s\ntwin\n%s", name, strings.Join(got[name], "\n"), strings.Join(rows, "\n"))
		}
	}
	if keyed != 8 || len(got) != len(want) {
		t.Fatalf("%d tables from --deep, %d from the twin (%d keyed)", len(got), len(want), keyed)
	}
	if !reflect.DeepEqual(before, inspectHashTree(t, src)) {
		t.Fatal("export --deep modified its source")
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "sfstate-native-*")); len(left) != 0 {
		t.Fatalf("download directories left behind: %v", left)
	}

	shallow := filepath.Join(t.TempDir(), "shallow")
	out, errOut, code := run(t, "--json", "export", "--out", shallow, src)
	if code != ExitOK {
		t.Fatalf("export without --deep: exit %d: %s", code, errOut)
	}
	var man struct {
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &man); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(man.Notes) != 4 || !strings.Contains(man.Notes[0], "--deep") {
		t.Fatalf("notes without --deep: %q", man.Notes)
	}
}

// TestExportDeepFromS3 exports the RocksDB native fixture stored on S3
// (versitygw) with --deep: its SST files are fetched from the bucket and
// the tables equal those of the canonical twin, as from a local copy.
func TestExportDeepFromS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	st, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("SFSTATE_S3_ENDPOINT", srv.Endpoint)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	putDir(t, st, fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"), "native")
	deep := filepath.Join(t.TempDir(), "deep")
	if _, errOut, code := run(t, "export", "--deep", "--format", "jsonl", "--out", deep, "s3://"+srv.Bucket+"/native"); code != ExitOK {
		t.Fatalf("export --deep from S3: exit %d: %s", code, errOut)
	}
	twin := filepath.Join(t.TempDir(), "twin")
	if _, errOut, code := run(t, "export", "--format", "jsonl", "--out", twin, fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers")); code != ExitOK {
		t.Fatalf("export of the twin: exit %d: %s", code, errOut)
	}
	got, want := exportTables(t, deep), exportTables(t, twin)
	if len(got) != 10 || !reflect.DeepEqual(got, want) {
		t.Fatalf("--deep export from S3 (%d tables) differs from the twin's (%d tables)", len(got), len(want))
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "sfstate-native-*")); len(left) != 0 {
		t.Fatalf("download directories left behind: %v", left)
	}
}

// putDir stores the files of dir (not its subdirectories) under prefix/
// of st.
func putDir(t *testing.T, st s3.Storage, dir, prefix string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put(context.Background(), prefix+"/"+e.Name(), bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
}
