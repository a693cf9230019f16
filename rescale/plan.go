package rescale

import (
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint"
)

// ErrOptions marks per-operator options that do not fit the savepoint (an
// operator that is not in it, a value outside Flink's limits, one given
// twice): a mistake in the request, not in the input.
var ErrOptions = errors.New("rescale: options do not fit the savepoint")

// opPlan is what Run does with one operator.
type opPlan struct {
	kind OperatorKind
	// p and maxP are the operator's new parallelism and max parallelism.
	p, maxP int
	// rewrite: the keyed state is rewritten (re-key or merge).
	rewrite bool
	// keep: the operator is copied unchanged.
	keep bool
	note string
}

// planOperators decides per operator of src the parallelism and max
// parallelism it gets (see Options): the job-wide values where the
// operator's max parallelism allows them, its own otherwise (with a note);
// per-operator values must fit. Operators named in the per-operator maps
// must exist.
func planOperators(src *savepoint.Savepoint, o Options) ([]opPlan, error) {
	perP, err := resolveOperators(src, o.OperatorParallelism, "parallelism")
	if err != nil {
		return nil, err
	}
	perMaxP, err := resolveOperators(src, o.OperatorMaxParallelism, "max parallelism")
	if err != nil {
		return nil, err
	}
	plans := make([]opPlan, len(src.Meta.Operators))
	keyed, fit := 0, 0
	for i, op := range src.Meta.Operators {
		kind, err := Classify(op)
		if err != nil {
			return nil, err
		}
		pl := opPlan{kind: kind, p: o.Parallelism, maxP: int(op.MaxParallelism)}
		oldP, oldMaxP := int(op.Parallelism), int(op.MaxParallelism)
		if o.Canonical {
			// Conversion: same layout, every keyed operator rewritten.
			pl.p, pl.rewrite = oldP, kind != KindNonKeyed
			plans[i] = pl
			continue
		}
		var notes []string
		if m, ok := perMaxP[op.ID]; ok {
			if oldMaxP == 1 && m != 1 {
				return nil, fmt.Errorf("%w: operator %s: Flink pins it at max parallelism 1 (a non-parallel operator); --operator-max-parallelism %d cannot apply", ErrOptions, op.ID, m)
			}
			pl.maxP = m
		} else if o.MaxParallelism > 0 {
			if oldMaxP == 1 {
				notes = append(notes, "max parallelism 1 (non-parallel operator) kept")
			} else {
				pl.maxP = o.MaxParallelism
			}
		}
		if p, ok := perP[op.ID]; ok {
			if err := keygroups.CheckParallelism(pl.maxP, p); err != nil {
				return nil, fmt.Errorf("rescale: operator %s: --operator-parallelism %d with max parallelism %d: %w", op.ID, p, pl.maxP, err)
			}
			pl.p = p
		} else if pl.p > pl.maxP {
			notes = append(notes, fmt.Sprintf("max parallelism %d is below %d: kept at parallelism %d", pl.maxP, o.Parallelism, oldP))
			pl.p = oldP
			if pl.p > pl.maxP {
				return nil, fmt.Errorf("rescale: operator %s: its parallelism %d exceeds the new max parallelism %d; give it one with --operator-parallelism", op.ID, oldP, pl.maxP)
			}
		}
		if kind != KindNonKeyed {
			keyed++
			if _, ok := perP[op.ID]; ok || pl.p == o.Parallelism {
				fit++
			}
		}
		pl.rewrite = kind != KindNonKeyed && (pl.maxP != oldMaxP || o.MergeFiles)
		pl.keep = !pl.rewrite && pl.p == oldP && len(notes) > 0
		for j, n := range notes {
			if j > 0 {
				pl.note += "; "
			}
			pl.note += n
		}
		plans[i] = pl
	}
	if keyed > 0 && fit == 0 {
		return nil, fmt.Errorf("%w: no keyed operator of %s allows parallelism %d (their max parallelism is smaller; raise it with --max-parallelism)", keygroups.ErrParallelism, src.Name(), o.Parallelism)
	}
	return plans, nil
}

// resolveOperators maps the keys of m (operator id, uid or name) to
// operator ids; an unknown operator or one named twice is an error.
func resolveOperators(src *savepoint.Savepoint, m map[string]int, what string) (map[savepoint.OperatorID]int, error) {
	out := map[savepoint.OperatorID]int{}
	for sel, v := range m {
		op := src.FindOperator(sel)
		if op == nil {
			return nil, fmt.Errorf("%w: operator %q (given a %s) is not in %s", ErrOptions, sel, what, src.Name())
		}
		if v < 1 || v > keygroups.MaxParallelismLimit {
			return nil, fmt.Errorf("%w: operator %q: %s %d outside [1, %d]", ErrOptions, sel, what, v, keygroups.MaxParallelismLimit)
		}
		if _, dup := out[op.ID]; dup {
			return nil, fmt.Errorf("%w: operator %s is given a %s twice (%q names it too)", ErrOptions, op.ID, what, sel)
		}
		out[op.ID] = v
	}
	return out, nil
}

// keptStats describes an operator copied unchanged.
func keptStats(op *savepoint.OperatorState) LayoutStats {
	n := 0
	for _, st := range op.Subtasks {
		if st.ManagedKeyed != nil {
			n++
		}
		if st.RawKeyed != nil {
			n++
		}
	}
	return LayoutStats{Operator: op.ID.String(), Kind: KindCanonical.String(), OldParallelism: int(op.Parallelism), NewParallelism: int(op.Parallelism),
		LayoutParallelism: int(op.Parallelism), MaxParallelism: int(op.MaxParallelism), OldHandles: n, NewHandles: n}
}
