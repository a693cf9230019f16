package digest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

func ts(v int64) *int64 { return &v }

func TestOrderIndependentAndSensitive(t *testing.T) {
	k := GroupKey{Operator: "op", State: "s", KeyGroup: 3}
	add := func(d *Digest, k GroupKey, e keyed.Entry) {
		var h Hasher
		h.Add(d, k, nil, &e, TTLCheck{})
	}
	es := []keyed.Entry{
		{Key: []any{int64(1)}, Value: "a", TTLTimestamp: ts(10)},
		{Key: []any{int64(2)}, Value: "b", TTLTimestamp: ts(30)},
		{Key: []any{int64(3)}, Namespace: int64(5), UserKey: "u", Value: int32(7)},
	}
	a, b := New(), New()
	for _, e := range es {
		add(a, k, e)
	}
	for i := len(es) - 1; i >= 0; i-- {
		add(b, k, es[i])
	}
	if d := a.Diff(b, 0); d != nil {
		t.Fatalf("order changed the digest: %v", d)
	}
	g := a.Groups[k]
	if g.Entries != 3 || g.TTLEntries != 2 || g.TTLMin != 10 || g.TTLMax != 30 {
		t.Fatalf("group %+v", g)
	}
	for name, mutate := range map[string]func(*keyed.Entry){
		"value":     func(e *keyed.Entry) { e.Value = "c" },
		"ttl":       func(e *keyed.Entry) { e.TTLTimestamp = ts(11) },
		"no ttl":    func(e *keyed.Entry) { e.TTLTimestamp = nil },
		"namespace": func(e *keyed.Entry) { e.Namespace = int64(1) },
		"user key":  func(e *keyed.Entry) { e.UserKey = "v" },
	} {
		c := New()
		for i, e := range es {
			if i == 0 {
				mutate(&e)
			}
			add(c, k, e)
		}
		if d := a.Diff(c, 0); len(d) != 1 {
			t.Errorf("%s change: diff %v", name, d)
		}
	}
	// A duplicated entry is not cancelled out.
	c := New()
	for _, e := range append(es, es[0], es[0]) {
		add(c, k, e)
	}
	if d := a.Diff(c, 0); len(d) != 1 || !strings.Contains(d[0], "entries 3 vs 5") {
		t.Errorf("duplicates: %v", d)
	}
	// Entries in another key group are another group.
	c = New()
	for i, e := range es {
		kk := k
		if i == 2 {
			kk.KeyGroup = 4
		}
		add(c, kk, e)
	}
	if d := a.Diff(c, 0); len(d) != 2 {
		t.Errorf("moved entry: %v", d)
	}
	if tot := c.Total("op", "s"); tot.Entries != 3 || tot.Hash != a.Total("", "").Hash {
		t.Errorf("totals %+v vs %+v", tot, a.Total("", ""))
	}
}

// TestFixtureCounts compares per-(operator, state, key group) entry counts
// with the independent reference decodings.
func TestFixtureCounts(t *testing.T) {
	root := fixtures.Require(t)
	checked := 0
	for _, f := range fixtures.All(t) {
		exp := filepath.Join(root, "_expected", f.Name+".entries.jsonl")
		fh, err := os.Open(exp)
		if err != nil {
			continue
		}
		want := map[GroupKey]int64{}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var e struct {
				KG    int    `json:"kg"`
				State string `json:"state"`
				Op    string `json:"op"`
			}
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("%s: %v", exp, err)
			}
			want[GroupKey{e.Op, e.State, e.KG}]++
		}
		fh.Close()
		st, err := s3.NewLocal(f.Dir)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := savepoint.Open(context.Background(), st, "_metadata")
		if err != nil {
			t.Fatal(err)
		}
		d, err := Compute(context.Background(), sp, Options{})
		if err != nil {
			t.Errorf("%s: %v", f.Name, err)
			continue
		}
		if len(d.Groups) != len(want) {
			t.Errorf("%s: %d groups, reference has %d", f.Name, len(d.Groups), len(want))
		}
		for k, n := range want {
			if g := d.Groups[k]; g == nil || g.Entries != n {
				t.Errorf("%s: %+v: reference %d entries, digest %v", f.Name, k, n, g)
			}
		}
		checked++
	}
	if checked < 8 {
		t.Fatalf("only %d fixtures checked", checked)
	}
}

