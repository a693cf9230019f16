package engine

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sfstate/sfstate/keygroups"
)

var testStates = []StateDesc{
	{Name: "v", Kind: KindValue},
	{Name: "vttl", Kind: KindValue, TTL: 10 * time.Second},
	{Name: "l", Kind: KindList},
	{Name: "m", Kind: KindMap, TTL: time.Minute},
	{Name: "ms", Kind: KindMultiset},
	{Name: "pq", Kind: KindPriorityQueue},
}

type backendCase struct {
	name string
	open func(t *testing.T, dir string, layout Layout, clock *Clock) Backend
}

var backendCases = []backendCase{
	{"heap", func(t *testing.T, _ string, layout Layout, _ *Clock) Backend {
		be, err := OpenHeap(layout, testStates)
		if err != nil {
			t.Fatal(err)
		}
		return be
	}},
	{"rocksdb", func(t *testing.T, dir string, layout Layout, clock *Clock) Backend {
		be, err := OpenRocksDB(dir, layout, testStates, RocksOptions{Clock: clock, WriteBufferSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return be
	}},
}

// forBackends runs f once per backend with a fresh operator and manual clock.
func forBackends(t *testing.T, layout Layout, f func(t *testing.T, op *Operator, clock *Clock)) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			clock := NewManualClock(1_000_000)
			be := bc.open(t, filepath.Join(t.TempDir(), "db"), layout, clock)
			defer be.Close()
			f(t, NewOperator(be, clock), clock)
		})
	}
}

var smallLayout = Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}

func mustState(t *testing.T, op *Operator, name string) *State {
	t.Helper()
	s, err := op.State(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func commit(t *testing.T, b *Bundle) {
	t.Helper()
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

func begin(t *testing.T, b *Bundle, keys ...KeyRef) {
	t.Helper()
	if err := b.Begin(keys); err != nil {
		t.Fatal(err)
	}
}

func getOne(t *testing.T, b *Bundle, s *State, k []byte) (string, bool) {
	t.Helper()
	v, ok, err := b.Get(s, k)
	if err != nil {
		t.Fatal(err)
	}
	return string(v), ok
}

func TestValuePutGetDelete(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		v := mustState(t, op, "v")
		b := op.NewBundle()
		defer b.Close()
		k1 := v.Key(nil, 3, []byte("alice"), nil)
		k2 := v.Key(nil, 3, []byte("bob"), []byte("ns"))
		begin(t, b, KeyRef{State: v, Key: k1}, KeyRef{State: v, Key: k2})
		if _, ok := getOne(t, b, v, k1); ok {
			t.Fatal("fresh key present")
		}
		if err := b.Put(v, k1, []byte("one")); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(v, k2, []byte("two")); err != nil {
			t.Fatal(err)
		}
		if s, ok := getOne(t, b, v, k1); !ok || s != "one" {
			t.Fatalf("read-your-write: %q %v", s, ok)
		}
		commit(t, b)
		if b.Stats().Writes != 2 {
			t.Fatalf("writes = %d, want 2", b.Stats().Writes)
		}
		if b.Len() != 0 {
			t.Fatal("working map not cleared by commit")
		}

		begin(t, b, KeyRef{State: v, Key: k1}, KeyRef{State: v, Key: k2})
		if s, ok := getOne(t, b, v, k2); !ok || s != "two" {
			t.Fatalf("after commit: %q %v", s, ok)
		}
		if err := b.Delete(v, k1); err != nil {
			t.Fatal(err)
		}
		if _, ok := getOne(t, b, v, k1); ok {
			t.Fatal("deleted key visible in bundle")
		}
		commit(t, b)
		if b.Stats().Writes != 1 {
			t.Fatalf("writes = %d, want 1 (the delete)", b.Stats().Writes)
		}
		if _, ok, _ := v.Get(k1); ok {
			t.Fatal("deleted key survives commit")
		}
		if p, ok, _ := v.Get(k2); !ok || string(p) != "two" {
			t.Fatalf("k2 = %q %v", p, ok)
		}
		// a put then delete of a key never stored writes nothing
		k3 := v.Key(nil, 4, []byte("carol"), nil)
		begin(t, b, KeyRef{State: v, Key: k3})
		_ = b.Put(v, k3, []byte("x"))
		_ = b.Delete(v, k3)
		commit(t, b)
		if b.Stats().Writes != 0 {
			t.Fatalf("writes = %d, want 0", b.Stats().Writes)
		}
	})
}

func TestEmptyBundleAndRepeatedKeys(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		v := mustState(t, op, "v")
		b := op.NewBundle()
		defer b.Close()
		begin(t, b)
		commit(t, b)
		if st := b.Stats(); st.Writes != 0 || st.Hydrated != 0 {
			t.Fatalf("empty bundle stats %+v", st)
		}
		if err := b.Commit(); err != ErrNoBundle {
			t.Fatalf("commit without begin: %v", err)
		}
		k := v.Key(nil, 1, []byte("k"), nil)
		refs := []KeyRef{{State: v, Key: k}, {State: v, Key: k}, {State: v, Key: append([]byte(nil), k...)}}
		begin(t, b, refs...)
		if b.Stats().Hydrated != 1 {
			t.Fatalf("hydrated %d keys, want 1", b.Stats().Hydrated)
		}
		if err := b.Begin(nil); err != ErrBundleActive {
			t.Fatalf("nested begin: %v", err)
		}
		for i := 0; i < 10; i++ {
			_ = b.Put(v, k, []byte(fmt.Sprint(i)))
		}
		commit(t, b)
		if b.Stats().Writes != 1 {
			t.Fatalf("writes %d, want one per touched key", b.Stats().Writes)
		}
		if p, ok, _ := v.Get(k); !ok || string(p) != "9" {
			t.Fatalf("got %q", p)
		}
		// a key not hydrated by Begin is read on demand
		k2 := v.Key(nil, 1, []byte("other"), nil)
		begin(t, b)
		if _, ok := getOne(t, b, v, k2); ok {
			t.Fatal("absent key present")
		}
		if b.Stats().PointReads != 1 {
			t.Fatalf("point reads %d", b.Stats().PointReads)
		}
		b.Abort()
	})
}

