package stateexport

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// metaColumn is one column of a metadata table: a name, a node and the
// value of a row.
type metaColumn[R any] struct {
	name string
	node node
	get  func(r R) serde.Value
}

func optString(s string) serde.Value {
	if s == "" {
		return nil
	}
	return s
}

func optMillis(p *int64) serde.Value {
	if p == nil {
		return nil
	}
	return *p
}

// writeMetaTable writes rows as one table named name.
func writeMetaTable[R any](e *exporter, name string, cols []metaColumn[R], rows []R) error {
	fields := make([]arrow.Field, len(cols))
	names := make([]string, len(cols))
	for i, c := range cols {
		fields[i] = c.node.field(c.name)
		names[i] = c.name
	}
	schema := arrow.NewSchema(fields, nil)
	enc := e.openTable(name, schema)
	rb := array.NewRecordBuilder(e.mem, schema)
	defer rb.Release()
	for _, r := range rows {
		for i, c := range cols {
			if err := c.node.app(rb.Field(i), c.get(r)); err != nil {
				err = fmt.Errorf("stateexport: table %s column %s: %w", name, c.name, err)
				enc.abort(err)
				return err
			}
		}
	}
	if err := enc.write(rb.NewRecordBatch(), nil); err != nil {
		enc.abort(err)
		return fmt.Errorf("stateexport: table %s: %w", name, err)
	}
	w, err := enc.close()
	if err != nil {
		return fmt.Errorf("stateexport: table %s: %w", name, err)
	}
	e.man.Tables = append(e.man.Tables, &ManifestTable{Name: name, Rows: int64(len(rows)), Columns: names, Files: []s3.Written{w}})
	return nil
}

// writeMetaTables writes _states (every shard: the statistics of its key
// groups) and _operators (the first shard only: it depends on the
// metadata alone).
func (e *exporter) writeMetaTables(sum *savepoint.Summary) error {
	first := e.o.Shard.All() || e.o.Shard.Index == 0
	rows := append([]*stateRow(nil), e.states...)
	if first {
		for _, os := range sum.Operators {
			if e.o.Operator != "" && e.sp.FindOperator(e.o.Operator) == nil {
				continue
			}
			if e.o.Operator != "" && e.sp.FindOperator(e.o.Operator).ID.String() != os.ID {
				continue
			}
			for _, x := range os.OperatorStates {
				if e.o.State != "" && x.Name != e.o.State {
					continue
				}
				r := &stateRow{op: os, operatorStateRows: true, rows: -1,
					sum:  savepoint.StateSummary{Name: x.Name, Kind: x.Mode, ValueType: x.Type, Entries: int64(x.Elements)},
					note: "operator (non-keyed) state: no element read", kgFrom: -1, kgTo: -1}
				if t := e.opTables[os.ID][x.Name]; t != nil {
					r.table, r.rows, r.note = t.man.Name, t.rows, ""
				}
				if x.Partial != "" {
					r.note = "serializer not read (" + x.Partial + "): elements exported as bytes"
				}
				rows = append(rows, r)
			}
		}
	}
	stateCols := []metaColumn[*stateRow]{
		{"operator_id", stringNode, func(r *stateRow) serde.Value { return r.op.ID }},
		{"operator_uid", stringNode, func(r *stateRow) serde.Value { return optString(r.op.UID) }},
		{"operator_name", stringNode, func(r *stateRow) serde.Value { return optString(r.op.Name) }},
		{"state", stringNode, func(r *stateRow) serde.Value { return r.sum.Name }},
		{"kind", stringNode, func(r *stateRow) serde.Value { return r.sum.Kind }},
		{"key_type", stringNode, func(r *stateRow) serde.Value { return optString(r.sum.KeyType) }},
		{"namespace_type", stringNode, func(r *stateRow) serde.Value { return optString(r.sum.NamespaceType) }},
		{"user_key_type", stringNode, func(r *stateRow) serde.Value { return optString(r.sum.UserKeyType) }},
		{"value_type", stringNode, func(r *stateRow) serde.Value { return optString(r.sum.ValueType) }},
		{"ttl", boolNode, func(r *stateRow) serde.Value { return r.sum.TTL }},
		{"table", stringNode, func(r *stateRow) serde.Value { return optString(r.table) }},
		{"entries", int64Node, func(r *stateRow) serde.Value { return r.sum.Entries }},
		{"rows", int64Node, func(r *stateRow) serde.Value {
			if r.rows < 0 {
				return nil
			}
			return r.rows
		}},
		{"bytes", int64Node, func(r *stateRow) serde.Value {
			if r.operatorStateRows {
				return nil
			}
			return r.sum.Bytes
		}},
		{"ttl_min", epochMillisNode, func(r *stateRow) serde.Value { return optMillis(r.ttlMin) }},
		{"ttl_max", epochMillisNode, func(r *stateRow) serde.Value { return optMillis(r.ttlMax) }},
		{"key_group_from", int32Node, func(r *stateRow) serde.Value {
			if r.kgFrom < 0 {
				return nil
			}
			return int32(r.kgFrom)
		}},
		{"key_group_to", int32Node, func(r *stateRow) serde.Value {
			if r.kgTo < 0 {
				return nil
			}
			return int32(r.kgTo)
		}},
		{"note", stringNode, func(r *stateRow) serde.Value { return optString(r.note) }},
	}
	if err := writeMetaTable(e, StatesTable, stateCols, rows); err != nil {
		return err
	}
	if !first {
		return nil
	}
	var ops []*savepoint.OperatorSummary
	for i, os := range sum.Operators {
		if e.o.Operator != "" && e.sp.FindOperator(e.o.Operator) != e.sp.Meta.Operators[i] {
			continue
		}
		ops = append(ops, os)
	}
	opCols := []metaColumn[*savepoint.OperatorSummary]{
		{"operator_id", stringNode, func(r *savepoint.OperatorSummary) serde.Value { return r.ID }},
		{"uid", stringNode, func(r *savepoint.OperatorSummary) serde.Value { return optString(r.UID) }},
		{"name", stringNode, func(r *savepoint.OperatorSummary) serde.Value { return optString(r.Name) }},
		{"parallelism", int32Node, func(r *savepoint.OperatorSummary) serde.Value { return int32(r.Parallelism) }},
		{"max_parallelism", int32Node, func(r *savepoint.OperatorSummary) serde.Value { return int32(r.MaxParallelism) }},
		{"subtasks_with_state", int32Node, func(r *savepoint.OperatorSummary) serde.Value { return int32(r.SubtasksWithState) }},
		{"fully_finished", boolNode, func(r *savepoint.OperatorSummary) serde.Value { return r.FullyFinished }},
		{"keyed_layout", stringNode, func(r *savepoint.OperatorSummary) serde.Value { return optString(r.KeyedLayout) }},
		{"bytes", int64Node, func(r *savepoint.OperatorSummary) serde.Value { return r.Bytes }},
		{"keyed_bytes", int64Node, func(r *savepoint.OperatorSummary) serde.Value { return r.KeyedBytes }},
		{"operator_state_bytes", int64Node, func(r *savepoint.OperatorSummary) serde.Value { return r.OperatorBytes }},
		{"operator_states", int32Node, func(r *savepoint.OperatorSummary) serde.Value { return int32(len(r.OperatorStates)) }},
		{"note", stringNode, func(r *savepoint.OperatorSummary) serde.Value { return optString(r.Note) }},
	}
	return writeMetaTable(e, OperatorsTable, opCols, ops)
}
