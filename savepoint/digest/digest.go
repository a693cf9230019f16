// Package digest computes a logical digest of a canonical savepoint's keyed
// state: per operator, state and key group the number of entries, an
// order-independent hash of the entries and the range of TTL last-access
// timestamps. Two savepoints with the same logical content have equal
// digests whatever wrote them (Flink with either backend, sfstate's
// export), however their entries are ordered, split over files or
// encoded byte for byte (BinaryRowData padding, heap vs RocksDB order,
// Snappy compression, parallelism).
//
// An entry is hashed from its decoded parts (savepoint/serde values in a
// canonical binary encoding: tagged, fixed-width numbers, floats by their
// bits, map entries sorted): key, namespace, user key (MAP), value with the TTL
// wrapper removed, and the TTL timestamp. SHA-256 of those parts gives
// 128 bits per entry that are summed (mod 2^64 per half), so the group
// hash does not depend on order, and duplicates are not cancelled out as
// they would be with XOR. Priority-queue (timer) entries count like any
// other entry.
//
// The package is pure Go and reads savepoints through package savepoint,
// so it works on any canonical savepoint; Compute never modifies its input.
package digest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
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
	Operator string // operator id, hex
	State    string
	KeyGroup int
}

// Group is the digest of one (operator, state, key group).
type Group struct {
	Entries int64
	// Sum is the order-independent entry hash (two 64-bit lanes).
	Sum [2]uint64
	// TTLEntries counts entries with a TTL timestamp; TTLMin/TTLMax are
	// their smallest and largest last-access times (valid if TTLEntries > 0).
	TTLEntries     int64
	TTLMin, TTLMax int64
}

// Digest is the logical digest of a savepoint's keyed state.
type Digest struct {
	Groups map[GroupKey]*Group
}

// New returns an empty digest.
func New() *Digest { return &Digest{Groups: map[GroupKey]*Group{}} }

// Entry is one logical entry as Add takes it: the decoded parts, any of
// which may be nil.
type Entry struct {
	Key, Namespace, UserKey, Value any
	TTL                            *int64
}

// render appends a length-prefixed canonical encoding of a decoded value.
func render(dst []byte, v any) []byte {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendCanonical(dst, v, 0)
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst
}

// AppendValue appends the canonical encoding of a decoded value that
// digests hash: equal logical values encode equally whatever bytes they
// were decoded from (map entries sorted), and the encoding delimits itself.
func AppendValue(dst []byte, v any) []byte { return appendCanonical(dst, v, 0) }

// maxDepth bounds the recursion over nested values.
const maxDepth = 64

