package command

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

var rewriteGolden = flag.Bool("rewrite", false, "rewrite golden files under testdata/golden")

// fixtureSavepoint returns the directory holding a fixture's _metadata.
func fixtureSavepoint(t *testing.T, name string) string {
	t.Helper()
	d := fixtures.Path(t, name)
	if _, err := os.Stat(filepath.Join(d, "_metadata")); err == nil {
		return d
	}
	return filepath.Join(d, "savepoint")
}

// inspectCopyDir copies the regular files of src into a new temporary directory.
func inspectCopyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// goldenCompare compares got with testdata/golden/<name>, or rewrites it.
func goldenCompare(t *testing.T, name string, got []byte) {
	t.Helper()
	root, err := fixtures.Root()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "testdata", "golden", name)
	if *rewriteGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -rewrite to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs at line %d:\n got  %q\n want %q\n(rerun with -rewrite if the change is intended)", name, i+1, g, w)
			}
		}
	}
}

var inspectGoldenFixtures = []string{
	"flink1.20-rocksdb-canonical-valuestate-timers",
	"flink1.15-rocksdb-canonical-metadata-v3",
	"flink1.20-hashmap-canonical-liststate-window-inline",
	"flink1.20-rocksdb-NATIVE-incremental-for-contrast",
	"flink1.20-hashmap-NATIVE-for-contrast",
	"sql-rocksdb-canonical-groupagg-ttl-valuestate",
	"sql-rocksdb-canonical-join-mapstate",
}

func TestInspectGolden(t *testing.T) {
	fx := fixtures.Require(t)
	for _, name := range inspectGoldenFixtures {
		t.Run(name, func(t *testing.T) {
			dir := fixtureSavepoint(t, name)
			out, errOut, code := run(t, "inspect", "--ttl", "24h", "--now", "2024-02-01T00:00:00Z", dir)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			goldenCompare(t, "inspect/"+name+".txt", []byte(strings.ReplaceAll(out, fx, "<fixtures>")))
		})
	}
	dir := fixtureSavepoint(t, "sql-rocksdb-canonical-join-ttl-valuestate")
	out, errOut, code := run(t, "inspect", "--dump", dir)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	goldenCompare(t, "inspect/sql-rocksdb-canonical-join-ttl-valuestate.dump.jsonl", []byte(out))
	out, errOut, code = run(t, "--json", "inspect", "--ttl", "1s", "--now", "1704352692000", fixtureSavepoint(t, "sql-rocksdb-canonical-join-ttl-valuestate"))
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	goldenCompare(t, "inspect/sql-rocksdb-canonical-join-ttl-valuestate.json", []byte(strings.ReplaceAll(out, fx, "<fixtures>")))
}

func TestInspectJSONIsValid(t *testing.T) {
	for _, name := range fixtures.Savepoints(t) {
		out, errOut, code := run(t, "--json", "inspect", fixtureSavepoint(t, name))
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		var v struct {
			MetadataVersion int
			Operators       []json.RawMessage
			Scanned         bool
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v.MetadataVersion < 3 || len(v.Operators) == 0 || !v.Scanned {
			t.Fatalf("%s: %+v", name, v)
		}
	}
}

func TestInspectDumpFilters(t *testing.T) {
	dir := fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	count := func(args ...string) int {
		out, errOut, code := run(t, append(append([]string{"inspect", "--dump"}, args...), dir)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		n := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("bad line %q", l)
			}
			for _, k := range []string{"operator", "subtask", "keyGroup", "state", "kind", "key", "namespace", "value"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("line lacks %s: %s", k, l)
				}
			}
			n++
		}
		return n
	}
	if n := count(); n != 32 {
		t.Fatalf("all: %d", n)
	}
	if n := count("--limit", "5"); n != 5 {
		t.Fatalf("limit: %d", n)
	}
	if n := count("--operator", "4b818c7923a927796d24b727201ba34d", "--state", "state-name"); n != 4 {
		t.Fatalf("operator+state: %d", n)
	}
	if n := count("--key-groups", "3-3"); n != 8 {
		t.Fatalf("key group 3: %d", n)
	}
	if _, _, code := run(t, "inspect", "--dump", "--key-groups", "9-2", dir); code != ExitUsage {
		t.Fatalf("bad range: exit %d", code)
	}
	// A uid selects its operator even though V4 metadata stores no uids.
	out, _, code := run(t, "inspect", "--operator", "CheckpointingTimelyStatefulOperator2", dir)
	if code != ExitOK || strings.Count(out, "\noperator ") != 1 || !strings.Contains(out, "operator 41e91aae0bee218c44306cf7d21940ad") {
		t.Fatalf("operator by uid: exit %d:\n%s", code, out)
	}
	if _, _, code := run(t, "inspect", "--operator", "nope", dir); code != ExitUsage {
		t.Fatalf("unknown operator: exit %d", code)
	}
}

