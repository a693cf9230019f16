package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// Target is one backend and parallelism to restore into.
type Target struct {
	Backend string `json:"backend"`
	// Parallelism of every restored operator; 0 = as in the savepoint. An
	// operator whose max parallelism is lower (a global operator has 1) is
	// restored at its max parallelism (TargetResult.RestoredParallelism).
	Parallelism int `json:"parallelism"`
}

// Name is "backend@pN" ("backend@p=savepoint" for parallelism 0).
func (t Target) Name() string {
	if t.Parallelism == 0 {
		return t.Backend + "@p=savepoint"
	}
	return fmt.Sprintf("%s@p%d", t.Backend, t.Parallelism)
}

// RestoreOptions is what a Restorer is told besides the target.
type RestoreOptions struct {
	// TTL gives restored TTL states this time-to-live and the backends this
	// clock time, so expired entries are not returned (and not exported).
	TTL TTLCheck
	// Shard restricts the restore to the shard's key groups.
	Shard Shard
	// TempDir holds backends and exported files.
	TempDir string
}

// Restorer restores a savepoint into a backend and exports what the
// backend returns as a canonical savepoint. Package verify/restore
// implements it with the engine (cgo).
type Restorer interface {
	Restore(ctx context.Context, sp *savepoint.Savepoint, t Target, o RestoreOptions) (restored *savepoint.Savepoint, cleanup func(), err error)
}

// Options configures Run.
type Options struct {
	// Targets to restore into (needs Restorer).
	Targets  []Target
	Restorer Restorer
	// Against, when set, is compared with the source as another target
	// (e.g. a migrated snapshot), named AgainstName.
	Against     *savepoint.Savepoint
	AgainstName string
	// TTL: with TTLMillis > 0 restored backends must return exactly the
	// entries that are live at NowMillis.
	TTL   TTLCheck
	Shard Shard
	// SkipCheck skips the structural check. Sharded runs check only in
	// shard 0.
	SkipCheck bool
	// Samples is the number of decoded differing entries per group
	// (default 5; negative: none).
	Samples int
	// MaxDifferences bounds the differing groups listed per target
	// (default 100).
	MaxDifferences int
	Concurrency    int
	TempDir        string
	// Log, when set, is told what Run is doing.
	Log func(format string, args ...any)
}

// ErrUnreadable marks a source that cannot be read at all.
var ErrUnreadable = errors.New("verify: unreadable input")

