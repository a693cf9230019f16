package verify

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// GroupKey identifies one (operator, state, key group).
type GroupKey struct {
	Operator string `json:"operator"` // operator id, hex
	State    string `json:"state"`
	KeyGroup int    `json:"keyGroup"`
}

func (k GroupKey) String() string {
	return fmt.Sprintf("operator %s state %q key group %d", k.Operator, k.State, k.KeyGroup)
}

func (k GroupKey) less(o GroupKey) bool {
	if k.Operator != o.Operator {
		return k.Operator < o.Operator
	}
	if k.State != o.State {
		return k.State < o.State
	}
	return k.KeyGroup < o.KeyGroup
}

// Hash is an order-independent 128-bit multiset hash: the sum of per-item
// hashes in two 64-bit lanes. Sums do not cancel duplicates as XOR would.
type Hash [2]uint64

func (h *Hash) add(b [32]byte) {
	h[0] += binary.BigEndian.Uint64(b[0:8])
	h[1] += binary.BigEndian.Uint64(b[8:16])
}

func (h Hash) plus(o Hash) Hash { return Hash{h[0] + o[0], h[1] + o[1]} }

// MarshalJSON writes the hash as 32 hex digits.
func (h Hash) MarshalJSON() ([]byte, error) {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:], h[0])
	binary.BigEndian.PutUint64(b[8:], h[1])
	return json.Marshal(hex.EncodeToString(b[:]))
}

// UnmarshalJSON reads 32 hex digits.
func (h *Hash) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return fmt.Errorf("verify: hash %q: want 32 hex digits", s)
	}
	h[0] = binary.BigEndian.Uint64(b[0:])
	h[1] = binary.BigEndian.Uint64(b[8:])
	return nil
}

// Group is the digest of one (operator, state, key group).
type Group struct {
	// Entries is the number of entries (a MAP state counts one entry per
	// user key, a LIST state one per key and namespace).
	Entries int64 `json:"entries"`
	// Counts sums multiset counts: the Integer values of MAP states (join
	// records MapState<RowData, Integer>) and the count of (count,
	// associations) tuples.
	Counts int64 `json:"counts"`
	// Associations sums the association counts of outer-join records
	// (the Integer second field of Tuple2 values).
	Associations int64 `json:"associations"`
	// Hash is the order-independent hash of (key, namespace, user key,
	// value, TTL timestamp) over every entry.
	Hash Hash `json:"hash"`
	// TTLEntries counts TTL timestamps (entries, or list elements);
	// TTLMin/TTLMax bound them and TTLHash hashes their multiset.
	TTLEntries int64 `json:"ttlEntries"`
	TTLMin     int64 `json:"ttlMin"`
	TTLMax     int64 `json:"ttlMax"`
	TTLHash    Hash  `json:"ttlHash"`
	// Expired counts the entries expired at the digest's TTL time (only
	// when a TTL was given).
	Expired int64 `json:"expired,omitempty"`
}

func newGroup() *Group { return &Group{TTLMin: math.MaxInt64, TTLMax: math.MinInt64} }

func (g *Group) merge(o *Group) {
	g.Entries += o.Entries
	g.Counts += o.Counts
	g.Associations += o.Associations
	g.Hash = g.Hash.plus(o.Hash)
	g.TTLEntries += o.TTLEntries
	g.TTLHash = g.TTLHash.plus(o.TTLHash)
	if o.TTLEntries > 0 {
		g.TTLMin = min(g.TTLMin, o.TTLMin)
		g.TTLMax = max(g.TTLMax, o.TTLMax)
	}
	g.Expired += o.Expired
}

// diff names the first field that differs between g (source) and o.
func (g *Group) diff(o *Group) (field, a, b string) {
	switch {
	case g.Entries != o.Entries:
		return "entries", fmt.Sprint(g.Entries), fmt.Sprint(o.Entries)
	case g.Counts != o.Counts:
		return "counts", fmt.Sprint(g.Counts), fmt.Sprint(o.Counts)
	case g.Associations != o.Associations:
		return "associations", fmt.Sprint(g.Associations), fmt.Sprint(o.Associations)
	case g.TTLEntries != o.TTLEntries:
		return "ttl entries", fmt.Sprint(g.TTLEntries), fmt.Sprint(o.TTLEntries)
	case g.TTLEntries > 0 && g.TTLMin != o.TTLMin:
		return "ttl min", fmt.Sprint(g.TTLMin), fmt.Sprint(o.TTLMin)
	case g.TTLEntries > 0 && g.TTLMax != o.TTLMax:
		return "ttl max", fmt.Sprint(g.TTLMax), fmt.Sprint(o.TTLMax)
	case g.TTLHash != o.TTLHash:
		return "ttl timestamps", "", ""
	case g.Hash != o.Hash:
		return "content", "", ""
	}
	return "", "", ""
}

