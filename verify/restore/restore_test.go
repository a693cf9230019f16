//go:build cgo

package restore

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

const genNow = int64(1_750_000_000_000)

func generate(t testing.TB, store s3.Storage, dir string, o GenOptions) *savepoint.Savepoint {
	t.Helper()
	if o.Now == 0 {
		o.Now = genNow
	}
	if o.TempDir == "" {
		o.TempDir = t.TempDir()
	}
	n, err := Generate(context.Background(), store, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("nothing generated")
	}
	sp, err := savepoint.Open(context.Background(), store, dir+"/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func targets(backends []string, pars ...int) []verify.Target {
	var out []verify.Target
	for _, b := range backends {
		for _, p := range pars {
			out = append(out, verify.Target{Backend: b, Parallelism: p})
		}
	}
	return out
}

// TestGeneratedTTL: engine state with TTL restores into both backends at
// other parallelisms; at a time when about half the TTL entries are
// expired, each backend returns exactly the live ones.
func TestGeneratedTTL(t *testing.T) {
	ctx := context.Background()
	store, _ := s3.NewLocal(t.TempDir())
	sp := generate(t, store, "src", GenOptions{Keys: 1500, Backend: "heap", Parallelism: 2, MaxParallelism: 128})
	ttl := verify.TTLCheck{TTLMillis: (24 * time.Hour).Milliseconds(), NowMillis: genNow + (24 * time.Hour).Milliseconds() - 500}
	r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 3, 1), Restorer: &Restorer{}, TTL: ttl, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Fatalf("verification failed:\n%s", strings.Join(r.Failures(), "\n"))
	}
	all, live := r.Digest.Total("", ""), r.Digest.Live.Total("", "")
	acc := r.Digest.Total("", "accState")
	if acc.Expired == 0 || acc.Expired == acc.Entries {
		t.Fatalf("accState: %d of %d expired; the time should expire about half", acc.Expired, acc.Entries)
	}
	if live.Entries+all.Expired != all.Entries {
		t.Fatalf("live %d + expired %d != %d", live.Entries, all.Expired, all.Entries)
	}
	if c := r.Digest.Total("", "right-records").Counts; c <= r.Digest.Total("", "right-records").Entries {
		t.Fatalf("right-records counts %d not above entries", c)
	}
	for _, tr := range r.Targets {
		if got := tr.Digest.Total("", ""); got.Entries != live.Entries || got.Counts != live.Counts {
			t.Fatalf("%s: %d entries (counts %d), want %d (%d)", tr.Name, got.Entries, got.Counts, live.Entries, live.Counts)
		}
	}
	// Without the TTL every entry must come back.
	r, err = verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb"}, 0), Restorer: &Restorer{}, SkipCheck: true})
	if err != nil || !r.OK {
		t.Fatalf("without TTL: %v %v", err, r.Failures())
	}
	if got := r.Targets[0].Digest.Total("", "").Entries; got != all.Entries {
		t.Fatalf("without TTL: %d entries back, %d in the source", got, all.Entries)
	}
}

// ref is one state of one restored subtask.
type ref struct {
	st    canonical.ImportedSubtask
	state int
}

func (r ref) apply(fn func(b interface {
	Put(int, []byte, []byte)
	Delete(int, []byte)
})) error {
	b := r.st.Backend.NewBatch()
	defer b.Close()
	fn(b)
	return b.Commit()
}

// hit is where a mutation landed.
type hit struct {
	verify.GroupKey
}

// mutateFirst applies fn to the first stored entry of state name in the
// first subtask that has one and records its group.
func mutateFirst(name string, h *hit, fn func(r ref, key, val []byte) error) func(res *canonical.ImportResult) error {
	return func(res *canonical.ImportResult) error {
		for _, op := range res.Operators {
			for _, st := range op.Subtasks {
				for id, d := range st.Backend.States() {
					if d.Name != name {
						continue
					}
					var key, val []byte
					_ = st.Backend.Scan(id, nil, nil, func(k, v []byte) bool {
						key, val = append([]byte{}, k...), append([]byte{}, v...)
						return false
					})
					if key == nil {
						continue
					}
					kg, err := st.Backend.Layout().KeyGroupOf(key)
					if err != nil {
						return err
					}
					h.GroupKey = verify.GroupKey{Operator: op.ID.String(), State: name, KeyGroup: kg}
					return fn(ref{st, id}, key, val)
				}
			}
		}
		return errors.New("state not found")
	}
}

