//go:build cgo

package recordstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/keygroups"
)

const testTTL = 50 * time.Millisecond

var (
	keyBuilder = mustRowBuilder()
	rowCodec   = mustCodec()
)

func mustRowBuilder() *keygroups.RowBuilder {
	b, err := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeBigInt})
	if err != nil {
		panic(err)
	}
	return b
}

func mustCodec() *rowcodec.Codec {
	c, err := rowcodec.NewCodec(arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "pad", Type: arrow.BinaryTypes.Binary, Nullable: true},
	}, nil))
	if err != nil {
		panic(err)
	}
	return c
}

func joinKey(t testing.TB, k int64) []byte {
	b, err := keyBuilder.Build([]any{k})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func payload(t testing.TB, id int64, pad int) []byte {
	var p any
	if pad > 0 {
		p = bytes.Repeat([]byte{byte(id)}, pad)
	}
	v, err := rowCodec.EncodeRow(nil, 0, []any{id, p})
	if err != nil {
		t.Fatal(err)
	}
	return v[rowcodec.TTLSize:]
}

func validateRow(row []byte) error {
	v := make([]byte, rowcodec.TTLSize, rowcodec.TTLSize+len(row))
	return rowCodec.Validate(append(v, row...))
}

type env struct {
	be    engine.Backend
	clock *engine.Clock
	st    JoinState
}

func openEnv(t testing.TB, backend string, l Layout, ttl time.Duration, opts Options) *env {
	t.Helper()
	layout := engine.Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}
	clock := engine.NewManualClock(1_000_000)
	states := []engine.StateDesc{StateDesc(l, ttl)}
	var be engine.Backend
	var err error
	switch backend {
	case "heap":
		be, err = engine.OpenHeap(layout, states)
	case "rocksdb":
		be, err = engine.OpenRocksDB(t.TempDir(), layout, states, engine.RocksOptions{Clock: clock, WriteBufferSize: 1 << 20})
	default:
		t.Fatalf("backend %q", backend)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	opts.Clock = clock
	opts.RowValidator = validateRow
	st, err := Open(l, be, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &env{be: be, clock: clock, st: st}
}

// refJoin is the obviously-correct model: a map of live rows with counts
// and timestamps, joined row by row.
type refJoin struct {
	ttl  int64
	rows map[refKey]*refRow
}

type refKey struct {
	side     Side
	key, row string
}

type refRow struct{ count, ts int64 }

func (r *refJoin) live(x *refRow, now int64) bool { return x != nil && !expired(x.ts, now, r.ttl) }

func (r *refJoin) process(now int64, in []Input) []string {
	var out []string
	for _, i := range in {
		// opposite side rows, any order
		for k, x := range r.rows {
			if k.side != i.Side.Other() || k.key != string(i.Key) || !r.live(x, now) {
				continue
			}
			l, rr := string(i.Row), k.row
			if i.Side == Right {
				l, rr = k.row, string(i.Row)
			}
			for c := int64(0); c < x.count; c++ {
				out = append(out, outString(i.Kind, []byte(l), []byte(rr)))
			}
		}
		k := refKey{i.Side, string(i.Key), string(i.Row)}
		x := r.rows[k]
		if !r.live(x, now) {
			delete(r.rows, k)
			x = nil
		}
		if i.Kind == keygroups.Insert {
			if x == nil {
				x = &refRow{}
				r.rows[k] = x
			}
			x.count++
			x.ts = now
		} else if x != nil {
			x.count--
			x.ts = now
			if x.count == 0 {
				delete(r.rows, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// logical renders the model's live content like LogicalGroup dumps.
func (r *refJoin) logical(now int64, maxP int) []string {
	var out []string
	for k, x := range r.rows {
		if !r.live(x, now) {
			continue
		}
		out = append(out, fmt.Sprintf("kg=%d %s key=%x row=%x count=%d assoc=0 ts=%d",
			KeyGroupOf([]byte(k.key), maxP), k.side, k.key, k.row, x.count, x.ts))
	}
	sort.Strings(out)
	return out
}

func outString(k keygroups.RowKind, l, r []byte) string { return fmt.Sprintf("%s %x | %x", k, l, r) }

func dumpLogical(t testing.TB, st JoinState) []string {
	t.Helper()
	var out []string
	var last []byte
	err := st.Logical(func(g *LogicalGroup) error {
		cur := AppendGroupPrefix(nil, 1, g.KeyGroup, g.Side, g.Key)
		if last != nil && bytes.Compare(last, cur) >= 0 {
			t.Errorf("logical groups out of order: %x then %x", last, cur)
		}
		last = cur
		for i, r := range g.Rows {
			if i > 0 && bytes.Compare(g.Rows[i-1].Row, r.Row) >= 0 {
				t.Errorf("rows out of order in group %x", cur)
			}
			out = append(out, fmt.Sprintf("kg=%d %s key=%x row=%x count=%d assoc=%d ts=%d",
				g.KeyGroup, g.Side, g.Key, r.Row, r.Count, r.Assoc, r.TS))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

type stream struct {
	bundles [][]Input
	advance []time.Duration // clock movement before each bundle
}

// randomStream mixes inserts and retractions of live and absent rows over a
// few hot keys and many cold ones, with clock jumps that expire rows.
func randomStream(t testing.TB, seed uint64, bundles, perBundle, pad int) stream {
	rng := rand.New(rand.NewPCG(seed, 7))
	var s stream
	var sent []Input
	for b := 0; b < bundles; b++ {
		var in []Input
		for i := 0; i < perBundle; i++ {
			if len(sent) > 0 && rng.IntN(4) == 0 {
				x := sent[rng.IntN(len(sent))]
				x.Kind = keygroups.Delete
				in = append(in, x)
				continue
			}
			k := int64(rng.IntN(40))
			if rng.IntN(3) == 0 {
				k = int64(rng.IntN(3)) // hot
			}
			x := Input{Side: Side(rng.IntN(2)), Kind: keygroups.Insert, Key: joinKey(t, k), Row: payload(t, int64(rng.IntN(6)), pad*rng.IntN(2))}
			in = append(in, x)
			sent = append(sent, x)
		}
		s.bundles = append(s.bundles, in)
		d := time.Duration(rng.IntN(12)) * time.Millisecond
		if rng.IntN(10) == 0 {
			d = testTTL
		}
		s.advance = append(s.advance, d)
	}
	return s
}

func collect(t testing.TB, j *Join, in []Input) []string {
	t.Helper()
	var out []string
	err := j.ProcessBundle(in, func(chunk []Output) error {
		for _, o := range chunk {
			out = append(out, outString(o.Kind, o.Left, o.Right))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

type policy struct {
	name string
	l    Layout
	opts func() (Options, JoinOptions)
}

func policies() []policy {
	return []policy{
		{"bucket", LayoutBucket, func() (Options, JoinOptions) { return Options{}, JoinOptions{} }},
		{"record-no-reuse", LayoutRecord, func() (Options, JoinOptions) { return Options{}, JoinOptions{} }},
		{"record-pool", LayoutRecord, func() (Options, JoinOptions) {
			p := engine.NewPool(64 << 20)
			return Options{Pool: p}, JoinOptions{Pool: p}
		}},
		{"record-pool-no-prefix-bloom", LayoutRecord, func() (Options, JoinOptions) {
			p := engine.NewPool(64 << 20)
			return Options{Pool: p, NoPrefixBloom: true}, JoinOptions{Pool: p}
		}},
		{"record-tiny-pool", LayoutRecord, func() (Options, JoinOptions) {
			p := engine.NewPool(600)
			return Options{Pool: p}, JoinOptions{Pool: p, ChunkRows: 3}
		}},
	}
}

func TestJoinMatchesReference(t *testing.T) {
	for _, backend := range []string{"heap", "rocksdb"} {
		for _, pol := range policies() {
			t.Run(backend+"/"+pol.name, func(t *testing.T) {
				opts, jopts := pol.opts()
				e := openEnv(t, backend, pol.l, testTTL, opts)
				j := NewJoin(e.st, jopts)
				ref := &refJoin{ttl: testTTL.Milliseconds(), rows: map[refKey]*refRow{}}
				s := randomStream(t, 1, 60, 25, 20)
				total := 0
				for b, in := range s.bundles {
					e.clock.Advance(s.advance[b])
					want := ref.process(e.clock.Now(), in)
					got := collect(t, j, in)
					if !slices.Equal(got, want) {
						t.Fatalf("bundle %d: output differs\n got %d rows %q\nwant %d rows %q", b, len(got), got, len(want), want)
					}
					total += len(got)
					if backend == "rocksdb" && b%7 == 6 {
						if err := e.be.Flush(); err != nil {
							t.Fatal(err)
						}
					}
					if jopts.Pool != nil && jopts.Pool.Used() != 0 {
						t.Fatalf("bundle %d: %d pool bytes still reserved after the bundle", b, jopts.Pool.Used())
					}
				}
				if total == 0 {
					t.Fatal("stream produced no output")
				}
				if got, want := dumpLogical(t, e.st), ref.logical(e.clock.Now(), 128); !slices.Equal(got, want) {
					t.Fatalf("logical content differs\n got %q\nwant %q", got, want)
				}
				probs, err := e.st.Check()
				if err != nil || len(probs) != 0 {
					t.Fatalf("check: %v %v", err, probs)
				}
			})
		}
	}
}

func TestLogicalEqualAcrossLayouts(t *testing.T) {
	s := randomStream(t, 9, 40, 30, 8)
	var dumps [][]string
	for _, backend := range []string{"heap", "rocksdb"} {
		for _, l := range []Layout{LayoutBucket, LayoutRecord} {
			e := openEnv(t, backend, l, time.Hour, Options{})
			j := NewJoin(e.st, JoinOptions{})
			for b, in := range s.bundles {
				e.clock.Advance(s.advance[b])
				collect(t, j, in)
			}
			d := dumpLogical(t, e.st)
			if len(d) == 0 {
				t.Fatal("empty logical content")
			}
			dumps = append(dumps, d)
		}
	}
	for i := 1; i < len(dumps); i++ {
		if !slices.Equal(dumps[0], dumps[i]) {
			t.Fatalf("logical content %d differs from 0:\n%q\n%q", i, dumps[i], dumps[0])
		}
	}
}

// uniqueStream inserts rows with unique ids and retracts only rows still
// inserted, the contract of Options.UniqueRows.
func uniqueStream(t testing.TB, seed uint64, bundles, perBundle int) stream {
	rng := rand.New(rand.NewPCG(seed, 5))
	var s stream
	var live []Input
	id := int64(0)
	for b := 0; b < bundles; b++ {
		var in []Input
		for i := 0; i < perBundle; i++ {
			if len(live) > 0 && rng.IntN(4) == 0 {
				j := rng.IntN(len(live))
				x := live[j]
				live = append(live[:j], live[j+1:]...)
				x.Kind = keygroups.Delete
				in = append(in, x)
				continue
			}
			id++
			x := Input{Side: Side(rng.IntN(2)), Kind: keygroups.Insert, Key: joinKey(t, int64(rng.IntN(12))), Row: payload(t, id, 8)}
			in = append(in, x)
			live = append(live, x)
		}
		s.bundles = append(s.bundles, in)
		d := time.Duration(rng.IntN(12)) * time.Millisecond
		if rng.IntN(12) == 0 {
			d = testTTL
		}
		s.advance = append(s.advance, d)
	}
	return s
}

func TestUniqueRowsMatchesReference(t *testing.T) {
	for _, backend := range []string{"heap", "rocksdb"} {
		for _, pol := range policies()[1:] {
			t.Run(backend+"/"+pol.name, func(t *testing.T) {
				opts, jopts := pol.opts()
				opts.UniqueRows = [2]bool{true, true}
				e := openEnv(t, backend, LayoutRecord, testTTL, opts)
				j := NewJoin(e.st, jopts)
				ref := &refJoin{ttl: testTTL.Milliseconds(), rows: map[refKey]*refRow{}}
				s := uniqueStream(t, 3, 50, 30)
				for b, in := range s.bundles {
					e.clock.Advance(s.advance[b])
					want := ref.process(e.clock.Now(), in)
					got := collect(t, j, in)
					if !slices.Equal(got, want) {
						t.Fatalf("bundle %d: output differs\n got %q\nwant %q", b, got, want)
					}
				}
				if got, want := dumpLogical(t, e.st), ref.logical(e.clock.Now(), 128); !slices.Equal(got, want) {
					t.Fatalf("logical content differs\n got %q\nwant %q", got, want)
				}
				st := e.st.Stats()
				if st.SkippedReads == 0 || st.PointReads != 0 {
					t.Fatalf("own reads not skipped: %+v", st)
				}
			})
		}
	}
}
