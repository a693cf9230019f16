package command

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

// fixtureDirs lists every Flink-written snapshot of both fixture trees as
// (name, directory holding _metadata, directory of reference decodings).
func fixtureDirs(t *testing.T) [][3]string {
	t.Helper()
	var out [][3]string
	for _, root := range []string{fixtures.Require(t), fixtures.RequireMore(t)} {
		ents, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !e.IsDir() || strings.HasPrefix(e.Name(), "_") {
				continue
			}
			for _, sub := range []string{"", "savepoint"} {
				dir := filepath.Join(root, e.Name(), sub)
				if _, err := os.Stat(filepath.Join(dir, "_metadata")); err == nil {
					out = append(out, [3]string{e.Name(), dir, filepath.Join(root, "_expected")})
					break
				}
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d fixture snapshots found", len(out))
	}
	return out
}

func countLines(t *testing.T, s string) int {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n
}

// TestEveryFixtureInspects runs inspect, inspect --json and inspect --dump
// on every Flink-written snapshot of ../shared/flink-fixtures and
// ../shared/flink-fixtures-more: each opens (exit 0) and dumps as many
// entries as its reference decoding holds, where one exists. RocksDB's
// native layout is dumped through --deep.
func TestEveryFixtureInspects(t *testing.T) {
	for _, f := range fixtureDirs(t) {
		name, dir, expDir := f[0], f[1], f[2]
		t.Run(name, func(t *testing.T) {
			out, errOut, code := run(t, "inspect", dir)
			if code != ExitOK || !strings.Contains(out, "operator ") {
				t.Fatalf("inspect: exit %d\n%s%s", code, out, errOut)
			}
			out, errOut, code = run(t, "inspect", dir, "--json")
			var doc map[string]any
			if code != ExitOK || json.Unmarshal([]byte(out), &doc) != nil || doc["operators"] == nil {
				t.Fatalf("inspect --json: exit %d\n%.400s%s", code, out, errOut)
			}
			args := []string{"inspect", "--dump", dir}
			if strings.Contains(name, "rocksdb-NATIVE") {
				if rocksDBVersion == nil {
					t.Skip("RocksDB native layout needs a cgo build")
				}
				args = append(args, "--deep")
			}
			out, errOut, code = run(t, args...)
			if code != ExitOK {
				t.Fatalf("inspect --dump: exit %d\n%s", code, errOut)
			}
			got := countLines(t, out)
			exp, err := os.ReadFile(filepath.Join(expDir, name+".entries.jsonl"))
			switch {
			case err == nil:
				if want := countLines(t, string(exp)); got != want {
					t.Fatalf("inspect --dump: %d entries, the reference decoding has %d", got, want)
				}
			case os.IsNotExist(err):
				if got == 0 && !strings.Contains(name, "changelog") {
					t.Fatalf("inspect --dump printed no entries")
				}
			default:
				t.Fatal(err)
			}
		})
	}
}
