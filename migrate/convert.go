package migrate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sort"

	"github.com/sfstate/sfstate/recordstore"
)

// ErrCorrupt is wrapped by every error about undecodable source state.
var ErrCorrupt = recordstore.ErrCorrupt

// Converter turns bucket entries into record entries. It reuses its key
// and value buffers; the zero value is ready for use with Width set.
type Converter struct {
	// Width is the key-group prefix width (1 or 2 bytes).
	Width int
	key   []byte
	val   []byte
	b     Bucket
	row   recordstore.LogicalRow
}

// Bucket is one decoded bucket key.
type Bucket struct {
	KeyGroup int
	Side     recordstore.Side
	Key      []byte // equality key (aliases the stored key)
	Prefix   []byte // the stored bucket key = the records' group prefix
}

// DecodeBucketKey splits a stored bucket key. On error off is the offending
// byte offset.
func DecodeBucketKey(k []byte, width int) (Bucket, int, error) {
	kg, side, key, rest, off, err := recordstore.DecodeGroupKey(k, width)
	if err != nil {
		return Bucket{}, off, err
	}
	if len(rest) != 0 {
		return Bucket{}, len(k) - len(rest), fmt.Errorf("%w: %d bytes after the equality key of a bucket key", ErrCorrupt, len(rest))
	}
	return Bucket{KeyGroup: kg, Side: side, Key: key, Prefix: k}, 0, nil
}

// ConvertBucket decodes one stored bucket entry (key k, value v) and calls
// emit with every record entry it becomes, in ascending record-key order.
// The slices passed to emit are valid only during the call. Expired rows
// are converted too: they keep their timestamps. On a decoding error
// nothing more is emitted and the error names the offset within the key
// or value. It returns the decoded bucket.
func (c *Converter) ConvertBucket(k, v []byte, emit func(b *Bucket, r *recordstore.LogicalRow, recKey, recVal []byte) error) (Bucket, error) {
	b, off, err := DecodeBucketKey(k, c.Width)
	if err != nil {
		return b, fmt.Errorf("bucket key %x offset %d: %w", k, off, err)
	}
	// b and the row live in c: handing their addresses to emit costs no
	// allocation per row
	c.b = b
	off, err = recordstore.DecodeBucketValue(v, func(r recordstore.LogicalRow) error {
		c.key = append(append(c.key[:0], k...), r.Row...)
		c.val = recordstore.AppendRecordValue(c.val[:0], r.TS, r.Count, r.Assoc)
		c.row = r
		return emit(&c.b, &c.row, c.key, c.val)
	})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return b, fmt.Errorf("bucket %x value offset %d: %w", k, off, err)
		}
		return b, err
	}
	return b, nil
}

// GroupID names one (side, key group) of a join state.
type GroupID struct {
	Side     recordstore.Side
	KeyGroup int
}

// GroupStats summarize the rows of one (side, key group).
type GroupStats struct {
	Keys  int64  `json:"keys"`        // distinct join keys
	Rows  int64  `json:"rows"`        // distinct rows
	Count int64  `json:"count"`       // sum of counts (wrapping)
	Assoc int64  `json:"assoc"`       // sum of association counts (wrapping)
	Hash  uint64 `json:"hash,string"` // sum of per-row hashes of (key, row, count, timestamp)
	Bytes int64  `json:"bytes"`       // key and row payload bytes
}

func (s *GroupStats) add(o GroupStats) {
	s.Keys += o.Keys
	s.Rows += o.Rows
	s.Count += o.Count
	s.Assoc += o.Assoc
	s.Hash += o.Hash
	s.Bytes += o.Bytes
}

// Digest is the logical summary of one join state: per (side, key group)
// statistics that do not depend on layout, backend or entry order.
type Digest struct {
	Groups map[GroupID]*GroupStats
}

// NewDigest returns an empty digest.
func NewDigest() *Digest { return &Digest{Groups: make(map[GroupID]*GroupStats)} }

const (
	hk1 = 0x9e3779b185ebca87
	hk2 = 0xc2b2ae3d27d4eb4f
	hk3 = 0x165667b19e3779f9
	hk4 = 0x85ebca77c2b2ae63
)

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// mum folds the 128-bit product of a and b into 64 bits.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// tailWord reads up to 8 bytes little-endian, zero-padded.
func tailWord(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.LittleEndian.Uint64(b)
	}
	var t uint64
	for i, c := range b {
		t |= uint64(c) << (8 * i)
	}
	return t
}