func TestTTLExpiry(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, clock *Clock) {
		s := mustState(t, op, "vttl")
		b := op.NewBundle()
		defer b.Close()
		k := s.Key(nil, 2, []byte("k"), nil)
		kb := s.Key(nil, 2, []byte("kb"), nil)
		begin(t, b, KeyRef{State: s, Key: k})
		_ = b.Put(s, k, []byte("v"))
		_ = b.Put(s, kb, []byte("w"))
		commit(t, b)
		clock.Advance(9999 * time.Millisecond)
		begin(t, b, KeyRef{State: s, Key: k})
		if _, ok := getOne(t, b, s, k); !ok {
			t.Fatal("expired too early")
		}
		_ = b.Put(s, kb, []byte("w2")) // write refreshes kb's timestamp
		b.Commit()
		clock.Advance(time.Millisecond) // now = write + ttl: expired
		begin(t, b, KeyRef{State: s, Key: k}, KeyRef{State: s, Key: kb})
		if _, ok := getOne(t, b, s, k); ok {
			t.Fatal("expired value returned by bundle")
		}
		if v, ok := getOne(t, b, s, kb); !ok || v != "w2" {
			t.Fatal("refreshed value lost")
		}
		b.Abort()
		if _, ok, _ := s.Get(k); ok {
			t.Fatal("expired value returned by Get")
		}
		n := 0
		if err := s.ScanKeyGroups(0, 127, func([]byte, int64, []byte) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("scan saw %d live entries, want 1", n)
		}
		// reading does not refresh: still expired later
		clock.Advance(time.Hour)
		if _, ok, _ := s.Get(kb); ok {
			t.Fatal("kb should have expired")
		}
	})
}

func TestLargeValues(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		v := mustState(t, op, "v")
		b := op.NewBundle()
		defer b.Close()
		big := make([]byte, 3<<20)
		for i := range big {
			big[i] = byte(i * 7)
		}
		keys := [][]byte{v.Key(nil, 0, []byte("a"), nil), v.Key(nil, 127, []byte("b"), nil)}
		begin(t, b)
		for _, k := range keys {
			_ = b.Put(v, k, big)
		}
		commit(t, b)
		begin(t, b, KeyRef{State: v, Key: keys[0]}, KeyRef{State: v, Key: keys[1]})
		for _, k := range keys {
			got, ok, err := b.Get(v, k)
			if err != nil || !ok || !bytes.Equal(got, big) {
				t.Fatalf("large value mismatch (ok=%v err=%v len=%d)", ok, err, len(got))
			}
		}
		b.Abort()
	})
}

