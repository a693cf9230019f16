package verify

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

func openDir(t testing.TB, dir string) *savepoint.Savepoint {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, "_metadata")
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func fixture(t testing.TB, name string) fixtures.Savepoint {
	t.Helper()
	for _, f := range fixtures.All(t) {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("fixture %s missing", name)
	return fixtures.Savepoint{}
}

type expectedGroup struct {
	entries, counts int64
	ttlMin, ttlMax  int64
	ttl             int64
}

// readExpected aggregates the reference decoding of a fixture per group.
func readExpected(t *testing.T, name string) map[GroupKey]*expectedGroup {
	f, err := os.Open(fixtures.Path(t, "_expected", name+".entries.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[GroupKey]*expectedGroup{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct {
			KG    int             `json:"kg"`
			State string          `json:"state"`
			Type  string          `json:"type"`
			Op    string          `json:"op"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		k := GroupKey{Operator: e.Op, State: e.State, KeyGroup: e.KG}
		g := out[k]
		if g == nil {
			g = &expectedGroup{ttlMin: 1<<63 - 1, ttlMax: -1 << 63}
			out[k] = g
		}
		g.entries++
		var n int32
		if e.Type == "MAP" && json.Unmarshal(e.Value, &n) == nil {
			g.counts += int64(n)
		}
		var ttl []json.RawMessage
		if json.Unmarshal(e.Value, &ttl) == nil && len(ttl) == 2 && string(ttl[0]) == `"TtlValue"` {
			var tv struct {
				LastAccess int64 `json:"lastAccess"`
			}
			if err := json.Unmarshal(ttl[1], &tv); err != nil {
				t.Fatal(err)
			}
			g.ttl++
			g.ttlMin, g.ttlMax = min(g.ttlMin, tv.LastAccess), max(g.ttlMax, tv.LastAccess)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDigestMatchesReference: entries, counts and TTL ranges per group
// agree with the independent reference decodings of every canonical
// fixture.
func TestDigestMatchesReference(t *testing.T) {
	checked := 0
	for _, f := range fixtures.All(t) {
		if strings.Contains(f.Name, "NATIVE") {
			continue
		}
		if _, err := os.Stat(fixtures.Path(t, "_expected", f.Name+".entries.jsonl")); err != nil {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			d, err := ComputeDigest(context.Background(), openDir(t, f.Dir), DigestOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := readExpected(t, f.Name)
			if len(want) != len(d.Groups) {
				t.Errorf("%d groups, reference has %d", len(d.Groups), len(want))
			}
			for k, w := range want {
				g := d.Groups[k]
				if g == nil {
					t.Errorf("%v missing", k)
					continue
				}
				if g.Entries != w.entries || g.Counts != w.counts {
					t.Errorf("%v: entries %d counts %d, reference %d %d", k, g.Entries, g.Counts, w.entries, w.counts)
				}
				if w.ttl > 0 && (g.TTLEntries != w.ttl || g.TTLMin != w.ttlMin || g.TTLMax != w.ttlMax) {
					t.Errorf("%v: TTL %d [%d,%d], reference %d [%d,%d]", k, g.TTLEntries, g.TTLMin, g.TTLMax, w.ttl, w.ttlMin, w.ttlMax)
				}
			}
		})
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d fixtures checked", checked)
	}
}

// TestShardsMergeToWhole: the shards of a savepoint cover every key group
// once and their merged reports equal the unsharded digest.
func TestShardsMergeToWhole(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"sql-rocksdb-canonical-join-mapstate", "flink1.20-rocksdb-canonical-valuestate-timers"} {
		sp := openDir(t, fixture(t, name).Dir)
		whole, err := Run(ctx, sp, Options{Against: sp, AgainstName: "self"})
		if err != nil || !whole.OK {
			t.Fatalf("%s: %v %v", name, err, whole.Failures())
		}
		for _, n := range []int{2, 3, 7} {
			var rs []*Report
			for i := n - 1; i >= 0; i-- {
				r, err := Run(ctx, sp, Options{Against: sp, AgainstName: "self", Shard: Shard{i, n}})
				if err != nil {
					t.Fatal(err)
				}
				// Through the digest file format.
				var b bytes.Buffer
				if err := r.WriteJSON(&b); err != nil {
					t.Fatal(err)
				}
				if r, err = ReadReport(&b, "shard"); err != nil {
					t.Fatal(err)
				}
				rs = append(rs, r)
			}
			m, err := Merge(rs)
			if err != nil {
				t.Fatal(err)
			}
			if !m.OK {
				t.Fatalf("merged: %v", m.Failures())
			}
			if diffs := Compare(whole.Digest, m.Digest); diffs != nil {
				t.Fatalf("%s in %d shards: merged digest differs: %v", name, n, diffs)
			}
			if len(m.Digest.Groups) != len(whole.Digest.Groups) {
				t.Fatalf("merged %d groups, whole %d", len(m.Digest.Groups), len(whole.Digest.Groups))
			}
			if _, err := Merge(rs[1:]); err == nil {
				t.Fatal("merge with a missing shard succeeded")
			}
			if _, err := Merge(append(rs[1:], rs[1])); err == nil {
				t.Fatal("merge with a duplicated shard succeeded")
			}
		}
	}
}

func TestShardRanges(t *testing.T) {
	for _, maxP := range []int{1, 7, 128, 32768} {
		for _, n := range []int{1, 2, 3, 10} {
			next := 0
			for i := 0; i < n; i++ {
				from, to := Shard{i, n}.Range(maxP)
				if from != next || to < from-1 {
					t.Fatalf("maxP %d shard %d/%d: [%d,%d], expected start %d", maxP, i, n, from, to, next)
				}
				next = to + 1
			}
			if next != maxP {
				t.Fatalf("maxP %d in %d shards ends at %d", maxP, n, next)
			}
		}
	}
	for _, bad := range []string{"", "1", "2/2", "-1/3", "a/b", "0/0"} {
		if _, err := ParseShard(bad); err == nil {
			t.Errorf("ParseShard(%q) accepted", bad)
		}
	}
}

// patchCopy copies a fixture and rewrites, in place, the bytes of the first
// entry of state that pick accepts: fn edits a copy of the entry's value,
// which must keep its length.
func patchCopy(t *testing.T, name, state string, fn func(e *savepoint.KeyedEntry, val []byte) bool) (*savepoint.Savepoint, GroupKey) {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fixture(t, name).Dir)); err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	sp := openDir(t, dir)
	var k GroupKey
	var old, neu []byte
	err := sp.WalkKeyed(context.Background(), savepoint.ScanOptions{State: state, KeyGroupTo: -1}, func(e *savepoint.KeyedEntry) error {
		v := bytes.Clone(e.ValueBytes)
		if !fn(e, v) {
			return nil
		}
		k = GroupKey{Operator: e.Operator.ID.String(), State: state, KeyGroup: e.KeyGroup}
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(v)))
		old = append(append(bytes.Clone(e.KeyBytes[1:]), frame...), e.ValueBytes...)
		neu = append(append(bytes.Clone(e.KeyBytes[1:]), frame...), v...)
		return savepoint.StopWalk
	})
	if err != nil && !savepoint.IsStop(err) {
		t.Fatal(err)
	}
	if old == nil {
		t.Fatal("no entry to patch")
	}
	patched := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if c := bytes.Count(b, old); c > 0 {
			patched += c
			os.WriteFile(p, bytes.Replace(b, old, neu, 1), 0o644)
		}
		return nil
	})
	if patched != 1 {
		t.Fatalf("entry found %d times in the files", patched)
	}
	return openDir(t, dir), k
}

// TestAgainstDetectsPatchedEntries: a copy with one TTL timestamp or one
// count changed is reported with the operator, state and key group, and
// the entry decoded on both sides.
func TestAgainstDetectsPatchedEntries(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, fixture, state, field string
		fn                          func(e *savepoint.KeyedEntry, v []byte) bool
	}{
		{"ttl", "sql-rocksdb-canonical-groupagg-ttl-valuestate", "", "ttl", func(e *savepoint.KeyedEntry, v []byte) bool {
			if e.TTLTimestamp == nil {
				return false
			}
			i := bytes.Index(v, binary.BigEndian.AppendUint64(nil, uint64(*e.TTLTimestamp)))
			if i < 0 {
				return false
			}
			binary.BigEndian.PutUint64(v[i:], uint64(*e.TTLTimestamp+1))
			return true
		}},
		{"count", "sql-rocksdb-canonical-join-mapstate", "left-records", "counts", func(e *savepoint.KeyedEntry, v []byte) bool {
			if len(v) < 4 {
				return false
			}
			v[len(v)-1] += 2
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := openDir(t, fixture(t, tc.fixture).Dir)
			state := tc.state
			if state == "" {
				d, _ := ComputeDigest(ctx, src, DigestOptions{})
				for k, g := range d.Groups {
					if g.TTLEntries > 0 {
						state = k.State
					}
				}
			}
			mut, k := patchCopy(t, tc.fixture, state, tc.fn)
			r, err := Run(ctx, src, Options{Against: mut, AgainstName: "copy"})
			if err != nil {
				t.Fatal(err)
			}
			if r.OK {
				t.Fatal("change not detected")
			}
			d := r.Targets[0].Differences
			if len(d) != 1 || d[0].GroupKey != k || !strings.HasPrefix(d[0].Field, tc.field) {
				t.Fatalf("differences %v, want one in %v (%s)", d, k, tc.field)
			}
			if len(d[0].Samples) != 1 || d[0].Samples[0].Source == "" || d[0].Samples[0].Target == "" {
				t.Fatalf("samples %v: want the entry side by side", d[0].Samples)
			}
			checkReports(t, r, k)
		})
	}
}

// checkReports: the JUnit XML parses and has a failing case for the
// group's operator and state; JSON round-trips; the table names the group.
func checkReports(t *testing.T, r *Report, k GroupKey) {
	t.Helper()
	b, err := r.JUnit()
	if err != nil {
		t.Fatal(err)
	}
	var s junitSuites
	if err := xml.Unmarshal(b, &s); err != nil {
		t.Fatalf("JUnit: %v", err)
	}
	failed := false
	for _, su := range s.Suites {
		for _, c := range su.Cases {
			if c.Failure != nil && c.Name == shortID(k.Operator)+"/"+k.State && strings.Contains(c.Failure.Body, k.String()) {
				failed = true
			}
		}
	}
	if !failed || s.Failures == 0 {
		t.Fatalf("JUnit has no failing case for %v:\n%s", k, b)
	}
	path := filepath.Join(t.TempDir(), "junit.xml")
	if err := WriteFileAtomic(path, b); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
		t.Fatal("junit file differs")
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(&js, "json")
	if err != nil {
		t.Fatal(err)
	}
	if diffs := Compare(r.Digest, back.Digest); diffs != nil || back.OK != r.OK {
		t.Fatalf("JSON round trip: %v", diffs)
	}
	var tb strings.Builder
	if err := r.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), k.String()) {
		t.Fatalf("table does not name %v:\n%s", k, tb.String())
	}
}

func TestTTLCheckFlinkRule(t *testing.T) {
	c := TTLCheck{TTLMillis: 1000, NowMillis: 5000}
	for ts, want := range map[int64]bool{3999: true, 4000: true, 4001: false, 1<<63 - 10: false} {
		if got := c.Expired(ts); got != want {
			t.Errorf("Expired(%d) = %v, want %v", ts, got, want)
		}
	}
}

func BenchmarkDigestFixtures(b *testing.B) {
	var sps []*savepoint.Savepoint
	for _, f := range fixtures.All(b) {
		if !strings.Contains(f.Name, "NATIVE") {
			sps = append(sps, openDir(b, f.Dir))
		}
	}
	b.ResetTimer()
	var n int64
	for i := 0; i < b.N; i++ {
		for _, sp := range sps {
			d, err := ComputeDigest(context.Background(), sp, DigestOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n += d.Total("", "").Entries
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
}

// TestListTTLLiveElements: the live digest of a TTL list keeps only its
// live elements, and drops the list when all expired.
func TestListTTLLiveElements(t *testing.T) {
	st := &keyed.StateMeta{Name: "l", Kind: "LIST", TTL: true}
	ttl := TTLCheck{TTLMillis: 100, NowMillis: 1000}
	el := func(ts int64, v int32) any { return &serde.TTLValue{LastAccess: ts, Value: v} }
	k := GroupKey{Operator: "op", State: "l", KeyGroup: 3}
	var h digest.Hasher
	d := NewDigest()
	d.Live = NewDigest()
	h.Add(d, k, st, &keyed.Entry{Key: int64(1), Value: serde.List{el(950, 1), el(850, 2), el(990, 3)}}, ttl)
	h.Add(d, k, st, &keyed.Entry{Key: int64(2), Value: serde.List{el(100, 1)}}, ttl)
	// What a backend returns at that time.
	want := NewDigest()
	h.Add(want, k, st, &keyed.Entry{Key: int64(1), Value: serde.List{el(950, 1), el(990, 3)}}, TTLCheck{})
	if diffs := Compare(want, d.Live); diffs != nil {
		t.Fatalf("live digest differs from the live lists: %v", diffs)
	}
	if g := d.Groups[k]; g.Entries != 2 || g.Expired != 1 || g.TTLEntries != 4 {
		t.Fatalf("group %+v", g)
	}
}

// TestMergeRejectsInconsistentShards: reports of other sources, TTLs or
// targets, and unreadable digest files, are refused.
func TestMergeRejectsInconsistentShards(t *testing.T) {
	ctx := context.Background()
	sp := openDir(t, fixture(t, "sql-rocksdb-canonical-join-mapstate").Dir)
	var rs []*Report
	for i := 0; i < 2; i++ {
		r, err := Run(ctx, sp, Options{Shard: Shard{i, 2}})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if _, err := Merge(rs); err != nil {
		t.Fatal(err)
	}
	other := *rs[1]
	other.Source = "elsewhere"
	if _, err := Merge([]*Report{rs[0], &other}); err == nil {
		t.Error("merged shards of two sources")
	}
	ttl := *rs[1]
	ttl.TTL = &TTLCheck{TTLMillis: 1, NowMillis: 2}
	if _, err := Merge([]*Report{rs[0], &ttl}); err == nil {
		t.Error("merged shards verified at different TTL times")
	}
	tg := *rs[1]
	tg.Targets = []TargetResult{{Name: "heap@p3"}}
	if _, err := Merge([]*Report{rs[0], &tg}); err == nil {
		t.Error("merged shards with different targets")
	}
	for _, bad := range []string{"", "{", `{"digest": {"groups": [{"hash": "zz"}]}}`, "[1,2]"} {
		if _, err := ReadReport(strings.NewReader(bad), "bad.json"); err == nil {
			t.Errorf("ReadReport(%q) accepted", bad)
		}
	}
}

// TestShardedTruncationMerges: a stream cut short is found by the shard
// that checks structure, and the merged verdict fails.
func TestShardedTruncationMerges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fixture(t, "flink1.20-rocksdb-canonical-valuestate-timers").Dir)); err != nil {
		t.Fatal(err)
	}
	sp := openDir(t, dir)
	var victim string
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			if h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle); ok && victim == "" && h.Delegate.Path != "" {
				victim = filepath.Join(dir, filepath.Base(h.Delegate.Path))
			}
		}
	}
	if victim == "" {
		t.Fatal("no keyed state file")
	}
	fi, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(victim, 0o644)
	if err := os.Truncate(victim, fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	sp = openDir(t, dir)
	var rs []*Report
	for i := 0; i < 3; i++ {
		r, err := Run(ctx, sp, Options{Shard: Shard{i, 3}})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	m, err := Merge(rs)
	if err != nil {
		t.Fatal(err)
	}
	if m.OK || m.Check == nil || len(m.Check.Problems) == 0 {
		t.Fatalf("merged verdict misses the truncation: %v", m.Failures())
	}
	if !strings.Contains(m.Check.Problems[0].File, filepath.Base(victim)) {
		t.Fatalf("problem %v does not name %s", m.Check.Problems[0], filepath.Base(victim))
	}
}

// TestOperatorErrorsReported: an operator a target cannot restore fails
// that target, and only that operator's JUnit cases are errors.
func TestOperatorErrorsReported(t *testing.T) {
	sp := openDir(t, fixture(t, "flink1.20-rocksdb-canonical-valuestate-timers").Dir)
	r, err := Run(context.Background(), sp, Options{SkipCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	bad := r.Digest.Operators[0].ID
	r.Targets = []TargetResult{{Name: "heap@p2", Backend: "heap", Parallelism: 2, OperatorErrors: OperatorErrors{bad: "unsupported state"}}}
	r.finish()
	if r.OK || len(r.Failures()) != 1 || !strings.Contains(r.Failures()[0], bad) {
		t.Fatalf("ok %v, failures %v", r.OK, r.Failures())
	}
	b, err := r.JUnit()
	if err != nil {
		t.Fatal(err)
	}
	var s junitSuites
	if err := xml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, c := range s.Suites[1].Cases {
		if (c.Error != nil) != strings.HasPrefix(c.Name, shortID(bad)+"/") {
			t.Fatalf("case %s: error %v", c.Name, c.Error)
		}
	}
	if s.Errors == 0 {
		t.Fatal("no JUnit error")
	}
}
