package statediff

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

func open(t *testing.T, dir string) *savepoint.Savepoint {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func diff(t *testing.T, a, b *savepoint.Savepoint, o Options) *Result {
	t.Helper()
	r, err := Diff(context.Background(), a, b, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func total(r *Result) (entries int64) {
	for _, s := range r.States {
		entries += s.EntriesA
	}
	return entries
}

// TestDiffFixtureWithItself: every fixture equals itself, through the
// digest path and the partitioned path.
func TestDiffFixtureWithItself(t *testing.T) {
	for _, fx := range fixtures.All(t) {
		t.Run(fx.Name, func(t *testing.T) {
			a, b := open(t, fx.Dir), open(t, fx.Dir)
			for _, noDigest := range []bool{false, true} {
				r := diff(t, a, b, Options{Limit: 3, NoDigest: noDigest, MemoryBytes: 1 << 10})
				if !r.Equal {
					t.Fatalf("noDigest=%v: not equal to itself: %+v", noDigest, r.States)
				}
				for _, s := range r.States {
					if s.EntriesA != s.EntriesB {
						t.Fatalf("%s/%s: %d vs %d entries", s.Operator, s.State, s.EntriesA, s.EntriesB)
					}
				}
			}
		})
	}
}

// TestDiffRescaledCopy rescales fixtures by reference (new parallelism,
// same max parallelism: the digest path) and by re-keying (new max
// parallelism: entries land in other key groups and files) and finds
// them equal to the source.
func TestDiffRescaledCopy(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"sql-rocksdb-canonical-join-mapstate", "flink1.20-hashmap-canonical-liststate-window-inline", "sql-rocksdb-canonical-groupagg-ttl-valuestate"} {
		fx := fixtureDir(t, name)
		src := open(t, fx)
		for _, o := range []rescale.Options{{Parallelism: 3}, {Parallelism: 2, MaxParallelism: 256, MergeFiles: true}} {
			dst := t.TempDir()
			dstStore, err := s3.NewLocal(dst)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rescale.Run(ctx, rescale.Request{Src: src, SrcURI: "file:" + fx, Dst: dstStore, Options: o}); err != nil {
				t.Fatalf("%s %+v: %v", name, o, err)
			}
			r := diff(t, src, open(t, dst), Options{Limit: 3})
			if !r.Equal {
				t.Fatalf("%s rescaled %+v differs: %s", name, o, mustJSON(r))
			}
			if total(r) == 0 {
				t.Fatalf("%s: nothing compared", name)
			}
			if o.MaxParallelism == 0 {
				skipped := 0
				for _, s := range r.States {
					skipped += s.KeyGroupsSkipped
				}
				if skipped == 0 {
					t.Errorf("%s: the digest path skipped no key group", name)
				}
			}
		}
	}
}

func fixtureDir(t *testing.T, name string) string {
	t.Helper()
	for _, fx := range fixtures.All(t) {
		if fx.Name == name {
			return fx.Dir
		}
	}
	t.Fatalf("fixture %s missing", name)
	return ""
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// mutateOne copies a fixture and rewrites one keyed file with flinkwrite,
// changing the BIGINT value of the first entry of state in operator op by
// +1000 (same length, so the metadata's offsets stay valid). It returns the
// copy's directory and the key group of the changed entry.
func mutateOne(t *testing.T, fx, op, state string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fx)); err != nil {
		t.Fatal(err)
	}
	sp := open(t, dir)
	o := sp.FindOperator(op)
	for _, st := range o.Subtasks {
		h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
		if !ok || slices.IndexFunc(h.Offsets, func(x int64) bool { return x != 0 }) < 0 {
			continue
		}
		loc, err := sp.Resolve(h.Delegate)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, loc.Key)
		stream, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		hdr, _, err := keyed.ParseHeader(stream, path)
		if err != nil {
			t.Fatal(err)
		}
		start, end := h.KeyGroupRange()
		var buf bytes.Buffer
		w, err := flinkwrite.NewKeyedWriter(&buf, flinkwrite.Header{Compressed: hdr.Compressed, Raw: hdr.Raw, RawNumStates: len(hdr.States)},
			keygroups.Range{Start: start, End: end}, int(o.MaxParallelism))
		if err != nil {
			t.Fatal(err)
		}
		changed := -1
		for kg := start; kg <= end; kg++ {
			off := h.Offset(kg)
			if off == 0 {
				continue
			}
			err := keyed.ReadKeyGroupWith(bytes.NewReader(stream), int64(len(stream)), path, hdr, kg, off,
				keyed.ReadOptions{MaxParallelism: int(o.MaxParallelism), Mode: keyed.ModeRaw}, func(e *keyed.Entry) error {
					val := e.ValueBytes
					if changed < 0 && e.State.Name == state && len(val) == 8 {
						val = binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(val)+1000)
						changed = kg
					}
					return w.Add(e.KeyGroup, e.State.ID, e.KeyBytes, val)
				})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if changed < 0 {
			continue
		}
		if !slices.Equal(w.Offsets(), h.Offsets) {
			t.Fatalf("rewritten offsets %v, metadata has %v", w.Offsets(), h.Offsets)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir, changed
	}
	t.Fatalf("no entry of %s/%s to change", op, state)
	return "", 0
}

// TestDiffOneEntryMutation finds exactly the one changed entry, with its
// values before and after.
func TestDiffOneEntryMutation(t *testing.T) {
	fx := fixtureDir(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	const op, state = "d5c8b168c6cbfe8c507a10f88b325243", "state-name"
	mut, kg := mutateOne(t, fx, op, state)
	for _, noDigest := range []bool{false, true} {
		r := diff(t, open(t, fx), open(t, mut), Options{Limit: 5, NoDigest: noDigest})
		if r.Equal {
			t.Fatal("mutated copy reported equal")
		}
		for _, s := range r.States {
			want := int64(0)
			if s.Operator == op && s.State == state {
				want = 1
			}
			if s.Changed != want || s.Added != 0 || s.Removed != 0 || s.TTLChanged != 0 {
				t.Fatalf("noDigest=%v %s/%s: +%d -%d ~%d ttl %d, want ~%d only", noDigest, s.Operator, s.State, s.Added, s.Removed, s.Changed, s.TTLChanged, want)
			}
			if want == 1 {
				if len(s.ChangedExamples) != 1 {
					t.Fatalf("examples %v", s.ChangedExamples)
				}
				var before, after struct {
					KeyGroup int    `json:"keyGroup"`
					Value    string `json:"value"`
					Key      []any  `json:"key"`
				}
				c := s.ChangedExamples[0]
				if err := json.Unmarshal(c.Before, &before); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(c.After, &after); err != nil {
					t.Fatal(err)
				}
				bv, _ := strconv.ParseInt(before.Value, 10, 64)
				av, err := strconv.ParseInt(after.Value, 10, 64)
				if before.KeyGroup != kg || after.KeyGroup != kg || err != nil || av != bv+1000 {
					t.Fatalf("change %s -> %s, want the value +1000 in key group %d", c.Before, c.After, kg)
				}
				// The fixture's value equals its key; the copy's is 1000 more.
				if k, _ := before.Key[0].(string); k != before.Value {
					t.Fatalf("before %s: value is not the key", c.Before)
				}
			}
		}
		if !noDigest {
			skipped := 0
			for _, s := range r.States {
				skipped += s.KeyGroupsSkipped
			}
			if skipped == 0 {
				t.Errorf("digest path skipped no key group")
			}
		}
	}
	// Ignoring TTL does not hide value changes.
	if r := diff(t, open(t, fx), open(t, mut), Options{IgnoreTTL: true}); r.Equal {
		t.Fatal("IgnoreTTL hid a value change")
	}
}

// TestDiffAcrossBackends compares the same job saved by the RocksDB and
// the hashmap backend (different entry order and state order): the
// keyed values and event timers are equal, the processing timers (set
// from the wall clock) are not: each side's are removed/added.
func TestDiffAcrossBackends(t *testing.T) {
	a := open(t, fixtureDir(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
	b := open(t, fixtureDir(t, "flink1.20-hashmap-canonical-valuestate-timers"))
	for _, noDigest := range []bool{false, true} {
		r := diff(t, a, b, Options{Limit: 2, NoDigest: noDigest})
		if r.Equal {
			t.Fatal("processing timers differ, diff says equal")
		}
		for _, s := range r.States {
			if s.State == "_timer_state/processing_timer" {
				if s.Removed != s.EntriesA || s.Added != s.EntriesB || s.EntriesA == 0 || s.Changed != 0 || len(s.AddedExamples) != 2 {
					t.Fatalf("%s: %s", s.State, mustJSON(s))
				}
				continue
			}
			if s.Differs() {
				t.Fatalf("%s/%s differs: %s", s.Operator, s.State, mustJSON(s))
			}
		}
	}
}
