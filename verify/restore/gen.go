//go:build cgo

package restore

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// GenOptions describes the state Generate writes.
type GenOptions struct {
	// Keys is the number of grouping keys.
	Keys int
	// Backend is "heap" or "rocksdb" (default).
	Backend                     string
	Parallelism, MaxParallelism int
	// Now is the engine clock; TTL timestamps lie up to Spread ms before it.
	Now    int64
	Spread int64
	// InlineThreshold as in canonical.ExportOptions (negative: every stream
	// is a file).
	InlineThreshold int
	Compress        bool
	TempDir         string
}

var (
	genKey     = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString}
	genAgg     = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString, keygroups.TypeBigInt}
	genUserKey = []keygroups.FieldType{keygroups.TypeInt}
	genRecord  = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString}
)

// GenSchema is the operator Generate writes: a group aggregate with TTL
// (accState, a row per key), map state (distinct: INT user keys to BIGINT),
// join records with TTL (left-records) and without (right-records) as
// multisets (MAP<row, Integer> counts in the savepoint), and a windowed
// value (TimeWindow namespace).
func GenSchema(ttl time.Duration) *engine.Schema {
	return &engine.Schema{
		Key: engine.RowType(genKey...),
		States: []engine.StateSchema{
			{Name: "accState", Kind: engine.KindValue, Namespace: engine.VoidType, Value: engine.RowType(genAgg...), TTL: ttl},
			{Name: "distinct", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: engine.RowType(genUserKey...), Value: engine.LongType},
			{Name: "left-records", Kind: engine.KindMultiset, Namespace: engine.VoidType, UserKey: engine.RowType(genRecord...), TTL: ttl},
			{Name: "right-records", Kind: engine.KindMultiset, Namespace: engine.VoidType, UserKey: engine.RowType(genRecord...)},
			{Name: "window-aggs", Kind: engine.KindValue, Namespace: engine.TimeWindowType, Value: engine.LongType},
		},
	}
}

// Generate fills engine backends with o.Keys keys of GenSchema state and
// exports them as a canonical savepoint into store under dir. It returns
// the number of entries written.
func Generate(ctx context.Context, store s3.Storage, dir string, o GenOptions) (int64, error) {
	tmp, err := os.MkdirTemp(o.TempDir, s3.ScratchPrefix+"gen-*")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	o.TempDir = tmp
	bes, schema, clock, total, err := GenerateBackends(o)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, be := range bes {
			be.Close()
		}
	}()
	op := canonical.Operator{UID: "verify-generated", Parallelism: o.Parallelism, MaxParallelism: o.MaxParallelism}
	for i, be := range bes {
		op.Subtasks = append(op.Subtasks, canonical.Subtask{Index: i, Operator: engine.NewOperator(be, clock), Schema: schema})
	}
	if _, _, err := canonical.Export(ctx, []canonical.Operator{op}, store, canonical.ExportOptions{Dir: dir, TempDir: tmp, InlineThreshold: o.InlineThreshold, Compress: o.Compress}); err != nil {
		return 0, err
	}
	return total, nil
}

// GenerateBackends opens o.Parallelism backends (RocksDB instances under
// o.TempDir, or heap) filled with GenSchema state; the caller closes them.
// It returns the backends, their schema and clock, and the entries written.
func GenerateBackends(o GenOptions) ([]engine.Backend, *engine.Schema, *engine.Clock, int64, error) {
	if o.Parallelism <= 0 || o.MaxParallelism < o.Parallelism {
		return nil, nil, nil, 0, fmt.Errorf("restore: generate: parallelism %d, max parallelism %d", o.Parallelism, o.MaxParallelism)
	}
	if o.Spread <= 0 {
		o.Spread = 1000
	}
	schema := GenSchema(24 * time.Hour)
	clock := engine.NewManualClock(o.Now)
	var bes []engine.Backend
	fail := func(err error) ([]engine.Backend, *engine.Schema, *engine.Clock, int64, error) {
		for _, be := range bes {
			be.Close()
		}
		return nil, nil, nil, 0, err
	}
	var total int64
	for i := 0; i < o.Parallelism; i++ {
		r := keygroups.RangeForSubtask(o.MaxParallelism, o.Parallelism, i)
		l := engine.Layout{MaxParallelism: o.MaxParallelism, Range: r}
		var be engine.Backend
		var err error
		if o.Backend == "heap" {
			be, err = engine.OpenHeap(l, schema.Descs())
		} else {
			be, err = engine.OpenRocksDB(filepath.Join(o.TempDir, fmt.Sprintf("gen-%d", i)), l, schema.Descs(), engine.RocksOptions{Clock: clock, WriteBufferSize: 32 << 20, ErrorIfExists: true})
		}
		if err != nil {
			return fail(err)
		}
		bes = append(bes, be)
		n, err := genFill(be, schema, o)
		if err != nil {
			return fail(err)
		}
		total += n
	}
	return bes, schema, clock, total, nil
}