// Run verifies src: structural check, digest, restore into every target,
// digests of the restored state and comparison. It returns an error only
// when the source cannot be read at all (then wrapping ErrUnreadable) or the
// context ends; everything else is in the report.
func Run(ctx context.Context, src *savepoint.Savepoint, o Options) (*Report, error) {
	if o.Samples == 0 {
		o.Samples = 5
	}
	if o.MaxDifferences == 0 {
		o.MaxDifferences = 100
	}
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r := &Report{Source: src.Name(), Shard: o.Shard.String(), ShardIndex: o.Shard.Index, ShardCount: o.Shard.Count}
	if o.TTL.TTLMillis > 0 {
		t := o.TTL
		r.TTL = &t
	}
	// The structural check covers the whole savepoint, so among shards only
	// shard 0 runs it (merged reports then list each problem once).
	if !o.SkipCheck && (o.Shard.All() || o.Shard.Index == 0) {
		logf("checking structure")
		probs, stats := savepoint.Check(ctx, src, savepoint.CheckOptions{Concurrency: max(1, o.Concurrency)})
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		savepoint.SortProblems(probs)
		r.Check = &CheckResult{Problems: probs, Stats: stats}
	}
	dopts := DigestOptions{Shard: o.Shard, TTL: o.TTL, Concurrency: o.Concurrency}
	// restoreSrc is what the targets restore from and what samples decode:
	// the source, or the canonical conversion of a native RocksDB one.
	restoreSrc := src
	var d *Digest
	var err error
	if hasNativeRocksDB(src) {
		logf("digesting source and converting its native RocksDB state to canonical")
		var ns *nativeSource
		ns, err = convertNative(ctx, src, o.TempDir, dopts)
		defer ns.remove()
		if err == nil {
			d, restoreSrc = ns.digest, ns.conv
			r.Notes = append(r.Notes, NoteNativeSource)
		}
	} else {
		logf("digesting source")
		d, err = ComputeDigest(ctx, src, dopts)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrUnreadable) {
			return nil, err
		}
		if errors.Is(err, savepoint.ErrNativeLayout) {
			return nil, fmt.Errorf("%w: %w", ErrUnreadable, err)
		}
		// A structurally broken source: the check problems say where.
		r.SourceError = err.Error()
		if r.Check == nil || len(r.Check.Problems) == 0 {
			r.Check = &CheckResult{Problems: []savepoint.Problem{{Kind: "decode", File: src.Name(), Offset: -1, Message: err.Error()}}}
		}
		r.finish()
		return r, nil
	}
	r.Digest = d
	want := d
	if d.Live != nil {
		want = d.Live
	}
	for _, t := range o.Targets {
		if o.Restorer == nil {
			return nil, errors.New("verify: targets given without a restorer")
		}
		tr := TargetResult{Name: t.Name(), Backend: t.Backend, Parallelism: t.Parallelism}
		if len(d.Operators) == 0 {
			// Nothing a backend restores: the engine holds keyed state
			// only.
			tr.Skipped = "the savepoint has no keyed state to restore"
			r.Targets = append(r.Targets, tr)
			continue
		}
		logf("restoring into %s", t.Name())
		sp, cleanup, err := o.Restorer.Restore(ctx, restoreSrc, t, RestoreOptions{TTL: o.TTL, Shard: o.Shard, TempDir: o.TempDir})
		var oe OperatorErrors
		var ss SkippedStates
		if errors.As(err, &oe) {
			tr.OperatorErrors = oe
		}
		if errors.As(err, &ss) {
			tr.SkippedStates = ss
		}
		if oe != nil || ss != nil {
			err = nil
		}
		if err == nil && sp == nil && len(ss) > 0 && len(oe) == 0 {
			// Nothing restorable: every keyed state was skipped.
			tr.Skipped, tr.Unsupported = ss.summary(), true
			r.Targets = append(r.Targets, tr)
			if cleanup != nil {
				cleanup()
			}
			continue
		}
		if err != nil || sp == nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				tr.Error = err.Error()
			}
			r.Targets = append(r.Targets, tr)
			if cleanup != nil {
				cleanup()
			}
			continue
		}
		tr.RestoredParallelism = restoredParallelism(t, sp)
		r.Targets = append(r.Targets, compareTarget(ctx, o, tr, restoreSrc, sp, without(want, oe, ss), true))
		cleanup()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if o.Against != nil {
		name := o.AgainstName
		if name == "" {
			name = "against"
		}
		logf("digesting %s", name)
		tr := TargetResult{Name: name}
		r.Targets = append(r.Targets, compareTarget(ctx, o, tr, restoreSrc, o.Against, d, false))
	}
	r.finish()
	return r, nil
}

// OperatorErrors is returned by a Restorer, together with the restored
// savepoint of the other operators (nil when none restored), when some
// operators (by id) cannot be restored.
type OperatorErrors map[string]string

func (e OperatorErrors) Error() string {
	ids := make([]string, 0, len(e))
	for id := range e {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var ls []string
	for _, id := range ids {
		ls = append(ls, fmt.Sprintf("operator %s: %s", id, e[id]))
	}
	return strings.Join(ls, "; ")
}

// SkippedState is keyed state that a Restorer leaves out on purpose
// because it cannot restore it (state only in a changelog handle's
// state-change log, a state whose serializer snapshot could not be read
// and that the engine cannot hold): its groups are left out of the
// comparison on both sides, and the report says so.
type SkippedState struct {
	Operator string `json:"operator"`
	// State is "" for all keyed state of the operator.
	State  string `json:"state,omitempty"`
	Reason string `json:"reason"`
}

func (s SkippedState) String() string {
	if s.State == "" {
		return fmt.Sprintf("operator %s: %s", s.Operator, s.Reason)
	}
	return fmt.Sprintf("operator %s state %q: %s", s.Operator, s.State, s.Reason)
}

// SkippedStates is returned by a Restorer, alone or joined with
// OperatorErrors (errors.Join) and together with the restored savepoint of
// the rest (nil when nothing was restored), for keyed state it left out.
// A target whose every keyed state was left out is Unsupported.
type SkippedStates []SkippedState

func (s SkippedStates) Error() string {
	ls := make([]string, len(s))
	for i, x := range s {
		ls[i] = x.String()
	}
	return strings.Join(ls, "; ")
}

// skips reports whether the group of k is left out.
func (s SkippedStates) skips(k GroupKey) bool {
	for _, x := range s {
		if x.Operator == k.Operator && (x.State == "" || x.State == k.State) {
			return true
		}
	}
	return false
}

// summary says why nothing was restored: each distinct reason with the
// operators (short ids) and states it applies to.
func (s SkippedStates) summary() string {
	var reasons []string
	what := map[string][]string{}
	for _, x := range s {
		if _, ok := what[x.Reason]; !ok {
			reasons = append(reasons, x.Reason)
		}
		w := "operator " + shortID(x.Operator)
		if x.State != "" {
			w += fmt.Sprintf(" state %q", x.State)
		}
		what[x.Reason] = append(what[x.Reason], w)
	}
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = fmt.Sprintf("%s (%s)", r, strings.Join(what[r], ", "))
	}
	return strings.Join(out, "; ")
}

