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
	"github.com/sfstate/sfstate/savepoint/serde"
)

func ts(v int64) *int64 { return &v }

func TestOrderIndependentAndSensitive(t *testing.T) {
	k := GroupKey{Operator: "op", State: "s", KeyGroup: 3}
	es := []Entry{
		{Key: []any{int64(1)}, Value: "a", TTL: ts(10)},
		{Key: []any{int64(2)}, Value: "b", TTL: ts(30)},
		{Key: []any{int64(3)}, Namespace: int64(5), UserKey: "u", Value: int32(7)},
	}
	a, b := New(), New()
	for _, e := range es {
		a.Add(k, e)
	}
	for i := len(es) - 1; i >= 0; i-- {
		b.Add(k, es[i])
	}
	if d := a.Diff(b, 0); d != nil {
		t.Fatalf("order changed the digest: %v", d)
	}
	g := a.Groups[k]
	if g.Entries != 3 || g.TTLEntries != 2 || g.TTLMin != 10 || g.TTLMax != 30 {
		t.Fatalf("group %+v", g)
	}
	for name, mutate := range map[string]func(*Entry){
		"value":     func(e *Entry) { e.Value = "c" },
		"ttl":       func(e *Entry) { e.TTL = ts(11) },
		"no ttl":    func(e *Entry) { e.TTL = nil },
		"namespace": func(e *Entry) { e.Namespace = int64(1) },
		"user key":  func(e *Entry) { e.UserKey = "v" },
	} {
		c := New()
		for i, e := range es {
			if i == 0 {
				mutate(&e)
			}
			c.Add(k, e)
		}
		if d := a.Diff(c, 0); len(d) != 1 {
			t.Errorf("%s change: diff %v", name, d)
		}
	}
	// A duplicated entry is not cancelled out.
	c := New()
	for _, e := range append(es, es[0], es[0]) {
		c.Add(k, e)
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
		c.Add(kk, e)
	}
	if d := a.Diff(c, 0); len(d) != 2 {
		t.Errorf("moved entry: %v", d)
	}
	if tot := c.Total("op", "s"); tot.Entries != 3 || tot.Sum != a.Total("", "").Sum {
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
