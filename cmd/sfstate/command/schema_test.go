package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

// The JSON Schemas under docs/schema/ document every command's --json
// output. TestJSONSchemas validates what the commands print against them
// with the small validator below (the subset of JSON Schema 2020-12 the
// files use: type, properties, required, additionalProperties, items). A
// change to an output's shape fails until the schema is updated: run the
// tests with -rewrite to infer the files again from the outputs (keys
// present in every instance are required, no other keys are allowed).

// jsonSchema is the subset of JSON Schema the files use.
type jsonSchema struct {
	Schema               string                 `json:"$schema,omitempty"`
	Title                string                 `json:"title,omitempty"`
	Type                 []string               `json:"type,omitempty"`
	Properties           map[string]*jsonSchema `json:"properties,omitempty"`
	Required             []string               `json:"required,omitempty"`
	AdditionalProperties *bool                  `json:"additionalProperties,omitempty"`
	Items                *jsonSchema            `json:"items,omitempty"`

	seen  int            // object instances merged (inference only)
	count map[string]int // per key, instances holding it
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		if strings.ContainsAny(x.String(), ".eE") {
			return "number"
		}
		return "integer"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func (s *jsonSchema) addType(t string) {
	for _, have := range s.Type {
		if have == t || (have == "number" && t == "integer") {
			return
		}
	}
	if t == "number" {
		for i, have := range s.Type {
			if have == "integer" {
				s.Type[i] = "number"
				return
			}
		}
	}
	s.Type = append(s.Type, t)
	sort.Strings(s.Type)
}

// infer merges one instance into s.
func (s *jsonSchema) infer(v any) {
	s.addType(jsonType(v))
	switch x := v.(type) {
	case []any:
		if s.Items == nil && len(x) > 0 {
			s.Items = &jsonSchema{}
		}
		for _, e := range x {
			s.Items.infer(e)
		}
	case map[string]any:
		if s.Properties == nil {
			s.Properties, s.count = map[string]*jsonSchema{}, map[string]int{}
		}
		s.seen++
		for k, e := range x {
			if s.Properties[k] == nil {
				s.Properties[k] = &jsonSchema{}
			}
			s.Properties[k].infer(e)
			s.count[k]++
		}
	}
}

// finish fills required and additionalProperties after inference.
func (s *jsonSchema) finish() {
	if s == nil {
		return
	}
	if s.Properties != nil {
		no := false
		s.AdditionalProperties = &no
		s.Required = nil
		for k, p := range s.Properties {
			if s.count[k] == s.seen {
				s.Required = append(s.Required, k)
			}
			p.finish()
		}
		sort.Strings(s.Required)
	}
	s.Items.finish()
}

// validate returns the ways v breaks s.
func (s *jsonSchema) validate(path string, v any) []string {
	if s == nil {
		return nil
	}
	t := jsonType(v)
	ok := len(s.Type) == 0
	for _, want := range s.Type {
		ok = ok || want == t || (want == "number" && t == "integer")
	}
	if !ok {
		return []string{fmt.Sprintf("%s: %s, schema says %v", path, t, s.Type)}
	}
	var errs []string
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			errs = append(errs, s.Items.validate(fmt.Sprintf("%s[%d]", path, i), e)...)
		}
	case map[string]any:
		for _, r := range s.Required {
			if _, ok := x[r]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required key %q missing", path, r))
			}
		}
		for k, e := range x {
			p := s.Properties[k]
			if p == nil {
				if s.AdditionalProperties != nil && !*s.AdditionalProperties {
					errs = append(errs, fmt.Sprintf("%s: key %q not in the schema", path, k))
				}
				continue
			}
			errs = append(errs, p.validate(path+"."+k, e)...)
		}
	}
	return errs
}

func decodeDocs(t *testing.T, out string) []any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var docs []any
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		docs = append(docs, v)
	}
	return docs
}

