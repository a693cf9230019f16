package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var camelRE = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// checkJSONConventions decodes out (one document or JSON lines) and fails
// on a key that is not camelCase or a number beyond 2^53. dataKeys are
// paths of values that are data (names as keys, decoded entries), which
// are not checked.
func checkJSONConventions(t *testing.T, what, out string, dataKeys ...string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	docs := 0
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", what, err, out)
		}
		docs++
		var walk func(path string, v any)
		walk = func(path string, v any) {
			for _, d := range dataKeys {
				if d == path {
					return
				}
			}
			switch x := v.(type) {
			case map[string]any:
				for k, c := range x {
					if !camelRE.MatchString(k) {
						t.Errorf("%s: key %q at %s is not camelCase", what, k, path)
					}
					walk(path+"."+k, c)
				}
			case []any:
				for _, c := range x {
					walk(path+"[]", c)
				}
			case json.Number:
				if n, ok := new(big.Int).SetString(x.String(), 10); ok && n.CmpAbs(big.NewInt(1<<53)) > 0 {
					t.Errorf("%s: number %s at %s exceeds 2^53 (write it as a string)", what, x, path)
				}
			}
		}
		walk("", v)
	}
	if docs == 0 {
		t.Fatalf("%s: no JSON output", what)
	}
}

// TestJSONOutputs runs the commands that read fixtures with --json and
// checks the conventions on what they print.
func TestJSONOutputs(t *testing.T) {
	sp := copyFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	ttl := copyFixture(t, filepath.Join("sql-rocksdb-canonical-groupagg-ttl-valuestate", "savepoint"))
	cases := [][]string{
		{"inspect", sp},
		{"inspect", ttl, "--ttl", "24h"},
		{"inspect", "--metadata-only", sp},
		{"inspect", "--dump", "--limit", "5", ttl},
		{"check", sp},
		{"rescale", sp, "-p", "2", "--out", filepath.Join(t.TempDir(), "p2")},
		{"keygroups", "assign", "-m", "128", "-p", "4", "--bytes", "1", "2"},
		{"keygroups", "ranges", "-p", "3"},
		{"keygroups", "plan", "-m", "128", "--from", "2", "--to", "3"},
		{"version"},
		{"ls", filepath.Dir(sp)},
		{"diff", sp, sp},
		{"export", sp, "--format", "csv", "--out", filepath.Join(t.TempDir(), "csv")},
		{"gc", t.TempDir(), "--dry-run"},
		{"convert", copyFixture(t, "flink1.20-hashmap-NATIVE-for-contrast"), "--to", "canonical", "--out", filepath.Join(t.TempDir(), "c")},
	}
	for _, args := range cases {
		name := strings.Join(args[:min(2, len(args))], " ")
		o, e, code := run(t, append([]string{"--json"}, args...)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		checkJSONConventions(t, name, o)
		if strings.Contains(o, "nowMillis") {
			t.Errorf("%v: volatile nowMillis without --now:\n%s", args, o)
		}
	}
	// With --now the reference time is part of the answer.
	o, e, code := run(t, "inspect", ttl, "--ttl", "24h", "--now", "2026-11-29T00:00:00Z", "--json")
	if code != ExitOK || !strings.Contains(o, fmt.Sprintf(`"nowMillis": %d`, int64(1795910400000))) {
		t.Fatalf("inspect --now: exit %d: %s\n%s", code, e, o)
	}
	// Repeated runs give identical bytes (nothing volatile).
	a, _, _ := run(t, "--json", "inspect", ttl, "--ttl", "24h")
	b, _, _ := run(t, "--json", "inspect", ttl, "--ttl", "24h")
	if a != b {
		t.Fatal("two inspect --json runs differ")
	}
}

// TestBenchSuitesJSON: the suites whose reports are not built from a
// library type above (keygroups, verify) print one JSON document under
// --json that follows the convention.
func TestBenchSuitesJSON(t *testing.T) {
	bin := cliBinary(t) // bench verify starts shard processes of the binary
	for _, suite := range []string{"keygroups", "verify"} {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "--json", "bench", suite, "--quick")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bench %s: %v: %s", suite, err, stderr.String())
		}
		o := string(out)
		var doc any
		if err := json.Unmarshal([]byte(o), &doc); err != nil {
			t.Fatalf("bench %s --json is not one JSON document: %v\n%.300s", suite, err, o)
		}
		checkJSONConventions(t, "bench "+suite, o)
	}
}
