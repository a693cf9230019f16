package stateexport

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// Fixed column names of state tables.
const (
	ColOperator     = "operator"
	ColSubtask      = "subtask"
	ColKeyGroup     = "key_group"
	ColTimestamp    = "timestamp"
	ColListIndex    = "list_index"
	ColTTLTimestamp = "ttl_timestamp"
)

// Parts of an entry, the prefixes of their columns (FieldNames.Part).
const (
	PartKey       = "key"
	PartNamespace = "namespace"
	PartUserKey   = "user_key"
	PartValue     = "value"
)

// column is one top-level data column of a state table: a part of an
// entry (key, namespace, user key, value, timer) or one field of it.
type column struct {
	name string
	node node
	// get extracts the column's value from the part (nil part: null).
	get func(v serde.Value) (serde.Value, bool)
}

func whole(v serde.Value) (serde.Value, bool) { return v, true }

// flatten maps a part of an entry to columns: rows, tuples, POJOs and
// time windows give one column per field (prefix_name), types without
// information (VoidNamespace, GlobalWindow) none, anything else one
// column named prefix. A snapshot whose decoder is not supported gives one
// binary column (the reader then hands the part's bytes as serde.Raw).
// given, when set, names the fields of a SQL row or tuple part (whose
// snapshots carry no names) instead of f0…fn: one name per field.
func flatten(prefix string, s *serde.Snapshot, given []string) ([]column, error) {
	if s == nil {
		if given != nil {
			return nil, fmt.Errorf("%s: --names given for a part the state does not have", prefix)
		}
		return nil, nil
	}
	if !serde.NewDecoder(s).Supported() {
		if given != nil {
			return nil, fmt.Errorf("%s: --names given for %s, which is exported as bytes", prefix, s.Class)
		}
		return []column{{name: prefix, node: binaryNode(s.Class), get: whole}}, nil
	}
	s = unwrapSnapshot(s)
	field := func(i int, fields func(serde.Value) ([]serde.Value, bool)) func(serde.Value) (serde.Value, bool) {
		return func(v serde.Value) (serde.Value, bool) {
			if v == nil {
				return nil, true
			}
			fs, ok := fields(v)
			if !ok {
				return nil, false
			}
			if i >= len(fs) {
				return nil, true
			}
			return fs[i], true
		}
	}
	var names []string
	var kids []node
	var fields func(serde.Value) ([]serde.Value, bool)
	switch s.Class {
	case serde.ClassTuple:
		for _, n := range s.Nested {
			kids = append(kids, snapshotNode(n, 1))
		}
		names, fields = fieldNames("f", len(kids)), tupleFields
	case serde.ClassRowData:
		names, kids = rowTypeNodes(s.Types, nil, 1)
		fields = rowFields
	case serde.ClassTimeWindow, serde.ClassTableTW:
		names, kids, fields = []string{"start", "end"}, []node{epochMillisNode, epochMillisNode}, windowFields
	case serde.ClassPojo:
		for _, n := range s.Nested {
			kids = append(kids, snapshotNode(n, 1))
		}
		names = append(append([]string(nil), s.FieldNames...), rawField)
		kids = append(kids, binaryNode(s.Class))
		fields = func(v serde.Value) ([]serde.Value, bool) {
			if r, ok := v.(*serde.Raw); ok {
				out := make([]serde.Value, len(names))
				out[len(out)-1] = r
				return out, true
			}
			return pojoFields(v)
		}
	default:
		if given != nil {
			return nil, fmt.Errorf("%s: --names given for %s, which is not a row or tuple", prefix, s.Class)
		}
		n := snapshotNode(s, 0)
		if n.unit {
			return nil, nil
		}
		return []column{{name: prefix, node: n, get: whole}}, nil
	}
	if given != nil {
		if s.Class != serde.ClassTuple && s.Class != serde.ClassRowData {
			return nil, fmt.Errorf("%s: --names given for %s, whose fields its serializer names", prefix, s.Class)
		}
		if len(given) != len(names) {
			return nil, fmt.Errorf("%s: %d names given for a row of %d fields", prefix, len(given), len(names))
		}
		names = given
	}
	out := make([]column, 0, len(kids))
	for i, k := range kids {
		if k.unit {
			continue
		}
		out = append(out, column{name: prefix + "_" + names[i], node: k, get: field(i, fields)})
	}
	return out, nil
}

// stateLayout is how the entries of one keyed state become rows.
type stateLayout struct {
	kind string // savepoint.StateKind
	// timer: PRIORITY_QUEUE entries holding a *serde.Timer.
	timer bool
	// list: one row per element (LIST states whose elements decode).
	list bool
	ttl  bool
	// Data columns, in table order.
	timerKey, key, ns, userKey, value []column
	schema                            *arrow.Schema
}