// checkSchema validates outputs (each one JSON document or JSON lines)
// against docs/schema/NAME.schema.json, or with -rewrite infers the file.
// Top-level keys listed in schemaData hold data of any shape (decoded keys
// and values).
func checkSchema(t *testing.T, name, title string, outputs ...string) {
	t.Helper()
	root, err := fixtures.Root()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "schema", name+".schema.json")
	var docs []any
	for _, o := range outputs {
		docs = append(docs, decodeDocs(t, o)...)
	}
	if *rewriteGolden {
		s := &jsonSchema{}
		for _, d := range docs {
			s.infer(d)
		}
		s.finish()
		for _, k := range schemaData[name] {
			if s.Properties[k] != nil {
				s.Properties[k] = &jsonSchema{}
			}
		}
		s.Schema, s.Title = "https://json-schema.org/draft/2020-12/schema", title
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -rewrite to create it)", err)
	}
	var s jsonSchema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for i, d := range docs {
		if errs := s.validate("$", d); len(errs) > 0 {
			if len(errs) > 10 {
				errs = append(errs[:10], fmt.Sprintf("... %d more", len(errs)-10))
			}
			t.Errorf("%s output %d does not match docs/schema/%s.schema.json (update it with -rewrite if the change is intended):\n  %s",
				name, i, name, strings.Join(errs, "\n  "))
		}
	}
}

// schemaData lists, per schema, the top-level keys whose values are data.
var schemaData = map[string][]string{
	"inspect-dump":      {"key", "namespace", "userKey", "value"},
	"inspect-deep-dump": {"key", "namespace", "userKey", "value"},
}

func TestSchemaValidator(t *testing.T) {
	s := &jsonSchema{}
	for _, d := range decodeDocs(t, `{"a": 1, "b": [{"c": "x"}]} {"a": 2.5, "b": [], "d": null}`) {
		s.infer(d)
	}
	s.finish()
	if strings.Join(s.Required, ",") != "a,b" || s.Properties["a"].Type[0] != "number" {
		t.Fatalf("inferred %+v", s)
	}
	cases := map[string]string{
		`{"a": 1, "b": []}`:                   "",
		`{"b": []}`:                           `required key "a" missing`,
		`{"a": "1", "b": []}`:                 "$.a: string",
		`{"a": 1, "b": [{"c": 3}]}`:           "$.b[0].c: integer",
		`{"a": 1, "b": [], "extra": true}`:    `key "extra" not in the schema`,
		`{"a": 1, "b": [{"c": "x", "e": 1}]}`: `key "e" not in the schema`,
	}
	for in, want := range cases {
		errs := strings.Join(s.validate("$", decodeDocs(t, in)[0]), "; ")
		if (want == "") != (errs == "") || !strings.Contains(errs, want) {
			t.Errorf("%s: %q, want %q", in, errs, want)
		}
	}
}

