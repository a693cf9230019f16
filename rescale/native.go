package rescale

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/sfstate/sfstate/checkpoint/manifest"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// Native (incremental RocksDB, tag 5/11) handles.
//
// Flink restores an incremental handle as a whole RocksDB instance:
// IncrementalRemoteKeyedStateHandle.getIntersection returns the entire
// handle when its range overlaps, and the restore opens the instance and
// clips it to the new range with deleteRange — but only when the handle's
// recorded range differs from the new one. A handle's file list cannot mix
// instances (each has its own MANIFEST and CURRENT), and narrowing a
// recorded range would make Flink skip the clip and keep foreign key
// groups. So for native handles the only correct by-reference `_metadata`
// is the old handles themselves (rebased to absolute URIs): each new
// subtask then receives every overlapping handle, which references all the
// files of those handles, and nothing is copied.
//
// For sfstate's own engine checkpoints the manifest beside `_metadata`
// records the key groups of every SST file. NativePlan turns it into a plan
// listing, per new subtask, the old instances it restores from (base
// first, as the engine's restore chooses) and only the SST files whose key
// groups overlap its range; Run writes it as PlanName next to the new
// `_metadata`.

// PlanName is the name of the native rescale plan written beside
// `_metadata`.
const PlanName = "rescale-plan.json"

// NativeViews validates a native operator for restore at newP and returns
// it unchanged (see above): Flink and the engine intersect its handles
// themselves.
func NativeViews(op *savepoint.OperatorState, newP int) (*savepoint.OperatorState, LayoutStats, error) {
	maxP := int(op.MaxParallelism)
	stats := LayoutStats{Operator: op.ID.String(), Kind: KindNative.String(), OldParallelism: int(op.Parallelism), NewParallelism: newP,
		LayoutParallelism: int(op.Parallelism), MaxParallelism: maxP}
	if err := keygroups.CheckParallelism(maxP, newP); err != nil {
		return nil, stats, fmt.Errorf("rescale: operator %s: parallelism %d with max parallelism %d: %w", op.ID, newP, maxP, err)
	}
	var rs []keygroups.Range
	for _, st := range op.Subtasks {
		for _, kh := range []savepoint.KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
			if kh == nil {
				continue
			}
			s, e := kh.KeyGroupRange()
			if e < s {
				continue
			}
			if s < 0 || e >= maxP {
				return nil, stats, fmt.Errorf("%w: operator %s subtask %d: key-group range [%d, %d] outside max parallelism %d", savepoint.ErrFormat, op.ID, st.Index, s, e, maxP)
			}
			rs = append(rs, keygroups.Range{Start: s, End: e})
			stats.OldHandles++
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	for i := 1; i < len(rs); i++ {
		if rs[i].Start <= rs[i-1].End {
			return nil, stats, fmt.Errorf("%w: operator %s: native handles %v and %v overlap", ErrUnsupported, op.ID, rs[i-1], rs[i])
		}
	}
	stats.NewHandles = stats.OldHandles
	return op, stats, nil
}

// PlanFile is one object a new subtask needs.
type PlanFile struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	Size int64  `json:"size"`
	// FirstKeyGroup..LastKeyGroup: the key groups an SST file may hold.
	FirstKeyGroup int `json:"firstKeyGroup,omitempty"`
	LastKeyGroup  int `json:"lastKeyGroup,omitempty"`
}

// PlanSource is one old instance a new subtask restores from.
type PlanSource struct {
	OldSubtask    int    `json:"oldSubtask"`
	BackendID     string `json:"backendId"`
	StartKeyGroup int    `json:"startKeyGroup"`
	EndKeyGroup   int    `json:"endKeyGroup"`
	// Base is the instance with the largest overlap (opened and clipped);
	// the others are copied from in range.
	Base bool `json:"base"`
	// SST lists the files whose key groups overlap the new range.
	SST []PlanFile `json:"sst"`
	// Private files (MANIFEST, CURRENT, OPTIONS), needed only when the
	// instance is opened whole.
	Private        []PlanFile `json:"private"`
	SkippedFiles   int        `json:"skippedFiles"`
	SkippedBytes   int64      `json:"skippedBytes"`
	BoundaryFiles  int        `json:"boundaryFiles"`
	BoundaryBytes  int64      `json:"boundaryBytes"`
	WholeBytes     int64      `json:"wholeBytes"`
	OverlapsGroups int        `json:"overlapKeyGroups"`
}

// PlanSubtask is one new subtask of a native plan.
type PlanSubtask struct {
	Index         int          `json:"index"`
	StartKeyGroup int          `json:"startKeyGroup"`
	EndKeyGroup   int          `json:"endKeyGroup"`
	Sources       []PlanSource `json:"sources"`
	// NeededBytes: SST files overlapping the range; WholeBytes: every file
	// of every overlapping instance (what Flink downloads); BoundaryBytes:
	// needed SST files that also hold key groups outside the range.
	NeededBytes   int64 `json:"neededBytes"`
	WholeBytes    int64 `json:"wholeBytes"`
	BoundaryBytes int64 `json:"boundaryBytes"`
}