func TestListState(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		l := mustState(t, op, "l")
		b := op.NewBundle()
		defer b.Close()
		k := l.Key(nil, 9, []byte("k"), []byte("w1"))
		list := func() []string {
			var out []string
			if err := b.ListGet(l, k, func(e []byte) bool { out = append(out, string(e)); return true }); err != nil {
				t.Fatal(err)
			}
			return out
		}
		begin(t, b, KeyRef{State: l, Key: k})
		_ = b.ListAdd(l, k, []byte("a"))
		_ = b.ListAddAll(l, k, [][]byte{[]byte(""), []byte("ccc")})
		commit(t, b)
		begin(t, b, KeyRef{State: l, Key: k})
		if got := fmt.Sprint(list()); got != "[a  ccc]" {
			t.Fatalf("list = %s", got)
		}
		_ = b.ListAdd(l, k, []byte("d"))
		commit(t, b)
		begin(t, b, KeyRef{State: l, Key: k})
		if got := fmt.Sprint(list()); got != "[a  ccc d]" {
			t.Fatalf("list = %s", got)
		}
		_ = b.ListUpdate(l, k, [][]byte{[]byte("z")})
		commit(t, b)
		begin(t, b, KeyRef{State: l, Key: k})
		if got := fmt.Sprint(list()); got != "[z]" {
			t.Fatalf("list = %s", got)
		}
		_ = b.ListUpdate(l, k, nil)
		commit(t, b)
		begin(t, b, KeyRef{State: l, Key: k})
		if got := list(); len(got) != 0 {
			t.Fatalf("cleared list = %v", got)
		}
		b.Abort()
	})
}

func TestMapAndMultiset(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, clock *Clock) {
		m := mustState(t, op, "m")
		ms := mustState(t, op, "ms")
		b := op.NewBundle()
		defer b.Close()
		prefix := m.EntryPrefix(nil, 5, []byte("user"), []byte("ns"))
		other := m.EntryKey(nil, 5, []byte("user2"), []byte("ns"), []byte("a"))
		begin(t, b)
		for _, uk := range []string{"c", "a", "b"} {
			_ = b.Put(m, m.EntryKey(nil, 5, []byte("user"), []byte("ns"), []byte(uk)), []byte("v"+uk))
		}
		_ = b.Put(m, other, []byte("x"))
		commit(t, b)

		iter := func() string {
			var out []string
			if err := b.Iterate(m, prefix, func(uk, v []byte) bool { out = append(out, string(uk)+"="+string(v)); return true }); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(out)
		}
		begin(t, b)
		if got := iter(); got != "[a=va b=vb c=vc]" {
			t.Fatalf("iterate = %s", got)
		}
		// overlay: remove b, update c, add d (uncommitted)
		_ = b.Delete(m, m.EntryKey(nil, 5, []byte("user"), []byte("ns"), []byte("b")))
		_ = b.Put(m, m.EntryKey(nil, 5, []byte("user"), []byte("ns"), []byte("c")), []byte("C"))
		_ = b.Put(m, m.EntryKey(nil, 5, []byte("user"), []byte("ns"), []byte("d")), []byte("D"))
		if got := iter(); got != "[a=va c=C d=D]" {
			t.Fatalf("iterate with overlay = %s", got)
		}
		ok, _ := b.Contains(m, m.EntryKey(nil, 5, []byte("user"), []byte("ns"), []byte("b")))
		if ok {
			t.Fatal("removed map entry still contained")
		}
		commit(t, b)
		begin(t, b)
		if got := iter(); got != "[a=va c=C d=D]" {
			t.Fatalf("iterate after commit = %s", got)
		}
		b.Abort()
		// map TTL: one minute; entries a written earlier expire first
		clock.Advance(time.Minute)
		begin(t, b)
		if got := iter(); got != "[]" {
			t.Fatalf("iterate after expiry = %s", got)
		}
		b.Abort()

		// multiset
		e1 := ms.EntryKey(nil, 7, []byte("cat"), nil, []byte{0, 0, 0, 10})
		e2 := ms.EntryKey(nil, 7, []byte("cat"), nil, []byte{0, 0, 0, 20})
		begin(t, b, KeyRef{State: ms, Key: e1}, KeyRef{State: ms, Key: e2})
		for _, d := range []int64{1, 1, 1} {
			if _, err := b.MultisetAdd(ms, e1, d); err != nil {
				t.Fatal(err)
			}
		}
		if c, _ := b.MultisetAdd(ms, e2, 2); c != 2 {
			t.Fatalf("count %d", c)
		}
		commit(t, b)
		begin(t, b, KeyRef{State: ms, Key: e1}, KeyRef{State: ms, Key: e2})
		if c, _ := b.MultisetCount(ms, e1); c != 3 {
			t.Fatalf("count e1 = %d", c)
		}
		if c, _ := b.MultisetAdd(ms, e2, -2); c != 0 {
			t.Fatalf("count e2 = %d", c)
		}
		// min of the multiset = first entry in key order
		var first []byte
		_ = b.Iterate(ms, ms.EntryPrefix(nil, 7, []byte("cat"), nil), func(uk, _ []byte) bool { first = append([]byte(nil), uk...); return false })
		if !bytes.Equal(first, []byte{0, 0, 0, 10}) {
			t.Fatalf("min = %v", first)
		}
		commit(t, b)
		if _, ok, _ := ms.Get(e2); ok {
			t.Fatal("zero-count multiset entry kept")
		}
	})
}

