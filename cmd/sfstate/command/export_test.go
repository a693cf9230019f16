package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

func TestExportCommandWritesDataset(t *testing.T) {
	sp := fixtures.Path(t, "sql-rocksdb-canonical-join-mapstate", "savepoint")
	dir := t.TempDir()
	out, errOut, code := run(t, "--json", "export", "--out", dir, "--compression", "snappy", "--row-group-rows", "2", sp)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var man struct {
		Compression string `json:"compression"`
		Tables      []struct {
			Name  string `json:"name"`
			State string `json:"state"`
			Rows  string `json:"rows"`
			Files []struct {
				Key  string `json:"key"`
				Size int64  `json:"size"`
			} `json:"files"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &man); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	rows := map[string]string{}
	for _, tb := range man.Tables {
		rows[tb.State] = tb.Rows
		for _, f := range tb.Files {
			fi, err := os.Stat(filepath.Join(dir, f.Key))
			if err != nil || fi.Size() != f.Size {
				t.Fatalf("%s: %v (size %d, manifest %d)", f.Key, err, fi.Size(), f.Size)
			}
		}
	}
	// The fixture's join holds 7 left and 3 right records.
	if rows["left-records"] != "7" || rows["right-records"] != "3" || man.Compression != "snappy" {
		t.Fatalf("manifest %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "_manifest.json")); err != nil {
		t.Fatal(err)
	}
	// A second export into the same directory is refused.
	if _, _, code := run(t, "export", "--out", dir, sp); code != ExitIO {
		t.Fatalf("second export: exit %d", code)
	}
	if _, _, code := run(t, "export", "--out", t.TempDir(), "--format", "xml", sp); code != ExitUsage {
		t.Fatalf("--format xml: exit %d", code)
	}
	if _, _, code := run(t, "export", "--out", t.TempDir(), "--shard", "3/3", sp); code != ExitUsage {
		t.Fatalf("--shard 3/3: exit %d", code)
	}
}

func TestDiffCommandExitCodes(t *testing.T) {
	a := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	b := fixtures.Path(t, "flink1.20-hashmap-canonical-valuestate-timers")
	out, errOut, code := run(t, "diff", a, a)
	if code != ExitOK || !strings.Contains(out, "equal: 8 states, 32 entries") {
		t.Fatalf("self diff: exit %d: %s %s", code, out, errOut)
	}
	out, _, code = run(t, "--json", "diff", "--limit", "1", a, b)
	if code != ExitCheckFailed {
		t.Fatalf("rocksdb vs hashmap: exit %d", code)
	}
	var res struct {
		Equal  bool `json:"equal"`
		States []struct {
			State   string            `json:"state"`
			Added   string            `json:"added"`
			Removed string            `json:"removed"`
			Changed string            `json:"changed"`
			AddedEx []json.RawMessage `json:"addedExamples"`
		} `json:"states"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, s := range res.States {
		differs := s.Added != "0" || s.Removed != "0" || s.Changed != "0"
		if differs != (s.State == "_timer_state/processing_timer") {
			t.Fatalf("state %s: %+v", s.State, s)
		}
		if !differs {
			continue
		}
		var ex struct {
			Timer struct {
				Timestamp string `json:"timestamp"` // 64-bit values as strings
			} `json:"timer"`
		}
		if s.Added != "4" || len(s.AddedEx) != 1 || json.Unmarshal(s.AddedEx[0], &ex) != nil || ex.Timer.Timestamp == "" {
			t.Fatalf("state %s: %+v", s.State, s)
		}
	}
	// Only the states that agree: equal.
	if _, _, code := run(t, "diff", "--state", "state-name", a, b); code != ExitOK {
		t.Fatalf("--state state-name: exit %d", code)
	}
	native := fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast")
	if _, _, code := run(t, "diff", a, native); code != ExitIO {
		t.Fatalf("native: exit %d, want %d (not compared)", code, ExitIO)
	}
}

// TestExportNamesFlag: --names renames a row part's columns (values with
// commas are not split into flags), and one that does not fit the
// savepoint exits 2 leaving nothing in the output directory.
func TestExportNamesFlag(t *testing.T) {
	sp := fixtureSavepoint(t, "sql-rocksdb-canonical-join-mapstate")
	dir := t.TempDir()
	out, errOut, code := run(t, "--json", "export", sp, "--out", dir, "--names", "left-records.user_key=id,amount,item")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var man struct {
		Tables []struct {
			State   string   `json:"state"`
			Columns []string `json:"columns"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &man); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tb := range man.Tables {
		if tb.State == "left-records" {
			found = strings.Join(tb.Columns, ",") == "operator,subtask,key_group,key_f0,user_key_id,user_key_amount,user_key_item,value"
			if !found {
				t.Fatalf("left-records columns %v", tb.Columns)
			}
		}
	}
	if !found {
		t.Fatal("no left-records table")
	}
	bad := filepath.Join(t.TempDir(), "bad")
	_, errOut, code = run(t, "export", sp, "--out", bad, "--names", "left-records.user_key=id,amount")
	if code != ExitUsage || !strings.Contains(errOut, "2 names given for a row of 3 fields") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if ents, _ := os.ReadDir(bad); len(ents) != 0 {
		t.Fatalf("a failed export left %d entries in its output directory", len(ents))
	}
}
