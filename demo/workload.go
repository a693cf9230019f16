//go:build cgo

package demo

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
)

// The demo job is one keyed operator (key: the auction id, a SQL row
// ROW<auction BIGINT>) holding four states side by side, each the shape of
// a Flink SQL operator's state:
//
//   - agg: a group aggregate per auction (bid count, price sum, last bid
//     price) with a 24 h TTL, as GroupAggFunction keeps it;
//   - prices: a MIN/MAX-with-retraction multiset of bid prices per auction
//     (one in eight bids is later cancelled and retracted);
//   - top1: the highest bid per auction (Top-1 / rank 1);
//   - join-buckets: an inner join of auctions with their bids in
//     recordstore's bucket layout (24 h TTL).
const (
	StateAgg    = "agg"
	StatePrices = "prices"
	StateTop1   = "top1"

	// TTL of the aggregate and of the join state.
	TTL = 24 * time.Hour
	// Span is the processing time the events are spread over; it ends at
	// the wall-clock time of the run, so the oldest entries have expired.
	Span = 30 * time.Hour

	// MaxParallelism of the job (Flink's default for parallelism <= 128).
	MaxParallelism = 128
	// Parallelism of the run.
	Parallelism = 2

	bundleEvents = 2000
)

var (
	keyFields    = []keygroups.FieldType{keygroups.TypeBigInt}
	aggFields    = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeBigInt, keygroups.TypeBigInt}
	priceFields  = []keygroups.FieldType{keygroups.TypeBigInt}
	top1Fields   = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeBigInt, keygroups.TypeBigInt}
	auctionRow   = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeBigInt, keygroups.TypeBigInt}
	bidRow       = []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeBigInt, keygroups.TypeBigInt, keygroups.TypeBigInt}
	joinSidesDef = &engine.JoinSides{
		Left:  engine.Type{Kind: engine.TypeRow, Fields: auctionRow, Names: []string{"id", "category", "reserve"}},
		Right: engine.Type{Kind: engine.TypeRow, Fields: bidRow, Names: []string{"auction", "bidder", "price", "dateTime"}},
	}
)

// Schema is the demo operator's schema in the given join layout.
func Schema(l recordstore.Layout) *engine.Schema {
	jd := recordstore.StateDesc(l, TTL)
	return &engine.Schema{
		Key: engine.Type{Kind: engine.TypeRow, Fields: keyFields, Names: []string{"auction"}},
		States: []engine.StateSchema{
			{Name: StateAgg, Kind: engine.KindValue, Namespace: engine.VoidType, TTL: TTL, FlinkKind: "AGGREGATING",
				Value: engine.Type{Kind: engine.TypeRow, Fields: aggFields, Names: []string{"bids", "price_sum", "last_price"}}},
			{Name: StatePrices, Kind: engine.KindMultiset, Namespace: engine.VoidType,
				UserKey: engine.Type{Kind: engine.TypeRow, Fields: priceFields, Names: []string{"price"}}},
			{Name: StateTop1, Kind: engine.KindValue, Namespace: engine.VoidType,
				Value: engine.Type{Kind: engine.TypeRow, Fields: top1Fields, Names: []string{"price", "bidder", "dateTime"}}},
			{Name: jd.Name, Kind: jd.Kind, Namespace: engine.VoidType, TTL: jd.TTL, Join: joinSidesDef},
		},
	}
}

// ---- a deterministic Nexmark-shaped event stream ----------------------------

type evKind uint8

const (
	evPerson evKind = iota
	evAuction
	evBid
)

type event struct {
	kind     evKind
	auction  int64 // auction id (auctions and bids)
	bidder   int64
	price    int64
	category int64
	seq      int64 // event index
}

// generator follows Nexmark's proportions (1 person, 3 auctions, 46 bids
// in 50 events), hot auctions and bidders, and bids on auctions in flight.
type generator struct {
	rng               *rand.Rand
	n                 int64
	persons, auctions int64
}

func newGenerator(seed uint64) *generator {
	return &generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *generator) price() int64 {
	return int64(math.Round(math.Pow(10, g.rng.Float64()*6) * 100))
}