// NativePlan is the by-reference rescale of an engine checkpoint.
type NativePlan struct {
	Format         string        `json:"format"`
	CheckpointID   int64         `json:"checkpointId"`
	MaxParallelism int           `json:"maxParallelism"`
	OldParallelism int           `json:"oldParallelism"`
	NewParallelism int           `json:"newParallelism"`
	Subtasks       []PlanSubtask `json:"subtasks"`
	NeededBytes    int64         `json:"neededBytes"`
	WholeBytes     int64         `json:"wholeBytes"`
	BoundaryBytes  int64         `json:"boundaryBytes"`
}

// PlanFormat names the plan file format.
const PlanFormat = "sfstate-native-rescale-plan/1"

// ReadNativePlan reads the engine manifest beside src's `_metadata` and
// plans a restore at newP. It returns (nil, nil) when there is no manifest
// (a Flink native checkpoint).
func ReadNativePlan(ctx context.Context, src *savepoint.Savepoint, newP int) (*NativePlan, error) {
	key := s3.JoinKey(src.Dir, manifest.Name)
	m, err := manifest.ReadKey(ctx, src.Store, key, src.Meta.CheckpointID)
	if s3.IsNotExist(err) {
		return nil, nil
	}
	if errors.Is(err, manifest.ErrForeign) {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if err != nil {
		return nil, fmt.Errorf("rescale: %w", err)
	}
	return planNative(m, newP, key)
}

// planFile is a manifest object as a plan lists it.
func planFile(o manifest.Object) PlanFile { return PlanFile{Name: o.Name, Key: o.Key, Size: o.Size} }

// planNative plans a restore of an engine manifest at newP.
func planNative(m *manifest.Manifest, newP int, name string) (*NativePlan, error) {
	if m.Format != manifest.Format || m.Version != manifest.Version {
		return nil, fmt.Errorf("%w: %s: format %q version %d is not an engine checkpoint manifest this tool reads", ErrUnsupported, name, m.Format, m.Version)
	}
	maxP := m.MaxParallelism
	if err := keygroups.CheckParallelism(maxP, newP); err != nil {
		return nil, fmt.Errorf("rescale: %s: parallelism %d with max parallelism %d: %w", name, newP, maxP, err)
	}
	p := &NativePlan{Format: PlanFormat, CheckpointID: m.CheckpointID, MaxParallelism: maxP, OldParallelism: len(m.Subtasks), NewParallelism: newP}
	for _, s := range m.Subtasks {
		if s.StartKeyGroup < 0 || s.EndKeyGroup >= maxP || s.EndKeyGroup < s.StartKeyGroup {
			return nil, fmt.Errorf("%w: %s: subtask %d range [%d, %d] outside max parallelism %d", savepoint.ErrFormat, name, s.Index, s.StartKeyGroup, s.EndKeyGroup, maxP)
		}
	}
	for i := 0; i < newP; i++ {
		r := keygroups.RangeForSubtask(maxP, newP, i)
		ps := PlanSubtask{Index: i, StartKeyGroup: r.Start, EndKeyGroup: r.End}
		for _, s := range m.Subtasks {
			ov := r.Intersect(keygroups.Range{Start: s.StartKeyGroup, End: s.EndKeyGroup})
			if ov.IsEmpty() {
				continue
			}
			src := PlanSource{OldSubtask: s.Index, BackendID: s.BackendID, StartKeyGroup: s.StartKeyGroup, EndKeyGroup: s.EndKeyGroup, OverlapsGroups: ov.Len()}
			for _, f := range s.Private {
				src.Private = append(src.Private, planFile(f))
				src.WholeBytes += f.Size
			}
			for _, f := range s.Shared {
				src.WholeBytes += f.Size
				if f.LastKeyGroup < r.Start || f.FirstKeyGroup > r.End {
					src.SkippedFiles++
					src.SkippedBytes += f.Size
					continue
				}
				pf := planFile(f.Object)
				pf.FirstKeyGroup, pf.LastKeyGroup = f.FirstKeyGroup, f.LastKeyGroup
				src.SST = append(src.SST, pf)
				if f.FirstKeyGroup < r.Start || f.LastKeyGroup > r.End {
					src.BoundaryFiles++
					src.BoundaryBytes += f.Size
				}
			}
			ps.Sources = append(ps.Sources, src)
		}
		// Base first: the largest overlap (stable, as the engine restores).
		sort.SliceStable(ps.Sources, func(a, b int) bool { return ps.Sources[a].OverlapsGroups > ps.Sources[b].OverlapsGroups })
		for j := range ps.Sources {
			s := &ps.Sources[j]
			s.Base = j == 0
			for _, f := range s.SST {
				ps.NeededBytes += f.Size
			}
			ps.WholeBytes += s.WholeBytes
			ps.BoundaryBytes += s.BoundaryBytes
		}
		p.NeededBytes += ps.NeededBytes
		p.WholeBytes += ps.WholeBytes
		p.BoundaryBytes += ps.BoundaryBytes
		p.Subtasks = append(p.Subtasks, ps)
	}
	return p, nil
}
