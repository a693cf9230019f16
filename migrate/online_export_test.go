//go:build cgo

package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

var (
	exKey   = []keygroups.FieldType{keygroups.TypeInt}
	exSides = &engine.JoinSides{
		Left:  engine.RowType(keygroups.TypeInt, keygroups.TypeBigInt, keygroups.TypeString),
		Right: engine.RowType(keygroups.TypeInt, keygroups.TypeString, keygroups.TypeDouble),
	}
	exTTL = 40 * time.Millisecond
)

// exSchema describes the join states declared on a backend.
func exSchema(descs []engine.StateDesc) *engine.Schema {
	s := &engine.Schema{Key: engine.RowType(exKey...)}
	for _, d := range descs {
		s.States = append(s.States, engine.StateSchema{Name: d.Name, Kind: d.Kind, Namespace: engine.VoidType, TTL: d.TTL, Join: exSides})
	}
	return s
}

type exGen struct {
	t      testing.TB
	rng    *rand.Rand
	lc, rc *rowcodec.Codec
	keys   int
	rows   int // distinct rows per key and side (default 6)
}

func newExGen(t testing.TB, seed uint64, keys int) *exGen {
	g := &exGen{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e37)), keys: keys}
	for i, ty := range []engine.Type{exSides.Left, exSides.Right} {
		as, err := ty.ArrowSchema()
		if err != nil {
			t.Fatal(err)
		}
		c, err := rowcodec.NewCodec(as)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			g.lc = c
		} else {
			g.rc = c
		}
	}
	return g
}

// bundle returns n random join inputs with valid rows.
func (g *exGen) bundle(n int) []recordstore.Input {
	var in []recordstore.Input
	for i := 0; i < n; i++ {
		k := int32(g.rng.IntN(g.keys))
		key, err := keygroups.BuildRow(exKey, []any{k})
		if err != nil {
			g.t.Fatal(err)
		}
		side := recordstore.Side(g.rng.IntN(2))
		v := g.rng.IntN(max(g.rows, 6))
		var row []byte
		if side == recordstore.Left {
			row, err = g.lc.EncodeRow(nil, 0, []any{k, int64(v), fmt.Sprintf("l%d-%d", k, v)})
		} else {
			row, err = g.rc.EncodeRow(nil, 0, []any{k, fmt.Sprintf("r%d-%d", k, v), float64(v) / 4})
		}
		if err != nil {
			g.t.Fatal(err)
		}
		kind := keygroups.Insert
		if g.rng.IntN(4) == 0 {
			kind = keygroups.Delete
		}
		in = append(in, recordstore.Input{Side: side, Kind: kind, Key: key, Row: row[8:]})
	}
	return in
}

