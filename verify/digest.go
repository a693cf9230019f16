package verify

import (
	"context"
	"sort"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// The digest model is package savepoint/digest's; these names stay for the
// packages and report schemas that know them as verify's.
type (
	// GroupKey identifies one (operator, state, key group).
	GroupKey = digest.GroupKey
	// StateInfo describes one keyed state of an operator.
	StateInfo = digest.StateInfo
	// OperatorInfo describes one operator with keyed state.
	OperatorInfo = digest.OperatorInfo
	// Digest is the logical digest of the keyed state of one snapshot (or
	// one shard of it).
	Digest = digest.Digest
	// TTLCheck is the time at which entries are judged live or expired.
	TTLCheck = digest.TTLCheck
	// RawEntry is one entry of a native (engine) checkpoint by its stored
	// bytes (Digest.AddRaw).
	RawEntry = digest.RawEntry
)

// NewDigest returns an empty digest.
func NewDigest() *Digest { return digest.New() }

// DigestOptions selects what ComputeDigest reads.
type DigestOptions struct {
	// Operator restricts the digest to one operator (id, uid or name).
	Operator string
	// Shard restricts every operator to its share of key groups.
	Shard Shard
	// TTL, when TTLMillis > 0, also computes the live digest.
	TTL TTLCheck
	// Concurrency is the number of subtask files read at once.
	Concurrency int
	// ReadAhead is the range-read buffer per open file (0 = default).
	ReadAhead int
	// Progress is advanced per key group.
	Progress savepoint.Progress
}

// ComputeDigest decodes every keyed entry of sp (in the shard) and returns
// its digest. Native keyed handles fail with savepoint.ErrNativeLayout.
func ComputeDigest(ctx context.Context, sp *savepoint.Savepoint, o DigestOptions) (*Digest, error) {
	d := NewDigest()
	if o.TTL.TTLMillis > 0 {
		d.Live = NewDigest()
	}
	var h digest.Hasher
	for _, op := range sp.Meta.Operators {
		if o.Operator != "" && sp.FindOperator(o.Operator) != op {
			continue
		}
		info, ok := operatorInfo(ctx, sp, op)
		if !ok {
			continue
		}
		from, to := o.Shard.Range(int(op.MaxParallelism))
		info.KeyGroupFrom, info.KeyGroupTo = from, to
		d.Operators = append(d.Operators, info)
		if from > to {
			continue
		}
		id := op.ID.String()
		err := sp.WalkKeyed(ctx, savepoint.ScanOptions{
			Operator: id, KeyGroupFrom: from, KeyGroupTo: to, Mode: keyed.ModeDecode,
			Concurrency: o.Concurrency, ReadAhead: o.ReadAhead, Progress: o.Progress,
		}, func(e *savepoint.KeyedEntry) error {
			if e.Operator != op {
				return nil
			}
			h.Add(d, GroupKey{Operator: id, State: e.State.Name, KeyGroup: e.KeyGroup}, e.State, e.Entry, o.TTL)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// operatorInfo lists the keyed states of op from its first stream header.
func operatorInfo(ctx context.Context, sp *savepoint.Savepoint, op *savepoint.OperatorState) (OperatorInfo, bool) {
	info := OperatorInfo{ID: op.ID.String(), UID: op.UID, Name: op.Name, Parallelism: int(op.Parallelism), MaxParallelism: int(op.MaxParallelism)}
	has := false
	seen := map[string]bool{}
	for _, st := range op.Subtasks {
		if st.ManagedKeyed == nil {
			continue
		}
		has = true
		// A changelog handle's states are those of its materialized
		// handles (the reader's view; see savepoint.ReadableSubtasks).
		for _, kh := range savepoint.MaterializedKeyed(st.ManagedKeyed) {
			h, ok := kh.(*savepoint.KeyGroupsHandle)
			if !ok || h.Delegate == nil {
				continue
			}
			hdr := readHeader(ctx, sp, h)
			if hdr == nil {
				continue
			}
			for _, s := range hdr.States {
				if seen[s.Name] {
					continue
				}
				seen[s.Name] = true
				info.States = append(info.States, StateInfo{Name: s.Name, Kind: s.Kind, TTL: s.TTL})
			}
		}
	}
	sort.Slice(info.States, func(i, j int) bool { return info.States[i].Name < info.States[j].Name })
	return info, has
}

// readHeader reads the header of h's stream as the entry reader does (up to
// the first key-group offset, stepping over unknown serializer snapshots).
func readHeader(ctx context.Context, sp *savepoint.Savepoint, h *savepoint.KeyGroupsHandle) *keyed.Header {
	_, hdr, err := sp.OpenKeyed(ctx, h, 64<<10)
	if err != nil {
		return nil
	}
	return hdr
}
