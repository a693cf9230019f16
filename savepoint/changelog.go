package savepoint

import (
	"errors"
	"fmt"
)

// This file lets the readers of keyed data see through the changelog state
// backend's handles (ChangelogHandle, tags 8/14): they decode the
// materialized handles like plain ones; the state-change logs are listed
// by Summarize and checked for presence by Check.

// MaterializedKeyed returns the keyed handles whose data a reader decodes
// for kh: the materialized handles of a changelog handle (nil entries
// dropped), kh itself otherwise (nil for nil). The state changes logged
// after the materialization are not part of it.
func MaterializedKeyed(kh KeyedHandle) []KeyedHandle {
	switch h := kh.(type) {
	case nil:
		return nil
	case *ChangelogHandle:
		var out []KeyedHandle
		for _, m := range h.Materialized {
			if m != nil {
				out = append(out, m)
			}
		}
		return out
	}
	return []KeyedHandle{kh}
}

// ReadableSubtasks returns op's subtasks as readers of keyed data see them:
// op.Subtasks itself when no subtask holds a changelog handle; otherwise a
// copy where each subtask with a changelog handle as managed keyed state is
// replaced by one shallow copy per materialized handle (ManagedKeyed set to
// it; operator and raw keyed handles only on the first copy) or, without
// materialized state, by one copy without managed keyed state. Raw keyed
// changelog handles are replaced by their first materialized handle.
func ReadableSubtasks(op *OperatorState) []*SubtaskState {
	has := false
	for _, st := range op.Subtasks {
		_, a := st.ManagedKeyed.(*ChangelogHandle)
		_, b := st.RawKeyed.(*ChangelogHandle)
		if a || b {
			has = true
			break
		}
	}
	if !has {
		return op.Subtasks
	}
	out := make([]*SubtaskState, 0, len(op.Subtasks))
	for _, st := range op.Subtasks {
		_, a := st.ManagedKeyed.(*ChangelogHandle)
		_, b := st.RawKeyed.(*ChangelogHandle)
		if !a && !b {
			out = append(out, st)
			continue
		}
		first := *st
		if b {
			first.RawKeyed = nil
			if raw := MaterializedKeyed(st.RawKeyed); len(raw) > 0 {
				first.RawKeyed = raw[0]
			}
		}
		if !a {
			out = append(out, &first)
			continue
		}
		mat := MaterializedKeyed(st.ManagedKeyed)
		first.ManagedKeyed = nil
		if len(mat) > 0 {
			first.ManagedKeyed = mat[0]
		}
		out = append(out, &first)
		for _, m := range mat[min(1, len(mat)):] {
			out = append(out, &SubtaskState{Index: st.Index, ManagedKeyed: m})
		}
	}
	return out
}

// ProblemChangelog: a state-change log's change set is malformed.
const ProblemChangelog = "changelog"

// checkChangelog checks the materialized handles of h like plain keyed
// handles, the frames of its inline changes (tag 9) and the streams of its
// file change logs (tags 10/13): they exist and, unless SkipData, the change
// set at each offset reads completely and every change's frame decodes.
func (c *checker) checkChangelog(op *OperatorState, st *SubtaskState, h *ChangelogHandle, raw bool) error {
	for _, m := range h.Materialized {
		if m == nil {
			continue
		}
		if err := c.checkKeyed(op, st, m, raw); err != nil {
			return err
		}
	}
	opID := op.ID.String()
	for _, l := range h.NonMaterialized {
		if l == nil {
			continue
		}
		for i, ch := range l.Changes {
			if _, err := ParseStateChange(ch); err != nil {
				if err := c.add(Problem{Kind: ProblemChangelog, File: c.sp.Name(), Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: int(ch.KeyGroup),
					Message: fmt.Sprintf("inline state change %d: %v", i, err)}); err != nil {
					return err
				}
			}
		}
		for _, s := range l.Streams {
			if s.Handle == nil {
				if err := c.add(Problem{Kind: ProblemStructure, File: c.sp.Name(), Offset: -1, Operator: opID, Subtask: st.Index, KeyGroup: -1,
					Message: "state-change log entry without stream handle"}); err != nil {
					return err
				}
				continue
			}
			loc, size, err := c.checkStream(op, st, s.Handle)
			if err != nil || size < 0 || c.o.SkipData {
				if err != nil {
					return err
				}
				continue
			}
			err = c.sp.readChangeSet(c.ctx, s, func(ch StateChange) error {
				_, err := ParseStateChange(ch)
				if err != nil {
					return fmt.Errorf("change in key group %d: %w", ch.KeyGroup, err)
				}
				return nil
			})
			if err != nil {
				p := Problem{Kind: ProblemChangelog, File: loc.Name, Offset: s.Offset, Operator: opID, Subtask: st.Index, KeyGroup: -1, Message: err.Error()}
				var ce *ChangeSetError
				if errors.As(err, &ce) {
					p.File, p.Offset, p.Message = ce.File, ce.Offset, ce.Error()
				}
				if err := c.add(p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