// appendCanonical encodes a decoded serde value deterministically: a tag
// per type, fixed-width big-endian numbers (floats by their bits),
// length-prefixed strings and sequences, map entries sorted by their
// encoding. Equal logical values encode equally whatever bytes they were
// decoded from. Types without a case are encoded as their type name and
// JSON.
func appendCanonical(dst []byte, v any, depth int) []byte {
	if depth > maxDepth {
		return append(dst, '!')
	}
	seq := func(tag byte, n int, at func(i int) any) []byte {
		dst = append(dst, tag)
		dst = binary.BigEndian.AppendUint32(dst, uint32(n))
		for i := 0; i < n; i++ {
			dst = appendCanonical(dst, at(i), depth+1)
		}
		return dst
	}
	str := func(tag byte, s string) []byte {
		dst = append(dst, tag)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
		return append(dst, s...)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, 'N')
	case bool:
		if x {
			return append(dst, 't')
		}
		return append(dst, 'f')
	case int8:
		return append(dst, 'b', byte(x))
	case int16:
		return binary.BigEndian.AppendUint16(append(dst, 's'), uint16(x))
	case serde.Char:
		return binary.BigEndian.AppendUint16(append(dst, 'c'), uint16(x))
	case int32:
		return binary.BigEndian.AppendUint32(append(dst, 'i'), uint32(x))
	case int64:
		return binary.BigEndian.AppendUint64(append(dst, 'l'), uint64(x))
	case int:
		return binary.BigEndian.AppendUint64(append(dst, 'l'), uint64(x))
	case float32:
		return binary.BigEndian.AppendUint32(append(dst, 'F'), math.Float32bits(x))
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, 'D'), math.Float64bits(x))
	case string:
		return str('S', x)
	case []byte:
		return str('B', string(x))
	case serde.Void:
		return append(dst, 'V')
	case serde.GlobalWindow:
		return append(dst, 'G')
	case serde.TimeWindow:
		dst = binary.BigEndian.AppendUint64(append(dst, 'W'), uint64(x.Start))
		return binary.BigEndian.AppendUint64(dst, uint64(x.End))
	case serde.CountWindow:
		return binary.BigEndian.AppendUint64(append(dst, 'C'), uint64(x.ID))
	case serde.Timestamp:
		dst = binary.BigEndian.AppendUint64(append(dst, 'T'), uint64(x.Millis))
		return binary.BigEndian.AppendUint32(dst, uint32(x.NanoOfMill))
	case serde.Decimal:
		u := ""
		if x.Unscaled != nil {
			u = x.Unscaled.String()
		}
		dst = binary.BigEndian.AppendUint32(str('d', u), uint32(x.Scale))
		return dst
	case *serde.Row:
		if x == nil {
			return append(dst, 'N')
		}
		dst = append(dst, 'R', byte(x.Kind))
		return seq('r', len(x.Fields), func(i int) any { return x.Fields[i] })
	case serde.Tuple:
		return seq('U', len(x), func(i int) any { return x[i] })
	case serde.List:
		return seq('L', len(x), func(i int) any { return x[i] })
	case []any:
		return seq('L', len(x), func(i int) any { return x[i] })
	case serde.Map:
		entries := make([][]byte, len(x))
		for i, e := range x {
			b := appendCanonical(nil, e.Key, depth+1)
			entries[i] = appendCanonical(b, e.Value, depth+1)
		}
		sort.Slice(entries, func(i, j int) bool { return string(entries[i]) < string(entries[j]) })
		dst = binary.BigEndian.AppendUint32(append(dst, 'M'), uint32(len(entries)))
		for _, e := range entries {
			dst = append(dst, e...)
		}
		return dst
	case *serde.TTLValue:
		if x == nil {
			return append(dst, 'N')
		}
		dst = binary.BigEndian.AppendUint64(append(dst, 'X'), uint64(x.LastAccess))
		return appendCanonical(dst, x.Value, depth+1)
	case *serde.Timer:
		if x == nil {
			return append(dst, 'N')
		}
		dst = binary.BigEndian.AppendUint64(append(dst, 'Z'), uint64(x.Timestamp))
		dst = appendCanonical(dst, x.Key, depth+1)
		return appendCanonical(dst, x.Namespace, depth+1)
	case *serde.Raw:
		if x == nil {
			return append(dst, 'N')
		}
		dst = str('Q', x.Serializer)
		return str('q', string(x.Bytes))
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, "%v", v)
	}
	dst = str('?', fmt.Sprintf("%T", v))
	return str('j', string(b))
}

// Add records one entry.
func (d *Digest) Add(k GroupKey, e Entry) {
	var buf []byte
	buf = render(buf, e.Key)
	buf = render(buf, e.Namespace)
	buf = render(buf, e.UserKey)
	buf = render(buf, e.Value)
	if e.TTL != nil {
		buf = append(buf, 1)
		buf = binary.BigEndian.AppendUint64(buf, uint64(*e.TTL))
	} else {
		buf = append(buf, 0)
	}
	h := sha256.Sum256(buf)
	g := d.Groups[k]
	if g == nil {
		g = &Group{TTLMin: math.MaxInt64, TTLMax: math.MinInt64}
		d.Groups[k] = g
	}
	g.Entries++
	g.Sum[0] += binary.BigEndian.Uint64(h[0:8])
	g.Sum[1] += binary.BigEndian.Uint64(h[8:16])
	if e.TTL != nil {
		g.TTLEntries++
		g.TTLMin = min(g.TTLMin, *e.TTL)
		g.TTLMax = max(g.TTLMax, *e.TTL)
	}
}