// StateInfo describes one keyed state of an operator.
type StateInfo struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	TTL  bool   `json:"ttl,omitempty"`
}

// OperatorInfo describes one operator with keyed state.
type OperatorInfo struct {
	ID             string      `json:"id"`
	UID            string      `json:"uid,omitempty"`
	Name           string      `json:"name,omitempty"`
	Parallelism    int         `json:"parallelism"`
	MaxParallelism int         `json:"maxParallelism"`
	States         []StateInfo `json:"states"`
	// KeyGroupFrom..KeyGroupTo (inclusive) is the part digested (all key
	// groups unless sharded).
	KeyGroupFrom int `json:"keyGroupFrom"`
	KeyGroupTo   int `json:"keyGroupTo"`
}

// Digest is the logical digest of the keyed state of one snapshot (or one
// shard of it).
type Digest struct {
	Operators []OperatorInfo
	Groups    map[GroupKey]*Group
	// Live, when a TTL was given, digests only the entries Flink would
	// still return at that time (expired TTL entries left out).
	Live *Digest
}

// NewDigest returns an empty digest.
func NewDigest() *Digest { return &Digest{Groups: map[GroupKey]*Group{}} }

// Keys returns the group keys in (operator, state, key group) order.
func (d *Digest) Keys() []GroupKey {
	ks := make([]GroupKey, 0, len(d.Groups))
	for k := range d.Groups {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].less(ks[j]) })
	return ks
}

// Total sums the groups of one operator and state ("" = all).
func (d *Digest) Total(operator, state string) Group {
	t := newGroup()
	for k, g := range d.Groups {
		if (operator == "" || k.Operator == operator) && (state == "" || k.State == state) {
			t.merge(g)
		}
	}
	return *t
}

// Merge adds the groups of o (a digest of other key groups) to d.
func (d *Digest) Merge(o *Digest) {
	for k, g := range o.Groups {
		cur := d.Groups[k]
		if cur == nil {
			cur = newGroup()
			d.Groups[k] = cur
		}
		cur.merge(g)
	}
	if o.Live != nil {
		if d.Live == nil {
			d.Live = NewDigest()
		}
		d.Live.Merge(o.Live)
	}
}

type digestJSON struct {
	Operators []OperatorInfo `json:"operators"`
	Groups    []groupJSON    `json:"groups"`
	Live      *digestJSON    `json:"live,omitempty"`
}

type groupJSON struct {
	GroupKey
	Group
}

// MarshalJSON writes the groups as a sorted list.
func (d *Digest) MarshalJSON() ([]byte, error) { return json.Marshal(d.toJSON()) }

func (d *Digest) toJSON() *digestJSON {
	out := &digestJSON{Operators: d.Operators, Groups: make([]groupJSON, 0, len(d.Groups))}
	if out.Operators == nil {
		out.Operators = []OperatorInfo{}
	}
	for _, k := range d.Keys() {
		g := *d.Groups[k]
		if g.TTLEntries == 0 {
			// The empty bounds (±MaxInt64) are not JSON-safe integers.
			g.TTLMin, g.TTLMax = 0, 0
		}
		out.Groups = append(out.Groups, groupJSON{k, g})
	}
	if d.Live != nil {
		out.Live = d.Live.toJSON()
	}
	return out
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (d *Digest) UnmarshalJSON(b []byte) error {
	var j digestJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*d = *fromJSON(&j)
	return nil
}

func fromJSON(j *digestJSON) *Digest {
	d := NewDigest()
	d.Operators = j.Operators
	for _, g := range j.Groups {
		gg := g.Group
		if gg.TTLEntries == 0 {
			gg.TTLMin, gg.TTLMax = math.MaxInt64, math.MinInt64
		}
		d.Groups[g.GroupKey] = &gg
	}
	if j.Live != nil {
		d.Live = fromJSON(j.Live)
	}
	return d
}

// TTLCheck describes the time at which entries are judged live or expired,
// with Flink's rule: an entry is expired when lastAccess + ttl <= now.
type TTLCheck struct {
	TTLMillis int64 `json:"ttlMillis"`
	NowMillis int64 `json:"nowMillis"`
}

// Expired reports whether an entry last accessed at ts is expired.
func (t TTLCheck) Expired(ts int64) bool {
	if t.TTLMillis <= 0 {
		return false
	}
	exp := ts + t.TTLMillis
	if ts > 0 && exp < ts { // overflow: never expires
		return false
	}
	return exp <= t.NowMillis
}

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
	var h hasher
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
			h.add(d, GroupKey{Operator: id, State: e.State.Name, KeyGroup: e.KeyGroup}, e.State, e.Entry, o.TTL)
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

// hasher hashes entries with reused buffers.
type hasher struct {
	buf []byte
}

func appendPart(dst []byte, v any) []byte { return appendValue(dst, v) }

// entryParts renders the parts of an entry that identify it (key,
// namespace, user key) and the whole entry.
func (h *hasher) entry(e *keyed.Entry) (ident int, all []byte) {
	value := e.Value
	if t, ok := value.(*serde.TTLValue); ok {
		value = t.Value
	}
	b := h.buf[:0]
	b = appendPart(b, e.Key)
	b = appendPart(b, e.Namespace)
	b = appendPart(b, e.UserKey)
	ident = len(b)
	b = appendPart(b, value)
	if e.TTLTimestamp != nil {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, uint64(*e.TTLTimestamp))
	} else {
		b = append(b, 0)
	}
	h.buf = b
	return ident, b
}

