//go:build cgo

package recordstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/sfstate/sfstate/engine"
)

// Layout names a join-state layout.
type Layout string

// The two layouts.
const (
	LayoutRecord Layout = "record"
	LayoutBucket Layout = "bucket"
)

// State names declared by the two layouts.
const (
	RecordStateName = "join-records"
	BucketStateName = "join-buckets"
)

// StateDesc is the engine state a layout stores its entries in; declare it
// when opening the backend (both may be declared side by side, e.g. during
// migration).
func StateDesc(l Layout, ttl time.Duration) engine.StateDesc {
	if l == LayoutBucket {
		return engine.StateDesc{Name: BucketStateName, Kind: engine.KindValue, TTL: ttl}
	}
	return engine.StateDesc{Name: RecordStateName, Kind: engine.KindMap, TTL: ttl}
}

// Probe names one input row of a bundle: the state hydrates what the
// bundle will read with batched lookups at Begin.
type Probe struct {
	Side Side
	Key  []byte // equality key (BinaryRowData)
	Row  []byte // row payload
}

// JoinState is the state of one streaming inner-join operator subtask, both
// sides. A bundle runs Begin, then any number of Count/Visit/Add, then
// Commit (or Abort). Byte slices handed to callbacks are valid only during
// the call. A JoinState is not safe for concurrent use.
type JoinState interface {
	// Layout is LayoutRecord or LayoutBucket.
	Layout() Layout
	// Begin opens a bundle at the clock's current time and hydrates the
	// probes' own rows with batched reads.
	Begin(probes []Probe) error
	// Now is the bundle's time (milliseconds): TTL decisions and written
	// timestamps use it.
	Now() int64
	// Count is the live count of one row (0 when absent or expired).
	Count(side Side, key, row []byte) (int64, error)
	// Visit calls fn for every live row of (side, key), bundle updates
	// included, with its count. fn's error stops the visit and is returned.
	Visit(side Side, key []byte, fn func(row []byte, count int64) error) error
	// Add adds delta to the row's count (a count reaching zero deletes the
	// row; a retraction of an absent row is a no-op) and refreshes its
	// timestamp. It returns the new count.
	Add(side Side, key, row []byte, delta int64) (int64, error)
	// Commit writes the bundle's changes with one atomic batch and releases
	// every reservation the bundle took.
	Commit() error
	// Abort discards the bundle.
	Abort()
	// SetPressureHandler installs fn, called when a cache reservation
	// fails; fn should release memory (drain pending output) so that the
	// same record can be retried.
	SetPressureHandler(fn func() error)
	// Logical visits the logical content in key-group order (then side,
	// then key): for every (join key, side) the live rows with counts,
	// association counts and timestamps. The group is only valid during fn.
	Logical(fn func(g *LogicalGroup) error) error
	// Check validates every stored entry and returns all problems found.
	Check() ([]Problem, error)
	// Stats returns cumulative counters.
	Stats() Stats
}

// Stats counts a state's work.
type Stats struct {
	Bundles       int64
	PointReads    int64 // keys read by batched point lookups
	SkippedReads  int64 // own-row reads avoided because the bundle knew the answer
	GroupScans    int64 // prefix iterations of a group in the store
	CacheHits     int64 // group visits served from the bundle cache
	LazyVisits    int64 // group visits that could not be cached
	SingleVisits  int64 // group scans not cached: the bundle's probes visit the group once
	ExpiredSkips  int64 // expired rows skipped
	Writes        int64 // puts and deletes committed
	CachePeak     int64 // largest cache reservation held in a bundle
	PressureCalls int64 // pressure handler calls
}