// TestMutationsDetected: a restore that loses or changes one entry fails,
// naming the operator, state and key group, with the entry decoded.
func TestMutationsDetected(t *testing.T) {
	ctx := context.Background()
	store, _ := s3.NewLocal(t.TempDir())
	sp := generate(t, store, "src", GenOptions{Keys: 600, Backend: "rocksdb", Parallelism: 2, MaxParallelism: 64})
	type mut struct {
		name, state string
		fn          func(r ref, key, val []byte) error
		field       []string
		groups      int
	}
	muts := []mut{
		{"drop entry", "distinct", func(r ref, key, _ []byte) error {
			return r.apply(func(b interface {
				Put(int, []byte, []byte)
				Delete(int, []byte)
			}) {
				b.Delete(r.state, key)
			})
		}, []string{"entries"}, 1},
		{"change count", "right-records", func(r ref, key, val []byte) error {
			val[len(val)-1]++
			return r.apply(func(b interface {
				Put(int, []byte, []byte)
				Delete(int, []byte)
			}) {
				b.Put(r.state, key, val)
			})
		}, []string{"counts"}, 1},
		{"flip TTL timestamp", "accState", func(r ref, key, val []byte) error {
			binary.BigEndian.PutUint64(val, binary.BigEndian.Uint64(val)-1)
			return r.apply(func(b interface {
				Put(int, []byte, []byte)
				Delete(int, []byte)
			}) {
				b.Put(r.state, key, val)
			})
		}, []string{"ttl min", "ttl max", "ttl timestamps"}, 1},
		{"wrong key group", "left-records", func(r ref, key, val []byte) error {
			l := r.st.Backend.Layout()
			kg, _ := l.KeyGroupOf(key)
			other := l.Range.Start
			if other == kg {
				other = l.Range.End
			}
			moved := l.AppendKeyGroup(nil, other)
			moved = append(moved, key[l.Width():]...)
			return r.apply(func(b interface {
				Put(int, []byte, []byte)
				Delete(int, []byte)
			}) {
				b.Delete(r.state, key)
				b.Put(r.state, moved, val)
			})
		}, []string{"entries", "missing", "unexpected"}, 2},
	}
	for _, m := range muts {
		t.Run(m.name, func(t *testing.T) {
			var h hit
			rs := &Restorer{Mutate: mutateFirst(m.state, &h, m.fn)}
			r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"heap"}, 3), Restorer: rs, SkipCheck: true, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if r.OK {
				t.Fatal("mutation not detected")
			}
			diffs := r.Targets[0].Differences
			if len(diffs) != m.groups {
				t.Fatalf("%d differing groups, want %d: %v", len(diffs), m.groups, diffs)
			}
			found := false
			for _, d := range diffs {
				if d.GroupKey == h.GroupKey {
					found = true
					ok := false
					for _, f := range m.field {
						ok = ok || d.Field == f
					}
					if !ok {
						t.Errorf("field %q, want one of %v", d.Field, m.field)
					}
					if len(d.Samples) == 0 {
						t.Errorf("no decoded sample for %v", d)
					}
				}
			}
			if !found {
				t.Fatalf("differences %v do not name %v", diffs, h.GroupKey)
			}
			var out strings.Builder
			if err := r.WriteTable(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), h.GroupKey.String()) || !strings.Contains(out.String(), "FAILED") {
				t.Fatalf("table does not name %v:\n%s", h.GroupKey, out.String())
			}
			t.Logf("%s", strings.Join(r.Failures(), "\n"))
		})
	}
}

// TestTruncatedFile: a truncated state file is reported by the structural
// check with its file and key group, and the verdict fails.
func TestTruncatedFile(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store, _ := s3.NewLocal(root)
	generate(t, store, "src", GenOptions{Keys: 400, Backend: "heap", Parallelism: 2, MaxParallelism: 32, InlineThreshold: -1})
	ents, _ := os.ReadDir(filepath.Join(root, "src"))
	var victim string
	for _, e := range ents {
		// A state file: not _metadata nor the sums file beside it (data file
		// names are random UUIDs, so they sort on either side of those).
		if !strings.HasPrefix(e.Name(), "_") {
			victim = filepath.Join(root, "src", e.Name())
			break
		}
	}
	fi, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(victim, fi.Size()*2/3); err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(ctx, store, "src/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"heap"}, 0), Restorer: &Restorer{}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.Check == nil || len(r.Check.Problems) == 0 {
		t.Fatalf("truncation not detected: %v", r.Failures())
	}
	p := r.Check.Problems[0]
	if !strings.Contains(p.File, filepath.Base(victim)) || p.Operator == "" {
		t.Fatalf("problem does not name the file and operator: %v", p)
	}
	t.Logf("%s", strings.Join(r.Failures(), "\n"))
}