// exportBytes writes a canonical savepoint of one subtask and returns the
// bytes of its keyed-state stream and the entry count.
func exportBytes(t *testing.T, st canonical.Subtask) ([]byte, int64) {
	t.Helper()
	ctx := context.Background()
	store, err := s3.NewLocal(filepath.Join(t.TempDir(), "sp"))
	if err != nil {
		t.Fatal(err)
	}
	op := canonical.Operator{UID: "join", Parallelism: 1, MaxParallelism: st.Operator.Layout().MaxParallelism, Subtasks: []canonical.Subtask{st}}
	_, stats, err := canonical.Export(ctx, []canonical.Operator{op}, store, canonical.ExportOptions{Dir: "sp", InlineThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := store.List(ctx, "sp/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, "/_metadata") && !strings.HasSuffix(o.Key, "/"+savepoint.SumsName) {
			names = append(names, o.Key)
		}
	}
	if len(names) != 1 {
		t.Fatalf("savepoint has %d stream files, want 1: %v", len(names), names)
	}
	rc, err := store.Get(ctx, names[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b, stats.Entries
}

// TestOnlineCanonicalSavepoint: a random join history in the bucket
// layout; one copy runs bundles through a MigratingJoinState (some keys
// migrate), the other runs the same bundles in the bucket layout without
// any migration. Canonical savepoints of both, before and after the
// bundles, and of a checkpoint of the mixed state restored, have
// byte-identical keyed-state streams; the pool is empty between bundles.
func TestOnlineCanonicalSavepoint(t *testing.T) {
	for _, kind := range []string{"heap", "rocksdb"} {
		t.Run(kind, func(t *testing.T) {
			clock := engine.NewManualClock(5_000_000)
			both := bothStates(exTTL)
			bucketOnly := both[:1]
			beA := openBackend(t, kind, 128, clock, both)
			beB := openBackend(t, kind, 128, clock, bucketOnly)
			hA, err := recordstore.Open(recordstore.LayoutBucket, beA, recordstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			hB, err := recordstore.Open(recordstore.LayoutBucket, beB, recordstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			gen := newExGen(t, 21, 60)
			jhA, jhB := recordstore.NewJoin(hA, recordstore.JoinOptions{}), recordstore.NewJoin(hB, recordstore.JoinOptions{})
			for b := 0; b < 40; b++ {
				in := gen.bundle(1 + gen.rng.IntN(25))
				runJoin(t, jhA, in)
				runJoin(t, jhB, in)
				clock.Advance(time.Duration(gen.rng.IntN(4)) * time.Millisecond)
			}
			subA := func(be engine.Backend) canonical.Subtask {
				st, err := MergedSubtask(canonical.Subtask{Operator: engine.NewOperator(be, clock), Schema: exSchema(both)})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			subB := canonical.Subtask{Operator: engine.NewOperator(beB, clock), Schema: exSchema(bucketOnly)}
			a0, n0 := exportBytes(t, subA(beA))
			if b0, _ := exportBytes(t, subB); !bytes.Equal(a0, b0) || n0 == 0 {
				t.Fatalf("savepoints before the migration differ (%d vs %d bytes, %d entries)", len(a0), len(b0), n0)
			}

			pool := engine.NewPool(2 << 10)
			ms, err := NewMigratingJoinState(beA, recordstore.Options{Clock: clock, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			jA, jB := recordstore.NewJoin(ms, recordstore.JoinOptions{Pool: pool}), recordstore.NewJoin(hB, recordstore.JoinOptions{})
			for b := 0; b < 6; b++ {
				in := gen.bundle(1 + gen.rng.IntN(8))
				if oa, ob := runJoin(t, jA, in), runJoin(t, jB, in); !reflect.DeepEqual(oa, ob) {
					t.Fatalf("bundle %d: outputs differ (%d vs %d rows)", b, len(oa), len(ob))
				}
				if pool.Used() != 0 {
					t.Fatalf("pool holds %d bytes between bundles", pool.Used())
				}
				clock.Advance(time.Duration(gen.rng.IntN(3)) * time.Millisecond)
			}
			st := ms.OnlineStats()
			left := countEntries(t, beA, recordstore.BucketStateName)
			if st.KeysMigrated == 0 || left == 0 || countEntries(t, beA, recordstore.RecordStateName) == 0 {
				t.Fatalf("stats %+v, %d buckets left: expected a partial migration", st, left)
			}
			a1, n1 := exportBytes(t, subA(beA))
			b1, _ := exportBytes(t, subB)
			if !bytes.Equal(a1, b1) || n1 == 0 {
				t.Fatalf("mid-migration savepoint differs from the unmigrated one (%d vs %d bytes)", len(a1), len(b1))
			}
			if bytes.Equal(a0, a1) {
				t.Fatal("the bundles changed nothing: the comparison is vacuous")
			}
			if kind != "rocksdb" {
				return
			}
			// checkpoint + restore of the mixed state: same savepoint, and
			// the restored state keeps migrating
			ctx := context.Background()
			store, _ := s3.NewLocal(filepath.Join(t.TempDir(), "chk"))
			if _, err := checkpoint.New(store, checkpoint.Options{}).TakeSync(ctx, []engine.Backend{beA}, 1); err != nil {
				t.Fatal(err)
			}
			rb, _, err := checkpoint.Restore(ctx, store, 1, beA.Layout().Range, filepath.Join(t.TempDir(), "r"), checkpoint.RestoreOptions{Rocks: engine.RocksOptions{Clock: clock}})
			if err != nil {
				t.Fatal(err)
			}
			defer rb.Close()
			if ar, _ := exportBytes(t, subA(rb)); !bytes.Equal(ar, b1) {
				t.Fatal("savepoint of the restored mixed state differs")
			}
			rs, err := NewMigratingJoinState(rb, recordstore.Options{Clock: clock, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			jr := recordstore.NewJoin(rs, recordstore.JoinOptions{})
			for b := 0; b < 4; b++ {
				in := gen.bundle(10)
				if or, ob := runJoin(t, jr, in), runJoin(t, jB, in); !reflect.DeepEqual(or, ob) {
					t.Fatalf("restored bundle %d: outputs differ", b)
				}
			}
			if rs.OnlineStats().KeysMigrated == 0 {
				t.Fatal("the restored state migrated nothing")
			}
			ar, _ := exportBytes(t, subA(rb))
			if br, _ := exportBytes(t, subB); !bytes.Equal(ar, br) {
				t.Fatal("savepoint after restored bundles differs")
			}
			if pool.Used() != 0 {
				t.Fatalf("pool holds %d bytes", pool.Used())
			}
		})
	}
}

// countingBackend counts committed batches and can fail them.
type countingBackend struct {
	engine.Backend
	commits int
	fail    bool
}

func (c *countingBackend) Native() (engine.Native, bool) { return engine.NativeOf(c.Backend) }

func (c *countingBackend) NewBatch() engine.Batch { return &countingBatch{c.Backend.NewBatch(), c} }

type countingBatch struct {
	engine.Batch
	c *countingBackend
}

var errCommitFail = errors.New("injected commit failure")

func (b *countingBatch) Commit() error {
	if b.c.fail {
		return errCommitFail
	}
	b.c.commits++
	return b.Batch.Commit()
}

func sortedEntries(t testing.TB, be engine.Backend) []string {
	var out []string
	for st := range be.States() {
		if err := be.Scan(st, nil, nil, func(k, v []byte) bool {
			out = append(out, fmt.Sprintf("%d %x %x", st, k, v))
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(out)
	return out
}

// TestOnlineMigrationInBundleWrite: a bundle that converts keys and writes
// commits exactly one batch (conversion and bundle writes together); a
// failed commit or an abort leaves every stored entry as it was.
func TestOnlineMigrationInBundleWrite(t *testing.T) {
	for _, kind := range []string{"heap", "rocksdb"} {
		t.Run(kind, func(t *testing.T) {
			clock := engine.NewManualClock(5_000_000)
			raw := openBackend(t, kind, 128, clock, bothStates(0))
			hs, err := recordstore.Open(recordstore.LayoutBucket, raw, recordstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			gen := newExGen(t, 5, 30)
			jh := recordstore.NewJoin(hs, recordstore.JoinOptions{})
			for b := 0; b < 20; b++ {
				runJoin(t, jh, gen.bundle(20))
			}
			be := &countingBackend{Backend: raw}
			ms, err := NewMigratingJoinState(be, recordstore.Options{Clock: clock, Pool: engine.NewPool(1 << 20)})
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			j := recordstore.NewJoin(ms, recordstore.JoinOptions{})
			before := sortedEntries(t, raw)
			in := gen.bundle(10)
			// a failed bundle write: nothing changes, nothing counts
			be.fail = true
			if err := j.ProcessBundle(in, func([]recordstore.Output) error { return nil }); !errors.Is(err, errCommitFail) {
				t.Fatalf("commit error %v", err)
			}
			if got := sortedEntries(t, raw); !reflect.DeepEqual(before, got) || ms.OnlineStats().KeysMigrated != 0 {
				t.Fatalf("a failed bundle changed the store or the stats (%+v)", ms.OnlineStats())
			}
			// an aborted bundle (the consumer fails)
			be.fail = false
			if err := j.ProcessBundle(in, func([]recordstore.Output) error { return io.ErrUnexpectedEOF }); err == nil {
				// no output at all is possible; then the bundle committed
				t.Log("bundle produced no output")
			} else if got := sortedEntries(t, raw); !reflect.DeepEqual(before, got) {
				t.Fatal("an aborted bundle changed the store")
			}
			buckets := countEntries(t, raw, recordstore.BucketStateName)
			be.commits = 0
			runJoin(t, j, in)
			st := ms.OnlineStats()
			if st.KeysMigrated == 0 || countEntries(t, raw, recordstore.BucketStateName) != buckets-int(st.KeysMigrated) {
				t.Fatalf("stats %+v, buckets %d -> %d", st, buckets, countEntries(t, raw, recordstore.BucketStateName))
			}
			if be.commits != 1 {
				t.Fatalf("the bundle committed %d batches, want 1 (conversion inside the bundle write)", be.commits)
			}
			// the conversion is held in the pool while the bundle runs; a
			// refusing pool is counted, the keys stay in their buckets
			// (deferred) and the bundle still proceeds
			for _, capacity := range []int64{1 << 20, 64} {
				buckets := countEntries(t, raw, recordstore.BucketStateName)
				pool := engine.NewPool(capacity)
				m2, err := NewMigratingJoinState(raw, recordstore.Options{Clock: clock, Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				var probes []recordstore.Probe
				if err := raw.Scan(0, nil, nil, func(k, _ []byte) bool {
					b, _, err := DecodeBucketKey(k, raw.Layout().Width())
					if err != nil {
						t.Fatal(err)
					}
					probes = append(probes, recordstore.Probe{Side: b.Side, Key: append([]byte(nil), b.Key...)})
					return len(probes) < 5
				}); err != nil {
					t.Fatal(err)
				}
				if err := m2.Begin(probes); err != nil {
					t.Fatal(err)
				}
				held := pool.Used()
				if err := m2.Commit(); err != nil {
					t.Fatal(err)
				}
				st := m2.OnlineStats()
				if pool.Used() != 0 {
					t.Fatalf("capacity %d: stats %+v, %d bytes left in the pool", capacity, st, pool.Used())
				}
				if capacity > 64 && (st.KeysMigrated == 0 || held == 0 || st.PoolRefusals != 0 || st.Deferred != 0) {
					t.Fatalf("capacity %d: %d bytes held during the bundle, stats %+v", capacity, held, st)
				}
				if capacity == 64 && (st.PoolRefusals == 0 || st.Deferred == 0 || st.KeysMigrated != 0 ||
					countEntries(t, raw, recordstore.BucketStateName) != buckets) {
					t.Fatalf("a %d-byte pool: stats %+v, buckets %d -> %d (want every conversion deferred)", capacity, st,
						buckets, countEntries(t, raw, recordstore.BucketStateName))
				}
				m2.Close()
			}
		})
	}
}

// TestMergedView: the view's record state equals the records of a fully
// migrated copy, through full and bounded scans and point reads; it is
// read-only and drops the bucket state.
func TestMergedView(t *testing.T) {
	for _, kind := range []string{"heap", "rocksdb"} {
		t.Run(kind, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			clock := engine.NewManualClock(1_000_000)
			be := openBackend(t, kind, 128, clock, bothStates(0))
			history(t, rng, be, clock, 40, 30)
			ref := openBackend(t, "heap", 128, clock, bothStates(0))
			if _, err := MigrateBackend(be, ref, BackendOptions{KeepBuckets: true}); err != nil {
				t.Fatal(err)
			}
			ms, err := NewMigratingJoinState(be, recordstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			if _, err := ms.Sweep(9); err != nil { // some keys migrated
				t.Fatal(err)
			}
			rst, _ := StateID(ref, recordstore.RecordStateName)
			var want [][2][]byte
			if err := ref.Scan(rst, nil, nil, func(k, v []byte) bool {
				want = append(want, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if countEntries(t, be, recordstore.BucketStateName) == 0 || countEntries(t, be, recordstore.RecordStateName) == 0 || len(want) == 0 {
				t.Fatal("state is not mixed")
			}
			v, err := NewMergedView(be)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.States()) != 1 || v.States()[0].Name != recordstore.RecordStateName {
				t.Fatalf("view states %v", v.States())
			}
			scan := func(lo, hi []byte, limit int) [][2][]byte {
				var got [][2][]byte
				if err := v.Scan(0, lo, hi, func(k, val []byte) bool {
					got = append(got, [2][]byte{append([]byte(nil), k...), append([]byte(nil), val...)})
					return limit <= 0 || len(got) < limit
				}); err != nil {
					t.Fatal(err)
				}
				return got
			}
			if got := scan(nil, nil, 0); !reflect.DeepEqual(got, want) {
				t.Fatalf("full scan: %d entries, want %d", len(got), len(want))
			}
			for i := 0; i < 30; i++ {
				a, b := rng.IntN(len(want)+1), rng.IntN(len(want)+1)
				if a > b {
					a, b = b, a
				}
				var lo, hi []byte
				if a < len(want) {
					lo = want[a][0]
				}
				if b < len(want) {
					hi = want[b][0]
				}
				exp := want[a:b]
				if hi == nil {
					exp = want[a:]
				}
				if lo == nil {
					exp = nil
					lo = []byte{0xff, 0xff, 0xff}
				}
				if got := scan(lo, hi, 0); len(got) != len(exp) || (len(exp) > 0 && !reflect.DeepEqual(got, exp)) {
					t.Fatalf("scan [%x, %x): %d entries, want %d", lo, hi, len(got), len(exp))
				}
				if n := 1 + rng.IntN(5); len(scan(nil, nil, n)) != min(n, len(want)) {
					t.Fatalf("scan stopped after %d does not stop", n)
				}
			}
			keys := [][]byte{append(append([]byte(nil), want[0][0]...), 0xee)}
			for _, e := range want {
				keys = append(keys, e[0])
			}
			err = v.MultiGet(0, keys, func(i int, val []byte, ok bool) {
				if i == 0 {
					if ok {
						t.Error("absent key found")
					}
					return
				}
				if !ok || !bytes.Equal(val, want[i-1][1]) {
					t.Errorf("MultiGet %x: %x %v, want %x", keys[i], val, ok, want[i-1][1])
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			b := v.NewBatch()
			b.Put(0, []byte("k"), []byte("v"))
			if err := b.Commit(); !errors.Is(err, ErrReadOnlyView) || !errors.Is(v.DeleteRange(0, nil, nil), ErrReadOnlyView) {
				t.Fatal("the view accepted a write")
			}
		})
	}
}

// failGetBackend fails MultiGet of one state while armed.
type failGetBackend struct {
	countingBackend
	failSt int
	armed  bool
}

func (f *failGetBackend) MultiGet(st int, keys [][]byte, fn func(int, []byte, bool)) error {
	if f.armed && st == f.failSt {
		return errCommitFail
	}
	return f.countingBackend.MultiGet(st, keys, fn)
}

// TestOnlineBeginFailure: a bundle whose Begin fails (bucket lookup or the
// record state's hydration) leaves the store and the wrapper usable; the
// next bundle migrates and joins as the bucket layout would.
func TestOnlineBeginFailure(t *testing.T) {
	clock := engine.NewManualClock(5_000_000)
	raw := openBackend(t, "rocksdb", 128, clock, bothStates(0))
	ref := openBackend(t, "heap", 128, clock, bothStates(0)[:1])
	gen := newExGen(t, 10, 40) // keys 20-39 have no bucket
	for _, be := range []engine.Backend{raw, ref} {
		hs, err := recordstore.Open(recordstore.LayoutBucket, be, recordstore.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		g := newExGen(t, 9, 20)
		j := recordstore.NewJoin(hs, recordstore.JoinOptions{})
		for b := 0; b < 10; b++ {
			runJoin(t, j, g.bundle(20))
		}
	}
	hr, _ := recordstore.Open(recordstore.LayoutBucket, ref, recordstore.Options{Clock: clock})
	jr := recordstore.NewJoin(hr, recordstore.JoinOptions{})
	be := &failGetBackend{countingBackend: countingBackend{Backend: raw}}
	pool := engine.NewPool(1 << 20)
	ms, err := NewMigratingJoinState(be, recordstore.Options{Clock: clock, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	j := recordstore.NewJoin(ms, recordstore.JoinOptions{})
	before := sortedEntries(t, raw)
	for _, st := range []int{0, 1} { // bucket lookup, record hydration
		in := gen.bundle(10)
		be.failSt, be.armed = st, true
		if err := j.ProcessBundle(in, func([]recordstore.Output) error { return nil }); !errors.Is(err, errCommitFail) {
			t.Fatalf("state %d: error %v", st, err)
		}
		be.armed = false
		if got := sortedEntries(t, raw); !reflect.DeepEqual(before, got) || pool.Used() != 0 {
			t.Fatalf("state %d: a failed Begin changed the store or kept %d pool bytes", st, pool.Used())
		}
	}
	for b := 0; b < 5; b++ {
		in := gen.bundle(15)
		if om, or := runJoin(t, j, in), runJoin(t, jr, in); !reflect.DeepEqual(om, or) {
			t.Fatalf("bundle %d after failures: outputs differ", b)
		}
	}
	if ms.OnlineStats().KeysMigrated == 0 {
		t.Fatal("nothing migrated after the failures")
	}
}