func (g *generator) next() event {
	ev := event{seq: g.n}
	r := g.n % 50
	g.n++
	switch {
	case r < 1:
		ev.kind = evPerson
		g.persons++
	case r < 4:
		ev.kind, ev.auction = evAuction, 1000+g.auctions
		g.auctions++
		ev.category = 10 + g.rng.Int64N(5)
		ev.price = g.price()
	default:
		ev.kind = evBid
		last := max(g.auctions-1, 0)
		if g.rng.IntN(2) > 0 {
			ev.auction = last / 100 * 100
		} else {
			lo := max(last-100, 0)
			ev.auction = lo + g.rng.Int64N(last-lo+1)
		}
		ev.auction += 1000
		people := max(g.persons, 1)
		active := min(people, 1000)
		ev.bidder = 1000 + people - active + g.rng.Int64N(active)
		ev.price = g.price()
	}
	return ev
}

// ---- the subtasks ----------------------------------------------------------

// WorkloadStats describes a workload run.
type WorkloadStats struct {
	Events       int64         `json:"events"`
	Auctions     int64         `json:"auctions"`
	Bids         int64         `json:"bids"`
	Retractions  int64         `json:"retractions"`
	JoinOutput   int64         `json:"joinOutput"`
	Elapsed      time.Duration `json:"-"`
	EventsPerSec float64       `json:"eventsPerSec"`
	// Start and End are the processing-time clock at the first and last
	// event (epoch ms); End is the reference time for TTL checks.
	Start int64 `json:"startMillis"`
	End   int64 `json:"endMillis"`
}

type subtask struct {
	idx   int
	be    engine.Backend
	op    *engine.Operator
	bun   *engine.Bundle
	join  *recordstore.Join
	agg   *engine.State
	ms    *engine.State
	top   *engine.State
	codec struct{ agg, top, auction, bid *rowcodec.Codec }
	rows  int64 // join output rows
	retr  int64
}

// Job is the demo operator at parallelism 2 on RocksDB: the backends stay
// open until Close.
type Job struct {
	Clock    *engine.Clock
	Subtasks []*subtask
	dir      string
}

func codecOf(ty engine.Type) (*rowcodec.Codec, error) {
	as, err := ty.ArrowSchema()
	if err != nil {
		return nil, err
	}
	return rowcodec.NewCodec(as)
}

// Backends returns the subtasks' backends in subtask order.
func (j *Job) Backends() []engine.Backend {
	var out []engine.Backend
	for _, s := range j.Subtasks {
		out = append(out, s.be)
	}
	return out
}

// Operators returns the subtasks' engine operators in subtask order.
func (j *Job) Operators() []*engine.Operator {
	var out []*engine.Operator
	for _, s := range j.Subtasks {
		out = append(out, s.op)
	}
	return out
}

// Close closes every backend and removes the working directory.
func (j *Job) Close() {
	for _, s := range j.Subtasks {
		if s.bun != nil {
			s.bun.Close()
		}
		s.be.Close()
	}
	os.RemoveAll(j.dir)
}

// OpenJob opens the two RocksDB subtasks under dir (key groups split as
// Flink splits them) with the clock set to the start of the span.
func OpenJob(dir string) (*Job, error) {
	clock := engine.NewManualClock(time.Now().Add(-Span).UnixMilli())
	schema := Schema(recordstore.LayoutBucket)
	if err := schema.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	j := &Job{Clock: clock, dir: dir}
	for i := 0; i < Parallelism; i++ {
		r := keygroups.RangeForSubtask(MaxParallelism, Parallelism, i)
		layout := engine.Layout{MaxParallelism: MaxParallelism, Range: r}
		be, err := engine.OpenRocksDB(filepath.Join(dir, fmt.Sprintf("subtask-%d", i)), layout, schema.Descs(), engine.RocksOptions{Clock: clock})
		if err != nil {
			j.Close()
			return nil, err
		}
		s := &subtask{idx: i, be: be, op: engine.NewOperator(be, clock)}
		j.Subtasks = append(j.Subtasks, s)
		if s.agg, err = s.op.State(StateAgg); err == nil {
			if s.ms, err = s.op.State(StatePrices); err == nil {
				s.top, err = s.op.State(StateTop1)
			}
		}
		if err != nil {
			j.Close()
			return nil, err
		}
		js, err := recordstore.Open(recordstore.LayoutBucket, be, recordstore.Options{Clock: clock})
		if err != nil {
			j.Close()
			return nil, err
		}
		s.join = recordstore.NewJoin(js, recordstore.JoinOptions{})
		s.bun = s.op.NewBundle()
		st := schema.States
		for _, c := range []struct {
			dst **rowcodec.Codec
			ty  engine.Type
		}{{&s.codec.agg, st[0].Value}, {&s.codec.top, st[2].Value}, {&s.codec.auction, joinSidesDef.Left}, {&s.codec.bid, joinSidesDef.Right}} {
			if *c.dst, err = codecOf(c.ty); err != nil {
				j.Close()
				return nil, err
			}
		}
	}
	return j, nil
}