// restoredParallelism lists the operators of the restored snapshot whose
// parallelism is not the target's (restored at their max parallelism).
func restoredParallelism(t Target, restored *savepoint.Savepoint) map[string]int {
	if t.Parallelism <= 0 {
		return nil
	}
	var out map[string]int
	for _, op := range restored.Meta.Operators {
		if int(op.Parallelism) != t.Parallelism {
			if out == nil {
				out = map[string]int{}
			}
			out[op.ID.String()] = int(op.Parallelism)
		}
	}
	return out
}

// without returns d without the groups of the given operators and of the
// skipped states.
func without(d *Digest, ops OperatorErrors, ss SkippedStates) *Digest {
	if len(ops) == 0 && len(ss) == 0 {
		return d
	}
	out := NewDigest()
	out.Operators = d.Operators
	for k, g := range d.Groups {
		if _, skip := ops[k.Operator]; !skip && !ss.skips(k) {
			out.Groups[k] = g
		}
	}
	return out
}

// compareTarget digests the restored snapshot and compares it with want;
// liveOnly leaves expired source entries out of the samples.
func compareTarget(ctx context.Context, o Options, tr TargetResult, src, dst *savepoint.Savepoint, want *Digest, liveOnly bool) TargetResult {
	got, err := ComputeDigest(ctx, dst, DigestOptions{Shard: o.Shard, Concurrency: o.Concurrency})
	if err != nil {
		tr.Error = err.Error()
		return tr
	}
	tr.Digest = got
	// Skipped states are left out on both sides.
	diffs := Compare(want, without(got, nil, tr.SkippedStates))
	if len(diffs) > o.MaxDifferences {
		tr.MoreDifferences = len(diffs) - o.MaxDifferences
		diffs = diffs[:o.MaxDifferences]
	}
	keep := func(*keyed.Entry) bool { return true }
	if liveOnly && o.TTL.TTLMillis > 0 {
		keep = func(e *keyed.Entry) bool { return e.TTLTimestamp == nil || !o.TTL.Expired(*e.TTLTimestamp) }
	}
	for i := range diffs {
		if o.Samples < 0 || i >= maxSampledGroups {
			break
		}
		s, err := Samples(ctx, src, dst, diffs[i].GroupKey, o.Samples, keep)
		if err != nil {
			diffs[i].Samples = []Sample{{Source: "cannot decode: " + err.Error()}}
			continue
		}
		diffs[i].Samples = s
	}
	tr.Differences = diffs
	return tr
}

// maxSampledGroups bounds the differing groups decoded for samples.
const maxSampledGroups = 10

// CheckResult is the structural check of the source.
type CheckResult struct {
	Problems []savepoint.Problem  `json:"problems"`
	Stats    savepoint.CheckStats `json:"stats"`
}

// TargetResult is one restore (or --against snapshot) compared with the
// source.
type TargetResult struct {
	Name        string `json:"name"`
	Backend     string `json:"backend,omitempty"`
	Parallelism int    `json:"parallelism,omitempty"`
	Error       string `json:"error,omitempty"`
	// Skipped says why nothing was restored (a savepoint without keyed
	// state, or keyed state that cannot be restored: Unsupported); the
	// target then passes.
	Skipped string `json:"skipped,omitempty"`
	// Unsupported: nothing was restored because every keyed state of the
	// savepoint was skipped (SkippedStates say why); nothing was verified.
	Unsupported bool `json:"unsupported,omitempty"`
	// SkippedStates were not restored and are left out of the comparison
	// on both sides.
	SkippedStates SkippedStates `json:"skippedStates,omitempty"`
	// RestoredParallelism names the operators (by id) restored at another
	// parallelism than the target's: min(target, max parallelism).
	RestoredParallelism map[string]int `json:"restoredParallelism,omitempty"`
	// OperatorErrors names the operators that could not be restored (the
	// others were compared).
	OperatorErrors OperatorErrors `json:"operatorErrors,omitempty"`
	Digest         *Digest        `json:"digest,omitempty"`
	Differences    []Difference   `json:"differences"`
	// MoreDifferences counts differing groups not listed.
	MoreDifferences int `json:"moreDifferences,omitempty"`
}

