package recordstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
)

// Side is the join input a row belongs to.
type Side uint8

// The two join inputs, as stored in the side byte of every key.
const (
	Left  Side = 0
	Right Side = 1
)

// Other returns the opposite side.
func (s Side) Other() Side { return s ^ 1 }

func (s Side) String() string {
	switch s {
	case Left:
		return "left"
	case Right:
		return "right"
	}
	return fmt.Sprintf("side(%d)", uint8(s))
}

// TTLPrefix is the size of the big-endian last-write timestamp that starts
// every stored value (the engine's convention, read by its compaction
// filter).
const TTLPrefix = 8

// RecordValueSize is the size of a record-layout value: timestamp, count
// and association count, each 8 bytes big-endian.
const RecordValueSize = TTLPrefix + 16

// BucketFormatV1 is the version byte of a bucket value.
const BucketFormatV1 = 0x01

// Limits applied when decoding untrusted bytes.
const (
	// MaxKeyLen bounds an equality key.
	MaxKeyLen = 1 << 20
	// MaxRowLen bounds one row payload.
	MaxRowLen = 64 << 20
	// MaxBucketRows bounds the rows of one bucket value.
	MaxBucketRows = 1 << 26
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errclass.New(errclass.ErrCorrupt, "recordstore: corrupt entry")

// LogicalRow is one distinct row of a (join key, side) multiset.
type LogicalRow struct {
	Row   []byte // row payload (compact row encoding, without TTL prefix)
	Count int64  // multiplicity, > 0
	Assoc int64  // association count (0 for inner joins; outer joins keep it)
	TS    int64  // last-write timestamp, epoch milliseconds
}

// LogicalGroup is the logical content of one (join key, side): the same for
// both layouts. Rows are ordered by payload bytes.
type LogicalGroup struct {
	KeyGroup int
	Side     Side
	Key      []byte // equality key (a BinaryRowData)
	Rows     []LogicalRow
}

// Problem is one structural defect found by Check.
type Problem struct {
	Key    []byte // stored key (copy)
	Offset int    // byte offset within the key or value where it was found
	InKey  bool   // the defect is in the key (else in the value)
	Msg    string
}

func (p Problem) String() string {
	where := "value"
	if p.InKey {
		where = "key"
	}
	return fmt.Sprintf("key %x: %s offset %d: %s", p.Key, where, p.Offset, p.Msg)
}

// KeyGroupOf is the Flink key group of an equality key (a BinaryRowData).
func KeyGroupOf(key []byte, maxParallelism int) int {
	return keygroups.KeyGroupFor(keygroups.HashRow(key), maxParallelism)
}

// AppendGroupPrefix appends kg | side | uvarint(len key) | key: the bucket
// key, and the prefix shared by every record of one (join key, side).
func AppendGroupPrefix(dst []byte, width, kg int, side Side, key []byte) []byte {
	dst = keygroups.AppendPrefix(dst, kg, width)
	dst = append(dst, byte(side))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// AppendRecordKey appends a record key: the group prefix followed by the
// row payload (the rest of the key, no length).
func AppendRecordKey(dst []byte, width, kg int, side Side, key, row []byte) []byte {
	return append(AppendGroupPrefix(dst, width, kg, side, key), row...)
}

// DecodeGroupKey splits a stored key into key group, side, equality key and
// the remainder (the row payload of a record key; empty for a bucket key).
// The slices alias stored. On error off is the offending byte offset.
func DecodeGroupKey(stored []byte, width int) (kg int, side Side, key, rest []byte, off int, err error) {
	if len(stored) < width+1 {
		return 0, 0, nil, nil, len(stored), fmt.Errorf("%w: key of %d bytes is shorter than key group and side", ErrCorrupt, len(stored))
	}
	if width == 2 {
		kg = int(stored[0])<<8 | int(stored[1])
	} else {
		kg = int(stored[0])
	}
	side = Side(stored[width])
	if side > Right {
		return 0, 0, nil, nil, width, fmt.Errorf("%w: side byte %d", ErrCorrupt, stored[width])
	}
	p := width + 1
	n, w := binary.Uvarint(stored[p:])
	if w <= 0 {
		return 0, 0, nil, nil, p, fmt.Errorf("%w: malformed key length", ErrCorrupt)
	}
	if n > MaxKeyLen || n > uint64(len(stored)-p-w) {
		return 0, 0, nil, nil, p, fmt.Errorf("%w: key length %d exceeds the %d bytes left", ErrCorrupt, n, len(stored)-p-w)
	}
	p += w
	key = stored[p : p+int(n)]
	rest = stored[p+int(n):]
	return kg, side, key, rest, 0, nil
}

// AppendRecordValue appends a record value.
func AppendRecordValue(dst []byte, ts, count, assoc int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	dst = binary.BigEndian.AppendUint64(dst, uint64(count))
	return binary.BigEndian.AppendUint64(dst, uint64(assoc))
}

// DecodeRecordValue reads a record value. The count must be positive and
// the association count non-negative.
func DecodeRecordValue(v []byte) (ts, count, assoc int64, off int, err error) {
	if len(v) != RecordValueSize {
		return 0, 0, 0, min(len(v), RecordValueSize), fmt.Errorf("%w: record value of %d bytes, want %d", ErrCorrupt, len(v), RecordValueSize)
	}
	ts = int64(binary.BigEndian.Uint64(v))
	count = int64(binary.BigEndian.Uint64(v[8:]))
	assoc = int64(binary.BigEndian.Uint64(v[16:]))
	if count <= 0 {
		return 0, 0, 0, 8, fmt.Errorf("%w: record count %d is not positive", ErrCorrupt, count)
	}
	if assoc < 0 {
		return 0, 0, 0, 16, fmt.Errorf("%w: negative association count %d", ErrCorrupt, assoc)
	}
	return ts, count, assoc, 0, nil
}

// recordTS reads only the timestamp of a record value (the expiry check
// runs before anything else is decoded or allocated).
func recordTS(v []byte) (int64, bool) {
	if len(v) < TTLPrefix {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// AppendBucketValue appends a bucket value holding rows, which must be
// sorted by payload bytes without duplicates and have positive counts. The
// leading timestamp is the newest row timestamp, so the engine's TTL
// compaction filter drops a bucket only when every row in it has expired.
//
//	ts        8 B big-endian, max over rows
//	version   1 B = BucketFormatV1
//	n         uvarint, number of rows
//	n times:  uvarint len | row payload | uvarint count | uvarint assoc |
//	          8 B big-endian row timestamp
func AppendBucketValue(dst []byte, rows []LogicalRow) []byte {
	maxTS := int64(math.MinInt64)
	for i := range rows {
		maxTS = max(maxTS, rows[i].TS)
	}
	if len(rows) == 0 {
		maxTS = 0
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(maxTS))
	dst = append(dst, BucketFormatV1)
	dst = binary.AppendUvarint(dst, uint64(len(rows)))
	for i := range rows {
		r := &rows[i]
		dst = binary.AppendUvarint(dst, uint64(len(r.Row)))
		dst = append(dst, r.Row...)
		dst = binary.AppendUvarint(dst, uint64(r.Count))
		dst = binary.AppendUvarint(dst, uint64(r.Assoc))
		dst = binary.BigEndian.AppendUint64(dst, uint64(r.TS))
	}
	return dst
}

// BucketSize is the encoded size of a bucket value of rows.
func BucketSize(rows []LogicalRow) int {
	n := TTLPrefix + 1 + uvarintLen(uint64(len(rows)))
	for i := range rows {
		r := &rows[i]
		n += uvarintLen(uint64(len(r.Row))) + len(r.Row) + uvarintLen(uint64(r.Count)) + uvarintLen(uint64(r.Assoc)) + 8
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// DecodeBucketValue visits the rows of a bucket value in stored order. Row
// bytes alias v. It checks every length against the bytes left, counts
// (positive), association counts (non-negative), strict payload order, and
// that the leading timestamp is the newest row timestamp. On error off is
// the byte offset within v.
func DecodeBucketValue(v []byte, fn func(r LogicalRow) error) (off int, err error) {
	if len(v) < TTLPrefix+1 {
		return len(v), fmt.Errorf("%w: bucket value of %d bytes is too short", ErrCorrupt, len(v))
	}
	head := int64(binary.BigEndian.Uint64(v))
	if v[TTLPrefix] != BucketFormatV1 {
		return TTLPrefix, fmt.Errorf("%w: bucket format version %d", ErrCorrupt, v[TTLPrefix])
	}
	p := TTLPrefix + 1
	uv := func(what string) (uint64, error) {
		x, w := binary.Uvarint(v[p:])
		if w <= 0 {
			return 0, fmt.Errorf("%w: malformed %s", ErrCorrupt, what)
		}
		p += w
		return x, nil
	}
	n, err := uv("row count")
	if err != nil {
		return p, err
	}
	// every row takes at least 1+1+1+8 bytes
	if n > MaxBucketRows || n > uint64(len(v)-p)/11 {
		return p, fmt.Errorf("%w: bucket row count %d cannot fit in %d bytes", ErrCorrupt, n, len(v)-p)
	}
	var prev []byte
	maxTS := int64(math.MinInt64)
	for i := uint64(0); i < n; i++ {
		start := p
		l, err := uv("row length")
		if err != nil {
			return start, err
		}
		if l > MaxRowLen || l > uint64(len(v)-p) {
			return start, fmt.Errorf("%w: row %d length %d exceeds the %d bytes left", ErrCorrupt, i, l, len(v)-p)
		}
		row := v[p : p+int(l)]
		p += int(l)
		if i > 0 && bytes.Compare(prev, row) >= 0 {
			return start, fmt.Errorf("%w: row %d is not after row %d in payload order", ErrCorrupt, i, i-1)
		}
		prev = row
		at := p
		c, err := uv("row count")
		if err != nil {
			return at, err
		}
		at2 := p
		a, err := uv("association count")
		if err != nil {
			return at2, err
		}
		if c == 0 || c > math.MaxInt64 {
			return at, fmt.Errorf("%w: row %d count %d is not a positive int64", ErrCorrupt, i, c)
		}
		if a > math.MaxInt64 {
			return at2, fmt.Errorf("%w: row %d association count %d overflows int64", ErrCorrupt, i, a)
		}
		if len(v)-p < 8 {
			return p, fmt.Errorf("%w: row %d timestamp truncated", ErrCorrupt, i)
		}
		ts := int64(binary.BigEndian.Uint64(v[p:]))
		p += 8
		maxTS = max(maxTS, ts)
		if err := fn(LogicalRow{Row: row, Count: int64(c), Assoc: int64(a), TS: ts}); err != nil {
			return start, err
		}
	}
	if p != len(v) {
		return p, fmt.Errorf("%w: %d trailing bytes after the last row", ErrCorrupt, len(v)-p)
	}
	if n > 0 && head != maxTS {
		return 0, fmt.Errorf("%w: bucket timestamp %d is not the newest row timestamp %d", ErrCorrupt, head, maxTS)
	}
	return 0, nil
}

// sortRows orders rows by payload bytes.
func sortRows(rows []LogicalRow) {
	sort.Slice(rows, func(i, j int) bool { return bytes.Compare(rows[i].Row, rows[j].Row) < 0 })
}

// expired reports whether a row written at ts is expired at now under ttl
// milliseconds (0 = never), Flink's rule ts + ttl <= now.
func expired(ts, now, ttl int64) bool {
	if ttl <= 0 || ts > math.MaxInt64-ttl {
		return false
	}
	return ts+ttl <= now
}

// BucketToRecords converts one bucket entry (stored key and value) into the
// record layout's entries, calling fn with each record key and value in
// key order (the bytes are reused after fn returns). Rows expired at now
// under ttl milliseconds (0 = never) are dropped. It is the per-key step of
// bucket → record migration and allocates nothing per row beyond dst
// growth.
func BucketToRecords(width int, stored, value []byte, now, ttl int64, fn func(key, val []byte) error) error {
	kg, side, key, rest, off, err := DecodeGroupKey(stored, width)
	if err != nil {
		return fmt.Errorf("recordstore: bucket key %x offset %d: %w", stored, off, err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("recordstore: bucket key %x offset %d: %w: %d bytes after the equality key", stored, len(stored)-len(rest), ErrCorrupt, len(rest))
	}
	var k, v []byte
	prefix := AppendGroupPrefix(nil, width, kg, side, key)
	if off, err := DecodeBucketValue(value, func(r LogicalRow) error {
		if expired(r.TS, now, ttl) {
			return nil
		}
		k = append(append(k[:0], prefix...), r.Row...)
		v = AppendRecordValue(v[:0], r.TS, r.Count, r.Assoc)
		return fn(k, v)
	}); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return fmt.Errorf("recordstore: bucket %x value offset %d: %w", stored, off, err)
		}
		return err
	}
	return nil
}