func genFill(be engine.Backend, s *engine.Schema, o GenOptions) (int64, error) {
	op := engine.NewOperator(be, nil)
	st := op.States()
	l := be.Layout()
	rb, err := keygroups.NewRowBuilder(genKey)
	if err != nil {
		return 0, err
	}
	as, err := s.States[0].Value.ArrowSchema()
	if err != nil {
		return 0, err
	}
	codec, err := rowcodec.NewCodec(as)
	if err != nil {
		return 0, err
	}
	b := be.NewBatch()
	defer b.Close()
	var n int64
	var key, val []byte
	for i := 0; i < o.Keys; i++ {
		row, err := rb.Build([]any{int64(i), fmt.Sprintf("key-%d", i)})
		if err != nil {
			return 0, err
		}
		kg := keygroups.KeyGroupFor(keygroups.HashRow(row), l.MaxParallelism)
		if !l.Range.Contains(kg) {
			continue
		}
		ts := o.Now - int64(i)%o.Spread
		var name any = fmt.Sprintf("group %d", i)
		if i%9 == 0 {
			name = nil
		}
		if val, err = codec.EncodeRow(val[:0], ts, []any{int64(i * 7), name, int64(i % 13)}); err != nil {
			return 0, err
		}
		key = st[0].Key(key[:0], kg, row, nil)
		b.Put(0, key, val)
		n++
		for j := 0; j < i%4; j++ {
			uk, _ := keygroups.BuildRow(genUserKey, []any{int32(j*10 + i%3)})
			key = st[1].EntryKey(key[:0], kg, row, nil, uk)
			val = binary.BigEndian.AppendUint64(val[:0], 0)
			val = binary.BigEndian.AppendUint64(val, uint64(i*j))
			b.Put(1, key, val)
			n++
		}
		for side := 2; side <= 3; side++ {
			for j := 0; j < 1+(i+side)%3; j++ {
				rec, _ := keygroups.BuildRow(genRecord, []any{int64(j), fmt.Sprintf("rec-%d-%d", side, i+j)})
				key = st[side].EntryKey(key[:0], kg, row, nil, rec)
				t := int64(0)
				if side == 2 {
					t = ts - int64(j)
				}
				val = binary.BigEndian.AppendUint64(val[:0], uint64(t))
				val = binary.BigEndian.AppendUint64(val, uint64(1+(i+j)%4))
				b.Put(side, key, val)
				n++
			}
		}
		if i%5 == 0 {
			for w := int64(0); w < 2; w++ {
				ns := binary.BigEndian.AppendUint64(nil, uint64(w*60000))
				ns = binary.BigEndian.AppendUint64(ns, uint64(w*60000+60000))
				key = st[4].Key(key[:0], kg, row, ns)
				val = binary.BigEndian.AppendUint64(val[:0], 0)
				val = binary.BigEndian.AppendUint64(val, uint64(i))
				b.Put(4, key, val)
				n++
			}
		}
		if b.Len() >= 4096 {
			if err := b.Commit(); err != nil {
				return 0, err
			}
		}
	}
	return n, b.Commit()
}
