package canonical

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// Join records: a recordstore join state (one engine state holding, per
// join key and side, the distinct rows with counts, association counts and
// last-write times) is exported as Flink's two MAP states of the regular
// join, user key = row as BinaryRowData, value = Integer count for an inner
// side, or Tuple2<Integer, Integer> (count, association count) for an
// outer side (JoinSides.LeftOuter/RightOuter, as Flink's
// OuterJoinRecordStateViews keeps inputs without unique key), TtlValue-
// wrapped with the row's last-write time when the state has a TTL; and
// imported back into the record layout.

// joinCodec converts join records in both directions.
type joinCodec struct {
	s     engine.StateSchema
	key   engine.Type
	ttl   bool
	outer [2]bool
	rows  [2]*rowcodec.FlinkRow
	tmp   []byte
}

func newJoinCodec(key engine.Type, s engine.StateSchema) (*joinCodec, error) {
	if key.Kind != engine.TypeRow {
		return nil, fmt.Errorf("join state %q: key must be a row", s.Name)
	}
	c := &joinCodec{s: s, key: key, ttl: s.TTL > 0, outer: [2]bool{s.Join.LeftOuter, s.Join.RightOuter}}
	for i, t := range []engine.Type{s.Join.Left, s.Join.Right} {
		as, err := t.ArrowSchema()
		if err != nil {
			return nil, fmt.Errorf("join state %q: %w", s.Name, err)
		}
		codec, err := rowcodec.NewCodec(as)
		if err != nil {
			return nil, fmt.Errorf("join state %q: %w", s.Name, err)
		}
		if c.rows[i], err = rowcodec.NewFlinkRow(codec); err != nil {
			return nil, fmt.Errorf("join state %q: %w", s.Name, err)
		}
	}
	return c, nil
}

// joinLayout is the recordstore layout holding a join state.
func joinLayout(s engine.StateSchema) (recordstore.Layout, error) {
	switch {
	case s.Name == recordstore.RecordStateName && s.Kind == engine.KindMap:
		return recordstore.LayoutRecord, nil
	case s.Name == recordstore.BucketStateName && s.Kind == engine.KindValue:
		return recordstore.LayoutBucket, nil
	}
	return "", fmt.Errorf("join state %q (%s) is neither %q (map) nor %q (value)", s.Name, s.Kind, recordstore.RecordStateName, recordstore.BucketStateName)
}

var errJoinStop = errors.New("join scan stopped")

// joinScan visits a join state's live logical content in key-group order.
func joinScan(op *engine.Operator, s engine.StateSchema, l engine.Layout) func(emitFunc) error {
	return func(emit emitFunc) error {
		lay, err := joinLayout(s)
		if err != nil {
			return err
		}
		js, err := recordstore.Open(lay, op.Backend(), recordstore.Options{Clock: op.Clock()})
		if err != nil {
			return err
		}
		err = js.Logical(func(g *recordstore.LogicalGroup) error {
			if !l.Range.Contains(g.KeyGroup) {
				return fmt.Errorf("join key in key group %d outside the subtask's range %d-%d", g.KeyGroup, l.Range.Start, l.Range.End)
			}
			for _, r := range g.Rows {
				if !emit(g.KeyGroup, r.TS, g.Key, r.Row, uint8(g.Side), r.Count, r.Assoc) {
					return errJoinStop
				}
			}
			return nil
		})
		if errors.Is(err, errJoinStop) {
			return nil
		}
		return err
	}
}

// flinkEntry appends the Flink key and value of one join record.
func (c *joinCodec) flinkEntry(kb, vb []byte, kg, width int, it scanItem) ([]byte, []byte, error) {
	if it.side > 1 {
		return kb, vb, convErr("join side %d", it.side)
	}
	kb, err := flinkwrite.AppendKeyGroupPrefix(kb, kg, width)
	if err != nil {
		return kb, vb, err
	}
	if kb, err = appendFlinkPart(kb, c.key, it.stored, "join key"); err != nil {
		return kb, vb, err
	}
	kb = append(kb, 0) // void namespace
	c.tmp = append(c.tmp[:0], 0, 0, 0, 0, 0, 0, 0, 0)
	c.tmp = append(c.tmp, it.payload...)
	at := len(kb)
	kb = append(kb, 0, 0, 0, 0)
	if kb, _, err = c.rows[it.side].ToBinaryRow(kb, c.tmp); err != nil {
		return kb, vb, fmt.Errorf("%w: join row: %v", ErrConvert, err)
	}
	binary.BigEndian.PutUint32(kb[at:], uint32(len(kb)-at-4))
	if it.count < 1 || it.count > math.MaxInt32 {
		return kb, vb, convErr("join row count %d outside Flink's Integer range 1..2^31-1", it.count)
	}
	vb = append(vb, 0)
	if c.ttl {
		vb = flinkwrite.AppendLong(vb, it.ts)
	}
	vb = flinkwrite.AppendInt(vb, int32(it.count))
	if c.outer[it.side] {
		if it.assoc < 0 || it.assoc > math.MaxInt32 {
			return kb, vb, convErr("join row association count %d outside Flink's Integer range 0..2^31-1", it.assoc)
		}
		vb = flinkwrite.AppendInt(vb, int32(it.assoc))
	}
	return kb, vb, nil
}

// engineEntry appends the record-layout key and value of one Flink entry
// of side `side`.
func (c *joinCodec) engineEntry(kb, vb []byte, width, kg int, side uint8, key, ns, userKey, v []byte) ([]byte, []byte, error) {
	if len(ns) != 1 || ns[0] != 0 {
		return kb, vb, convErr("join entry namespace % x is not void", ns)
	}
	var err error
	c.tmp, err = parseFlinkPart(c.tmp[:0], c.key, key, "join key")
	if err != nil {
		return kb, vb, err
	}
	keyLen := len(c.tmp)
	if len(userKey) < 4 || int64(binary.BigEndian.Uint32(userKey)) != int64(len(userKey)-4) {
		return kb, vb, convErr("join row size prefix does not match its %d bytes", len(userKey))
	}
	// Flink erases the kind of join records (+I), but another one stays
	// in the row's header byte.
	c.tmp, _, err = c.rows[side].FromBinaryRow(c.tmp, 0, userKey[4:])
	if err != nil {
		return kb, vb, fmt.Errorf("%w: join row: %v", ErrConvert, err)
	}
	kb = recordstore.AppendRecordKey(kb, width, kg, recordstore.Side(side), c.tmp[:keyLen], c.tmp[keyLen+8:])
	if len(v) < 1 || v[0] != 0 {
		return kb, vb, convErr("NULL or empty join count")
	}
	v = v[1:]
	var ts int64
	if c.ttl {
		if len(v) < 8 {
			return kb, vb, convErr("join count without TTL timestamp")
		}
		ts = int64(binary.BigEndian.Uint64(v))
		v = v[8:]
	}
	want := 4
	if c.outer[side] {
		want = 8 // Tuple2<Integer, Integer>: count, association count
	}
	if len(v) != want {
		return kb, vb, convErr("join count of %d bytes (want %d)", len(v), want)
	}
	n := int32(binary.BigEndian.Uint32(v))
	if n < 1 {
		return kb, vb, convErr("join row count %d", n)
	}
	var assoc int32
	if c.outer[side] {
		if assoc = int32(binary.BigEndian.Uint32(v[4:])); assoc < 0 {
			return kb, vb, convErr("outer join row association count %d", assoc)
		}
	}
	vb = recordstore.AppendRecordValue(vb, ts, int64(n), int64(assoc))
	return kb, vb, nil
}
