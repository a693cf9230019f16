package stateexport

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// Operator (non-keyed) state tables: one per (operator, state) of the
// operator state handles, one row per list element (SPLIT_DISTRIBUTE and
// UNION list states) or broadcast map entry, with the columns
//
//	operator  STRING  operator id (hex)
//	subtask   INT32   the subtask whose stream held the element
//	state     STRING  state name
//	mode      STRING  SPLIT_DISTRIBUTE, UNION or BROADCAST
//	index     INT32   element index in the subtask's list / entry index in
//	                  its copy of the broadcast map
//	key…      broadcast states: the map key's columns
//	value…    the element's (map value's) columns
//
// typed like keyed state (flatten). Elements whose serializer has no
// decoder are one binary column with the serializer class in the field
// metadata (MetaSerializer); a broadcast state whose key or value does not
// decode is one row per subtask holding the whole map's bytes in value.
// The stream layout is keyed.ReadOperatorStates'. Operator state belongs to
// no key group, so only the first shard writes these tables.

// Fixed column names of operator-state tables.
const (
	ColState = "state"
	ColMode  = "mode"
	ColIndex = "index"
)

// opLayout is how the elements of one operator state become rows.
type opLayout struct {
	key, value []column
	schema     *arrow.Schema
}

func newOpLayout(m *keyed.StateMeta) (*opLayout, error) {
	l := &opLayout{}
	fields := []arrow.Field{
		{Name: ColOperator, Type: arrow.BinaryTypes.String},
		{Name: ColSubtask, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColState, Type: arrow.BinaryTypes.String},
		{Name: ColMode, Type: arrow.BinaryTypes.String},
		{Name: ColIndex, Type: arrow.PrimitiveTypes.Int32},
	}
	var err error
	if m.Type == keyed.Broadcast {
		if l.key, err = flatten(PartKey, m.Key, nil); err != nil {
			return nil, err
		}
	}
	if l.value, err = flatten(PartValue, m.Value, nil); err != nil {
		return nil, err
	}
	if len(l.value) == 0 && m.Value == nil {
		l.value = []column{{name: "value", node: binaryNode("<none>"), get: whole}}
	}
	seen := map[string]bool{}
	for _, cs := range [][]column{l.key, l.value} {
		for _, c := range cs {
			fields = append(fields, c.node.field(c.name))
		}
	}
	for _, f := range fields {
		if seen[f.Name] {
			return nil, fmt.Errorf("operator state %q: two columns named %q", m.Name, f.Name)
		}
		seen[f.Name] = true
	}
	l.schema = arrow.NewSchema(fields, nil)
	return l, nil
}

// appendRow appends one element.
func (l *opLayout) appendRow(rb *array.RecordBuilder, op string, subtask int, e *keyed.OperatorEntry) error {
	rb.Field(0).(*array.StringBuilder).Append(op)
	rb.Field(1).(*array.Int32Builder).Append(int32(subtask))
	rb.Field(2).(*array.StringBuilder).Append(e.State.Name)
	rb.Field(3).(*array.StringBuilder).Append(keyed.DistributionModeName(e.Mode))
	rb.Field(4).(*array.Int32Builder).Append(int32(e.Index))
	i := 5
	value := e.Value
	if value == nil && e.Bytes != nil {
		value = &serde.Raw{Bytes: e.Bytes}
	}
	for _, part := range []struct {
		cs []column
		v  serde.Value
	}{{l.key, e.Key}, {l.value, value}} {
		for _, c := range part.cs {
			v, ok := c.get(part.v)
			if !ok {
				return fmt.Errorf("column %s: %w", c.name, typeErr("its type", part.v))
			}
			if err := c.node.app(rb.Field(i), v); err != nil {
				return fmt.Errorf("column %s: %w", c.name, err)
			}
			i++
		}
	}
	return nil
}

// opTable is one operator-state table being written.
type opTable struct {
	layout  *opLayout
	rb      *array.RecordBuilder
	enc     *encoder
	man     *ManifestTable
	pending int
	rows    int64
}

func (t *opTable) flush() error {
	if t.pending == 0 {
		return nil
	}
	t.pending = 0
	if err := t.enc.write(t.rb.NewRecordBatch(), nil); err != nil {
		return fmt.Errorf("stateexport: table %s: %w", t.man.Name, err)
	}
	return nil
}

