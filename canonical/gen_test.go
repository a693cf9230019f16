package canonical

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/keygroups"
)

// testNow is the manual clock of generated state; TTL timestamps lie
// shortly before it, so nothing is expired.
const testNow = int64(1_700_000_000_000)

var (
	keyFields   = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString}
	accFields   = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString, keygroups.TypeDouble, keygroups.TypeTimestamp(3), keygroups.TypeDecimal(10, 2)}
	recordRow   = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString}
	mapKeyField = []keygroups.FieldType{keygroups.TypeInt}
)

// genSchema covers value rows with TTL, map state with row user keys and
// long values, a join-record multiset with TTL and a window namespace.
func genSchema() *engine.Schema {
	return &engine.Schema{
		Key: engine.RowType(keyFields...),
		States: []engine.StateSchema{
			{Name: "accState", Kind: engine.KindValue, Namespace: engine.VoidType, Value: engine.RowType(accFields...), TTL: time.Hour},
			{Name: "distinct", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: engine.RowType(mapKeyField...), Value: engine.LongType},
			{Name: "left-records", Kind: engine.KindMultiset, Namespace: engine.VoidType, UserKey: engine.RowType(recordRow...), TTL: 2 * time.Hour},
			{Name: "window-aggs", Kind: engine.KindValue, Namespace: engine.TimeWindowType, Value: engine.LongType},
			{Name: "window-records", Kind: engine.KindList, Namespace: engine.LongType, Value: engine.RowType(recordRow...), TTL: 3 * time.Hour},
		},
	}
}

// genCounts is how many entries genFill writes per state for n keys.
type genCounts map[string]int64

// genFill writes the state of keys 0..n-1 that fall into be's key-group
// range and returns the number of entries per state.
func genFill(t testing.TB, be engine.Backend, s *engine.Schema, n int) genCounts {
	t.Helper()
	op := engine.NewOperator(be, nil)
	l := be.Layout()
	rb, err := keygroups.NewRowBuilder(keyFields)
	if err != nil {
		t.Fatal(err)
	}
	as, err := s.States[0].Value.ArrowSchema()
	if err != nil {
		t.Fatal(err)
	}
	codec, err := rowcodec.NewCodec(as)
	if err != nil {
		t.Fatal(err)
	}
	ras, err := s.States[4].Value.ArrowSchema()
	if err != nil {
		t.Fatal(err)
	}
	recCodec, err := rowcodec.NewCodec(ras)
	if err != nil {
		t.Fatal(err)
	}
	counts := genCounts{}
	b := be.NewBatch()
	defer b.Close()
	var key, val []byte
	for i := 0; i < n; i++ {
		row, err := rb.Build([]any{int64(i), fmt.Sprintf("key-%d-%s", i, string(rune('a'+i%26)))})
		if err != nil {
			t.Fatal(err)
		}
		kg := keygroups.KeyGroupFor(keygroups.HashRow(row), l.MaxParallelism)
		if !l.Range.Contains(kg) {
			continue
		}
		ts := testNow - int64(i%1000)
		// accState: one row per key, some NULL fields.
		var name any = fmt.Sprintf("name %d with a longer tail", i)
		if i%7 == 0 {
			name = nil
		}
		val, err = codec.EncodeRow(val[:0], ts, []any{int64(i * 3), name, float64(i) / 4, arrow.Timestamp(int64(i) * 1000), decimal128.FromI64(int64(i * 101))})
		if err != nil {
			t.Fatal(err)
		}
		st := op.States()
		key = st[0].Key(key[:0], kg, row, nil)
		b.Put(0, key, val)
		counts["accState"]++
		// distinct: i%4 map entries.
		for j := 0; j < i%4; j++ {
			uk, _ := keygroups.BuildRow(mapKeyField, []any{int32(j*10 + i%3)})
			key = st[1].EntryKey(key[:0], kg, row, nil, uk)
			val = binary.BigEndian.AppendUint64(val[:0], 0)
			val = binary.BigEndian.AppendUint64(val, uint64(i*j))
			b.Put(1, key, val)
			counts["distinct"]++
		}
		// left-records: 1..3 records with counts.
		for j := 0; j < 1+i%3; j++ {
			rec, _ := keygroups.BuildRow(recordRow, []any{int64(j), fmt.Sprintf("rec-%d", i+j)})
			key = st[2].EntryKey(key[:0], kg, row, nil, rec)
			val = binary.BigEndian.AppendUint64(val[:0], uint64(ts-int64(j)))
			val = binary.BigEndian.AppendUint64(val, uint64(1+j))
			b.Put(2, key, val)
			counts["left-records"]++
		}
		// window-aggs on every fifth key, two windows.
		if i%5 == 0 {
			for w := int64(0); w < 2; w++ {
				ns := binary.BigEndian.AppendUint64(nil, uint64(w*60000))
				ns = binary.BigEndian.AppendUint64(ns, uint64(w*60000+60000))
				key = st[3].Key(key[:0], kg, row, ns)
				val = binary.BigEndian.AppendUint64(val[:0], 0)
				val = binary.BigEndian.AppendUint64(val, uint64(i))
				b.Put(3, key, val)
				counts["window-aggs"]++
			}
		}
		// window-records on every third key: a list of 1..4 rows.
		if i%3 == 0 {
			val = binary.BigEndian.AppendUint64(val[:0], uint64(ts))
			for j := 0; j < 1+i%4; j++ {
				el, err := recCodec.EncodeRow(nil, 0, []any{int64(j), fmt.Sprintf("list-%d-%d", i, j)})
				if err != nil {
					t.Fatal(err)
				}
				val = binary.AppendUvarint(val, uint64(len(el)-8))
				val = append(val, el[8:]...)
			}
			key = st[4].Key(key[:0], kg, row, binary.BigEndian.AppendUint64(nil, uint64(i%2*60000)))
			b.Put(4, key, val)
			counts["window-records"]++
		}
		if b.Len() >= 4096 {
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	return counts
}

// genOperator opens `parallelism` backends of kind ("heap" or "rocksdb"),
// fills them with n keys and returns the export description.
func genOperator(t testing.TB, kind string, maxP, parallelism, n int) (Operator, genCounts) {
	t.Helper()
	s := genSchema()
	op := Operator{UID: "generated-join", Parallelism: parallelism, MaxParallelism: maxP}
	total := genCounts{}
	clock := engine.NewManualClock(testNow)
	for i := 0; i < parallelism; i++ {
		r := keygroups.RangeForSubtask(maxP, parallelism, i)
		be := openBackend(t, kind, engine.Layout{MaxParallelism: maxP, Range: r}, s.Descs(), clock)
		for k, v := range genFill(t, be, s, n) {
			total[k] += v
		}
		op.Subtasks = append(op.Subtasks, Subtask{Index: i, Operator: engine.NewOperator(be, clock), Schema: s})
	}
	return op, total
}

func openBackend(t testing.TB, kind string, l engine.Layout, descs []engine.StateDesc, clock *engine.Clock) engine.Backend {
	t.Helper()
	var be engine.Backend
	var err error
	switch kind {
	case "heap":
		be, err = engine.OpenHeap(l, descs)
	case "rocksdb":
		be, err = engine.OpenRocksDB(t.TempDir(), l, descs, engine.RocksOptions{Clock: clock, WriteBufferSize: 4 << 20})
	default:
		t.Fatalf("unknown backend %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}
