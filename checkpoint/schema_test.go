package checkpoint

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
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
// backends' states, or declares a join-record state that is none of
// recordstore's layouts, fails the checkpoint instead of writing a wrong
// meta-state stream.
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

	// A join-record state must be one of recordstore's layouts.
	join := &engine.Schema{Key: engine.RowType(), States: []engine.StateSchema{{Name: "rows", Kind: engine.KindMap,
		Join: &engine.JoinSides{Left: engine.RowType(), Right: engine.RowType()}}}}
	if _, err := SchemaStateMeta(join)(engine.StateDesc{Name: "rows", Kind: engine.KindMap}); err == nil || !strings.Contains(err.Error(), recordstore.RecordStateName) {
		t.Errorf("join state outside recordstore's layouts: %v", err)
	}
	join.States[0].Name, join.States[0].Kind = recordstore.BucketStateName, engine.KindMap
	if _, err := SchemaStateMeta(join)(engine.StateDesc{Name: recordstore.BucketStateName, Kind: engine.KindMap}); err == nil || !strings.Contains(err.Error(), "join records") {
		t.Errorf("bucket layout declared as a map: %v", err)
	}
	if _, err := SchemaStateMeta(testSchema())(engine.StateDesc{Name: "other", Kind: engine.KindValue}); err == nil {
		t.Error("undescribed state accepted")
	}
}

// TestSchemaDescribesJoinState: a join-record state keeps one meta info in
// the meta-state stream, with byte-array serializers for recordstore's
// stored bytes and the join description (engine.JoinSides.Describe): both
// sides' Flink names, outer flags and input row serializers.
func TestSchemaDescribesJoinState(t *testing.T) {
	left := engine.Type{Kind: engine.TypeRow, Fields: []keygroups.FieldType{keygroups.TypeInt, keygroups.TypeString}, Nullable: []bool{false, true}}
	right := engine.RowType(keygroups.TypeBigInt, keygroups.TypeDouble, keygroups.TypeTimestamp(3))
	for _, l := range []recordstore.Layout{recordstore.LayoutBucket, recordstore.LayoutRecord} {
		d := recordstore.StateDesc(l, time.Hour)
		sch := &engine.Schema{Key: engine.RowType(keygroups.TypeBigInt), States: []engine.StateSchema{
			{Name: "counts", Kind: engine.KindValue, Namespace: engine.VoidType, Value: engine.LongType},
			{Name: d.Name, Kind: d.Kind, Namespace: engine.VoidType, TTL: d.TTL,
				Join: &engine.JoinSides{Left: left, Right: right, LeftName: "auctions", LeftOuter: true}},
		}}
		b, err := MetaStream(sch.Descs(), &Options{Schema: sch})
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		hdr, _, err := keyed.ReadHeader(bytes.NewReader(b), "meta")
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if len(hdr.States) != 2 || hdr.States[1].Name != d.Name || hdr.States[1].Partial != "" {
			t.Fatalf("%s: states %+v", l, hdr.States)
		}
		m := hdr.States[1]
		wantKind := map[recordstore.Layout]string{recordstore.LayoutBucket: "VALUE", recordstore.LayoutRecord: "MAP"}[l]
		stored := m.Value
		if l == recordstore.LayoutRecord {
			stored = m.UserValue
		}
		if m.Kind != wantKind || stored == nil || stored.Class != serde.ClassBytes {
			t.Errorf("%s: kind %s, stored value serializer %+v", l, m.Kind, stored)
		}
		for k, v := range map[string]string{engine.JoinOptVersion: "1", engine.JoinOptLeftName: "auctions", engine.JoinOptRightName: "right-records",
			engine.JoinOptLeftOuter: "true", engine.JoinOptRightOuter: "false"} {
			if got, ok := m.OptionMap[k]; !ok || got != v {
				t.Errorf("%s: option %s = %q (set %v), want %q", l, k, got, ok, v)
			}
		}
		rows := map[string]*serde.Snapshot{}
		for _, ns := range m.Serializers {
			rows[ns.Key] = ns.Snapshot
		}
		for key, want := range map[string]engine.Type{engine.JoinSerLeftRow: left, engine.JoinSerRightRow: right} {
			s := rows[key]
			if s == nil || s.Class != serde.ClassRowData || len(s.Types) != len(want.Fields) {
				t.Fatalf("%s: %s = %+v", l, key, s)
			}
			for i, lt := range s.Types {
				if lt.Nullable != (want.Nullable == nil || want.Nullable[i]) {
					t.Errorf("%s: %s field %d nullable %v", l, key, i, lt.Nullable)
				}
			}
		}
	}
}
