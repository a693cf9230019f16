package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// Difference is one (operator, state, key group) whose digests differ.
type Difference struct {
	GroupKey
	// Field is the first digest field that differs: "missing" (group only
	// in the source), "unexpected" (only in the target), "entries",
	// "counts", "associations", "ttl entries", "ttl min", "ttl max",
	// "ttl timestamps" or "content".
	Field  string `json:"field"`
	Source string `json:"source,omitempty"`
	Target string `json:"target,omitempty"`
	// Samples are the first differing entries, decoded.
	Samples []Sample `json:"samples,omitempty"`
}

func (d Difference) String() string {
	s := fmt.Sprintf("%s: %s", d.GroupKey, d.Field)
	if d.Source != "" || d.Target != "" {
		s += fmt.Sprintf(" %s vs %s", d.Source, d.Target)
	}
	return s
}

// Sample is one entry that differs, decoded as JSON, side by side: Source
// or Target is empty when the entry is missing on that side.
type Sample struct {
	Source string `json:"source,omitempty"`
	Target string `json:"target,omitempty"`
}

// Compare lists the groups of src and dst that differ, in key order. Groups
// outside the operators and key groups both digests cover are compared too:
// a group present on one side only is a difference.
func Compare(src, dst *Digest) []Difference {
	seen := map[GroupKey]bool{}
	var ks []GroupKey
	for _, d := range []*Digest{src, dst} {
		for k := range d.Groups {
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].Less(ks[j]) })
	var out []Difference
	for _, k := range ks {
		a, b := src.Groups[k], dst.Groups[k]
		switch {
		case b == nil && a.Entries == 0:
		case a == nil && b.Entries == 0:
		case b == nil:
			out = append(out, Difference{GroupKey: k, Field: "missing", Source: fmt.Sprintf("%d entries", a.Entries), Target: "none"})
		case a == nil:
			out = append(out, Difference{GroupKey: k, Field: "unexpected", Source: "none", Target: fmt.Sprintf("%d entries", b.Entries)})
		default:
			if f, x, y := a.FirstDifference(b); f != "" {
				out = append(out, Difference{GroupKey: k, Field: f, Source: x, Target: y})
			}
		}
	}
	return out
}

// maxSampleEntries bounds the entries of one key group held in memory to
// find samples; larger groups are reported without samples.
const maxSampleEntries = 200_000

type sampleEntry struct {
	ident string
	full  []byte
	json  string
}

// groupEntries decodes the entries of one group, keyed by their full
// rendering (multiset). ok is false when the group is too large.
func groupEntries(ctx context.Context, sp *savepoint.Savepoint, k GroupKey, keep func(*keyed.Entry) bool) (map[string][]sampleEntry, bool, error) {
	out := map[string][]sampleEntry{}
	var h digest.Hasher
	n := 0
	err := sp.WalkKeyed(ctx, savepoint.ScanOptions{
		Operator: k.Operator, State: k.State, KeyGroupFrom: k.KeyGroup, KeyGroupTo: k.KeyGroup, Mode: keyed.ModeDecode,
	}, func(e *savepoint.KeyedEntry) error {
		if e.Operator.ID.String() != k.Operator || e.KeyGroup != k.KeyGroup {
			return nil
		}
		if keep != nil && !keep(e.Entry) {
			return nil
		}
		n++
		if n > maxSampleEntries {
			return savepoint.StopWalk
		}
		ident, full := h.Encode(e.Entry)
		js, err := json.Marshal(entryView{Key: e.Key, Namespace: e.Namespace, UserKey: e.UserKey, Value: e.Value, TTL: e.TTLTimestamp})
		if err != nil {
			js = fmt.Appendf(nil, "%v", e.Value)
		}
		se := sampleEntry{ident: string(full[:ident]), full: bytes.Clone(full), json: string(js)}
		out[string(se.full)] = append(out[string(se.full)], se)
		return nil
	})
	if err != nil && !savepoint.IsStop(err) {
		return nil, false, err
	}
	return out, n <= maxSampleEntries, nil
}

type entryView struct {
	Key       any    `json:"key"`
	Namespace any    `json:"ns,omitempty"`
	UserKey   any    `json:"userKey,omitempty"`
	Value     any    `json:"value"`
	TTL       *int64 `json:"ttl,omitempty"`
}

// Samples decodes one group in both snapshots and returns up to limit
// entries that are not in both, paired by (key, namespace, user key) when
// both sides have a different version of the same entry. keepSource, when set,
// drops source entries (e.g. expired ones) before comparing.
func Samples(ctx context.Context, src, dst *savepoint.Savepoint, k GroupKey, limit int, keepSource func(*keyed.Entry) bool) ([]Sample, error) {
	a, okA, err := groupEntries(ctx, src, k, keepSource)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	b, okB, err := groupEntries(ctx, dst, k, nil)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	if !okA || !okB {
		return nil, nil
	}
	// Multiset difference.
	var onlyA, onlyB []sampleEntry
	for full, es := range a {
		n := len(es) - len(b[full])
		for i := 0; i < n; i++ {
			onlyA = append(onlyA, es[i])
		}
	}
	for full, es := range b {
		n := len(es) - len(a[full])
		for i := 0; i < n; i++ {
			onlyB = append(onlyB, es[i])
		}
	}
	sort.Slice(onlyA, func(i, j int) bool { return onlyA[i].json < onlyA[j].json })
	sort.Slice(onlyB, func(i, j int) bool { return onlyB[i].json < onlyB[j].json })
	used := make([]bool, len(onlyB))
	var out []Sample
	for _, ea := range onlyA {
		s := Sample{Source: ea.json}
		for j, eb := range onlyB {
			if !used[j] && eb.ident == ea.ident {
				used[j] = true
				s.Target = eb.json
				break
			}
		}
		out = append(out, s)
	}
	for j, eb := range onlyB {
		if !used[j] {
			out = append(out, Sample{Target: eb.json})
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
