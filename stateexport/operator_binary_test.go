package stateexport

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// Serializer snapshot classes sfstate has no decoder for (made up).
const (
	unknownElementClass = "com.example.queue.PendingRequestSerializer$Snapshot"
	unknownRuleClass    = "com.example.rules.RuleSerializer$Snapshot"
)

// unknownSnapshot is a serializer snapshot of class: version 1 and a body
// no snapshot grammar of sfstate reads (the header parser steps over it).
func unknownSnapshot(class string) flinkwrite.RawSnapshot {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(class)))
	b = append(b, class...)
	b = binary.BigEndian.AppendUint32(b, 1)
	return flinkwrite.RawSnapshot{Versioned: append(b, 0x13, 0x37, 0x00, 0x2a, 0x07)}
}

func opStateMeta(name string, typ flinkwrite.BackendStateType, mode string, ser ...flinkwrite.NamedSnapshot) flinkwrite.StateMetaInfo {
	return flinkwrite.StateMetaInfo{Name: name, Type: typ, Options: []flinkwrite.Option{{Key: "OPERATOR_STATE_DISTRIBUTION_MODE", Value: mode}}, Serializers: ser}
}

// binaryOpSubtask is what one subtask's operator-state stream holds.
type binaryOpSubtask struct {
	pending [][]byte // elements of the list state with the unknown serializer
	offsets []int64  // elements of the UNION list state of Longs
	rules   []byte   // the broadcast map (unknown value serializer)
}

// writeBinaryOpSavepoint writes into dir a savepoint of one operator
// without keyed state whose subtasks each have an operator-state stream
// (proxy version 6): the SPLIT_DISTRIBUTE list state "pending" whose
// element serializer is unknownElementClass, the UNION list state
// "offsets" of Longs, and the broadcast state "rules" with String keys
// and values of unknownRuleClass, the data of each at the offsets its
// handle records.
func writeBinaryOpSavepoint(t *testing.T, dir string, subtasks []binaryOpSubtask) *savepoint.OperatorState {
	t.Helper()
	hdr, err := flinkwrite.AppendOperatorHeader(nil, false,
		[]flinkwrite.StateMetaInfo{
			opStateMeta("pending", flinkwrite.OperatorState, "SPLIT_DISTRIBUTE", flinkwrite.NamedSnapshot{Key: "VALUE_SERIALIZER", Snapshot: unknownSnapshot(unknownElementClass)}),
			opStateMeta("offsets", flinkwrite.OperatorState, "UNION", flinkwrite.NamedSnapshot{Key: "VALUE_SERIALIZER", Snapshot: flinkwrite.LongSnapshot}),
		},
		[]flinkwrite.StateMetaInfo{opStateMeta("rules", flinkwrite.BroadcastState, "BROADCAST",
			flinkwrite.NamedSnapshot{Key: "KEY_SERIALIZER", Snapshot: flinkwrite.StringSnapshot},
			flinkwrite.NamedSnapshot{Key: "VALUE_SERIALIZER", Snapshot: unknownSnapshot(unknownRuleClass)})})
	if err != nil {
		t.Fatal(err)
	}
	op := &savepoint.OperatorState{ID: savepoint.OperatorIDFromUID("binary-operator-state"), Parallelism: int32(len(subtasks)), MaxParallelism: 128}
	for i, s := range subtasks {
		data := bytes.Clone(hdr)
		var pend, offs []int64
		for _, el := range s.pending {
			pend = append(pend, int64(len(data)))
			data = append(data, el...)
		}
		for _, v := range s.offsets {
			offs = append(offs, int64(len(data)))
			data = flinkwrite.AppendLong(data, v)
		}
		rules := int64(len(data))
		data = append(data, s.rules...)
		name := "op-state-" + string(rune('0'+i))
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		op.Subtasks = append(op.Subtasks, &savepoint.SubtaskState{Index: i, ManagedOperator: &savepoint.OperatorHandle{
			Tag: savepoint.TagPartitionableOperator,
			States: []savepoint.OperatorStateMeta{
				{Name: "pending", Mode: savepoint.ModeSplitDistribute, Offsets: pend},
				{Name: "offsets", Mode: savepoint.ModeUnion, Offsets: offs},
				{Name: "rules", Mode: savepoint.ModeBroadcast, Offsets: []int64{rules}},
			},
			Delegate: &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: name, Size: int64(len(data))}}})
	}
	b, err := savepoint.EncodeMetadata(&savepoint.Metadata{Version: 3, CheckpointID: 1, Operators: []*savepoint.OperatorState{op}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, savepoint.MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return op
}

// ruleMap is a broadcast map as Flink writes it: i32 size, then per entry
// the key (String) and the value (here bytes of the unknown serializer).
func ruleMap(entries ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(entries)))
	for i, k := range entries {
		b = flinkwrite.AppendStringValue(b, k)
		b = append(b, 0xff, byte(i), 0x00, 0x80)
	}
	return b
}