func TestCanonicalEncoding(t *testing.T) {
	nan := math.NaN()
	row := func(f ...any) *serde.Row { return &serde.Row{Fields: f} }
	a := appendCanonical(nil, row(nan, row(int64(1), "x"), serde.Map{{Key: "a", Value: int32(1)}, {Key: "b", Value: int32(2)}}), 0)
	b := appendCanonical(nil, row(nan, row(int64(1), "x"), serde.Map{{Key: "b", Value: int32(2)}, {Key: "a", Value: int32(1)}}), 0)
	if !bytes.Equal(a, b) {
		t.Fatal("equal values (NaN, nested row, reordered map) encode differently")
	}
	for _, pair := range [][2]any{
		{int32(1), int64(1)},
		{"ab", []any{"a", "b"}},
		{row("a", "bc"), row("ab", "c")},
		{&serde.Row{Kind: 1, Fields: []any{int64(1)}}, row(int64(1))},
		{float64(0), math.Copysign(0, -1)},
	} {
		if bytes.Equal(appendCanonical(nil, pair[0], 0), appendCanonical(nil, pair[1], 0)) {
			t.Errorf("%#v and %#v encode equally", pair[0], pair[1])
		}
	}
	deep := any(int64(1))
	for i := 0; i < 200; i++ {
		deep = []any{deep}
	}
	if len(appendCanonical(nil, deep, 0)) == 0 {
		t.Fatal("deep value")
	}
}

// persistedDigest is the JSON of the digest TestPersistedForm builds, as
// verification reports (verify --digest-out) wrote it before the digest
// model moved here: reports written then are read back (--merge,
// --against) and must compare equal with digests computed now.
const persistedDigest = `{"operators":[],"groups":[{"operator":"op","state":"l","keyGroup":2,"entries":1,"counts":0,"associations":0,"hash":"298d2a4713937544cfd6f2523485b458","ttlEntries":2,"ttlMin":850,"ttlMax":950,"ttlHash":"8bb0efce36575f2a55973beea2adaa62"},{"operator":"op","state":"m","keyGroup":1,"entries":2,"counts":5,"associations":0,"hash":"db5fdcbc0307b1215d6253dede54445f","ttlEntries":2,"ttlMin":800,"ttlMax":950,"ttlHash":"9fcb8c19146a24fd4763dcef547d1b2a","expired":1},{"operator":"op","state":"v","keyGroup":0,"entries":1,"counts":4,"associations":1,"hash":"afeb978c035f0c204fa2d7d54ecfbb18","ttlEntries":0,"ttlMin":0,"ttlMax":0,"ttlHash":"00000000000000000000000000000000"}],"live":{"operators":[],"groups":[{"operator":"op","state":"l","keyGroup":2,"entries":1,"counts":0,"associations":0,"hash":"84a84f80491fa42aecf7c53f3e87f0db","ttlEntries":1,"ttlMin":950,"ttlMax":950,"ttlHash":"b266d851c6e17ea300014a25b056aea3"},{"operator":"op","state":"m","keyGroup":1,"entries":1,"counts":3,"associations":0,"hash":"9ef9f29a6c2876a9ae519093ecc257e8","ttlEntries":1,"ttlMin":950,"ttlMax":950,"ttlHash":"b266d851c6e17ea300014a25b056aea3"},{"operator":"op","state":"v","keyGroup":0,"entries":1,"counts":4,"associations":1,"hash":"afeb978c035f0c204fa2d7d54ecfbb18","ttlEntries":0,"ttlMin":0,"ttlMax":0,"ttlHash":"00000000000000000000000000000000"}]}}`

// TestPersistedForm: entry and TTL hashes, counts, the live digest and the
// JSON form are those of reports already written.
func TestPersistedForm(t *testing.T) {
	ttl := TTLCheck{TTLMillis: 100, NowMillis: 1000}
	d := New()
	d.Live = New()
	var h Hasher
	m := &keyed.StateMeta{Name: "m", Kind: "MAP", TTL: true}
	l := &keyed.StateMeta{Name: "l", Kind: "LIST", TTL: true}
	v := &keyed.StateMeta{Name: "v", Kind: "VALUE"}
	el := func(ts int64, v int32) any { return &serde.TTLValue{LastAccess: ts, Value: v} }
	h.Add(d, GroupKey{"op", "m", 1}, m, &keyed.Entry{Key: &serde.Row{Fields: []serde.Value{int64(1), "a"}}, Namespace: serde.Void{}, UserKey: "u", Value: &serde.TTLValue{LastAccess: 950, Value: int32(3)}, TTLTimestamp: ts(950)}, ttl)
	h.Add(d, GroupKey{"op", "m", 1}, m, &keyed.Entry{Key: int64(2), UserKey: "w", Value: int32(2), TTLTimestamp: ts(800)}, ttl)
	h.Add(d, GroupKey{"op", "l", 2}, l, &keyed.Entry{Key: int64(1), Value: serde.List{el(950, 1), el(850, 2)}}, ttl)
	h.Add(d, GroupKey{"op", "v", 0}, v, &keyed.Entry{Key: "k", Namespace: serde.TimeWindow{Start: 0, End: 10}, Value: serde.Tuple{int32(4), int32(1)}}, ttl)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != persistedDigest {
		t.Fatalf("digest JSON changed:\n got %s\nwant %s", b, persistedDigest)
	}
	var back Digest
	if err := json.Unmarshal([]byte(persistedDigest), &back); err != nil {
		t.Fatal(err)
	}
	if diff := d.Diff(&back, 0); diff != nil {
		t.Fatalf("read back: %v", diff)
	}
	if diff := d.Live.Diff(back.Live, 0); diff != nil {
		t.Fatalf("read back live: %v", diff)
	}
}
