//go:build cgo

package command

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify/restore"
)

// TestInspectNativeCheckpointSchemaTypes: `sfstate inspect --deep` of an
// engine checkpoint taken with checkpoint.Options.Schema shows the
// declared Flink types; without a schema the states are byte arrays.
func TestInspectNativeCheckpointSchemaTypes(t *testing.T) {
	root := t.TempDir()
	store, _ := s3.NewLocal(root)
	bes, schema, _, _, err := restore.GenerateBackends(restore.GenOptions{Keys: 100, Parallelism: 1, MaxParallelism: 32, Now: 1_750_000_000_000, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, be := range bes {
			be.Close()
		}
	}()
	ctx := context.Background()
	if _, err := checkpoint.New(store, checkpoint.Options{Schema: schema}).TakeSync(ctx, bes, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.New(store, checkpoint.Options{}).TakeSync(ctx, bes, 2); err != nil {
		t.Fatal(err)
	}
	type state struct {
		Name          string `json:"name"`
		KeyType       string `json:"keyType"`
		NamespaceType string `json:"namespaceType"`
		UserKeyType   string `json:"userKeyType"`
		ValueType     string `json:"valueType"`
		Entries       int64  `json:"entries"`
	}
	states := func(id string) map[string]state {
		out, errOut, code := run(t, "--json", "inspect", "--deep", filepath.Join(root, id))
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", id, code, errOut)
		}
		var r struct {
			Operators []struct {
				States []state `json:"states"`
			} `json:"operators"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Operators) != 1 {
			t.Fatalf("%s: %v\n%s", id, err, out)
		}
		m := map[string]state{}
		for _, s := range r.Operators[0].States {
			m[s.Name] = s
		}
		return m
	}
	typed, raw := states("chk-1"), states("chk-2")
	if len(typed) != len(schema.States) {
		t.Fatalf("%d states, schema has %d", len(typed), len(schema.States))
	}
	for _, want := range schema.States {
		s, r := typed[want.Name], raw[want.Name]
		if s.Entries == 0 || s.Entries != r.Entries {
			t.Errorf("%s: %d entries with schema, %d without", want.Name, s.Entries, r.Entries)
		}
		if !strings.HasPrefix(s.KeyType, "ROW<") || s.ValueType == "" || s.ValueType == "BYTES" || s.NamespaceType == "BYTES" {
			t.Errorf("%s: typed checkpoint shows %+v", want.Name, s)
		}
		if r.KeyType != "BYTES" || r.ValueType != "BYTES" {
			t.Errorf("%s: untyped checkpoint shows %+v", want.Name, r)
		}
	}
	if s := typed["window-aggs"]; s.NamespaceType != "TIME_WINDOW" || s.ValueType != "BIGINT" {
		t.Errorf("window-aggs: %+v", s)
	}
	if s := typed["distinct"]; !strings.HasPrefix(s.UserKeyType, "ROW<") || s.ValueType != "BIGINT" {
		t.Errorf("distinct: %+v", s)
	}
	out, _, code := run(t, "inspect", "--deep", filepath.Join(root, "chk-1"))
	if code != ExitOK || !strings.Contains(out, "value "+typed["window-aggs"].ValueType) {
		t.Errorf("text output lacks types:\n%s", out)
	}
}
