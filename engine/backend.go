package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/sfstate/sfstate/keygroups"
)

// Kind is the shape of a declared state.
type Kind uint8

// State kinds. Value and List keep one stored entry per (key, namespace);
// Map and Multiset keep one stored entry per (key, namespace, user key);
// PriorityQueue keeps one stored entry per element, ordered by priority.
const (
	KindValue Kind = iota + 1
	KindList
	KindMap
	KindMultiset
	KindPriorityQueue
)

func (k Kind) String() string {
	switch k {
	case KindValue:
		return "value"
	case KindList:
		return "list"
	case KindMap:
		return "map"
	case KindMultiset:
		return "multiset"
	case KindPriorityQueue:
		return "priority-queue"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// StateDesc declares one state of an operator. Each state gets its own
// column family (RocksDB) or ordered map (heap).
type StateDesc struct {
	Name string
	Kind Kind
	// TTL is the state's time-to-live; zero disables expiry. The last-access
	// timestamp is refreshed on create and write (Flink's OnCreateAndWrite);
	// expired entries are never returned.
	TTL time.Duration
}

// Layout fixes the key-group prefix of every stored key.
type Layout struct {
	// MaxParallelism is the job's maximum parallelism (number of key groups).
	MaxParallelism int
	// Range is the key-group range owned by this operator subtask.
	Range keygroups.Range
}

// Validate checks the layout.
func (l Layout) Validate() error {
	if l.MaxParallelism < 1 || l.MaxParallelism > 1<<15 {
		return fmt.Errorf("engine: max parallelism %d out of [1, 32768]", l.MaxParallelism)
	}
	if l.Range.Start < 0 || l.Range.End >= l.MaxParallelism || l.Range.IsEmpty() {
		return fmt.Errorf("engine: key-group range [%d, %d] invalid for max parallelism %d",
			l.Range.Start, l.Range.End, l.MaxParallelism)
	}
	return nil
}

// Width is the key-group prefix width of this layout.
func (l Layout) Width() int { return keygroups.PrefixWidth(l.MaxParallelism) }

// AppendKeyGroup appends kg's prefix to dst.
func (l Layout) AppendKeyGroup(dst []byte, kg int) []byte {
	return keygroups.AppendPrefix(dst, kg, l.Width())
}

// Key appends the stored key of (kg, key, namespace) for value and list
// states (see State.Key).
func (l Layout) Key(dst []byte, kg int, key, ns []byte) []byte {
	dst = l.AppendKeyGroup(dst, kg)
	dst = appendLenBytes(dst, key)
	return appendLenBytes(dst, ns)
}

// KeyGroupOf reads the key group of a stored key.
func (l Layout) KeyGroupOf(key []byte) (int, error) {
	kg, err := keygroups.ReadPrefix(key, l.Width())
	if err != nil {
		return 0, fmt.Errorf("engine: stored key of %d bytes is shorter than the %d-byte key-group prefix", len(key), l.Width())
	}
	return kg, nil
}

// RangeBounds returns [lower, upper) stored-key bounds covering the
// key groups start..end inclusive. upper is nil when end is the last
// key group representable in the prefix width.
func (l Layout) RangeBounds(start, end int) (lower, upper []byte) {
	lower = l.AppendKeyGroup(nil, start)
	limit := 1 << (8 * l.Width())
	if end+1 >= limit {
		return lower, nil
	}
	return lower, l.AppendKeyGroup(nil, end+1)
}

// ErrClosed is returned by operations on a closed backend.
var ErrClosed = errors.New("engine: backend closed")

// ErrUnknownState is returned for a state name the operator did not declare.
var ErrUnknownState = errors.New("engine: unknown state")

// Backend is the raw, ordered key-value store of one operator subtask: one
// keyspace per declared state, keys and values as opaque bytes. Both
// implementations (RocksDB and heap) have the same semantics; TTL and
// state kinds are interpreted above this interface, by Operator and Bundle.
type Backend interface {
	// Name is "rocksdb" or "heap".
	Name() string
	// Layout returns the key-group layout the backend was opened with.
	Layout() Layout
	// States lists the declared states, indexed by state id.
	States() []StateDesc
	// MultiGet reads keys of state st in one batch. fn is called once per
	// key, in input order, with the stored value (ok=false when absent).
	// The value bytes are only valid during the call. Keys need not be
	// sorted and may repeat.
	MultiGet(st int, keys [][]byte, fn func(i int, val []byte, ok bool)) error
	// NewBatch starts an atomic write batch.
	NewBatch() Batch
	// Scan visits the entries of st with lower <= key < upper in key order
	// (upper nil = no bound) until fn returns false. Key and value bytes are
	// only valid during the call. Writes must not run concurrently.
	Scan(st int, lower, upper []byte, fn func(key, val []byte) bool) error
	// DeleteRange removes every entry of st with lower <= key < upper.
	DeleteRange(st int, lower, upper []byte) error
	// Flush makes every committed batch durable (a no-op for the heap).
	Flush() error
	// Close releases the backend. Further calls return ErrClosed.
	Close() error
}

// MultiStateGetter is implemented by backends that read keys of several
// states in one batch (RocksDB: one batched MultiGet over several column
// families). fn is called in input order as for MultiGet.
type MultiStateGetter interface {
	MultiGetStates(sts []int, keys [][]byte, fn func(i int, val []byte, ok bool)) error
}

// Batch collects writes applied atomically by Commit. Put and Delete copy
// their arguments.
type Batch interface {
	Put(st int, key, val []byte)
	Delete(st int, key []byte)
	// Len is the number of operations queued.
	Len() int
	// Commit applies the batch (WAL off for RocksDB) and resets it.
	Commit() error
	// Close releases the batch's resources; a batch must be closed.
	Close()
}

func checkStates(states []StateDesc) error {
	if len(states) == 0 {
		return errors.New("engine: no states declared")
	}
	if len(states) > 1<<15 {
		return fmt.Errorf("engine: %d states declared, limit is 32768", len(states))
	}
	seen := make(map[string]bool, len(states))
	for _, s := range states {
		if s.Name == "" || s.Name == "default" {
			return fmt.Errorf("engine: invalid state name %q", s.Name)
		}
		if s.Kind < KindValue || s.Kind > KindPriorityQueue {
			return fmt.Errorf("engine: state %q: invalid kind %d", s.Name, s.Kind)
		}
		if s.TTL < 0 || (s.TTL > 0 && s.TTL < time.Millisecond) {
			return fmt.Errorf("engine: state %q: TTL %v must be zero or at least 1ms", s.Name, s.TTL)
		}
		if s.Kind == KindPriorityQueue && s.TTL != 0 {
			return fmt.Errorf("engine: state %q: priority queues have no TTL", s.Name)
		}
		if seen[s.Name] {
			return fmt.Errorf("engine: state %q declared twice", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}