func TestKeyGroupRangeIterationAndClip(t *testing.T) {
	for _, layout := range []Layout{
		{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}},
		{MaxParallelism: 4096, Range: keygroups.Range{Start: 0, End: 4095}},
	} {
		t.Run(fmt.Sprint(layout.MaxParallelism), func(t *testing.T) {
			forBackends(t, layout, func(t *testing.T, op *Operator, _ *Clock) {
				v := mustState(t, op, "v")
				b := op.NewBundle()
				defer b.Close()
				begin(t, b)
				step := layout.MaxParallelism / 16
				for kg := 0; kg < layout.MaxParallelism; kg += step {
					for j := 0; j < 3; j++ {
						_ = b.Put(v, v.Key(nil, kg, []byte{byte(j)}, nil), []byte{byte(kg), byte(kg >> 8)})
					}
				}
				commit(t, b)
				count := func(lo, hi int) (n int) {
					err := v.ScanKeyGroups(lo, hi, func(k []byte, _ int64, p []byte) bool {
						kg, _, _, _, err := op.DecodeKey(k)
						if err != nil || kg < lo || kg > hi || int(p[0])|int(p[1])<<8 != kg {
							t.Fatalf("bad entry in [%d,%d]: kg %d err %v", lo, hi, kg, err)
						}
						n++
						return true
					})
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				if n := count(0, layout.MaxParallelism-1); n != 48 {
					t.Fatalf("all = %d", n)
				}
				if n := count(step, 3*step); n != 9 {
					t.Fatalf("[step, 3step] = %d", n)
				}
				if n := count(step+1, 2*step-1); n != 0 {
					t.Fatalf("gap = %d", n)
				}
				r := keygroups.Range{Start: 2 * step, End: 5*step - 1}
				if err := op.ClipToRange(r); err != nil {
					t.Fatal(err)
				}
				if n := count(0, layout.MaxParallelism-1); n != 9 {
					t.Fatalf("after clip = %d, want 9", n)
				}
				if n := count(r.Start, r.End); n != 9 {
					t.Fatalf("inside clip = %d", n)
				}
			})
		})
	}
}