// hashBytes is a fast non-cryptographic 64-bit hash of b continuing from
// seed. Two independent lanes each fold 16 bytes per step with a
// 64×64→128-bit multiply (high half xor low half) keyed by the lane's
// previous state, so the multiplies of a 32-byte block overlap; each step
// also keeps the rotated previous state, so a zero product cannot erase
// what came before. The length enters the seed and the final avalanche.
// Digests only need it deterministic and sensitive to every byte and to
// the length: a changed row goes unnoticed with probability about 2^-64.
func hashBytes(seed uint64, b []byte) uint64 {
	n := uint64(len(b))
	h1 := seed ^ n*hk3
	h2 := bits.RotateLeft64(seed, 32) ^ hk4
	for len(b) >= 32 {
		w0 := binary.LittleEndian.Uint64(b)
		w1 := binary.LittleEndian.Uint64(b[8:])
		w2 := binary.LittleEndian.Uint64(b[16:])
		w3 := binary.LittleEndian.Uint64(b[24:])
		h1 = mum(w0^hk1, w1^h1) ^ bits.RotateLeft64(h1, 23)
		h2 = mum(w2^hk2, w3^h2) ^ bits.RotateLeft64(h2, 23)
		b = b[32:]
	}
	h := h1 ^ bits.RotateLeft64(h2, 31)*hk1
	if len(b) >= 16 {
		h = mum(binary.LittleEndian.Uint64(b)^hk1, binary.LittleEndian.Uint64(b[8:])^h) ^ bits.RotateLeft64(h, 23)
		b = b[16:]
	}
	var w0, w1 uint64
	if len(b) > 8 {
		w0, w1 = binary.LittleEndian.Uint64(b), tailWord(b[8:])
	} else {
		w0 = tailWord(b)
	}
	h = mum(w0^hk2, w1^h^hk3) ^ bits.RotateLeft64(h, 23)
	return mix64(h ^ n)
}

// RowHash is the hash of one row of a group whose prefix hash is
// prefixHash (see PrefixHash), mixed with the row's count and timestamp.
func RowHash(prefixHash uint64, row []byte, count, ts int64) uint64 {
	h := hashBytes(prefixHash, row)
	return mix64(h ^ mix64(uint64(count)^bits.RotateLeft64(uint64(ts), 29)^hk4))
}

// PrefixHash is the hash of a group prefix (the bucket key, or a record
// key without its row), the seed of RowHash.
func PrefixHash(prefix []byte) uint64 { return hashBytes(0x243f6a8885a308d3, prefix) }

// Group returns the statistics of id, creating them.
func (d *Digest) Group(id GroupID) *GroupStats {
	g := d.Groups[id]
	if g == nil {
		g = &GroupStats{}
		d.Groups[id] = g
	}
	return g
}

// AddRow adds one row of a group whose prefix hash is prefixHash.
func (d *Digest) AddRow(g *GroupStats, prefixHash uint64, key []byte, r *recordstore.LogicalRow) {
	g.Rows++
	g.Count += r.Count
	g.Assoc += r.Assoc
	g.Hash += RowHash(prefixHash, r.Row, r.Count, r.TS)
	g.Bytes += int64(len(r.Row))
}

// AddBucketEntry decodes one stored bucket entry and adds it.
func (d *Digest) AddBucketEntry(width int, k, v []byte) error {
	b, off, err := DecodeBucketKey(k, width)
	if err != nil {
		return fmt.Errorf("bucket key %x offset %d: %w", k, off, err)
	}
	g := d.Group(GroupID{b.Side, b.KeyGroup})
	pc := PrefixHash(k)
	first := true
	off, err = recordstore.DecodeBucketValue(v, func(r recordstore.LogicalRow) error {
		if first {
			first = false
			g.Keys++
			g.Bytes += int64(len(b.Key))
		}
		d.AddRow(g, pc, b.Key, &r)
		return nil
	})
	if err != nil {
		return fmt.Errorf("bucket %x value offset %d: %w", k, off, err)
	}
	return nil
}

// RecordDigester adds record entries, given in key order, to a digest
// (key order lets it count distinct join keys without remembering them).
type RecordDigester struct {
	D      *Digest
	Width  int
	prefix []byte
	pc     uint64
	g      *GroupStats
}

