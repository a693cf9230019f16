// Package digest computes a logical digest of a canonical savepoint's keyed
// state, per operator, state and key group: the number of entries, the sum
// of multiset counts (the Integer values of MapState<RowData, Integer> join
// records) and of outer-join association counts (Tuple2 values whose
// second field is an Integer), the number, minimum, maximum and an
// order-independent hash of the TTL last-access timestamps, and an
// order-independent hash of the entries. Two savepoints with the same
// logical content have equal digests whatever wrote them (Flink with either
// backend, sfstate's export), however their entries are ordered, split over
// files or encoded byte for byte (BinaryRowData padding, heap vs RocksDB
// order, Snappy compression, parallelism).
//
// An entry is hashed from its decoded parts (savepoint/serde values in the
// canonical binary encoding of AppendValue: tagged, fixed-width numbers,
// floats by their bits, map entries sorted, self-delimiting): key,
// namespace, user key (MAP) and value with the TTL wrapper removed,
// concatenated, then one byte 1 and the TTL timestamp (8 bytes, big endian)
// or one byte 0 without one. The first 128 bits of the SHA-256 of those
// bytes are summed in two 64-bit lanes (mod 2^64 each), so the group hash
// does not depend on order, and duplicates are not cancelled out as they
// would be with XOR. A TTL timestamp is hashed as SHA-256 of its 8
// big-endian bytes. Priority-queue (timer) entries count like any other
// entry. Digests are persisted (verification reports) and read back, so
// this definition is stable.
//
// With a TTL and a time (TTLCheck), a digest also holds a live digest: the
// entries Flink would still return at that time.
//
// The package is pure Go and reads savepoints through package savepoint,
// so it works on any canonical savepoint; Compute never modifies its input.
package digest

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

// Less orders group keys by operator, state and key group.
func (k GroupKey) Less(o GroupKey) bool {
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
		return fmt.Errorf("digest: hash %q: want 32 hex digits", s)
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

// Merge adds o (the same group's digest of other entries) to g.
func (g *Group) Merge(o *Group) {
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

// FirstDifference names the first field that differs between g and o and
// the two values ("" when equal; hashes have no values shown).
func (g *Group) FirstDifference(o *Group) (field, a, b string) {
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
	// Operators describes the operators digested (filled by callers that
	// know them; Compute leaves it empty).
	Operators []OperatorInfo
	Groups    map[GroupKey]*Group
	// Live, when a TTL was given, digests only the entries Flink would
	// still return at that time (expired TTL entries left out).
	Live *Digest
}

// New returns an empty digest.
func New() *Digest { return &Digest{Groups: map[GroupKey]*Group{}} }

// Keys returns the group keys in (operator, state, key group) order.
func (d *Digest) Keys() []GroupKey {
	ks := make([]GroupKey, 0, len(d.Groups))
	for k := range d.Groups {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].Less(ks[j]) })
	return ks
}