func rowKey(v int64) []byte {
	k, err := keygroups.BuildRow(keyFields, []any{v})
	if err != nil {
		panic(err) // a BIGINT row cannot fail to build
	}
	return k
}

func keyGroup(key []byte) int { return keygroups.KeyGroupFor(keygroups.HashRow(key), MaxParallelism) }

func i64(p []byte, i int) int64 { return int64(binary.BigEndian.Uint64(p[8*i:])) }

// process runs one bundle of this subtask's events.
func (s *subtask) process(evs []event, now int64) error {
	type prepared struct {
		ev  *event
		key []byte
		kg  int
	}
	pre := make([]prepared, len(evs))
	var refs []engine.KeyRef
	var inputs []recordstore.Input
	for i := range evs {
		ev := &evs[i]
		key := rowKey(ev.auction)
		kg := keyGroup(key)
		pre[i] = prepared{ev, key, kg}
		switch ev.kind {
		case evAuction:
			row, err := s.codec.auction.EncodeRow(nil, 0, []any{ev.auction, ev.category, ev.price})
			if err != nil {
				return err
			}
			inputs = append(inputs, recordstore.Input{Side: recordstore.Left, Kind: keygroups.Insert, Key: key, Row: row[8:]})
		case evBid:
			refs = append(refs,
				engine.KeyRef{State: s.agg, Key: s.agg.Key(nil, kg, key, nil)},
				engine.KeyRef{State: s.top, Key: s.top.Key(nil, kg, key, nil)},
				engine.KeyRef{State: s.ms, Key: s.ms.EntryKey(nil, kg, key, nil, rowKey(ev.price))})
			row, err := s.codec.bid.EncodeRow(nil, 0, []any{ev.auction, ev.bidder, ev.price, now})
			if err != nil {
				return err
			}
			inputs = append(inputs, recordstore.Input{Side: recordstore.Right, Kind: keygroups.Insert, Key: key, Row: row[8:]})
		}
	}
	b := s.bun
	if err := b.Begin(refs); err != nil {
		return err
	}
	var buf []byte
	for _, p := range pre {
		ev := p.ev
		if ev.kind != evBid {
			continue
		}
		ak := s.agg.Key(nil, p.kg, p.key, nil)
		cnt, sum, last := int64(0), int64(0), int64(-1)
		if v, ok, err := b.Get(s.agg, ak); err != nil {
			b.Abort()
			return err
		} else if ok {
			_, f, err := s.codec.agg.DecodeRow(append(make([]byte, 8), v...))
			if err != nil {
				b.Abort()
				return err
			}
			cnt, sum, last = f[0].(int64), f[1].(int64), f[2].(int64)
		}
		// One bid in eight cancels the auction's previous bid: the
		// retraction removes its price from the MIN/MAX multiset.
		if ev.seq%8 == 0 && last >= 0 {
			if _, err := b.MultisetAdd(s.ms, s.ms.EntryKey(nil, p.kg, p.key, nil, rowKey(last)), -1); err != nil {
				b.Abort()
				return err
			}
			s.retr++
		}
		if _, err := b.MultisetAdd(s.ms, s.ms.EntryKey(nil, p.kg, p.key, nil, rowKey(ev.price)), 1); err != nil {
			b.Abort()
			return err
		}
		v, err := s.codec.agg.EncodeRow(buf[:0], 0, []any{cnt + 1, sum + ev.price, ev.price})
		if err != nil {
			b.Abort()
			return err
		}
		if err := b.Put(s.agg, ak, v[8:]); err != nil {
			b.Abort()
			return err
		}
		tk := s.top.Key(nil, p.kg, p.key, nil)
		best := int64(-1)
		if v, ok, err := b.Get(s.top, tk); err != nil {
			b.Abort()
			return err
		} else if ok {
			_, f, err := s.codec.top.DecodeRow(append(make([]byte, 8), v...))
			if err != nil {
				b.Abort()
				return err
			}
			best = f[0].(int64)
		}
		if ev.price > best {
			v, err := s.codec.top.EncodeRow(nil, 0, []any{ev.price, ev.bidder, now})
			if err != nil {
				b.Abort()
				return err
			}
			if err := b.Put(s.top, tk, v[8:]); err != nil {
				b.Abort()
				return err
			}
		}
	}
	if err := b.Commit(); err != nil {
		return err
	}
	if len(inputs) == 0 {
		return nil
	}
	return s.join.ProcessBundle(inputs, func(chunk []recordstore.Output) error {
		s.rows += int64(len(chunk))
		return nil
	})
}

