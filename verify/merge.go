package verify

import (
	"fmt"
	"slices"
	"sort"

	"github.com/sfstate/sfstate/savepoint"
)

// Merge combines the reports of the shards 0..n-1 of one verification into
// the final verdict: digests are summed, differences recomputed from the
// merged digests (samples kept from the shard reports) and structural
// problems concatenated. Every shard must be present exactly once, with the
// same source, shard count, TTL and targets.
func Merge(rs []*Report) (*Report, error) {
	if len(rs) == 0 {
		return nil, fmt.Errorf("verify: merge: no shard reports")
	}
	n := max(1, rs[0].ShardCount)
	if len(rs) != n {
		return nil, fmt.Errorf("verify: merge: %d reports for %d shards", len(rs), n)
	}
	seen := make([]bool, n)
	out := &Report{Source: rs[0].Source, TTL: rs[0].TTL, Digest: NewDigest()}
	type tacc struct {
		tr      TargetResult
		digest  *Digest
		samples map[GroupKey][]Sample
	}
	var targets []*tacc
	srcOK := true
	for i, r := range rs {
		if r.Source != out.Source {
			return nil, fmt.Errorf("verify: merge: report %d is of %q, not %q", i, r.Source, out.Source)
		}
		if max(1, r.ShardCount) != n || r.ShardIndex < 0 || r.ShardIndex >= n {
			return nil, fmt.Errorf("verify: merge: report %d is shard %d/%d, want one of %d shards", i, r.ShardIndex, r.ShardCount, n)
		}
		if seen[r.ShardIndex] {
			return nil, fmt.Errorf("verify: merge: shard %d/%d given twice", r.ShardIndex, n)
		}
		seen[r.ShardIndex] = true
		if (r.TTL == nil) != (out.TTL == nil) || (r.TTL != nil && *r.TTL != *out.TTL) {
			return nil, fmt.Errorf("verify: merge: shard %d was verified with another --ttl/--now", r.ShardIndex)
		}
		if r.Check != nil {
			if out.Check == nil {
				out.Check = &CheckResult{}
			}
			out.Check.Problems = append(out.Check.Problems, r.Check.Problems...)
			s := &out.Check.Stats
			s.Files += r.Check.Stats.Files
			s.KeyGroups += r.Check.Stats.KeyGroups
			s.Entries += r.Check.Stats.Entries
			s.KeysVerified += r.Check.Stats.KeysVerified
			s.KeysUnverified += r.Check.Stats.KeysUnverified
		}
		for _, nt := range r.Notes {
			if !slices.Contains(out.Notes, nt) {
				out.Notes = append(out.Notes, nt)
			}
		}
		if r.SourceError != "" {
			out.SourceError = appendLine(out.SourceError, fmt.Sprintf("shard %s: %s", r.Shard, r.SourceError))
		}
		if r.Digest == nil {
			srcOK = false
		} else {
			out.Digest.Merge(r.Digest)
			mergeOperators(out.Digest, r.Digest)
		}
		if i == 0 {
			for _, t := range r.Targets {
				targets = append(targets, &tacc{tr: TargetResult{Name: t.Name, Backend: t.Backend, Parallelism: t.Parallelism}, digest: NewDigest(), samples: map[GroupKey][]Sample{}})
			}
		}
		if len(r.Targets) != len(targets) {
			return nil, fmt.Errorf("verify: merge: shard %d has %d targets, shard %d has %d", r.ShardIndex, len(r.Targets), rs[0].ShardIndex, len(targets))
		}
		for j, t := range r.Targets {
			a := targets[j]
			if t.Name != a.tr.Name {
				return nil, fmt.Errorf("verify: merge: shard %d target %d is %s, want %s", r.ShardIndex, j, t.Name, a.tr.Name)
			}
			if t.Skipped != "" {
				a.tr.Skipped = t.Skipped
			}
			// A shard restores the same operators as every other.
			a.tr.Unsupported = t.Unsupported
			for _, x := range t.SkippedStates {
				if !slices.Contains(a.tr.SkippedStates, x) {
					a.tr.SkippedStates = append(a.tr.SkippedStates, x)
				}
			}
			if t.Error != "" {
				a.tr.Error = appendLine(a.tr.Error, fmt.Sprintf("shard %s: %s", r.Shard, t.Error))
			}
			for id, p := range t.RestoredParallelism {
				if a.tr.RestoredParallelism == nil {
					a.tr.RestoredParallelism = map[string]int{}
				}
				a.tr.RestoredParallelism[id] = p
			}
			for id, msg := range t.OperatorErrors {
				if a.tr.OperatorErrors == nil {
					a.tr.OperatorErrors = OperatorErrors{}
				}
				a.tr.OperatorErrors[id] = msg
			}
			if t.Digest != nil {
				a.digest.Merge(t.Digest)
				mergeOperators(a.digest, t.Digest)
			}
			for _, d := range t.Differences {
				a.samples[d.GroupKey] = d.Samples
			}
			a.tr.MoreDifferences += t.MoreDifferences
		}
	}
	if !srcOK {
		out.Digest = nil
	}
	if out.Check != nil {
		savepoint.SortProblems(out.Check.Problems)
	}
	for _, a := range targets {
		tr := a.tr
		if tr.Error == "" && out.Digest != nil {
			want := out.Digest
			if want.Live != nil && tr.Backend != "" {
				want = want.Live
			}
			tr.Digest = a.digest
			tr.Differences = Compare(without(want, tr.OperatorErrors, tr.SkippedStates), without(a.digest, nil, tr.SkippedStates))
			for i := range tr.Differences {
				tr.Differences[i].Samples = a.samples[tr.Differences[i].GroupKey]
			}
		}
		out.Targets = append(out.Targets, tr)
	}
	out.finish()
	return out, nil
}

func mergeOperators(dst, src *Digest) {
	for _, op := range src.Operators {
		found := false
		for i := range dst.Operators {
			d := &dst.Operators[i]
			if d.ID == op.ID {
				found = true
				d.KeyGroupFrom = min(d.KeyGroupFrom, op.KeyGroupFrom)
				d.KeyGroupTo = max(d.KeyGroupTo, op.KeyGroupTo)
			}
		}
		if !found {
			dst.Operators = append(dst.Operators, op)
		}
	}
	sort.Slice(dst.Operators, func(i, j int) bool { return dst.Operators[i].ID < dst.Operators[j].ID })
}

func appendLine(s, line string) string {
	if s == "" {
		return line
	}
	return s + "\n" + line
}
