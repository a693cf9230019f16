package statediff

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// testEntry is one entry of a generated one-state savepoint.
type testEntry struct {
	key     int64
	userKey []byte // MAP state only
	val     []byte
}

// writeOneState writes a canonical savepoint into dir: one operator
// (parallelism 1, max parallelism 128) with one keyed state of Long keys,
// void namespace and the given kind and value serializer.
func writeOneState(t *testing.T, dir, kind string, value flinkwrite.Snapshot, entries []testEntry) {
	t.Helper()
	const maxP = 128
	h := flinkwrite.Header{KeySerializer: flinkwrite.LongSnapshot, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("s", kind, flinkwrite.VoidNamespaceSnapshot, value),
	}}
	byKG := map[int][]testEntry{}
	for _, e := range entries {
		kg := keygroups.KeyGroupFor(keygroups.HashLong(e.key), maxP)
		byKG[kg] = append(byKG[kg], e)
	}
	fh, err := os.Create(filepath.Join(dir, "keyed"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := flinkwrite.NewKeyedWriter(fh, h, keygroups.Range{Start: 0, End: maxP - 1}, maxP)
	if err != nil {
		t.Fatal(err)
	}
	var key []byte
	for kg := 0; kg < maxP; kg++ {
		es := byKG[kg]
		// Flink writes a key group in key byte order.
		slices.SortFunc(es, func(a, b testEntry) int {
			if c := bytes.Compare(flinkwrite.AppendLong(nil, a.key), flinkwrite.AppendLong(nil, b.key)); c != 0 {
				return c
			}
			return bytes.Compare(a.userKey, b.userKey)
		})
		for _, e := range es {
			key, err = flinkwrite.StateKey{KeyGroup: kg, PrefixLen: 1, Key: flinkwrite.AppendLong(nil, e.key),
				Namespace: flinkwrite.AppendVoidNamespace(nil), UserKey: e.userKey}.Append(key[:0])
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Add(kg, 0, key, e.val); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	op := &savepoint.OperatorState{ID: savepoint.OperatorIDFromUID("one-state"), Parallelism: 1, MaxParallelism: maxP,
		Subtasks: []*savepoint.SubtaskState{{Index: 0, ManagedKeyed: &savepoint.KeyGroupsHandle{Tag: savepoint.TagSavepointKeyGroups,
			StartKeyGroup: 0, Offsets: w.Offsets(), Delegate: &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: "keyed", Size: w.Size()}}}}}
	b, err := savepoint.EncodeMetadata(&savepoint.Metadata{Version: 3, CheckpointID: 1, Operators: []*savepoint.OperatorState{op}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, savepoint.MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// diffBoth diffs a and b through the digest path and the full pass (in
// memory and spilled): the results of one path agree whatever the budget,
// the two paths agree on the counts (their examples may be other
// entries: the digest path compares a few key groups at a time).
func diffBoth(t *testing.T, da, db string, o Options) *Result {
	t.Helper()
	a, b := open(t, da), open(t, db)
	var first *Result
	counts := func(r *Result) string {
		var out []string
		for _, s := range r.States {
			out = append(out, fmt.Sprintf("%s/%s %d %d +%d -%d ~%d ttl %d", s.Operator, s.State, s.EntriesA, s.EntriesB, s.Added, s.Removed, s.Changed, s.TTLChanged))
		}
		return fmt.Sprint(r.Equal, out, r.Notes)
	}
	for _, noDigest := range []bool{false, true} {
		var byPath *Result
		for _, mem := range []int64{0, 2 << 10} {
			o.NoDigest, o.MemoryBytes, o.TempDir = noDigest, mem, t.TempDir()
			r := stripSpill(diff(t, a, b, o))
			for _, s := range r.States {
				s.KeyGroupsSkipped = 0
			}
			if byPath == nil {
				byPath = r
			} else if mustJSON(r) != mustJSON(byPath) {
				t.Fatalf("noDigest=%v memory %d:\n%s\ndiffers from\n%s", noDigest, mem, mustJSON(r), mustJSON(byPath))
			}
		}
		if first == nil {
			first = byPath
		} else if counts(byPath) != counts(first) {
			t.Fatalf("full pass %s, digest path %s", counts(byPath), counts(first))
		}
	}
	return first
}

func oneState(t *testing.T, r *Result) *StateDiff {
	t.Helper()
	if len(r.States) != 1 {
		t.Fatalf("states: %s", mustJSON(r))
	}
	return r.States[0]
}

// TestDiffSerializersDiffer: a state with TTL on one side only has other
// value bytes for the same values; it is compared by decoded values (and
// a note says so): the values are equal where they are, the TTL timestamp
// is only on one side.
func TestDiffSerializersDiffer(t *testing.T) {
	const n = 300
	da, db := t.TempDir(), t.TempDir()
	var ea, eb []testEntry
	for k := int64(0); k < n; k++ {
		ea = append(ea, testEntry{key: k, val: flinkwrite.AppendTtlValue(nil, 1000+k, flinkwrite.AppendLong(nil, 2*k))})
		v := 2 * k
		if k == 5 {
			v = 99
		}
		eb = append(eb, testEntry{key: k, val: flinkwrite.AppendLong(nil, v)})
	}
	writeOneState(t, da, flinkwrite.KindValue, flinkwrite.TtlSnapshot(flinkwrite.LongSnapshot), ea)
	writeOneState(t, db, flinkwrite.KindValue, flinkwrite.LongSnapshot, eb)
	r := diffBoth(t, da, db, Options{Limit: 2})
	s := oneState(t, r)
	if s.Changed != 1 || s.TTLChanged != n-1 || s.Added+s.Removed != 0 || r.Incomplete {
		t.Fatalf("%s", mustJSON(r))
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "serializers differ") || !strings.Contains(r.Notes[0], `"s"`) {
		t.Fatalf("notes %q", r.Notes)
	}
	if c := s.ChangedExamples[0]; !strings.Contains(string(c.Before), `"value":"10"`) || !strings.Contains(string(c.After), `"value":"99"`) ||
		!strings.Contains(string(c.Before), `"ttlTimestamp":"1005"`) {
		t.Fatalf("change %s -> %s", c.Before, c.After)
	}
	r = diffBoth(t, da, db, Options{Limit: 2, IgnoreTTL: true})
	if s := oneState(t, r); s.Changed != 1 || s.TTLChanged != 0 {
		t.Fatalf("ignoring TTL: %s", mustJSON(r))
	}
}

// TestDiffValueBytesDecoded: a MapSerializer value (a java.util.Map, whose
// entry order is the map's iteration order) written in another order on
// each side has other bytes and the same value: equal; a real change is
// found, with the same serializers no note is written.
func TestDiffValueBytesDecoded(t *testing.T) {
	da, db := t.TempDir(), t.TempDir()
	m := func(k int64, x, y int64) []byte {
		return flinkwrite.AppendMapSerializer(nil,
			flinkwrite.MapSerializerEntry{Key: flinkwrite.AppendStringValue(nil, "a"), Value: flinkwrite.AppendLong(nil, x)},
			flinkwrite.MapSerializerEntry{Key: flinkwrite.AppendStringValue(nil, fmt.Sprint("b", k)), Value: flinkwrite.AppendLong(nil, y)})
	}
	rev := func(k int64, x, y int64) []byte {
		return flinkwrite.AppendMapSerializer(nil,
			flinkwrite.MapSerializerEntry{Key: flinkwrite.AppendStringValue(nil, fmt.Sprint("b", k)), Value: flinkwrite.AppendLong(nil, y)},
			flinkwrite.MapSerializerEntry{Key: flinkwrite.AppendStringValue(nil, "a"), Value: flinkwrite.AppendLong(nil, x)})
	}
	var ea, eb []testEntry
	for k := int64(0); k < 200; k++ {
		ea = append(ea, testEntry{key: k, val: m(k, k, 2*k)})
		switch {
		case k == 7:
			eb = append(eb, testEntry{key: k, val: rev(k, k, 2*k+1)})
		case k%2 == 0:
			eb = append(eb, testEntry{key: k, val: rev(k, k, 2*k)})
		default:
			eb = append(eb, testEntry{key: k, val: m(k, k, 2*k)})
		}
	}
	snap := flinkwrite.MapSnapshot(flinkwrite.StringSnapshot, flinkwrite.LongSnapshot)
	writeOneState(t, da, flinkwrite.KindValue, snap, ea)
	writeOneState(t, db, flinkwrite.KindValue, snap, eb)
	r := diffBoth(t, da, db, Options{Limit: 3})
	s := oneState(t, r)
	if s.Changed != 1 || s.TTLChanged+s.Added+s.Removed != 0 || len(r.Notes) != 0 {
		t.Fatalf("%s", mustJSON(r))
	}
	if c := s.ChangedExamples[0]; !strings.Contains(string(c.After), `"15"`) || strings.Contains(string(c.Before), `"15"`) {
		t.Fatalf("change %s -> %s", c.Before, c.After)
	}
}

// TestDiffTTLLayouts: TTL timestamps are told from values in MAP state
// (cut from the bytes) and LIST state (elements decoded).
func TestDiffTTLLayouts(t *testing.T) {
	ttl := func(ts, v int64) []byte { return flinkwrite.AppendTtlValue(nil, ts, flinkwrite.AppendLong(nil, v)) }
	for _, c := range []struct {
		kind string
		snap flinkwrite.Snapshot
		gen  func(k int64, ts, v int64) []testEntry
	}{
		{flinkwrite.KindMap, flinkwrite.MapSnapshot(flinkwrite.StringSnapshot, flinkwrite.TtlSnapshot(flinkwrite.LongSnapshot)),
			func(k, ts, v int64) []testEntry {
				return []testEntry{
					{key: k, userKey: flinkwrite.AppendStringValue(nil, "x"), val: flinkwrite.AppendMapEntryValue(nil, ttl(ts, v), false)},
					{key: k, userKey: flinkwrite.AppendStringValue(nil, "y"), val: flinkwrite.AppendMapEntryValue(nil, ttl(5, 5), false)},
				}
			}},
		{flinkwrite.KindList, flinkwrite.ListSnapshot(flinkwrite.TtlSnapshot(flinkwrite.LongSnapshot)),
			func(k, ts, v int64) []testEntry {
				l, err := flinkwrite.AppendListValue(nil, ttl(5, 5), ttl(ts, v))
				if err != nil {
					t.Fatal(err)
				}
				return []testEntry{{key: k, val: l}}
			}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			da, db := t.TempDir(), t.TempDir()
			var ea, eb []testEntry
			for k := int64(0); k < 100; k++ {
				ea = append(ea, c.gen(k, 100+k, k)...)
				switch k {
				case 3:
					eb = append(eb, c.gen(k, 100+k+1, k)...) // TTL only
				case 4:
					eb = append(eb, c.gen(k, 100+k, k+1)...) // value
				case 6:
					eb = append(eb, c.gen(k, 100+k+1, k+1)...) // both: a change
				default:
					eb = append(eb, c.gen(k, 100+k, k)...)
				}
			}
			writeOneState(t, da, c.kind, c.snap, ea)
			writeOneState(t, db, c.kind, c.snap, eb)
			r := diffBoth(t, da, db, Options{Limit: 3})
			s := oneState(t, r)
			if s.Changed != 2 || s.TTLChanged != 1 || s.Added+s.Removed != 0 || len(r.Notes) != 0 {
				t.Fatalf("%s", mustJSON(r))
			}
			if e := s.TTLChangedExamples[0]; !bytes.Contains(e.Before, []byte(`"103"`)) || !bytes.Contains(e.After, []byte(`"104"`)) {
				t.Fatalf("TTL change %s -> %s", e.Before, e.After)
			}
			r = diffBoth(t, da, db, Options{IgnoreTTL: true})
			if s := oneState(t, r); s.Changed != 2 || s.TTLChanged != 0 {
				t.Fatalf("ignoring TTL: %s", mustJSON(r))
			}
		})
	}
}

// TestSorterOrder: whatever order entries are added in (sorted, a few
// ascending runs, many runs, random) and whatever the budget (in memory,
// spilled), the sorter yields them in (state, identity) order with their
// bytes and positions.
func TestSorterOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	mk := func(i int) rec {
		id := make([]byte, 1+rng.Intn(12))
		rng.Read(id)
		if rng.Intn(4) == 0 {
			id = id[:min(len(id), 1+rng.Intn(3))] // short ids share prefixes
		}
		return rec{state: int32(rng.Intn(3)), id: id, val: fmt.Appendf(nil, "v%d", i), ttl: []byte{byte(i)}, kg: int32(i % 100), offset: int64(i), bpos: -1}
	}
	for _, shape := range []string{"sorted", "runs", "many-runs", "random"} {
		for _, budget := range []int64{1 << 30, 8 << 10} {
			recs := make([]rec, 5000)
			for i := range recs {
				recs[i] = mk(i)
			}
			want := slices.Clone(recs)
			slices.SortStableFunc(want, func(a, b rec) int { return recLess(&a, &b) })
			want = slices.CompactFunc(want, func(a, b rec) bool { return recLess(&a, &b) == 0 })
			in := slices.Clone(want)
			switch shape {
			case "runs", "many-runs":
				runs := 7
				if shape == "many-runs" {
					runs = 2000
				}
				// Deal the sorted entries round-robin into ascending runs.
				var dealt []rec
				for r := 0; r < runs; r++ {
					for i := r; i < len(in); i += runs {
						dealt = append(dealt, in[i])
					}
				}
				in = dealt
			case "random":
				rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
			}
			sc := &scratch{parent: t.TempDir()}
			s := newSorter(sc, budget, newSide(nil))
			for i := range in {
				if err := s.add(&in[i]); err != nil {
					t.Fatal(err)
				}
			}
			it, err := s.sorted()
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; ; i++ {
				r, err := it.next()
				if err != nil {
					t.Fatal(err)
				}
				if r == nil {
					if i != len(want) {
						t.Fatalf("%s budget %d: %d entries, want %d", shape, budget, i, len(want))
					}
					break
				}
				w := want[i]
				if r.state != w.state || !bytes.Equal(r.id, w.id) || !bytes.Equal(r.val, w.val) || !bytes.Equal(r.ttl, w.ttl) || r.kg != w.kg || r.offset != w.offset || r.bpos != w.bpos {
					t.Fatalf("%s budget %d: entry %d is %+v, want %+v", shape, budget, i, *r, w)
				}
			}
			it.close()
			if (budget < 1<<20) != (sc.Runs > 0) {
				t.Fatalf("%s budget %d: %d runs", shape, budget, sc.Runs)
			}
			if err := sc.remove(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