// Run feeds n events through the job: the generator routes each event to
// the subtask owning its key group, the subtasks process bundles of
// bundleEvents/Parallelism events concurrently, and the processing-time clock moves over Span
// so that the stream ends at the current wall-clock time. tick, if set, is
// called with the number of events done so far.
func (j *Job) Run(ctx context.Context, n int64, seed uint64, tick func(done int64)) (*WorkloadStats, error) {
	end := time.Now().UnixMilli()
	start := end - Span.Milliseconds()
	j.Clock.Set(start)
	st := &WorkloadStats{Events: n, Start: start, End: end}
	gen := newGenerator(seed)
	var done atomic.Int64
	chans := make([]chan []event, len(j.Subtasks))
	errs := make([]error, len(j.Subtasks))
	var wg sync.WaitGroup
	// The clock is shared: subtasks read it at Begin. Both subtasks see a
	// time within one bundle of the generator's position.
	for i, s := range j.Subtasks {
		chans[i] = make(chan []event, 2)
		wg.Add(1)
		go func(i int, s *subtask) {
			defer wg.Done()
			for evs := range chans[i] {
				if errs[i] != nil {
					continue
				}
				if err := s.process(evs, j.Clock.Now()); err != nil {
					errs[i] = fmt.Errorf("subtask %d: %w", i, err)
				}
				done.Add(int64(len(evs)))
			}
		}(i, s)
	}
	t0 := time.Now()
	pending := make([][]event, len(j.Subtasks))
	flush := func(i int) {
		if len(pending[i]) > 0 {
			chans[i] <- pending[i]
			pending[i] = nil
		}
	}
	var persons int64
	var err error
	for i := int64(0); i < n; i++ {
		if i%bundleEvents == 0 {
			if err = ctx.Err(); err != nil {
				break
			}
			j.Clock.Set(start + int64(float64(Span.Milliseconds())*float64(i)/float64(n)))
			if tick != nil {
				tick(done.Load())
			}
		}
		ev := gen.next()
		switch ev.kind {
		case evPerson:
			persons++
			continue
		case evAuction:
			st.Auctions++
		case evBid:
			st.Bids++
		}
		t := keygroups.SubtaskForKeyGroup(MaxParallelism, len(j.Subtasks), keyGroup(rowKey(ev.auction)))
		pending[t] = append(pending[t], ev)
		if len(pending[t]) >= bundleEvents/len(j.Subtasks) {
			flush(t)
		}
	}
	for i := range pending {
		flush(i)
		close(chans[i])
	}
	wg.Wait()
	j.Clock.Set(end)
	if err != nil {
		return nil, err
	}
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	for _, s := range j.Subtasks {
		st.JoinOutput += s.rows
		st.Retractions += s.retr
	}
	done.Add(persons)
	if tick != nil {
		tick(n)
	}
	st.Elapsed = time.Since(t0)
	st.EventsPerSec = float64(n) / st.Elapsed.Seconds()
	return st, nil
}