// Total sums the groups of one operator and state ("" = all).
func (d *Digest) Total(operator, state string) Group {
	t := newGroup()
	for k, g := range d.Groups {
		if (operator == "" || k.Operator == operator) && (state == "" || k.State == state) {
			t.Merge(g)
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
		cur.Merge(g)
	}
	if o.Live != nil {
		if d.Live == nil {
			d.Live = New()
		}
		d.Live.Merge(o.Live)
	}
}

// Diff lists the groups that differ between d and other (at most limit
// lines, 0 = all), in key order, each naming the first field that differs;
// nil means equal.
func (d *Digest) Diff(other *Digest, limit int) []string {
	seen := map[GroupKey]bool{}
	var ks []GroupKey
	for _, dd := range []*Digest{d, other} {
		for k := range dd.Groups {
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].Less(ks[j]) })
	var out []string
	for _, k := range ks {
		a, b := d.Groups[k], other.Groups[k]
		var msg string
		switch {
		case a == nil:
			msg = fmt.Sprintf("only in second: %d entries", b.Entries)
		case b == nil:
			msg = fmt.Sprintf("only in first: %d entries", a.Entries)
		default:
			f, x, y := a.FirstDifference(b)
			switch {
			case f == "":
				continue
			case x == "" && y == "":
				msg = "different " + f
			default:
				msg = fmt.Sprintf("%s %s vs %s", f, x, y)
			}
		}
		out = append(out, fmt.Sprintf("%s: %s", k, msg))
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out
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
	d := New()
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

// Hasher hashes decoded entries into digests, reusing its buffer; the zero
// value is ready. It is not safe for concurrent use.
type Hasher struct {
	buf []byte
}

// Encode renders the bytes an entry's hash covers (see the package doc):
// the first ident bytes identify the entry (key, namespace, user key), all
// is the whole rendering. all is valid until the next call.
func (h *Hasher) Encode(e *keyed.Entry) (ident int, all []byte) {
	value := e.Value
	if t, ok := value.(*serde.TTLValue); ok {
		value = t.Value
	}
	b := h.buf[:0]
	b = AppendValue(b, e.Key)
	b = AppendValue(b, e.Namespace)
	b = AppendValue(b, e.UserKey)
	ident = len(b)
	b = AppendValue(b, value)
	if e.TTLTimestamp != nil {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, uint64(*e.TTLTimestamp))
	} else {
		b = append(b, 0)
	}
	h.buf = b
	return ident, b
}

// addTTL records one TTL timestamp in g.
func (g *Group) addTTL(ts int64) {
	g.TTLEntries++
	g.TTLMin = min(g.TTLMin, ts)
	g.TTLMax = max(g.TTLMax, ts)
	var tb [8]byte
	binary.BigEndian.PutUint64(tb[:], uint64(ts))
	g.TTLHash.add(sha256.Sum256(tb[:]))
}

// group returns d's group k, adding it if absent.
func (d *Digest) group(k GroupKey) *Group {
	g := d.Groups[k]
	if g == nil {
		g = newGroup()
		d.Groups[k] = g
	}
	return g
}

// Add records one decoded entry (keyed.ModeDecode) of state st (nil:
// unknown kind) in group k of d, and, when d has a live digest, in that
// unless it is expired at ttl: a TTL list keeps only its live elements there
// and counts as expired when none is left.
func (h *Hasher) Add(d *Digest, k GroupKey, st *keyed.StateMeta, e *keyed.Entry, ttl TTLCheck) {
	_, b := h.Encode(e)
	sum := sha256.Sum256(b)
	g := d.group(k)
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
		g.addTTL(ts)
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
			_, b := h.Encode(&le)
			sum = sha256.Sum256(b)
			c, a = counts(st, live)
		}
	}
	lg := d.Live.group(k)
	lg.Entries++
	lg.Hash.add(sum)
	lg.Counts += c
	lg.Associations += a
	for _, ts := range ttls {
		lg.addTTL(ts)
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

// AddKeyed records one decoded entry (keyed.ModeDecode) of the given
// operator (hex id), as Compute does for every entry it reads; callers that
// decode entries another way (native RocksDB handles) digest them with it.
func (d *Digest) AddKeyed(operator string, e *keyed.Entry) {
	var h Hasher
	h.Add(d, GroupKey{Operator: operator, State: e.State.Name, KeyGroup: e.KeyGroup}, e.State, e, TTLCheck{})
}

// Options selects what Compute reads.
type Options struct {
	// Operator and State restrict the digest (as savepoint.ScanOptions).
	Operator, State string
	// SkipNative skips native handles instead of failing.
	SkipNative bool
}

// Compute decodes every keyed entry of sp and returns its digest (without
// operator descriptions or a live digest).
func Compute(ctx context.Context, sp *savepoint.Savepoint, o Options) (*Digest, error) {
	d := New()
	var h Hasher
	err := sp.WalkKeyed(ctx, savepoint.ScanOptions{
		Operator: o.Operator, State: o.State, KeyGroupTo: -1, Mode: keyed.ModeDecode, SkipNative: o.SkipNative,
	}, func(e *savepoint.KeyedEntry) error {
		h.Add(d, GroupKey{Operator: e.Operator.ID.String(), State: e.State.Name, KeyGroup: e.KeyGroup}, e.State, e.Entry, TTLCheck{})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}
