package checkpoint

// Restoring from a native rescale plan (package rescale's PlanName beside a
// rescaled `_metadata`): each new subtask fetches only the SST files whose
// key groups overlap its range — in parallel ranged reads — and clips what
// lies outside. RestorePlanned wraps Restore, checks the plan against the
// checkpoint's own manifest, and reports the boundary waste; RestoreLazy
// (planned_lazy.go) opens the subtask before its files are local.

import (
	"context"
	"fmt"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
)

// PlannedStats describes one new subtask's restore.
type PlannedStats struct {
	RestoreStats
	// PlannedBytes are the SST bytes the plan lists for the subtask;
	// BoundaryBytes those of files that also hold key groups of other
	// subtasks (fetched, then partly clipped away); WholeBytes what
	// downloading every overlapping handle would move.
	PlannedBytes, BoundaryBytes, WholeBytes int64
}

// RestorePlanned rebuilds new subtask i of plan from the checkpoint store st (the
// store the engine's Checkpointer wrote) into dir. With whole set every
// file of every overlapping handle is downloaded instead (Flink's way; the
// baseline of the benchmark).
func RestorePlanned(ctx context.Context, st s3.Storage, plan *rescale.NativePlan, i int, dir string, whole bool, opts RestoreOptions) (engine.Backend, *PlannedStats, error) {
	if plan == nil || i < 0 || i >= len(plan.Subtasks) {
		return nil, nil, fmt.Errorf("rescale restore: no subtask %d in the plan", i)
	}
	ps := plan.Subtasks[i]
	m, err := ReadManifest(ctx, st, plan.CheckpointID)
	if err != nil {
		return nil, nil, err
	}
	if m.MaxParallelism != plan.MaxParallelism || len(m.Subtasks) != plan.OldParallelism {
		return nil, nil, fmt.Errorf("rescale restore: plan (max parallelism %d, %d old subtasks) does not match checkpoint %d (%d, %d)",
			plan.MaxParallelism, plan.OldParallelism, plan.CheckpointID, m.MaxParallelism, len(m.Subtasks))
	}
	opts.WholeHandles = whole
	b, rs, err := Restore(ctx, st, plan.CheckpointID, keygroups.Range{Start: ps.StartKeyGroup, End: ps.EndKeyGroup}, dir, opts)
	if err != nil {
		return nil, nil, err
	}
	return b, &PlannedStats{RestoreStats: *rs, PlannedBytes: ps.NeededBytes, BoundaryBytes: ps.BoundaryBytes, WholeBytes: ps.WholeBytes}, nil
}