// OK reports whether the target equals the source.
func (t *TargetResult) OK() bool {
	return t.Error == "" && len(t.OperatorErrors) == 0 && len(t.Differences) == 0 && t.MoreDifferences == 0
}

// Report is the outcome of Run or Merge.
type Report struct {
	Source     string       `json:"source"`
	Shard      string       `json:"shard,omitempty"`
	ShardIndex int          `json:"shardIndex"`
	ShardCount int          `json:"shardCount"`
	TTL        *TTLCheck    `json:"ttl,omitempty"`
	Check      *CheckResult `json:"check,omitempty"`
	// SourceError is set when the source's entries could not be decoded.
	SourceError string `json:"sourceError,omitempty"`
	// Notes say how the source was read when not as is (NoteNativeSource).
	Notes   []string       `json:"notes,omitempty"`
	Digest  *Digest        `json:"digest,omitempty"`
	Targets []TargetResult `json:"targets"`
	OK      bool           `json:"ok"`
	// Unsupported: there were targets, and none of them restored anything
	// because the savepoint's keyed state cannot be restored (see the
	// targets' SkippedStates): the savepoint is valid, but nothing was
	// verified beyond the source's structure.
	Unsupported bool `json:"unsupported,omitempty"`
}

func (r *Report) finish() {
	r.OK = r.SourceError == "" && (r.Check == nil || len(r.Check.Problems) == 0)
	r.Unsupported = false
	restoring := 0
	unsupported := 0
	for i := range r.Targets {
		t := &r.Targets[i]
		if !t.OK() {
			r.OK = false
		}
		if t.Backend != "" {
			restoring++
			if t.Unsupported {
				unsupported++
			}
		}
	}
	r.Unsupported = restoring > 0 && unsupported == restoring
	if r.Targets == nil {
		r.Targets = []TargetResult{}
	}
}

// Failures lists one line per failure (structure problems, target errors
// and differing groups), for logs.
func (r *Report) Failures() []string {
	var out []string
	if r.Check != nil {
		for _, p := range r.Check.Problems {
			out = append(out, "structure: "+p.String())
		}
	}
	if r.SourceError != "" {
		out = append(out, "source: "+r.SourceError)
	}
	for _, t := range r.Targets {
		if t.Error != "" {
			out = append(out, fmt.Sprintf("%s: %s", t.Name, t.Error))
		}
		for _, id := range sortedKeys(t.OperatorErrors) {
			out = append(out, fmt.Sprintf("%s: operator %s not restored: %s", t.Name, id, t.OperatorErrors[id]))
		}
		for _, d := range t.Differences {
			out = append(out, fmt.Sprintf("%s: %s", t.Name, d))
		}
		if t.MoreDifferences > 0 {
			out = append(out, fmt.Sprintf("%s: %d more differing groups", t.Name, t.MoreDifferences))
		}
	}
	return out
}

// states lists every (operator, state) of the source digest, sorted.
func (r *Report) states() [][2]string {
	seen := map[[2]string]bool{}
	var out [][2]string
	add := func(op, st string) {
		k := [2]string{op, st}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	if r.Digest != nil {
		for _, op := range r.Digest.Operators {
			for _, s := range op.States {
				add(op.ID, s.Name)
			}
		}
		for k := range r.Digest.Groups {
			add(k.Operator, k.State)
		}
	}
	for _, t := range r.Targets {
		for _, d := range t.Differences {
			add(d.Operator, d.State)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}

func (r *Report) stateKind(op, st string) string {
	if r.Digest == nil {
		return ""
	}
	for _, o := range r.Digest.Operators {
		if o.ID == op {
			for _, s := range o.States {
				if s.Name == st {
					k := s.Kind
					if s.TTL {
						k += "+TTL"
					}
					return k
				}
			}
		}
	}
	return ""
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func joinLines(ls []string) string { return strings.Join(ls, "\n") }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
