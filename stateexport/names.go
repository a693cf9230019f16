package stateexport

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/savepoint"
)

// ErrFieldNames marks an Options.FieldNames entry that does not fit the
// savepoint: a state or part it does not have, a part that is not a row
// or tuple, or a name count unlike the field count (a usage error).
var ErrFieldNames = errors.New("--names does not fit")

// FieldNames names the fields of one part of a state's entries: the
// columns <part>_<name> instead of <part>_f0…<part>_fN for SQL rows and
// tuples, whose serializer snapshots carry no field names.
type FieldNames struct {
	// Target is "STATE" or "OPERATOR/STATE" (operator id, uid or name);
	// without an operator every operator's state of that name is meant.
	Target string
	// Part is PartKey, PartNamespace, PartUserKey or PartValue.
	Part string
	// Names, one per field of the part, in order.
	Names []string

	// resolved by the exporter
	op    *savepoint.OperatorState
	state string
	used  bool
}

// ParseFieldNames parses `[OPERATOR/]STATE.PART=NAME,NAME,…` (the form
// of `sfstate export --names`); PART is key, namespace, user_key or
// value, and the state name may itself hold dots and slashes.
func ParseFieldNames(spec string) (FieldNames, error) {
	lhs, rhs, ok := strings.Cut(spec, "=")
	dot := strings.LastIndexByte(lhs, '.')
	if !ok || dot <= 0 {
		return FieldNames{}, fmt.Errorf("stateexport: --names %q: want [OPERATOR/]STATE.PART=NAME,NAME,… (PART: key, namespace, user_key or value)", spec)
	}
	f := FieldNames{Target: lhs[:dot], Part: lhs[dot+1:], Names: strings.Split(rhs, ",")}
	switch f.Part {
	case PartKey, PartNamespace, PartUserKey, PartValue:
	default:
		return FieldNames{}, fmt.Errorf("stateexport: --names %q: part %q is not key, namespace, user_key or value", spec, f.Part)
	}
	seen := map[string]bool{}
	for _, n := range f.Names {
		if n == "" || strings.ContainsAny(n, " \t\n\"=,") {
			return FieldNames{}, fmt.Errorf("stateexport: --names %q: field name %q is empty or holds blanks, quotes, commas or =", spec, n)
		}
		if seen[n] {
			return FieldNames{}, fmt.Errorf("stateexport: --names %q: field %q named twice", spec, n)
		}
		seen[n] = true
	}
	return f, nil
}

// resolveFieldNames splits each target into operator and state: the text
// before the first '/' is an operator when sp has one of that id, uid or
// name; otherwise the whole target is a state name.
func resolveFieldNames(sp *savepoint.Savepoint, fns []FieldNames) ([]*FieldNames, error) {
	out := make([]*FieldNames, 0, len(fns))
	for i := range fns {
		f := fns[i]
		f.state = f.Target
		if opName, state, ok := strings.Cut(f.Target, "/"); ok && state != "" {
			if op := sp.FindOperator(opName); op != nil {
				f.op, f.state = op, state
			}
		}
		for _, g := range out {
			if g.op == f.op && g.state == f.state && g.Part == f.Part {
				return nil, fmt.Errorf("%w: %s.%s given twice", ErrFieldNames, f.Target, f.Part)
			}
		}
		out = append(out, &f)
	}
	return out, nil
}

// fieldNames returns the names given for the parts of state of op (nil
// when none) and marks them used.
func (e *exporter) fieldNames(op *savepoint.OperatorState, state string) map[string][]string {
	var m map[string][]string
	for _, f := range e.names {
		if f.state != state || (f.op != nil && f.op != op) {
			continue
		}
		if m == nil {
			m = map[string][]string{}
		}
		// An operator-qualified entry wins over an unqualified one.
		if _, ok := m[f.Part]; !ok || f.op != nil {
			m[f.Part] = f.Names
		}
		f.used = true
	}
	return m
}

// unusedFieldNames reports a --names entry that named no exported state.
func (e *exporter) unusedFieldNames() error {
	for _, f := range e.names {
		if !f.used {
			return fmt.Errorf("%w: %s.%s: no exported keyed state %q", ErrFieldNames, f.Target, f.Part, f.state)
		}
	}
	return nil
}