// exportOperatorState writes the operator-state tables of op and returns
// the rows written per state name.
func (e *exporter) exportOperatorState(op *savepoint.OperatorState) (map[string]*opTable, error) {
	tables := map[string]*opTable{}
	var order []*opTable
	fail := func(err error) (map[string]*opTable, error) {
		for _, t := range order {
			t.rb.Release()
			t.enc.abort(err)
		}
		return nil, err
	}
	opID := op.ID.String()
	for _, st := range op.Subtasks {
		oh := st.ManagedOperator
		if oh == nil || oh.Delegate == nil || oh.Delegate.Tag == savepoint.TagEmptySegmentFile {
			continue
		}
		if e.o.State != "" && !handleHasState(oh, e.o.State) {
			continue
		}
		obj, err := e.sp.OpenStream(e.ctx, oh.Delegate, 0)
		if err != nil {
			return fail(err)
		}
		if obj.Size() == 0 {
			continue
		}
		name := obj.Loc.Name
		hdr, _, err := keyed.ReadOperatorHeaderWithin(io.NewSectionReader(obj, 0, obj.Size()), name, savepoint.OperatorHeaderEnd(oh))
		if err != nil {
			return fail(fmt.Errorf("stateexport: operator %s subtask %d: %w", op.ID, st.Index, err))
		}
		refs := make([]keyed.OperatorStateRef, 0, len(oh.States))
		for _, m := range oh.States {
			refs = append(refs, keyed.OperatorStateRef{Name: m.Name, Mode: int(m.Mode), Offsets: m.Offsets})
		}
		// A table for every state of the handle, also those without
		// elements.
		for _, ref := range refs {
			m := hdr.State(ref.Name)
			if tables[ref.Name] != nil || m == nil || (e.o.State != "" && ref.Name != e.o.State) {
				continue
			}
			l, err := newOpLayout(m)
			if err != nil {
				return fail(fmt.Errorf("stateexport: operator %s: %w", op.ID, err))
			}
			tn := e.tableName(op, ref.Name)
			cols := make([]string, l.schema.NumFields())
			for i, f := range l.schema.Fields() {
				cols[i] = f.Name
			}
			t := &opTable{layout: l, rb: array.NewRecordBuilder(e.mem, l.schema), enc: e.openTable(tn, l.schema),
				man: &ManifestTable{Name: tn, Operator: opID, State: ref.Name, Kind: keyed.DistributionModeName(ref.Mode), Columns: cols}}
			tables[ref.Name] = t
			order = append(order, t)
		}
		err = keyed.ReadOperatorStates(obj, obj.Size(), name, hdr, refs, keyed.ModeDecode, func(oe *keyed.OperatorEntry) error {
			if e.o.State != "" && oe.State.Name != e.o.State {
				return nil
			}
			t := tables[oe.State.Name]
			if t == nil {
				return fmt.Errorf("stateexport: %s: element of state %q, which the handle does not list", name, oe.State.Name)
			}
			if err := t.layout.appendRow(t.rb, opID, st.Index, oe); err != nil {
				return &keyed.Error{File: name, KeyGroup: -1, Offset: oe.Offset, BlockPos: -1,
					Err: fmt.Errorf("operator state %q element %d: cannot export: %w", oe.State.Name, oe.Index, err)}
			}
			t.pending++
			t.rows++
			if t.pending >= e.o.RowGroupRows {
				return t.flush()
			}
			return nil
		})
		if err != nil {
			return fail(err)
		}
	}
	for i, t := range order {
		err := t.flush()
		t.rb.Release()
		var w s3.Written
		if err == nil {
			w, err = t.enc.close()
		} else {
			t.enc.abort(err)
		}
		if err != nil {
			for _, u := range order[i+1:] {
				u.rb.Release()
				u.enc.abort(err)
			}
			return nil, fmt.Errorf("stateexport: table %s: %w", t.man.Name, err)
		}
		t.man.Rows, t.man.Entries = t.rows, t.rows
		t.man.Files = append(t.man.Files, w)
		e.man.Tables = append(e.man.Tables, t.man)
	}
	return tables, nil
}

func handleHasState(oh *savepoint.OperatorHandle, name string) bool {
	for _, m := range oh.States {
		if m.Name == name {
			return true
		}
	}
	return false
}