func (h *hasher) add(d *Digest, k GroupKey, st *keyed.StateMeta, e *keyed.Entry, ttl TTLCheck) {
	_, b := h.entry(e)
	sum := sha256.Sum256(b)
	g := d.Groups[k]
	if g == nil {
		g = newGroup()
		d.Groups[k] = g
	}
	g.Entries++
	g.Hash.add(sum)
	value := e.Value
	if t, ok := value.(*serde.TTLValue); ok {
		value = t.Value
	}
	c, a := counts(st, value)
	g.Counts += c
	g.Associations += a
	var ttls []int64
	if e.TTLTimestamp != nil {
		ttls = append(ttls, *e.TTLTimestamp)
	} else if els, ok := listOf(value); ok {
		for _, el := range els {
			if t, ok := el.(*serde.TTLValue); ok {
				ttls = append(ttls, t.LastAccess)
			}
		}
	}
	for _, ts := range ttls {
		g.TTLEntries++
		g.TTLMin = min(g.TTLMin, ts)
		g.TTLMax = max(g.TTLMax, ts)
		var tb [8]byte
		binary.BigEndian.PutUint64(tb[:], uint64(ts))
		g.TTLHash.add(sha256.Sum256(tb[:]))
	}
	if d.Live == nil {
		return
	}
	if e.TTLTimestamp != nil && ttl.Expired(*e.TTLTimestamp) {
		g.Expired++
		return
	}
	if els, ok := listOf(value); ok && len(ttls) > 0 {
		// A TTL list: Flink returns only its live elements, and nothing
		// when every element expired.
		var live serde.List
		ttls = ttls[:0]
		for _, el := range els {
			if t, ok := el.(*serde.TTLValue); ok && ttl.Expired(t.LastAccess) {
				continue
			}
			live = append(live, el)
			if t, ok := el.(*serde.TTLValue); ok {
				ttls = append(ttls, t.LastAccess)
			}
		}
		if len(live) == 0 {
			g.Expired++
			return
		}
		if len(live) != len(els) {
			le := *e
			le.Value = live
			_, b := h.entry(&le)
			sum = sha256.Sum256(b)
			c, a = counts(st, live)
		}
	}
	lg := d.Live.Groups[k]
	if lg == nil {
		lg = newGroup()
		d.Live.Groups[k] = lg
	}
	lg.Entries++
	lg.Hash.add(sum)
	lg.Counts += c
	lg.Associations += a
	for _, ts := range ttls {
		lg.TTLEntries++
		lg.TTLMin = min(lg.TTLMin, ts)
		lg.TTLMax = max(lg.TTLMax, ts)
		var tb [8]byte
		binary.BigEndian.PutUint64(tb[:], uint64(ts))
		lg.TTLHash.add(sha256.Sum256(tb[:]))
	}
}

// counts returns the multiset count and association count an entry's value
// carries: MAP states with Integer values hold counts (join records
// MapState<RowData, Integer>); Tuple2 values whose second field is an
// Integer carry association counts (outer joins), with the count first
// when that is an Integer too.
func counts(st *keyed.StateMeta, v any) (count, assoc int64) {
	switch t := v.(type) {
	case serde.Tuple:
		if len(t) == 2 {
			if a, ok := asInt(t[1]); ok {
				if c, ok := asInt(t[0]); ok {
					return c, a
				}
				return 0, a
			}
		}
	default:
		if st != nil && st.Kind == "MAP" {
			if c, ok := v.(int32); ok {
				return int64(c), 0
			}
		}
	}
	return 0, 0
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int32:
		return int64(x), true
	}
	return 0, false
}

// listOf returns the elements of a LIST state value.
func listOf(v any) ([]any, bool) {
	l, ok := v.(serde.List)
	return []any(l), ok
}