// Options configure a JoinState.
type Options struct {
	// Clock is the TTL clock; nil is the wall clock. For RocksDB pass the
	// clock given to engine.RocksOptions so the compaction filter agrees.
	Clock *engine.Clock
	// Pool is the slot's shared reservation pool that the record layout's
	// per-bundle opposite-side cache is charged to. Nil disables reuse:
	// every visit iterates the store.
	Pool *engine.Pool
	// CacheAllowance, when positive, additionally caps the cache bytes of
	// one bundle. For tests and the benchmark's fixed-allowance policies
	// only; production relies on the pool alone.
	CacheAllowance int64
	// UniqueRows declares, per side, that the side's rows are unique (the
	// planner's unique-key input spec: no row is inserted twice without a
	// retraction in between). The record layout then skips the own-row
	// point read: an insert writes count 1, a retraction deletes. The
	// bucket layout must read the multiset anyway and ignores it.
	UniqueRows [2]bool
	// NoPrefixBloom (RocksDB only, record layout) turns off what the record
	// layout otherwise installs on its column family when it opens: the
	// group-prefix extractor (engine.RecordPrefixExtractor: the prefix of a
	// record key is its whole group prefix kg | side | uvarint len | k) and
	// a memtable prefix bloom. The bloom filters then also hold group
	// prefixes, so a group seek skips the SST files and memtables that lack
	// the group. Both options are mutable and not persisted with the data:
	// files written with or without them read back the same, with or
	// without them. A seek with a key holding a complete group prefix must
	// not iterate past that group (the record layout never does; key-group
	// bounds and full scans are unaffected).
	NoPrefixBloom bool
	// PrefixBloom is kept for source compatibility and has no effect: the
	// prefix bloom is on unless NoPrefixBloom is set.
	//
	// Deprecated: the prefix bloom is the default.
	PrefixBloom bool
	// RowValidator, when set, is used by Check to validate row payloads
	// (e.g. a rowcodec.Codec's Validate on a TTL-prefixed value).
	RowValidator func(row []byte) error
	// IterPerGroup (record layout; for measurements only) makes every group
	// visit open its own bounded iterator through engine.Backend.Scan, as a
	// straightforward port does, instead of the bundle-wide prefix cursor.
	IterPerGroup bool
}

// Open returns the join state of layout l on be, which must declare
// StateDesc(l, ttl).
func Open(l Layout, be engine.Backend, opts Options) (JoinState, error) {
	name := RecordStateName
	if l == LayoutBucket {
		name = BucketStateName
	} else if l != LayoutRecord {
		return nil, fmt.Errorf("recordstore: unknown layout %q", l)
	}
	st := -1
	var desc engine.StateDesc
	for i, d := range be.States() {
		if d.Name == name {
			st, desc = i, d
		}
	}
	if st < 0 {
		return nil, fmt.Errorf("recordstore: backend does not declare state %q", name)
	}
	if opts.Clock == nil {
		opts.Clock = engine.SystemClock()
	}
	c := common{
		kv:     newKV(be, st),
		width:  be.Layout().Width(),
		layout: be.Layout(),
		maxP:   be.Layout().MaxParallelism,
		ttl:    desc.TTL.Milliseconds(),
		opts:   opts,
	}
	if l == LayoutBucket {
		return &bucketState{common: c}, nil
	}
	c.kv.iterPerGroup = opts.IterPerGroup
	if !opts.NoPrefixBloom {
		if err := setPrefixExtractor(c.kv, c.width); err != nil {
			return nil, err
		}
	}
	return newRecordState(c), nil
}

// common is shared by both layouts.
type common struct {
	kv       *kv
	width    int
	layout   engine.Layout
	maxP     int
	ttl      int64
	opts     Options
	now      int64
	active   bool
	stats    Stats
	pressure func() error
	scratch  []byte
}

var errNoBundle = errors.New("recordstore: no bundle open")

func (c *common) Now() int64                         { return c.now }
func (c *common) Stats() Stats                       { return c.stats }
func (c *common) SetPressureHandler(fn func() error) { c.pressure = fn }

func (c *common) kg(key []byte) int { return KeyGroupOf(key, c.maxP) }

func (c *common) groupPrefix(dst []byte, side Side, key []byte) []byte {
	return AppendGroupPrefix(dst, c.width, c.kg(key), side, key)
}

func (c *common) begin() error {
	if c.active {
		return errors.New("recordstore: bundle already open")
	}
	c.active = true
	c.now = c.opts.Clock.Now()
	c.stats.Bundles++
	return nil
}

// checkKey validates the key of a stored entry: decodable, the key group
// matches the equality key's hash and lies in the backend's range.
func (c *common) checkKey(k []byte, probs []Problem) (kg int, side Side, key, rest []byte, ok bool, out []Problem) {
	kg, side, key, rest, off, err := DecodeGroupKey(k, c.width)
	if err != nil {
		return 0, 0, nil, nil, false, append(probs, Problem{Key: append([]byte(nil), k...), Offset: off, InKey: true, Msg: err.Error()})
	}
	if want := c.kg(key); want != kg {
		probs = append(probs, Problem{Key: append([]byte(nil), k...), InKey: true,
			Msg: fmt.Sprintf("stored key group %d, but the equality key hashes to key group %d", kg, want)})
	} else if !c.layout.Range.Contains(kg) {
		probs = append(probs, Problem{Key: append([]byte(nil), k...), InKey: true,
			Msg: fmt.Sprintf("key group %d outside the subtask's range [%d, %d]", kg, c.layout.Range.Start, c.layout.Range.End)})
	}
	return kg, side, key, rest, true, probs
}
