package native

import (
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// Stats accumulates a deep summary of one operator's native keyed state:
// per state entry counts, bytes, key-group distribution and TTL ages.
type Stats struct {
	// KeyGroups is the number of key groups the operator's handles cover.
	KeyGroups int
	TTLMillis int64
	NowMillis int64
	// KeySerializer, when set, is the operator's key serializer snapshot
	// (the meta-state header's): with it the summaries carry the key type.
	// Namespace, user-key and value types come from each entry's state
	// meta info.
	KeySerializer *serde.Snapshot

	order  []string
	states map[string]*stateAcc
	kgs    map[int]int64
}

type stateAcc struct {
	sum savepoint.StateSummary
	kgs map[int]int64
}

// NewStats returns an empty accumulator; ttlMillis > 0 counts entries last
// accessed before nowMillis-ttlMillis as expired.
func NewStats(ttlMillis, nowMillis int64) *Stats {
	return &Stats{TTLMillis: ttlMillis, NowMillis: nowMillis, states: map[string]*stateAcc{}, kgs: map[int]int64{}}
}

// Add counts one decoded entry; kind is the report kind (savepoint.StateKind).
func (s *Stats) Add(e *keyed.Entry, kind string) {
	name := e.State.Name
	a := s.states[name]
	if a == nil {
		a = &stateAcc{kgs: map[int]int64{}}
		a.sum.Name, a.sum.Kind, a.sum.TTL = name, kind, e.State.TTL
		savepoint.SetStateTypes(&a.sum, s.KeySerializer, e.State)
		s.states[name] = a
		s.order = append(s.order, name)
	}
	a.sum.Entries++
	a.sum.Bytes += int64(len(e.KeyBytes) + len(e.ValueBytes))
	a.kgs[e.KeyGroup]++
	s.kgs[e.KeyGroup]++
	if e.TTLTimestamp != nil {
		ts := *e.TTLTimestamp
		a.sum.TTLEntries++
		if a.sum.TTLOldest == nil || ts < *a.sum.TTLOldest {
			v := ts
			a.sum.TTLOldest = &v
		}
		if a.sum.TTLNewest == nil || ts > *a.sum.TTLNewest {
			v := ts
			a.sum.TTLNewest = &v
		}
		if s.TTLMillis > 0 && ts <= s.NowMillis-s.TTLMillis {
			a.sum.Expired++
		}
	}
}

// States returns the per-state summaries in first-seen order, each with
// its key-group distribution.
func (s *Stats) States() []savepoint.StateSummary {
	out := make([]savepoint.StateSummary, 0, len(s.order))
	for _, n := range s.order {
		a := s.states[n]
		sum := a.sum
		sum.KeyGroups = KeyGroupDist(a.kgs, s.KeyGroups)
		out = append(out, sum)
	}
	return out
}

// Total is the distribution over all states.
func (s *Stats) Total() *savepoint.KeyGroupDist { return KeyGroupDist(s.kgs, s.KeyGroups) }

// KeyGroupDist summarizes per-key-group counts over total key groups
// (empty key groups count as 0 for min and median).
func KeyGroupDist(counts map[int]int64, total int) *savepoint.KeyGroupDist {
	return savepoint.NewKeyGroupDist(counts, max(total, len(counts)))
}
