package verify

import (
	"fmt"
	"strconv"
	"strings"
)

// Shard selects a deterministic share of every operator's key groups:
// shard Index of Count gets the contiguous key groups
// [Index*maxP/Count, (Index+1)*maxP/Count). The zero Shard is everything.
// The split depends only on the max parallelism, so every shard of every
// run agrees on it, and the shards of one operator cover each key group
// exactly once.
type Shard struct {
	Index, Count int
}

// ParseShard parses "i/n" (0 <= i < n).
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || n > 1<<15 || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("verify: shard %q: want i/n with 0 <= i < n <= 32768", s)
	}
	return Shard{Index: i, Count: n}, nil
}

// All reports whether s is the whole savepoint.
func (s Shard) All() bool { return s.Count <= 1 }

func (s Shard) String() string {
	if s.All() {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Range returns the inclusive key-group range of the shard for an operator
// of max parallelism maxP; from > to when the shard has no key group.
func (s Shard) Range(maxP int) (from, to int) {
	if s.All() {
		return 0, maxP - 1
	}
	from = int(int64(s.Index) * int64(maxP) / int64(s.Count))
	to = int(int64(s.Index+1)*int64(maxP)/int64(s.Count)) - 1
	return from, to
}
