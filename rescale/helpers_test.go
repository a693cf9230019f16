package rescale

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// entryID identifies one keyed entry independent of the file holding it.
func entryID(op, state string, key, value []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", op, state, len(key))
	h.Write(key)
	h.Write(value)
	return hex.EncodeToString(h.Sum(nil))
}

// readHandle calls fn for every entry of a key-groups handle (only the key
// groups its offsets name), in raw mode (canonical entries whatever the
// layout).
func readHandle(ctx context.Context, sp *savepoint.Savepoint, h *savepoint.KeyGroupsHandle, maxP int, fn func(kg int, state string, key, value []byte) error) error {
	obj, err := sp.OpenStream(ctx, h.Delegate, 0)
	if err != nil {
		return err
	}
	hdr, _, err := keyed.ReadHeader(io.NewSectionReader(obj, 0, obj.Size()), obj.Loc.Name)
	if err != nil {
		return err
	}
	layout, err := sp.KeyedLayout(ctx, h, maxP)
	if err != nil {
		return err
	}
	s, e := h.KeyGroupRange()
	for kg := s; kg <= e; kg++ {
		off := h.Offset(kg)
		if off == 0 {
			continue
		}
		err := keyed.ReadKeyGroupWith(obj, obj.Size(), obj.Loc.Name, hdr, kg, off, keyed.ReadOptions{MaxParallelism: maxP, Mode: keyed.ModeRaw, Heap: layout == savepoint.LayoutNativeHeap},
			func(en *keyed.Entry) error {
				if en.KeyGroup != kg {
					return fmt.Errorf("entry of key group %d in block of %d", en.KeyGroup, kg)
				}
				return fn(kg, en.State.Name, en.KeyBytes, en.ValueBytes)
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// allEntries reads every keyed entry of every canonical operator, grouped by
// the subtask of parallelism p that Flink's assignment hands it to;
// it fails when an entry reaches a subtask outside whose range it lies.
func assignedEntries(t *testing.T, ctx context.Context, sp *savepoint.Savepoint, p int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, op := range sp.Meta.Operators {
		kind, err := Classify(op)
		if err != nil {
			t.Fatal(err)
		}
		if kind != KindCanonical {
			continue
		}
		maxP := int(op.MaxParallelism)
		np := p
		if np > maxP {
			np = maxP
		}
		for i := 0; i < np; i++ {
			r := keygroups.RangeForSubtask(maxP, np, i)
			for _, raw := range []bool{false, true} {
				for _, kh := range Assign(op, np, i, raw) {
					h := kh.(*savepoint.KeyGroupsHandle)
					err := readHandle(ctx, sp, h, maxP, func(kg int, state string, key, value []byte) error {
						if !r.Contains(kg) {
							return fmt.Errorf("operator %s: key group %d handed to subtask %d of %d (range %v)", op.ID, kg, i, np, r)
						}
						got[entryID(op.ID.String(), state, key, value)]++
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	return got
}

// sourceEntries reads every keyed entry of the savepoint as stored.
func sourceEntries(t *testing.T, ctx context.Context, sp *savepoint.Savepoint) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, op := range sp.Meta.Operators {
		kind, err := Classify(op)
		if err != nil {
			t.Fatal(err)
		}
		if kind != KindCanonical {
			continue
		}
		for _, st := range op.Subtasks {
			for _, kh := range []savepoint.KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
				if kh == nil {
					continue
				}
				err := readHandle(ctx, sp, kh.(*savepoint.KeyGroupsHandle), int(op.MaxParallelism), func(kg int, state string, key, value []byte) error {
					got[entryID(op.ID.String(), state, key, value)]++
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return got
}

func sameCounts(t *testing.T, what string, want, got map[string]int) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: source has no entries; the test would prove nothing", what)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("%s: entry %s seen %d times, want %d", what, k[:12], got[k], n)
		}
	}
	for k, n := range got {
		if want[k] == 0 {
			t.Fatalf("%s: unexpected entry %s (x%d)", what, k[:12], n)
		}
	}
}

// treeHash hashes every file (name, mode, content) below dir.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%v\x00", rel, d.IsDir())
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%d\x00", len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// openAt opens a rescaled savepoint whose handles may be absolute paths into
// another directory: the store is rooted at "/" so both trees are inside it.
// openAt opens a rescaled savepoint the way every reader does: its
// absolute handles into the source are followed through the recorded
// sources.
func openAt(t *testing.T, ctx context.Context, dir string) *savepoint.Savepoint {
	t.Helper()
	return openDir(t, ctx, dir)
}

func openDir(t *testing.T, ctx context.Context, dir string) *savepoint.Savepoint {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(ctx, st, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// synthSpec describes a random canonical savepoint.
type synthSpec struct {
	maxP, oldP int
	keys       int
	inline     float64 // probability that a subtask's stream is inline
	missing    float64 // probability that a subtask has no state at all
}

var testOperator = savepoint.OperatorIDFromUID("rescale-test-operator")

// writeSynth writes a canonical savepoint with a Long key, a VALUE state
// "v" and a MAP state "m" to dir; it returns the number of entries.
func writeSynth(t *testing.T, rng *rand.Rand, dir string, sp synthSpec) int {
	t.Helper()
	type ent struct {
		kg, state  int
		key, value []byte
	}
	var es []ent
	void := flinkwrite.AppendVoidNamespace(nil)
	width := keygroups.PrefixWidth(sp.maxP)
	for i := 0; i < sp.keys; i++ {
		k := rng.Int63n(1 << 40)
		kg := keygroups.Assign(keygroups.Long(k), sp.maxP)
		kb := flinkwrite.AppendLong(nil, k)
		key, err := flinkwrite.StateKey{KeyGroup: kg, PrefixLen: width, Key: kb, Namespace: void}.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, ent{kg, 0, key, flinkwrite.AppendLong(nil, rng.Int63())})
		for j := 0; j < rng.Intn(3); j++ {
			uk, err := flinkwrite.StateKey{KeyGroup: kg, PrefixLen: width, Key: kb, Namespace: void, UserKey: flinkwrite.AppendInt(nil, int32(j))}.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			es = append(es, ent{kg, 1, uk, flinkwrite.AppendMapEntryValue(nil, flinkwrite.AppendLong(nil, int64(j)), false)})
		}
	}
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].kg != es[j].kg {
			return es[i].kg < es[j].kg
		}
		if es[i].state != es[j].state {
			return es[i].state < es[j].state
		}
		return bytes.Compare(es[i].key, es[j].key) < 0
	})
	// Drop duplicate keys (same random key twice).
	uniq := es[:0]
	for i, e := range es {
		if i > 0 && e.state == es[i-1].state && bytes.Equal(e.key, es[i-1].key) {
			continue
		}
		uniq = append(uniq, e)
	}
	es = uniq
	hdr := flinkwrite.Header{KeySerializer: flinkwrite.LongSnapshot, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("v", flinkwrite.KindValue, flinkwrite.VoidNamespaceSnapshot, flinkwrite.LongSnapshot),
		flinkwrite.KeyedStateMeta("m", flinkwrite.KindMap, flinkwrite.VoidNamespaceSnapshot, flinkwrite.MapSnapshot(flinkwrite.IntSnapshot, flinkwrite.LongSnapshot)),
	}}
	op := &savepoint.OperatorState{ID: testOperator, Parallelism: int32(sp.oldP), MaxParallelism: int32(sp.maxP)}
	n := 0
	for i := 0; i < sp.oldP; i++ {
		r := keygroups.RangeForSubtask(sp.maxP, sp.oldP, i)
		if rng.Float64() < sp.missing {
			continue
		}
		var buf bytes.Buffer
		w, err := flinkwrite.NewKeyedWriter(&buf, hdr, r, sp.maxP)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if r.Contains(e.kg) {
				if err := w.Add(e.kg, e.state, e.key, e.value); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		var d *savepoint.StreamHandle
		if rng.Float64() < sp.inline {
			d = &savepoint.StreamHandle{Tag: savepoint.TagByteStream, Name: fmt.Sprintf("inline-%d", i), Data: buf.Bytes()}
		} else {
			name := fmt.Sprintf("keyed-%d", i)
			if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			d = &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: name, Size: int64(buf.Len())}
		}
		op.Subtasks = append(op.Subtasks, &savepoint.SubtaskState{Index: i, ManagedKeyed: &savepoint.KeyGroupsHandle{
			Tag: savepoint.TagSavepointKeyGroups, StartKeyGroup: int32(r.Start), Offsets: w.Offsets(), Delegate: d}})
	}
	md := &savepoint.Metadata{Version: 3, CheckpointID: 7, Operators: []*savepoint.OperatorState{op}}
	b, err := savepoint.EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, savepoint.MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// failingStore fails every data-changing call after `after` successful ones.
type failingStore struct {
	s3.Storage
	after int32
	calls atomic.Int32
}

var errInjected = errors.New("injected failure")

func (f *failingStore) fail() bool { return f.calls.Add(1) > f.after }

func (f *failingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if f.fail() {
		return errInjected
	}
	return f.Storage.Put(ctx, key, r, size)
}

func (f *failingStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if f.fail() {
		return errInjected
	}
	return f.Storage.PutIfAbsent(ctx, key, r, size)
}

func (f *failingStore) Copy(ctx context.Context, src, dst string) error {
	if f.fail() {
		return errInjected
	}
	return f.Storage.Copy(ctx, src, dst)
}
