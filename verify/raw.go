package verify

// TargetDigest is a target digested outside Run (native checkpoints).
type TargetDigest struct {
	// Name overrides Target.Name() in the report.
	Name   string
	Target Target
	Digest *Digest
	Err    error
}

// BuildReport compares targets digested elsewhere with the source digest
// (its live part when a TTL is given) and returns the report, without
// decoded samples.
func BuildReport(source string, o Options, check *CheckResult, src *Digest, targets []TargetDigest) *Report {
	r := &Report{Source: source, Shard: o.Shard.String(), ShardIndex: o.Shard.Index, ShardCount: o.Shard.Count, Check: check, Digest: src}
	if o.TTL.TTLMillis > 0 {
		t := o.TTL
		r.TTL = &t
	}
	want := src
	if src.Live != nil {
		want = src.Live
	}
	for _, t := range targets {
		tr := TargetResult{Name: t.Target.Name(), Backend: t.Target.Backend, Parallelism: t.Target.Parallelism, Digest: t.Digest}
		if t.Name != "" {
			tr.Name = t.Name
		}
		if t.Err != nil {
			tr.Error = t.Err.Error()
		} else {
			tr.Differences = Compare(want, t.Digest)
			if max := o.MaxDifferences; max > 0 && len(tr.Differences) > max {
				tr.MoreDifferences = len(tr.Differences) - max
				tr.Differences = tr.Differences[:max]
			}
		}
		r.Targets = append(r.Targets, tr)
	}
	r.finish()
	return r
}