// verifiableFixtures are the Flink savepoints the engine restores (the
// hashmap backend's NATIVE savepoint through the reader's heap mode); the
// RocksDB NATIVE one is not.
var verifiableFixtures = map[string]bool{
	"flink1.20-hashmap-NATIVE-for-contrast":                true,
	"flink1.20-rocksdb-NATIVE-incremental-for-contrast":    true,
	"sql-rocksdb-canonical-groupagg-valuestate":            true,
	"sql-rocksdb-canonical-groupagg-ttl-valuestate":        true,
	"sql-rocksdb-canonical-join-mapstate":                  true,
	"sql-rocksdb-canonical-deduplicate-valuestate":         true,
	"sql-rocksdb-canonical-join-ttl-valuestate":            true,
	"flink1.20-rocksdb-canonical-valuestate-timers":        true,
	"flink1.20-hashmap-canonical-valuestate-timers":        true,
	"flink1.19-rocksdb-canonical-snappy-compressed":        true,
	"flink1.15-rocksdb-canonical-metadata-v3":              true,
	"flink1.20-rocksdb-canonical-broadcast-operator-state": true,
	"sql-rocksdb-canonical-windowjoin-liststate-timers":    true,
	"sql-rocksdb-canonical-udagg-liststate-mapstate":       true,
	"flink1.20-hashmap-canonical-liststate-window-inline":  true,
}

// TestFixtures: every fixture the engine can restore verifies clean on
// RocksDB at another parallelism and on the heap at its own (a RocksDB
// native one through its canonical conversion); a fixture missing from
// verifiableFixtures must fail with the unsupported state named.
func TestFixtures(t *testing.T) {
	ctx := context.Background()
	for _, f := range fixtures.All(t) {
		t.Run(f.Name, func(t *testing.T) {
			st, _ := s3.NewLocal(f.Dir)
			sp, err := savepoint.Open(ctx, st, "_metadata")
			if err != nil {
				t.Fatal(err)
			}
			p, maxP := 1, 1<<15
			for _, op := range sp.Meta.Operators {
				p = max(p, int(op.Parallelism))
				maxP = min(maxP, int(op.MaxParallelism))
			}
			rescaled := p + 1
			if rescaled > maxP {
				rescaled = max(1, p-1)
			}
			// RocksDB rescaled and the heap at the savepoint's parallelism
			// (the other combinations are covered by canonical).
			tg := []verify.Target{{Backend: "rocksdb", Parallelism: rescaled}, {Backend: "heap"}}
			r, err := verify.Run(ctx, sp, verify.Options{Targets: tg, Restorer: &Restorer{}, TempDir: t.TempDir()})
			switch {
			case err != nil:
				t.Fatal(err)
			case verifiableFixtures[f.Name]:
				if !r.OK {
					t.Fatalf("failures:\n%s", strings.Join(r.Failures(), "\n"))
				}
				// The broadcast fixture's keyed operators hold no entries.
				if r.Digest.Total("", "").Entries == 0 && !strings.Contains(f.Name, "broadcast") {
					t.Fatal("no entries")
				}
			default:
				if r.OK {
					t.Fatal("verified although the engine cannot restore it")
				}
				// The operators with unsupported state fail by name; the
				// others restore and compare equal.
				for _, tr := range r.Targets {
					if tr.Error != "" || len(tr.OperatorErrors) == 0 || len(tr.Differences) != 0 {
						t.Fatalf("%s: error %q, operator errors %v, differences %v", tr.Name, tr.Error, tr.OperatorErrors, tr.Differences)
					}
					for id, msg := range tr.OperatorErrors {
						if !strings.Contains(msg, "unsupported state") || !strings.Contains(msg, id) || !strings.Contains(msg, "state \"") {
							t.Fatalf("%s: %q does not name operator %s and its state", tr.Name, msg, id)
						}
					}
					t.Logf("%s: %d operators not restored: %v", tr.Name, len(tr.OperatorErrors), tr.OperatorErrors)
				}
			}
		})
	}
}
