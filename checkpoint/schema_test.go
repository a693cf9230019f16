package checkpoint

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// testSchema describes testStates: string keys, a long value state and a
// string → string map state.
func testSchema() *engine.Schema {
	return &engine.Schema{Key: engine.StringType, States: []engine.StateSchema{
		{Name: "counts", Kind: engine.KindValue, Namespace: engine.VoidType, Value: engine.LongType},
		{Name: "rows", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: engine.StringType, Value: engine.StringType},
	}}
}

// TestSchemaGivesRealSerializers: with Options.Schema the meta-state
// stream of every subtask names Flink's serializers of the declared types
// instead of byte arrays.
func TestSchemaGivesRealSerializers(t *testing.T) {
	ctx := context.Background()
	st := localStore(t)
	c := newCluster(t, 2)
	c.write(0, 200, "a", false)
	if _, err := New(st, Options{Schema: testSchema()}).TakeSync(ctx, c.backends, 4); err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(ctx, st, MetadataKey(4))
	if err != nil {
		t.Fatal(err)
	}
	for i, sub := range sp.Meta.Operators[0].Subtasks {
		h := sub.ManagedKeyed.(*savepoint.IncrementalHandle)
		hdr, _, err := keyed.ReadHeader(bytes.NewReader(h.Meta.Data), "meta")
		if err != nil {
			t.Fatalf("subtask %d: %v", i, err)
		}
		if hdr.KeySerializer == nil || !strings.HasSuffix(hdr.KeySerializer.Class, "StringSerializer$StringSerializerSnapshot") {
			t.Errorf("subtask %d: key serializer %+v", i, hdr.KeySerializer)
		}
		if len(hdr.States) != 2 || hdr.States[0].Name != "counts" || hdr.States[1].Name != "rows" {
			t.Fatalf("subtask %d: states %+v", i, hdr.States)
		}
		counts, rows := hdr.States[0], hdr.States[1]
		if counts.Kind != "VALUE" || counts.Value == nil || !strings.Contains(counts.Value.Class, "LongSerializer") {
			t.Errorf("subtask %d: counts %s value %+v", i, counts.Kind, counts.Value)
		}
		if rows.Kind != "MAP" || rows.UserKey == nil || !strings.Contains(rows.UserKey.Class, "StringSerializer") ||
			rows.UserValue == nil || !strings.Contains(rows.UserValue.Class, "StringSerializer") {
			t.Errorf("subtask %d: rows %s user key %+v user value %+v", i, rows.Kind, rows.UserKey, rows.UserValue)
		}
	}

	// Without a schema the same states are byte arrays.
	if _, err := New(st, Options{}).TakeSync(ctx, c.backends, 5); err != nil {
		t.Fatal(err)
	}
	sp, err = savepoint.Open(ctx, st, MetadataKey(5))
	if err != nil {
		t.Fatal(err)
	}
	h := sp.Meta.Operators[0].Subtasks[0].ManagedKeyed.(*savepoint.IncrementalHandle)
	hdr, _, err := keyed.ReadHeader(bytes.NewReader(h.Meta.Data), "meta")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hdr.KeySerializer.Class, "BytePrimitiveArraySerializer") || !strings.Contains(hdr.States[0].Value.Class, "BytePrimitiveArraySerializer") {
		t.Errorf("default key %s value %s", hdr.KeySerializer.Class, hdr.States[0].Value.Class)
	}
}

// TestSchemaMustMatchStates: a schema that does not describe the
// backends' states, or describes a join-record state, fails the
// checkpoint instead of writing a wrong meta-state stream.
func TestSchemaMustMatchStates(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 1)
	c.write(0, 50, "a", false)

	wrongKind := testSchema()
	wrongKind.States[1] = engine.StateSchema{Name: "rows", Kind: engine.KindValue, Namespace: engine.VoidType, Value: engine.StringType}
	missing := testSchema()
	missing.States = missing.States[:1]
	for name, sch := range map[string]*engine.Schema{"wrong kind": wrongKind, "missing state": missing} {
		if _, err := New(localStore(t), Options{Schema: sch}).TakeSync(ctx, c.backends, 1); err == nil || !strings.Contains(err.Error(), "Schema") {
			t.Errorf("%s: %v", name, err)
		}
	}

	join := &engine.Schema{Key: engine.RowType(), States: []engine.StateSchema{{Name: "rows", Kind: engine.KindMap,
		Join: &engine.JoinSides{Left: engine.RowType(), Right: engine.RowType()}}}}
	if _, err := SchemaStateMeta(join)(engine.StateDesc{Name: "rows", Kind: engine.KindMap}); err == nil || !strings.Contains(err.Error(), "join") {
		t.Errorf("join state: %v", err)
	}
	if _, err := SchemaStateMeta(testSchema())(engine.StateDesc{Name: "other", Kind: engine.KindValue}); err == nil {
		t.Error("undescribed state accepted")
	}
}
