package canonical

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// kryoSnapshot is a versioned KryoSerializerSnapshot (version 2) of class
// typeClass with three empty optional maps: a serializer package serde
// parses but cannot decode values of.
func kryoSnapshot(typeClass string) []byte {
	utf := func(b []byte, s string) []byte {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		return append(b, s...)
	}
	b := utf(nil, serde.ClassKryo)
	b = binary.BigEndian.AppendUint32(b, 2)
	b = utf(b, typeClass)
	for range 3 {
		b = binary.BigEndian.AppendUint64(b, serde.LinkedOptionalMapHeader)
		b = binary.BigEndian.AppendUint32(b, 0)
	}
	return b
}

// TestOpaqueValuesRoundTrip: values, map user keys and user values whose
// serializer package serde cannot decode (Kryo) import as opaque Flink
// bytes and export back byte for byte.
func TestOpaqueValuesRoundTrip(t *testing.T) {
	ctx := context.Background()
	kryo := engine.Type{Kind: engine.TypeRaw, Snapshot: flinkwrite.RawSnapshot{Versioned: kryoSnapshot("com.example.Pojo")}}
	s := &engine.Schema{
		Key: engine.LongType,
		States: []engine.StateSchema{
			{Name: "kryo-value", Kind: engine.KindValue, Namespace: engine.VoidType, Value: kryo},
			{Name: "kryo-map", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: kryo, Value: kryo},
		},
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if dec := serde.NewDecoder(mustSnap(t, kryo)); dec.Supported() {
		t.Fatal("the Kryo serializer decodes; the test needs one that does not")
	}
	maxP := 16
	clock := engine.NewManualClock(testNow)
	be := openBackend(t, "heap", engine.Layout{MaxParallelism: maxP, Range: keygroups.Range{Start: 0, End: maxP - 1}}, s.Descs(), clock)
	op := engine.NewOperator(be, clock)
	b := be.NewBatch()
	var key, val []byte
	for i := int64(0); i < 50; i++ {
		k := binary.BigEndian.AppendUint64(nil, uint64(i))
		kg := keygroups.KeyGroupFor(keygroups.HashLong(i), maxP)
		blob := bytes.Repeat([]byte{byte(i), 0xee}, int(i%7)+1)
		key = op.States()[0].Key(key[:0], kg, k, nil)
		val = append(binary.BigEndian.AppendUint64(val[:0], 0), blob...)
		b.Put(0, key, val)
		key = op.States()[1].EntryKey(key[:0], kg, k, nil, append([]byte{0x01}, blob...))
		val = append(binary.BigEndian.AppendUint64(val[:0], 0), 0)
		val = append(val, blob[1:]...)
		b.Put(1, key, val)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	store, _ := s3.NewLocal(t.TempDir())
	exp := Operator{UID: "opaque", Parallelism: 1, MaxParallelism: maxP, Subtasks: []Subtask{{Index: 0, Operator: op, Schema: s}}}
	if _, _, err := Export(ctx, []Operator{exp}, store, ExportOptions{Dir: "a", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	a, err := savepoint.Open(ctx, store, "a/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	raws := 0
	err = a.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
		if _, ok := e.Value.(*serde.Raw); ok {
			raws++
		}
		return nil
	})
	if err != nil || raws != 100 {
		t.Fatalf("%d opaque values read back (%v), want 100", raws, err)
	}
	res, err := Import(ctx, a, testFactory(t, "rocksdb", clock, nil), ImportOptions{Parallelism: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if res.Stats.Entries != 100 {
		t.Fatalf("imported %d entries", res.Stats.Entries)
	}
	c := reexport(t, res, clock, store, "b")
	if diff := mustDigest(t, a).Diff(mustDigest(t, c), 10); diff != nil {
		t.Fatalf("digest differs after import/export:\n%v", diff)
	}
}

func mustSnap(t *testing.T, ty engine.Type) *serde.Snapshot {
	t.Helper()
	rs := ty.Snapshot.(flinkwrite.RawSnapshot)
	s, _, err := serde.ParseSnapshot(append([]byte{0, 0, 0, serde.ProxyVersion}, rs.Versioned...), 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