// TestExportOperatorStateUnknownSerializer: operator-state elements whose
// serializer sfstate cannot decode are exported to Parquet as one binary
// value column holding each element's exact bytes, with the serializer
// class in the column's sfstate.serializer field metadata; a broadcast
// state whose values do not decode is one row per subtask holding the
// whole map's bytes. A decodable state of the same streams stays typed.
// The files are read back with parquet-go (rows, physical and logical
// types) and with pqarrow (the stored Arrow schema and its metadata).
func TestExportOperatorStateUnknownSerializer(t *testing.T) {
	subtasks := []binaryOpSubtask{
		{pending: [][]byte{{0xca, 0xfe, 0x00}, bytes.Repeat([]byte{0x5a, 0xff, 0x00}, 100), {0x01}}, offsets: []int64{42, -7}, rules: ruleMap("a", "bb")},
		{pending: [][]byte{{0x00, 0x00, 0xff, 0xfe, 0x80}}, offsets: []int64{1 << 40}, rules: ruleMap("only")},
	}
	src := t.TempDir()
	op := writeBinaryOpSavepoint(t, src, subtasks)
	sp := openFixture(t, src)
	dir := t.TempDir()
	man := export(t, sp, dir, Options{Format: Parquet, RowGroupRows: 2})
	got := opTables(t, dir, man)
	id := op.ID.String()

	// Rows: the exact element bytes, in subtask and element order.
	var want [][]any
	for st, s := range subtasks {
		for i, el := range s.pending {
			want = append(want, []any{id, int64(st), "pending", "SPLIT_DISTRIBUTE", int64(i), string(el)})
		}
	}
	checkRows(t, "pending", got[id+"/pending"], want)
	want = nil
	for st, s := range subtasks {
		for i, v := range s.offsets {
			want = append(want, []any{id, int64(st), "offsets", "UNION", int64(i), v})
		}
	}
	checkRows(t, "offsets", got[id+"/offsets"], want)
	want = nil
	for st, s := range subtasks {
		want = append(want, []any{id, int64(st), "rules", "BROADCAST", int64(0), nil, string(s.rules)})
	}
	checkRows(t, "rules", got[id+"/rules"], want)
	checkOperatorStatesRows(t, dir, man, got)

	// Column types and metadata.
	tables := map[string]*ManifestTable{}
	for _, tb := range man.Tables {
		if operatorStateKind(tb.Kind) {
			tables[tb.State] = tb
		}
	}
	for _, c := range []struct {
		state, class string
		binary       bool
	}{{"pending", unknownElementClass, true}, {"rules", unknownRuleClass, true}, {"offsets", "", false}} {
		tb := tables[c.state]
		if tb == nil {
			t.Fatalf("no table for %s", c.state)
		}
		path := filepath.Join(dir, tb.Files[0].Key)
		// parquet-go: the value column is plain BYTE_ARRAY, no string.
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		pf, err := parquet.OpenFile(f, fi.Size())
		if err != nil {
			t.Fatal(err)
		}
		fields := pf.Schema().Fields()
		last := fields[len(fields)-1]
		if last.Name() != "value" {
			t.Fatalf("%s: last column %q", c.state, last.Name())
		}
		// A string column is BYTE_ARRAY with a logical type; the
		// binary column has none.
		annotated := func(f parquet.Field) bool {
			lt := f.Type().LogicalType()
			return lt != nil && lt.Value != nil
		}
		if fields[2].Name() != ColState || !annotated(fields[2]) {
			t.Fatalf("%s: column %q has no logical type", c.state, fields[2].Name())
		}
		if c.binary && (last.Type().Kind() != parquet.ByteArray || annotated(last)) {
			t.Fatalf("%s: value column is %v (logical %v), want plain BYTE_ARRAY", c.state, last.Type().Kind(), last.Type().LogicalType())
		}
		if !c.binary && last.Type().Kind() != parquet.Int64 {
			t.Fatalf("%s: value column is %v, want INT64", c.state, last.Type().Kind())
		}
		f.Close()

		// pqarrow: the stored Arrow schema names the serializer.
		rdr, err := file.OpenParquetFile(path, false)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		schema, err := fr.Schema()
		if err != nil {
			t.Fatal(err)
		}
		idx := schema.FieldIndices("value")
		if len(idx) != 1 {
			t.Fatalf("%s: value fields %v in %v", c.state, idx, schema)
		}
		fl := schema.Field(idx[0])
		k := fl.Metadata.FindKey(MetaSerializer)
		if c.binary {
			if fl.Type.ID() != arrow.BINARY || k < 0 || fl.Metadata.Values()[k] != c.class {
				t.Fatalf("%s: value field %v, want BINARY with %s=%s", c.state, fl, MetaSerializer, c.class)
			}
			// The Arrow reader yields the same bytes.
			tbl, err := fr.ReadTable(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var vals []string
			for _, chunk := range tbl.Column(idx[0]).Data().Chunks() {
				b := chunk.(*array.Binary)
				for i := 0; i < b.Len(); i++ {
					vals = append(vals, string(b.Value(i)))
				}
			}
			tbl.Release()
			var wantVals []string
			for _, s := range subtasks {
				if c.state == "pending" {
					for _, el := range s.pending {
						wantVals = append(wantVals, string(el))
					}
				} else {
					wantVals = append(wantVals, string(s.rules))
				}
			}
			if len(vals) != len(wantVals) {
				t.Fatalf("%s: pqarrow read %d values, want %d", c.state, len(vals), len(wantVals))
			}
			for i := range vals {
				if vals[i] != wantVals[i] {
					t.Fatalf("%s: pqarrow value %d is %x, want %x", c.state, i, vals[i], wantVals[i])
				}
			}
		} else if k >= 0 {
			t.Fatalf("%s: decoded column carries %s", c.state, MetaSerializer)
		}
		rdr.Close()
	}
}

// checkRows compares rows read back with the expected ones, in order.
func checkRows(t *testing.T, what string, got, want [][]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows %q, want %d", what, len(got), got, len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s row %d: %q, want %q", what, i, got[i], want[i])
		}
		for j := range want[i] {
			if !sameLeaf(got[i][j], want[i][j]) {
				t.Fatalf("%s row %d column %d: %q, want %q", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}