func TestLayoutValidation(t *testing.T) {
	if keygroups.PrefixWidth(128) != 1 || keygroups.PrefixWidth(129) != 2 {
		t.Fatal("prefix width")
	}
	for _, l := range []Layout{{0, keygroups.Range{Start: 0, End: 0}}, {128, keygroups.Range{Start: 5, End: 4}}, {128, keygroups.Range{Start: 0, End: 128}}, {1 << 16, keygroups.Range{Start: 0, End: 1}}} {
		if l.Validate() == nil {
			t.Fatalf("layout %+v accepted", l)
		}
	}
	if _, err := OpenHeap(smallLayout, []StateDesc{{Name: "a", Kind: KindValue}, {Name: "a", Kind: KindMap}}); err == nil {
		t.Fatal("duplicate state accepted")
	}
	if _, err := OpenHeap(smallLayout, []StateDesc{{Name: "default", Kind: KindValue}}); err == nil {
		t.Fatal("reserved name accepted")
	}
	for _, bad := range []StateDesc{
		{Name: "t", Kind: KindValue, TTL: time.Microsecond},
		{Name: "t", Kind: KindValue, TTL: -time.Second},
		{Name: "t", Kind: Kind(99)},
		{Name: "t", Kind: KindPriorityQueue, TTL: time.Second},
	} {
		if _, err := OpenHeap(smallLayout, []StateDesc{bad}); err == nil {
			t.Fatalf("state %+v accepted", bad)
		}
	}
	op := NewOperator(mustHeap(t), nil)
	if _, _, _, _, err := op.DecodeKey([]byte{1, 200}); err == nil {
		t.Fatal("malformed key decoded")
	}
}

func mustHeap(t *testing.T) Backend {
	be, err := OpenHeap(smallLayout, testStates)
	if err != nil {
		t.Fatal(err)
	}
	return be
}

func TestStateMultiGetInputOrder(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, clock *Clock) {
		s := mustState(t, op, "vttl")
		b := op.NewBundle()
		defer b.Close()
		var keys [][]byte
		begin(t, b)
		for i := 0; i < 50; i++ {
			k := s.Key(nil, (i*37)%128, []byte(fmt.Sprint("key", i)), nil)
			keys = append(keys, k)
			if i%3 != 0 {
				_ = b.Put(s, k, []byte(fmt.Sprint("val", i)))
			}
		}
		commit(t, b)
		// unsorted, repeated, with an absent key
		order := []int{49, 3, 3, 0, 17, 1, 48, 2}
		var in [][]byte
		for _, i := range order {
			in = append(in, keys[i])
		}
		got := make([]string, len(in))
		err := s.MultiGet(in, func(i int, ts int64, p []byte, ok bool) {
			if ok {
				if ts != clock.Now() {
					t.Errorf("ts %d", ts)
				}
				got[i] = string(p)
			} else {
				got[i] = "-"
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		want := "[val49 - - - val17 val1 - val2]"
		if fmt.Sprint(got) != want {
			t.Fatalf("got %v want %s", got, want)
		}
		clock.Advance(10 * time.Second)
		n := 0
		_ = s.MultiGet(in, func(_ int, _ int64, _ []byte, ok bool) {
			if ok {
				n++
			}
		})
		if n != 0 {
			t.Fatalf("%d expired values returned", n)
		}
	})
}

func TestBeginIsOneBatchedRead(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		v, m, l := mustState(t, op, "v"), mustState(t, op, "m"), mustState(t, op, "l")
		b := op.NewBundle()
		defer b.Close()
		kv := v.Key(nil, 1, []byte("a"), nil)
		km := m.EntryKey(nil, 2, []byte("a"), nil, []byte("u"))
		kl := l.Key(nil, 3, []byte("a"), nil)
		begin(t, b)
		_ = b.Put(v, kv, []byte("1"))
		_ = b.Put(m, km, []byte("2"))
		_ = b.ListAdd(l, kl, []byte("3"))
		commit(t, b)
		absent := v.Key(nil, 4, []byte("none"), nil)
		begin(t, b, KeyRef{State: v, Key: kv}, KeyRef{State: m, Key: km}, KeyRef{State: l, Key: kl}, KeyRef{State: v, Key: absent}, KeyRef{State: m, Key: km})
		if st := b.Stats(); st.Reads != 1 || st.Hydrated != 4 {
			t.Fatalf("stats %+v, want one batched read of 4 keys", st)
		}
		for _, c := range []struct {
			s    *State
			k    []byte
			want string
		}{{v, kv, "1"}, {m, km, "2"}} {
			if got, ok := getOne(t, b, c.s, c.k); !ok || got != c.want {
				t.Fatalf("%s = %q", c.s.Desc().Name, got)
			}
		}
		if _, ok := getOne(t, b, v, absent); ok {
			t.Fatal("absent key present")
		}
		if b.Stats().PointReads != 0 {
			t.Fatal("hydrated keys were read again")
		}
		b.Abort()
	})
}