// AddKeyed records one decoded entry (keyed.ModeDecode) of the given
// operator (hex id), as Compute does for every entry it reads; callers that
// decode entries another way (native RocksDB handles) digest them with it.
func (d *Digest) AddKeyed(operator string, e *keyed.Entry) {
	v := e.Value
	if t, ok := v.(*serde.TTLValue); ok {
		v = t.Value
	}
	d.Add(GroupKey{Operator: operator, State: e.State.Name, KeyGroup: e.KeyGroup},
		Entry{Key: e.Key, Namespace: e.Namespace, UserKey: e.UserKey, Value: v, TTL: e.TTLTimestamp})
}

// Options selects what Compute reads.
type Options struct {
	// Operator and State restrict the digest (as savepoint.ScanOptions).
	Operator, State string
	// SkipNative skips native handles instead of failing.
	SkipNative bool
}

// Compute decodes every keyed entry of sp and returns its digest.
func Compute(ctx context.Context, sp *savepoint.Savepoint, o Options) (*Digest, error) {
	d := New()
	err := sp.WalkKeyed(ctx, savepoint.ScanOptions{
		Operator: o.Operator, State: o.State, KeyGroupTo: -1, Mode: keyed.ModeDecode, SkipNative: o.SkipNative,
	}, func(e *savepoint.KeyedEntry) error {
		d.AddKeyed(e.Operator.ID.String(), e.Entry)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Total sums the groups of one operator and state ("" = all).
func (d *Digest) Total(operator, state string) Group {
	t := Group{TTLMin: math.MaxInt64, TTLMax: math.MinInt64}
	for k, g := range d.Groups {
		if (operator != "" && k.Operator != operator) || (state != "" && k.State != state) {
			continue
		}
		t.Entries += g.Entries
		t.Sum[0] += g.Sum[0]
		t.Sum[1] += g.Sum[1]
		t.TTLEntries += g.TTLEntries
		if g.TTLEntries > 0 {
			t.TTLMin = min(t.TTLMin, g.TTLMin)
			t.TTLMax = max(t.TTLMax, g.TTLMax)
		}
	}
	return t
}

// Keys returns the group keys in (operator, state, key group) order.
func (d *Digest) Keys() []GroupKey {
	ks := make([]GroupKey, 0, len(d.Groups))
	for k := range d.Groups {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.Operator != b.Operator {
			return a.Operator < b.Operator
		}
		if a.State != b.State {
			return a.State < b.State
		}
		return a.KeyGroup < b.KeyGroup
	})
	return ks
}

// Diff lists the groups that differ between d and other (at most limit
// lines, 0 = all), in key order; nil means equal.
func (d *Digest) Diff(other *Digest, limit int) []string {
	seen := map[GroupKey]bool{}
	var ks []GroupKey
	for _, dd := range []*Digest{d, other} {
		for _, k := range dd.Keys() {
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.Operator != b.Operator {
			return a.Operator < b.Operator
		}
		if a.State != b.State {
			return a.State < b.State
		}
		return a.KeyGroup < b.KeyGroup
	})
	var out []string
	for _, k := range ks {
		a, b := d.Groups[k], other.Groups[k]
		var msg string
		switch {
		case a == nil:
			msg = fmt.Sprintf("only in second: %d entries", b.Entries)
		case b == nil:
			msg = fmt.Sprintf("only in first: %d entries", a.Entries)
		case a.Entries != b.Entries:
			msg = fmt.Sprintf("entries %d vs %d", a.Entries, b.Entries)
		case a.Sum != b.Sum:
			msg = "same entry count, different content"
		case a.TTLEntries != b.TTLEntries || (a.TTLEntries > 0 && (a.TTLMin != b.TTLMin || a.TTLMax != b.TTLMax)):
			msg = fmt.Sprintf("TTL entries %d [%d, %d] vs %d [%d, %d]", a.TTLEntries, a.TTLMin, a.TTLMax, b.TTLEntries, b.TTLMin, b.TTLMax)
		default:
			continue
		}
		out = append(out, fmt.Sprintf("operator %s state %q key group %d: %s", k.Operator, k.State, k.KeyGroup, msg))
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out
}