// Add adds one stored record entry.
func (rd *RecordDigester) Add(k, v []byte) error {
	if rd.g != nil && len(k) >= len(rd.prefix) && string(k[:len(rd.prefix)]) == string(rd.prefix) {
		// same group as the previous record: a group prefix is
		// self-delimiting, so the rest of the key is the row
		ts, c, a, off, err := recordstore.DecodeRecordValue(v)
		if err != nil {
			return fmt.Errorf("record %x value offset %d: %w", k, off, err)
		}
		rd.g.Rows++
		rd.g.Count += c
		rd.g.Assoc += a
		row := k[len(rd.prefix):]
		rd.g.Hash += RowHash(rd.pc, row, c, ts)
		rd.g.Bytes += int64(len(row))
		return nil
	}
	kg, side, key, row, off, err := recordstore.DecodeGroupKey(k, rd.Width)
	if err != nil {
		return fmt.Errorf("record key %x offset %d: %w", k, off, err)
	}
	ts, c, a, off, err := recordstore.DecodeRecordValue(v)
	if err != nil {
		return fmt.Errorf("record %x value offset %d: %w", k, off, err)
	}
	p := k[:len(k)-len(row)]
	if rd.g == nil || string(p) != string(rd.prefix) {
		rd.prefix = append(rd.prefix[:0], p...)
		rd.pc = PrefixHash(p)
		rd.g = rd.D.Group(GroupID{side, kg})
		rd.g.Keys++
		rd.g.Bytes += int64(len(key))
	}
	rd.D.AddRow(rd.g, rd.pc, key, &recordstore.LogicalRow{Row: row, Count: c, Assoc: a, TS: ts})
	return nil
}

// AddGroup adds one logical group (recordstore.JoinState.Logical).
func (d *Digest) AddGroup(width int, lg *recordstore.LogicalGroup) {
	g := d.Group(GroupID{lg.Side, lg.KeyGroup})
	g.Keys++
	g.Bytes += int64(len(lg.Key))
	pc := PrefixHash(recordstore.AppendGroupPrefix(nil, width, lg.KeyGroup, lg.Side, lg.Key))
	for i := range lg.Rows {
		d.AddRow(g, pc, lg.Key, &lg.Rows[i])
	}
}

// Merge adds o's statistics to d.
func (d *Digest) Merge(o *Digest) {
	for id, s := range o.Groups {
		d.Group(id).add(*s)
	}
}

// Total sums every group.
func (d *Digest) Total() GroupStats {
	var t GroupStats
	for _, s := range d.Groups {
		t.add(*s)
	}
	return t
}

// IDs returns the group ids in (side, key group) order.
func (d *Digest) IDs() []GroupID {
	ids := make([]GroupID, 0, len(d.Groups))
	for id := range d.Groups {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Side != ids[j].Side {
			return ids[i].Side < ids[j].Side
		}
		return ids[i].KeyGroup < ids[j].KeyGroup
	})
	return ids
}

// Mismatch is one group whose statistics differ.
type Mismatch struct {
	ID       GroupID
	Src, Dst GroupStats
}

func (m Mismatch) String() string {
	return fmt.Sprintf("side %s key group %d: source keys=%d rows=%d count=%d assoc=%d hash=%016x, migrated keys=%d rows=%d count=%d assoc=%d hash=%016x",
		m.ID.Side, m.ID.KeyGroup, m.Src.Keys, m.Src.Rows, m.Src.Count, m.Src.Assoc, m.Src.Hash,
		m.Dst.Keys, m.Dst.Rows, m.Dst.Count, m.Dst.Assoc, m.Dst.Hash)
}

// Compare lists the groups whose statistics differ between src and dst.
func Compare(src, dst *Digest) []Mismatch {
	var out []Mismatch
	seen := map[GroupID]bool{}
	for _, d := range []*Digest{src, dst} {
		for _, id := range d.IDs() {
			if seen[id] {
				continue
			}
			seen[id] = true
			var a, b GroupStats
			if s := src.Groups[id]; s != nil {
				a = *s
			}
			if s := dst.Groups[id]; s != nil {
				b = *s
			}
			if a != b {
				out = append(out, Mismatch{ID: id, Src: a, Dst: b})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ID.Side != out[j].ID.Side {
			return out[i].ID.Side < out[j].ID.Side
		}
		return out[i].ID.KeyGroup < out[j].ID.KeyGroup
	})
	return out
}