// newStateLayout builds the table layout of state m of a file whose key
// serializer is key; names, when set, names the fields of its parts (by
// part: PartKey, PartNamespace, PartUserKey, PartValue).
func newStateLayout(key *serde.Snapshot, m *keyed.StateMeta, names map[string][]string) (*stateLayout, error) {
	l := &stateLayout{kind: savepoint.StateKind(m), ttl: m.TTL}
	var ferr error
	flat := func(part string, s *serde.Snapshot) []column {
		cs, err := flatten(part, s, names[part])
		if err != nil && ferr == nil {
			ferr = fmt.Errorf("%w: state %q: %v", ErrFieldNames, m.Name, err)
		}
		return cs
	}
	fields := []arrow.Field{
		{Name: ColOperator, Type: arrow.BinaryTypes.String},
		{Name: ColSubtask, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColKeyGroup, Type: arrow.PrimitiveTypes.Int32},
	}
	value := m.Value
	if m.Type == keyed.PriorityQueue {
		v := unwrapSnapshot(m.Value)
		if v != nil && v.Class == serde.ClassTimer && len(v.Nested) == 2 && serde.NewDecoder(v).Supported() {
			l.timer = true
			l.key = flat(PartKey, v.Nested[0])
			l.ns = flat(PartNamespace, v.Nested[1])
			value = nil
		}
	} else {
		l.key = flat(PartKey, key)
		l.ns = flat(PartNamespace, m.Namespace)
	}
	switch {
	case l.timer:
	case l.kind == "LIST":
		elem := m.Element
		if inner := ttlInner(elem); inner != nil {
			elem = inner
		}
		if m.Element != nil && serde.NewDecoder(m.Element).Supported() {
			l.list = true
			value = elem
		}
	case l.kind == "MAP":
		l.userKey = flat(PartUserKey, m.UserKey)
		value = m.UserValue
		if inner := ttlInner(value); inner != nil && m.UserValue != nil && serde.NewDecoder(m.UserValue).Supported() {
			value = inner
		}
	default:
		if inner := ttlInner(value); inner != nil && value != nil && serde.NewDecoder(value).Supported() {
			value = inner
		}
	}
	l.value = flat(PartValue, value)
	if ferr != nil {
		return nil, ferr
	}
	if l.timer {
		fields = append(fields, annotate(int64Node, "TIMER_TIMESTAMP_MILLIS").field(ColTimestamp))
	}
	add := func(cs []column) {
		for _, c := range cs {
			fields = append(fields, c.node.field(c.name))
		}
	}
	add(l.key)
	add(l.ns)
	if l.list {
		fields = append(fields, arrow.Field{Name: ColListIndex, Type: arrow.PrimitiveTypes.Int32, Nullable: true})
	}
	add(l.userKey)
	add(l.value)
	if l.ttl {
		fields = append(fields, epochMillisNode.field(ColTTLTimestamp))
	}
	seen := map[string]bool{}
	for _, f := range fields {
		if seen[f.Name] {
			return nil, fmt.Errorf("state %q: two columns named %q", m.Name, f.Name)
		}
		seen[f.Name] = true
	}
	l.schema = arrow.NewSchema(fields, nil)
	return l, nil
}

// appendEntry appends the rows of one entry to rb (built on l.schema),
// calling row after each (it may flush rb), and returns how many it
// appended.
func (l *stateLayout) appendEntry(rb *array.RecordBuilder, op string, e *savepoint.KeyedEntry, row func() error) (int, error) {
	if l.list {
		elems, ok := e.Value.(serde.List)
		if !ok && e.Value != nil {
			return 0, fmt.Errorf("list state value of type %T", e.Value)
		}
		for i, el := range elems {
			var ttl *int64
			if t, ok := el.(*serde.TTLValue); ok && l.ttl {
				el = t.Value
				v := t.LastAccess
				ttl = &v
			}
			if err := l.appendRow(rb, op, e, i, el, ttl); err != nil {
				return i, fmt.Errorf("element %d: %w", i, err)
			}
			if err := row(); err != nil {
				return i + 1, err
			}
		}
		return len(elems), nil
	}
	v := e.Value
	if t, ok := v.(*serde.TTLValue); ok && l.ttl {
		v = t.Value
	}
	if err := l.appendRow(rb, op, e, -1, v, e.TTLTimestamp); err != nil {
		return 0, err
	}
	return 1, row()
}

// appendRow appends one row. Builders are filled column by column; a
// failure after the first column leaves the record builder with columns
// of unequal length, which the caller treats as fatal.
func (l *stateLayout) appendRow(rb *array.RecordBuilder, op string, e *savepoint.KeyedEntry, index int, value serde.Value, ttl *int64) error {
	i := 0
	rb.Field(i).(*array.StringBuilder).Append(op)
	rb.Field(i + 1).(*array.Int32Builder).Append(int32(e.Subtask))
	rb.Field(i + 2).(*array.Int32Builder).Append(int32(e.KeyGroup))
	i += 3
	key, ns := e.Key, e.Namespace
	if l.timer {
		t, ok := e.Value.(*serde.Timer)
		if !ok || t == nil {
			return fmt.Errorf("timer state entry of type %T", e.Value)
		}
		rb.Field(i).(*array.Int64Builder).Append(t.Timestamp)
		i++
		key, ns = t.Key, t.Namespace
	}
	put := func(cs []column, part serde.Value) error {
		for _, c := range cs {
			v, ok := c.get(part)
			if !ok {
				return fmt.Errorf("column %s: %w", c.name, typeErr("its type", part))
			}
			if err := c.node.app(rb.Field(i), v); err != nil {
				return fmt.Errorf("column %s: %w", c.name, err)
			}
			i++
		}
		return nil
	}
	if err := put(l.key, key); err != nil {
		return err
	}
	if err := put(l.ns, ns); err != nil {
		return err
	}
	if l.list {
		rb.Field(i).(*array.Int32Builder).Append(int32(index))
		i++
	}
	if err := put(l.userKey, e.UserKey); err != nil {
		return err
	}
	if !l.timer {
		if err := put(l.value, value); err != nil {
			return err
		}
	}
	if l.ttl {
		tb := rb.Field(i).(*array.TimestampBuilder)
		if ttl != nil {
			tb.Append(arrow.Timestamp(*ttl))
		} else {
			tb.AppendNull()
		}
	}
	return nil
}
