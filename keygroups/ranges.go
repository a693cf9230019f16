package keygroups

import (
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/errclass"
)

const (
	// MaxParallelismLimit is the largest max parallelism Flink accepts
	// (KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM, 1<<15).
	MaxParallelismLimit = 1 << 15
	// DefaultMaxParallelismLowerBound is the smallest max parallelism Flink
	// derives for a job that sets none (DEFAULT_LOWER_BOUND_MAX_PARALLELISM).
	DefaultMaxParallelismLowerBound = 128
)

// ErrParallelism reports an invalid (max) parallelism combination.
var ErrParallelism = errors.New("keygroups: invalid parallelism")

// CheckParallelism reports whether 1 ≤ parallelism ≤ maxParallelism ≤ 32768,
// the preconditions of every assignment function in this package.
func CheckParallelism(maxParallelism, parallelism int) error {
	if maxParallelism < 1 || maxParallelism > MaxParallelismLimit {
		return fmt.Errorf("%w: max parallelism %d not in [1, %d]", ErrParallelism, maxParallelism, MaxParallelismLimit)
	}
	if parallelism < 1 || parallelism > maxParallelism {
		return fmt.Errorf("%w: parallelism %d not in [1, max parallelism %d]", ErrParallelism, parallelism, maxParallelism)
	}
	return nil
}

// Range is an inclusive range of key groups [Start, End] (Flink's
// KeyGroupRange). A range with End < Start is empty; Empty is the canonical
// empty range.
type Range struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Empty is the empty key-group range (KeyGroupRange.EMPTY_KEY_GROUP_RANGE).
var Empty = Range{Start: 0, End: -1}

// IsEmpty reports whether r holds no key group.
func (r Range) IsEmpty() bool { return r.End < r.Start }

// Len is the number of key groups in r.
func (r Range) Len() int {
	if r.IsEmpty() {
		return 0
	}
	return r.End - r.Start + 1
}

// Contains reports whether key group kg lies in r.
func (r Range) Contains(kg int) bool { return kg >= r.Start && kg <= r.End }

// Intersect returns the key groups in both r and o (Empty if none).
func (r Range) Intersect(o Range) Range {
	s, e := max(r.Start, o.Start), min(r.End, o.End)
	if e < s || r.IsEmpty() || o.IsEmpty() {
		return Empty
	}
	return Range{Start: s, End: e}
}

// String formats r as "[start..end]" ("[]" when empty).
func (r Range) String() string {
	if r.IsEmpty() {
		return "[]"
	}
	return fmt.Sprintf("[%d..%d]", r.Start, r.End)
}

// RangeForSubtask is the key-group range owned by subtask i of parallelism
// p (computeKeyGroupRangeForOperatorIndex). It returns Empty when the
// arguments fail CheckParallelism or i is not in [0, p).
func RangeForSubtask(maxParallelism, parallelism, i int) Range {
	if CheckParallelism(maxParallelism, parallelism) != nil || i < 0 || i >= parallelism {
		return Empty
	}
	m, p := maxParallelism, parallelism
	return Range{Start: (i*m + p - 1) / p, End: ((i+1)*m - 1) / p}
}

// Ranges returns the key-group range of every subtask, index = subtask, or
// nil when the arguments fail CheckParallelism.
func Ranges(maxParallelism, parallelism int) []Range {
	if CheckParallelism(maxParallelism, parallelism) != nil {
		return nil
	}
	out := make([]Range, parallelism)
	for i := range out {
		out[i] = RangeForSubtask(maxParallelism, parallelism, i)
	}
	return out
}

// SubtaskForKeyGroup is the subtask index owning key group kg
// (computeOperatorIndexForKeyGroup): kg*p/maxP. It returns -1 when the
// arguments fail CheckParallelism or kg is not in [0, maxParallelism).
func SubtaskForKeyGroup(maxParallelism, parallelism, kg int) int {
	if CheckParallelism(maxParallelism, parallelism) != nil || kg < 0 || kg >= maxParallelism {
		return -1
	}
	return kg * parallelism / maxParallelism
}

// DefaultMaxParallelism is the max parallelism Flink picks for an operator
// first run with the given parallelism and no explicit max parallelism
// (computeDefaultMaxParallelism): roundUpToPowerOfTwo(p + p/2) clamped to
// [128, 32768]. It returns -1 for p outside [1, 32768].
func DefaultMaxParallelism(parallelism int) int {
	if parallelism < 1 || parallelism > MaxParallelismLimit {
		return -1
	}
	n := parallelism + parallelism/2
	pow := 1
	for pow < n {
		pow <<= 1
	}
	return min(max(pow, DefaultMaxParallelismLowerBound), MaxParallelismLimit)
}

// PrefixWidth is the number of key-group prefix bytes in front of every
// keyed entry (computeRequiredBytesInKeyGroupPrefix): 1 when maxParallelism
// ≤ 128, else 2.
func PrefixWidth(maxParallelism int) int {
	if maxParallelism > 128 {
		return 2
	}
	return 1
}

// AppendPrefix appends key group kg as a big-endian prefix of width bytes
// (1 or 2), as CompositeKeySerializationUtils.writeKeyGroup does.
func AppendPrefix(dst []byte, kg, width int) []byte {
	if width == 2 {
		return append(dst, byte(kg>>8), byte(kg))
	}
	return append(dst, byte(kg))
}

// PutPrefix writes the prefix into dst[:width]; dst must be at least width
// bytes long.
func PutPrefix(dst []byte, kg, width int) {
	if width == 2 {
		dst[0], dst[1] = byte(kg>>8), byte(kg)
		return
	}
	dst[0] = byte(kg)
}

// ErrShortPrefix reports a key too short to hold its key-group prefix.
var ErrShortPrefix = errclass.New(errclass.ErrCorrupt, "keygroups: key shorter than its key-group prefix")

// ReadPrefix decodes the key-group prefix of width bytes (1 or 2) at the
// start of key.
func ReadPrefix(key []byte, width int) (int, error) {
	if width != 1 && width != 2 {
		return 0, fmt.Errorf("keygroups: invalid prefix width %d", width)
	}
	if len(key) < width {
		return 0, fmt.Errorf("%w (%d < %d bytes)", ErrShortPrefix, len(key), width)
	}
	if width == 2 {
		return int(key[0])<<8 | int(key[1]), nil
	}
	return int(key[0]), nil
}

// PrefixBounds returns the smallest prefix of r and the prefix just after
// it, i.e. the [lo, hi) byte-string bounds that enclose every key of the key
// groups in r (what RocksDB deleteRange/iterators need to clip a database to
// a key-group range). For an empty r both are nil.
func PrefixBounds(r Range, width int) (lo, hi []byte) {
	if r.IsEmpty() {
		return nil, nil
	}
	return AppendPrefix(nil, r.Start, width), AppendPrefix(nil, r.End+1, width)
}