// TestInspectNativeDump: the RocksDB native snapshot refuses --dump
// without --deep; the hashmap backend's NATIVE savepoint (heap key-group
// layout) dumps like its canonical twin (timer timestamps differ between
// the two runs).
func TestInspectNativeDump(t *testing.T) {
	_, errOut, code := run(t, "inspect", "--dump", fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	// Valid input in a layout --dump does not decode without --deep: unsupported.
	if code != ExitUnsupported || !strings.Contains(errOut, "native") {
		t.Fatalf("rocksdb native: exit %d: %s", code, errOut)
	}
	dump := func(name string) []string {
		out, errOut, code := run(t, "inspect", "--dump", fixtureSavepoint(t, name))
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.Contains(l, `"kind":"TIMERS"`) {
				l = regexp.MustCompile(`"ts":-?[0-9]+`).ReplaceAllString(l, `"ts":0`)
			}
			lines = append(lines, l)
		}
		sort.Strings(lines)
		return lines
	}
	got, want := dump("flink1.20-hashmap-NATIVE-for-contrast"), dump("flink1.20-hashmap-canonical-valuestate-timers")
	if len(got) != 32 || !slices.Equal(got, want) {
		t.Fatalf("heap-layout dump differs from the canonical twin's:\n%s\n---\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func inspectHashTree(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h.Write([]byte(p + "|" + info.Mode().String() + "|"))
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestInspectAndCheckNeverModifyInput(t *testing.T) {
	dir := inspectCopyDir(t, fixtureSavepoint(t, "flink1.19-rocksdb-canonical-snappy-compressed"))
	before := inspectHashTree(t, dir)
	report := filepath.Join(t.TempDir(), "report.html")
	for _, args := range [][]string{
		{"inspect", dir},
		{"inspect", "--html", report, dir},
		{"inspect", "--dump", dir},
		{"--json", "inspect", filepath.Join(dir, "_metadata")},
		{"check", dir},
	} {
		if _, errOut, code := run(t, args...); code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	if after := inspectHashTree(t, dir); after != before {
		t.Fatal("input directory changed")
	}
}

func TestInspectHTMLReport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.html")
	if _, errOut, code := run(t, "inspect", "--html", out, "--ttl", "1h", "--now", "1706683200000", fixtureSavepoint(t, "sql-rocksdb-canonical-groupagg-ttl-valuestate")); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"<!DOCTYPE html>", "<svg", "State size per operator", "Entries per key group", "TTL age", "accState", "ROW&lt;BIGINT&gt;"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(s, "<script") || strings.Contains(s, "http://") && !strings.Contains(s, `xmlns="http://www.w3.org/2000/svg"`) {
		t.Error("report is not self-contained")
	}
	// No temporary files are left behind.
	ents, _ := os.ReadDir(filepath.Dir(out))
	if len(ents) != 1 {
		t.Fatalf("%d files in report directory", len(ents))
	}
}

func TestInspectCorruptInputExit3(t *testing.T) {
	dir := inspectCopyDir(t, fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
	meta := filepath.Join(dir, "_metadata")
	b, _ := os.ReadFile(meta)
	// Truncate the metadata inside the operator list.
	if err := os.WriteFile(meta, b[:300], 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "inspect", dir)
	if code != ExitIO || !strings.Contains(errOut, "_metadata") || !strings.Contains(errOut, "offset") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, _, code := run(t, "check", dir); code != ExitIO {
		t.Fatalf("check on unreadable metadata: exit %d", code)
	}
	// A corrupt key-group block: inspect fails with file and offset, check
	// lists it and exits 1.
	dir = inspectCopyDir(t, fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
	mb, _ := os.ReadFile(filepath.Join(dir, "_metadata"))
	md, err := savepoint.ParseMetadata(mb, "m")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := savepoint.ParseOperatorID("d5c8b168c6cbfe8c507a10f88b325243")
	var h *savepoint.KeyGroupsHandle
	for _, op := range md.Operators {
		if op.ID == id {
			h = op.Subtask(2).ManagedKeyed.(*savepoint.KeyGroupsHandle)
		}
	}
	target := filepath.Join(dir, h.Delegate.Path)
	data, _ := os.ReadFile(target)
	data[h.Offset(2)+2] = 0x7F // first key length becomes huge
	if err := os.WriteFile(target, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = run(t, "inspect", dir)
	if code != ExitIO || !strings.Contains(errOut, filepath.Base(target)) || !strings.Contains(errOut, "offset") {
		t.Fatalf("inspect corrupt block: exit %d: %s", code, errOut)
	}
	out, _, code := run(t, "check", dir)
	if code != ExitCheckFailed || !strings.Contains(out, filepath.Base(target)) || !strings.Contains(out, "offset") {
		t.Fatalf("check corrupt block: exit %d: %s", code, out)
	}
}

func TestCheckCleanFixturesCLI(t *testing.T) {
	for _, name := range fixtures.Savepoints(t) {
		out, errOut, code := run(t, "check", fixtureSavepoint(t, name))
		if code != ExitOK || !strings.Contains(out, ": ok (") {
			t.Fatalf("%s: exit %d: %s%s", name, code, out, errOut)
		}
	}
	out, _, code := run(t, "--json", "check", fixtureSavepoint(t, "sql-rocksdb-canonical-join-mapstate"))
	var v struct {
		OK       bool
		Problems []any
		Stats    struct{ KeysVerified int }
	}
	if code != ExitOK || json.Unmarshal([]byte(out), &v) != nil || !v.OK || len(v.Problems) != 0 || v.Stats.KeysVerified != 10 {
		t.Fatalf("json check: exit %d: %s", code, out)
	}
}

func TestInspectS3URL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	src := fixtureSavepoint(t, "sql-rocksdb-canonical-join-mapstate")
	st, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(src, "_metadata"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "sp/_metadata", bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("SFSTATE_S3_ENDPOINT", srv.Endpoint)
	url := "s3://" + srv.Bucket + "/sp"
	out, errOut, code := run(t, "inspect", url)
	if code != ExitOK || !strings.Contains(out, "left-records") || !strings.Contains(out, "7 entries") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, "check", url+"/_metadata"); code != ExitOK {
		t.Fatalf("check: exit %d: %s%s", code, out, errOut)
	}
	if _, _, code := run(t, "inspect", "s3://"+srv.Bucket+"/missing"); code != ExitIO {
		t.Fatalf("missing savepoint: exit %d", code)
	}
}

// TestInspectNativeFilesSummary: native RocksDB handles are summarized per
// subtask (files, SST files, shared, bytes, as the JSON file list adds up);
// --files lists every file.
func TestInspectNativeFilesSummary(t *testing.T) {
	sp := fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast")
	js, errOut, code := run(t, "--json", "inspect", sp)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var sum struct {
		Operators []struct {
			NativeFiles []struct {
				Subtask int    `json:"subtask"`
				Name    string `json:"name"`
				Bytes   int64  `json:"bytes"`
				Shared  bool   `json:"shared"`
			} `json:"nativeFiles"`
		} `json:"operators"`
	}
	if err := json.Unmarshal([]byte(js), &sum); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "inspect", sp)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	all, _, code := run(t, "inspect", "--files", sp)
	if code != ExitOK {
		t.Fatalf("--files: exit %d", code)
	}
	files := 0
	for _, op := range sum.Operators {
		type agg struct{ files, sst, shared int }
		per := map[int]*agg{}
		for _, f := range op.NativeFiles {
			a := per[f.Subtask]
			if a == nil {
				a = &agg{}
				per[f.Subtask] = a
			}
			a.files++
			if strings.HasSuffix(f.Name, ".sst") {
				a.sst++
			}
			if f.Shared {
				a.shared++
			}
			files++
		}
		for st, a := range per {
			row := fmt.Sprintf(`(?m)^\s+%d\s+%d\s+%d\s+%d\s+[0-9.]+ (B|KiB|MiB)$`, st, a.files, a.sst, a.shared)
			if !regexp.MustCompile(row).MatchString(out) {
				t.Errorf("no summary row %s:\n%s", row, out)
			}
			line := fmt.Sprintf("subtask %d: %s (%d SST, %d shared)", st, plural(a.files, "file"), a.sst, a.shared)
			if !strings.Contains(all, line) {
				t.Errorf("--files lacks %q", line)
			}
		}
	}
	if files == 0 {
		t.Fatal("fixture has no native files")
	}
	if n := strings.Count(out, ".sst"); n != 0 {
		t.Errorf("default output lists %d SST files:\n%s", n, out)
	}
	listed := regexp.MustCompile(`(?m)^      \S+\s+\d+ B( \(shared\))?$`).FindAllString(all, -1)
	if len(listed) != files {
		t.Errorf("--files lists %d files, the metadata has %d:\n%s", len(listed), files, all)
	}
}