// TestJSONSchemas runs the commands that read fixtures with --json on
// several fixtures each and validates the outputs against docs/schema/.
func TestJSONSchemas(t *testing.T) {
	fx := fixtures.Require(t)
	var sps []string
	for _, name := range []string{"flink1.20-rocksdb-canonical-valuestate-timers", "flink1.20-rocksdb-canonical-broadcast-operator-state",
		"flink1.20-hashmap-canonical-liststate-window-inline", "flink1.15-rocksdb-canonical-metadata-v3",
		"flink1.20-rocksdb-NATIVE-incremental-for-contrast", "sql-rocksdb-canonical-join-ttl-valuestate/savepoint",
		"sql-rocksdb-canonical-groupagg-ttl-valuestate/savepoint", "sql-rocksdb-canonical-udagg-liststate-mapstate/savepoint"} {
		if _, err := os.Stat(filepath.Join(fx, name)); err == nil {
			sps = append(sps, filepath.Join(fx, name))
		}
	}
	runJSON := func(args ...string) string {
		t.Helper()
		o, e, code := run(t, append([]string{"--json"}, args...)...)
		if code != ExitOK && !(code == ExitCheckFailed && args[0] == "check") {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		return o
	}
	var inspect, check, dump, rescale []string
	for _, sp := range sps {
		inspect = append(inspect, runJSON("inspect", sp), runJSON("inspect", "--metadata-only", sp),
			runJSON("inspect", "--ttl", "24h", "--now", "2024-02-01T00:00:00Z", sp))
		check = append(check, runJSON("check", sp))
		if !strings.Contains(sp, "NATIVE") {
			dump = append(dump, runJSON("inspect", "--dump", "--limit", "20", sp))
		}
	}
	for _, sp := range sps[:2] {
		rescale = append(rescale, runJSON("rescale", sp, "-p", "2", "--out", filepath.Join(t.TempDir(), "p2")))
	}
	checkSchema(t, "inspect", "sfstate inspect --json", inspect...)
	checkSchema(t, "inspect-dump", "sfstate inspect --dump --json (one JSON object per line)", dump...)
	// A check that found problems, one of them in a form sfstate does not
	// decode (the fixtures are clean).
	var bad map[string]any
	if err := json.Unmarshal([]byte(check[0]), &bad); err != nil {
		t.Fatal(err)
	}
	bad["ok"] = false
	bad["problems"] = []any{
		map[string]any{"kind": "size", "file": "f", "offset": -1, "operator": "o", "subtask": 0, "keyGroup": -1, "message": "m"},
		map[string]any{"kind": "header", "file": "f", "offset": 7, "subtask": 1, "keyGroup": -1, "message": "m", "unsupported": true},
	}
	var badOut bytes.Buffer
	if err := writeJSON(&badOut, bad); err != nil {
		t.Fatal(err)
	}
	check = append(check, badOut.String())
	checkSchema(t, "check", "sfstate check --json", check...)
	checkSchema(t, "rescale", "sfstate rescale --json", rescale...)
	checkSchema(t, "keygroups-assign", "sfstate keygroups assign --json",
		runJSON("keygroups", "assign", "-m", "128", "-p", "4", "1", "2"),
		runJSON("keygroups", "assign", "-m", "128", "-p", "4", "--bytes", "-t", "row<int, string>", "1,a"))
	checkSchema(t, "keygroups-ranges", "sfstate keygroups ranges --json", runJSON("keygroups", "ranges", "-p", "3"))
	checkSchema(t, "keygroups-plan", "sfstate keygroups plan --json", runJSON("keygroups", "plan", "-m", "128", "--from", "2", "--to", "3"),
		runJSON("keygroups", "plan", "-m", "8", "--from", "3", "--to", "2"))
	// A build with VCS information adds its revision and time.
	var vcs bytes.Buffer
	v := Version()
	v.Revision, v.Time = "0123456789abcdef0123456789abcdef01234567", "2026-01-02T03:04:05Z"
	if err := writeJSON(&vcs, v); err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "version", "sfstate version --json", runJSON("version"), vcs.String())

	// The commands added beside them: ls, diff, export, gc (convert links
	// RocksDB for native sources; a heap-layout source converts without).
	heap := filepath.Join(fx, "flink1.20-hashmap-NATIVE-for-contrast")
	twin := filepath.Join(fx, "flink1.20-hashmap-canonical-valuestate-timers")
	checkSchema(t, "ls", "sfstate ls --json", runJSON("ls", fx))
	// Re-keyed to another max parallelism (no digest path) and diffed with
	// a tiny budget: the report counts the spilled runs.
	rekeyed := filepath.Join(t.TempDir(), "m256")
	runJSON("rescale", twin, "-p", "2", "--max-parallelism", "256", "--out", rekeyed)
	checkSchema(t, "diff", "sfstate diff --json", runJSON("diff", sps[0], sps[0]), runJSON("diff", twin, twin, "--limit", "3"),
		runJSON("diff", twin, rekeyed, "--memory", "1KiB", "--temp-dir", t.TempDir()))
	exportDir := filepath.Join(t.TempDir(), "export")
	checkSchema(t, "export", "sfstate export --json", runJSON("export", sps[0], "--format", "jsonl", "--out", exportDir))
	checkSchema(t, "bench-export", "sfstate bench export --json", runJSON("bench", "export", "--entries", "300", "--dir", t.TempDir()))
	gcDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(gcDir, "sfstate-tmp-left-over"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "gc", "sfstate gc --json", runJSON("gc", gcDir, "--dry-run", "--min-age", "0"))
	checkSchema(t, "convert", "sfstate convert --json", runJSON("convert", heap, "--to", "canonical", "--out", filepath.Join(t.TempDir(), "canonical")))
}
