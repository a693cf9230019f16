package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
)

var listStates = []StateDesc{
	{Name: "lt", Kind: KindList, TTL: 10 * time.Second},
	{Name: "l", Kind: KindList},
}

// forListBackends runs f on both backends holding listStates, with a
// manual clock that also drives the RocksDB compaction filters.
func forListBackends(t *testing.T, f func(t *testing.T, op *Operator, clock *Clock)) {
	for _, name := range []string{"heap", "rocksdb"} {
		t.Run(name, func(t *testing.T) {
			clock := NewManualClock(1_000_000)
			var be Backend
			var err error
			if name == "heap" {
				be, err = OpenHeap(smallLayout, listStates)
			} else {
				be, err = OpenRocksDB(filepath.Join(t.TempDir(), "db"), smallLayout, listStates, RocksOptions{Clock: clock, WriteBufferSize: 1 << 20})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			f(t, NewOperator(be, clock), clock)
		})
	}
}

func listOfBundle(t *testing.T, b *Bundle, s *State, k []byte) []string {
	t.Helper()
	out := []string{}
	if err := b.ListGet(s, k, func(e []byte) bool { out = append(out, string(e)); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// listNow reads the list in a fresh bundle.
func listNow(t *testing.T, b *Bundle, s *State, k []byte) []string {
	t.Helper()
	begin(t, b)
	defer b.Abort()
	return listOfBundle(t, b, s, k)
}

func publicElems(t *testing.T, p []byte) []string {
	t.Helper()
	out := []string{}
	if err := decodeList(p, func(e []byte) bool { out = append(out, string(e)); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

func addAll(t *testing.T, b *Bundle, s *State, k []byte, elems ...string) {
	t.Helper()
	var es [][]byte
	for _, e := range elems {
		es = append(es, []byte(e))
	}
	if err := b.ListAddAll(s, k, es); err != nil {
		t.Fatal(err)
	}
}

// TestListElementTTL: each element of a TTL list expires on its own
// (Flink's list TTL), on both backends, whether appended blind (a merge),
// after a read (a put of the whole list) or replaced by ListUpdate; reads
// outside bundles (State.Get, ScanKeyGroups) agree.
func TestListElementTTL(t *testing.T) {
	forListBackends(t, func(t *testing.T, op *Operator, clock *Clock) {
		lt := mustState(t, op, "lt")
		b := op.NewBundle()
		defer b.Close()
		k := lt.Key(nil, 7, []byte("k"), []byte("ns"))
		k2 := lt.Key(nil, 9, []byte("k2"), nil)

		begin(t, b) // blind appends
		addAll(t, b, lt, k, "a", "b")
		commit(t, b)
		clock.Advance(6 * time.Second)
		begin(t, b)
		addAll(t, b, lt, k, "c")
		if got := listOfBundle(t, b, lt, k); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("append then read in one bundle: %v", got)
		}
		addAll(t, b, lt, k, "d")
		commit(t, b)
		if got := listNow(t, b, lt, k); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
			t.Fatalf("at +6s: %v", got)
		}
		clock.Advance(4 * time.Second) // a and b are 10s old: expired
		if got := listNow(t, b, lt, k); !slices.Equal(got, []string{"c", "d"}) {
			t.Fatalf("at +10s: %v", got)
		}
		p, ok, err := lt.Get(k)
		if err != nil || !ok || !slices.Equal(publicElems(t, p), []string{"c", "d"}) {
			t.Fatalf("State.Get at +10s: %q %v %v", p, ok, err)
		}
		var scanned []string
		var scanTS int64
		if err := lt.ScanKeyGroups(0, 127, func(_ []byte, ts int64, p []byte) bool {
			scanned = publicElems(t, p)
			scanTS = ts
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(scanned, []string{"c", "d"}) || scanTS != clock.Now()-4000 {
			t.Fatalf("ScanKeyGroups: %v at %d (now %d)", scanned, scanTS, clock.Now())
		}

		// A hydrated append rewrites the list: expired elements are gone,
		// live ones keep their own timestamps.
		clock.Advance(time.Second)
		begin(t, b, KeyRef{State: lt, Key: k})
		addAll(t, b, lt, k, "e")
		commit(t, b)
		clock.Advance(5 * time.Second) // c, d written 10s ago
		if got := listNow(t, b, lt, k); !slices.Equal(got, []string{"e"}) {
			t.Fatalf("after hydrated append: %v", got)
		}

		// ListUpdate timestamps every element now.
		begin(t, b)
		addAll(t, b, lt, k2, "x")
		commit(t, b)
		clock.Advance(9 * time.Second)
		begin(t, b)
		if err := b.ListUpdate(lt, k2, [][]byte{[]byte("x"), []byte("y")}); err != nil {
			t.Fatal(err)
		}
		commit(t, b)
		clock.Advance(5 * time.Second) // e expired, x/y 5s old
		if got := listNow(t, b, lt, k2); !slices.Equal(got, []string{"x", "y"}) {
			t.Fatalf("after update: %v", got)
		}
		if got := listNow(t, b, lt, k); len(got) != 0 {
			t.Fatalf("fully expired list still reads %v", got)
		}
		if _, ok, _ := lt.Get(k); ok {
			t.Fatal("State.Get returned a fully expired list")
		}
		begin(t, b)
		if _, ok, _ := b.Get(lt, k); ok {
			t.Fatal("Bundle.Get returned a fully expired list")
		}
		// Appending to an expired list starts a new one.
		addAll(t, b, lt, k, "f")
		commit(t, b)
		if got := listNow(t, b, lt, k); !slices.Equal(got, []string{"f"}) {
			t.Fatalf("append to expired list: %v", got)
		}
	})
}

// TestListWholeValueInTTLState: a whole-list value (as an import writes it)
// in a TTL state reads as elements timestamped with the value; blind
// appends to it merge into a per-element list.
func TestListWholeValueInTTLState(t *testing.T) {
	forListBackends(t, func(t *testing.T, op *Operator, clock *Clock) {
		lt := mustState(t, op, "lt")
		k := lt.Key(nil, 3, []byte("imp"), nil)
		old := binary.BigEndian.AppendUint64(nil, uint64(clock.Now()))
		old = appendLenBytes(appendLenBytes(old, []byte("p")), []byte("q"))
		wb := op.Backend().NewBatch()
		wb.Put(lt.ID(), k, old)
		if err := wb.Commit(); err != nil {
			t.Fatal(err)
		}
		wb.Close()
		b := op.NewBundle()
		defer b.Close()
		clock.Advance(5 * time.Second)
		begin(t, b)
		addAll(t, b, lt, k, "r")
		commit(t, b)
		if got := listNow(t, b, lt, k); !slices.Equal(got, []string{"p", "q", "r"}) {
			t.Fatalf("%v", got)
		}
		clock.Advance(5 * time.Second)
		if got := listNow(t, b, lt, k); !slices.Equal(got, []string{"r"}) {
			t.Fatalf("imported elements should expire with their value: %v", got)
		}
	})
}

// TestListAppendsWithoutTTLStayWholeList: lists of states without a TTL
// keep the whole-list format through merges, and bundle appends issue no
// reads.
func TestListAppendsWithoutTTLStayWholeList(t *testing.T) {
	forListBackends(t, func(t *testing.T, op *Operator, clock *Clock) {
		l := mustState(t, op, "l")
		k := l.Key(nil, 1, []byte("a"), nil)
		b := op.NewBundle()
		defer b.Close()
		for i := 0; i < 3; i++ {
			begin(t, b, KeyRef{State: l, Key: k, WriteOnly: true})
			addAll(t, b, l, k, fmt.Sprint(i), fmt.Sprint(i+10))
			if st := b.Stats(); st.Hydrated+st.PointReads != 0 {
				t.Fatalf("blind append read the store: %+v", st)
			}
			commit(t, b)
			clock.Advance(time.Hour)
		}
		var raw []byte
		if err := op.Backend().MultiGet(l.ID(), [][]byte{k}, func(_ int, v []byte, ok bool) { raw = append([]byte(nil), v...) }); err != nil {
			t.Fatal(err)
		}
		if isPerElement(raw) {
			t.Fatal("a list without TTL was stored per-element")
		}
		if got := publicElems(t, raw[TTLPrefix:]); !slices.Equal(got, []string{"0", "10", "1", "11", "2", "12"}) {
			t.Fatalf("%v", got)
		}
		// Delete then append in one bundle: only the new elements.
		begin(t, b)
		if err := b.Delete(l, k); err != nil {
			t.Fatal(err)
		}
		addAll(t, b, l, k, "z")
		commit(t, b)
		if got := listNow(t, b, l, k); !slices.Equal(got, []string{"z"}) {
			t.Fatalf("delete+append: %v", got)
		}
	})
}

// TestListCompactionDropsExpiredElements: the native list filter rewrites
// per-element lists without their expired elements and drops lists with
// none left.
func TestListCompactionDropsExpiredElements(t *testing.T) {
	clock := NewManualClock(5_000_000)
	be, err := OpenRocksDB(filepath.Join(t.TempDir(), "db"), smallLayout, listStates, RocksOptions{Clock: clock, WriteBufferSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	op := NewOperator(be, clock)
	lt := mustState(t, op, "lt")
	b := op.NewBundle()
	defer b.Close()
	k1 := lt.Key(nil, 1, []byte("one"), nil)
	k2 := lt.Key(nil, 2, []byte("two"), nil)
	begin(t, b)
	addAll(t, b, lt, k1, "old1", "old2")
	addAll(t, b, lt, k2, "gone")
	commit(t, b)
	clock.Advance(8 * time.Second)
	begin(t, b)
	addAll(t, b, lt, k1, "new")
	commit(t, b)
	clock.Advance(3 * time.Second) // old1, old2, gone expired
	before := listElemsDropped()
	if err := be.Flush(); err != nil {
		t.Fatal(err)
	}
	// The first compaction merges the blind appends into values; the
	// filter sees values, not merge operands, so the second drops.
	for i := 0; i < 2; i++ {
		if err := CompactNative(be); err != nil {
			t.Fatal(err)
		}
	}
	raw := map[string][]byte{}
	if err := be.Scan(lt.ID(), nil, nil, func(k, v []byte) bool {
		raw[string(k)] = append([]byte(nil), v...)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw[string(k2)]; ok {
		t.Fatal("fully expired list survived compaction")
	}
	v, ok := raw[string(k1)]
	if !ok || !isPerElement(v) {
		t.Fatalf("k1 after compaction: %x", v)
	}
	var elems []string
	if err := listElems(v[TTLPrefix:], true, 0, func(ts int64, el []byte) bool {
		elems = append(elems, string(el))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(elems, []string{"new"}) {
		t.Fatalf("stored elements after compaction: %v", elems)
	}
	if d := listElemsDropped() - before; d < 2 {
		t.Fatalf("filter reports %d dropped elements", d)
	}
}

// TestListMergeNativeMatchesGo feeds random values in both formats (and
// malformed ones) to the native merge operator and mergeListValues.
func TestListMergeNativeMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	value := func(per bool) []byte {
		ts := rng.Int64N(1 << 40)
		v := binary.BigEndian.AppendUint64(nil, listPrefix(per, ts))
		for i := rng.IntN(4); i > 0; i-- {
			el := make([]byte, rng.IntN(300))
			for j := range el {
				el[j] = byte(rng.IntN(256))
			}
			v = appendListElem(v, per, ts-rng.Int64N(1000), el)
		}
		return v
	}
	for i := 0; i < 500; i++ {
		var vals [][]byte
		for j := 1 + rng.IntN(20); j > 0; j-- {
			vals = append(vals, value(rng.IntN(3) == 0))
		}
		bad := i%10 == 9
		if bad {
			// a dangling uvarint continuation byte (or a short prefix)
			j := rng.IntN(len(vals))
			if i%20 == 19 {
				vals[j] = vals[j][:5]
			} else {
				vals[j] = append(vals[j], 0x85)
			}
		}
		want, gerr := mergeListValues(nil, vals...)
		got, ok := nativeListMerge(vals)
		if bad {
			if gerr == nil || ok {
				t.Fatalf("case %d: malformed input accepted (go err %v, native ok %v)", i, gerr, ok)
			}
			continue
		}
		if gerr != nil || !ok {
			t.Fatalf("case %d: go err %v, native ok %v", i, gerr, ok)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: native %x\ngo %x", i, got, want)
		}
	}
}

// TestListMergeOperatorReadsCheckpoint reads a native checkpoint holding
// list merge records through grocksdb with ListMergeOperator, as a tool
// would, and gets the lists the engine reads.
func TestListMergeOperatorReadsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	be, err := OpenRocksDB(filepath.Join(dir, "db"), smallLayout, listStates, RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	op := NewOperator(be, nil)
	l := mustState(t, op, "l")
	b := op.NewBundle()
	defer b.Close()
	k := l.Key(nil, 1, []byte("a"), nil)
	for i := 0; i < 3; i++ {
		begin(t, b)
		addAll(t, b, l, k, fmt.Sprint("x", i), fmt.Sprint("y", i))
		commit(t, b)
		if i == 0 {
			if err := be.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cp := filepath.Join(dir, "cp")
	if err := CreateNativeCheckpoint(be, cp); err != nil {
		t.Fatal(err)
	}
	// Not destroyed: grocksdb v1.7.15's Options.Destroy frees a Go merge
	// operator after the options that own it (ReadNativeDir keeps its
	// options for the process's life for the same reason).
	opts := grocksdb.NewDefaultOptions()
	opts.SetMergeOperator(ListMergeOperator{})
	names := []string{"default", "lt", "l"}
	db, hs, err := grocksdb.OpenDbForReadOnlyColumnFamilies(opts, cp, names, []*grocksdb.Options{opts, opts, opts}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, h := range hs {
			h.Destroy()
		}
		db.Close()
	}()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetCF(ro, hs[2], k)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Free()
	if !v.Exists() || len(v.Data()) < TTLPrefix {
		t.Fatalf("value %x", v.Data())
	}
	if got := publicElems(t, v.Data()[TTLPrefix:]); !slices.Equal(got, []string{"x0", "y0", "x1", "y1", "x2", "y2"}) {
		t.Fatalf("%v", got)
	}
}

// FuzzListValue feeds arbitrary stored list values to the Go and native
// merges (same verdict, same bytes when both accept), to the readers
// outside bundles and to a bundle's hydration: errors, never panics.
func FuzzListValue(f *testing.F) {
	v := binary.BigEndian.AppendUint64(nil, listPrefix(true, 5000))
	v = appendListElem(v, true, 4000, []byte("a"))
	f.Add(v, []byte{0, 0, 0, 0, 0, 0, 0, 9, 1, 'b'})
	f.Add([]byte{0x80, 0, 0, 0, 0, 0, 0, 1}, []byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0xff}, []byte{0x80, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0x85})
	f.Fuzz(fuzzListBody)
}

func fuzzListBody(t *testing.T, a, b []byte) {
	want, gerr := mergeListValues(nil, a, b)
	got, ok := nativeListMerge([][]byte{a, b})
	if (gerr == nil) != ok {
		t.Fatalf("go err %v, native ok %v", gerr, ok)
	}
	if ok && !bytes.Equal(want, got) && canonicalUvarints(a) && canonicalUvarints(b) {
		t.Fatalf("native %x, go %x", got, want)
	}
	be, err := OpenHeap(smallLayout, listStates)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	op := NewOperator(be, NewManualClock(6000))
	for _, s := range op.States() {
		k := s.Key(nil, 1, []byte("k"), nil)
		wb := be.NewBatch()
		wb.Put(s.ID(), k, a)
		wb.(merger).Merge(s.ID(), k, b)
		if wb.Commit() != nil {
			wb = be.NewBatch()
			wb.Put(s.ID(), k, a)
			if err := wb.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		_, _, _ = s.Get(k)
		_ = s.ScanKeyGroups(0, 127, func([]byte, int64, []byte) bool { return true })
		bu := op.NewBundle()
		if bu.Begin([]KeyRef{{State: s, Key: k}}) == nil {
			_ = bu.ListGet(s, k, func([]byte) bool { return true })
			_ = bu.ListAdd(s, k, []byte("z"))
			_ = bu.Commit()
		}
		bu.Close()
	}
}

// canonicalUvarints reports whether every uvarint in a list value is
// minimally encoded (the Go merge re-encodes, the native one copies).
func canonicalUvarints(v []byte) bool {
	if len(v) < TTLPrefix {
		return true
	}
	ok := true
	p := v[TTLPrefix:]
	per := isPerElement(v)
	for len(p) > 0 && ok {
		if per {
			if len(p) < 8 {
				return true
			}
			p = p[8:]
		}
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return true
		}
		ok = w == len(binary.AppendUvarint(nil, n))
		p = p[w+int(n):]
	}
	return ok
}

// TestScanKeyGroupsTimed: a TTL list scans with each live element's own
// time (blind appends in several bundles, one element expired); a list
// without TTL scans as ScanKeyGroups does.
func TestScanKeyGroupsTimed(t *testing.T) {
	forListBackends(t, func(t *testing.T, op *Operator, clock *Clock) {
		lt, l := mustState(t, op, "lt"), mustState(t, op, "l")
		b := op.NewBundle()
		defer b.Close()
		k := lt.Key(nil, 3, []byte("k"), nil)
		t0 := clock.Now()
		for i := 0; i < 3; i++ {
			begin(t, b)
			addAll(t, b, lt, k, fmt.Sprint("e", i))
			addAll(t, b, l, k, fmt.Sprint("p", i))
			commit(t, b)
			clock.Advance(4 * time.Second)
		}
		// now t0+12s: e0 (t0) expired, e1 (t0+4s) and e2 (t0+8s) live.
		var got []string
		var scanTS int64
		if err := lt.ScanKeyGroupsTimed(0, 127, func(_ []byte, ts int64, p []byte, timed bool) bool {
			if !timed {
				t.Fatal("TTL list not timed")
			}
			scanTS = ts
			if err := ListElems(p, true, func(ets int64, el []byte) bool {
				got = append(got, fmt.Sprintf("%s@%d", el, ets-t0))
				return true
			}); err != nil {
				t.Fatal(err)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"e1@4000", "e2@8000"}) || scanTS != t0+8000 {
			t.Fatalf("timed scan: %v newest %d", got, scanTS-t0)
		}
		got = nil
		if err := l.ScanKeyGroupsTimed(0, 127, func(_ []byte, ts int64, p []byte, timed bool) bool {
			if timed {
				t.Fatal("list without TTL timed")
			}
			if err := ListElems(p, false, func(ets int64, el []byte) bool {
				got = append(got, fmt.Sprintf("%s@%d", el, ets))
				return true
			}); err != nil {
				t.Fatal(err)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"p0@0", "p1@0", "p2@0"}) {
			t.Fatalf("plain scan: %v", got)
		}
	})
}
