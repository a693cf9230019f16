package savepoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// TestChangelogFixtureChanges decodes every inline change of the Flink
// 1.17 changelog checkpoint and compares the per (operator, state, key
// group) change counts with the entries the reference decoder found in the
// Flink 1.9 savepoint of the same job: each key was written once.
func TestChangelogFixtureChanges(t *testing.T) {
	md, err := ParseMetadata(readMoreFixture(t, fixtureChangelog), fixtureChangelog)
	if err != nil {
		t.Fatal(err)
	}
	sp := &Savepoint{Meta: md, Store: s3.NewMem(), MetadataKey: MetadataName}
	got := map[string]int{}
	values := map[string]bool{}
	types := map[string]string{}
	for _, op := range md.Operators {
		for _, st := range op.Subtasks {
			h, ok := st.ManagedKeyed.(*ChangelogHandle)
			if !ok {
				continue
			}
			ids := map[uint16]string{}
			err := sp.WalkStateChanges(t.Context(), h, false, func(c StateChange) error {
				info, err := ParseStateChange(c)
				if err != nil {
					return err
				}
				if info.Metadata {
					if info.MetaVersion != 6 || info.Op != 8 {
						t.Errorf("metadata change op %d, meta info version %d", info.Op, info.MetaVersion)
					}
					ids[info.StateID] = info.StateName
					types[info.StateName] = info.TypeName()
					return nil
				}
				name, ok := ids[info.StateID]
				if !ok {
					return fmt.Errorf("data change of unregistered state %d", info.StateID)
				}
				if want := map[bool]byte{true: 5, false: 1}[strings.HasPrefix(name, "_timer_state/")]; info.Op != want {
					t.Errorf("%s: operation %s", name, StateChangeOpName(info.Op))
				}
				got[fmt.Sprintf("%s %s %d", op.ID, name, c.KeyGroup)]++
				if name == "state-name" {
					// SET of a VALUE state: key Tuple1<Long> (8 bytes),
					// namespace (void: 1 byte, Long: 8), value Long.
					p := info.Payload
					if len(p) != 17 && len(p) != 24 {
						return fmt.Errorf("SET payload of %d bytes", len(p))
					}
					values[fmt.Sprintf("%s %d key %d value %d", op.ID, c.KeyGroup, int64(binary.BigEndian.Uint64(p)), int64(binary.BigEndian.Uint64(p[len(p)-8:])))] = true
				}
				return nil
			})
			if err != nil {
				t.Fatalf("operator %s subtask %d: %v", op.ID, st.Index, err)
			}
		}
	}
	want := map[string]int{}
	nValues := 0
	for _, e := range readMoreExpected(t, fixtureV2) {
		want[fmt.Sprintf("%s %s %d", e.Op, e.State, e.KG)]++
		if e.State == "state-name" {
			var key []int64
			if err := json.Unmarshal(e.Key, &key); err != nil || len(key) != 1 {
				t.Fatalf("key %s: %v", e.Key, err)
			}
			nValues++
			if k := fmt.Sprintf("%s %d key %d value %d", e.Op, e.KG, key[0], e.Value); !values[k] {
				t.Errorf("no change sets %s", k)
			}
		}
	}
	if len(values) != nValues {
		t.Errorf("%d SET changes, %d expected values", len(values), nValues)
	}
	if len(got) != len(want) {
		t.Errorf("%d (operator, state, key group) cells, want %d", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d changes, want %d", k, got[k], n)
		}
	}
	if types["state-name"] != "KEY_VALUE" || types["_timer_state/event_timer"] != "PRIORITY_QUEUE" {
		t.Errorf("state types %v", types)
	}
}

// changeSetBytes encodes changes as one change set: grouped by key group,
// groups ascending (metadata first), as Flink's StateChangeFormat writes.
func changeSetBytes(changes []StateChange) []byte {
	groups := map[int32][]StateChange{}
	var kgs []int32
	for _, c := range changes {
		if groups[c.KeyGroup] == nil {
			kgs = append(kgs, c.KeyGroup)
		}
		groups[c.KeyGroup] = append(groups[c.KeyGroup], c)
	}
	sort.Slice(kgs, func(i, j int) bool { return kgs[i] < kgs[j] })
	var e binfmt.Encbuf
	e.PutI32(int32(len(kgs)))
	for _, kg := range kgs {
		e.PutI32(int32(len(groups[kg])))
		e.PutI32(kg)
		for _, c := range groups[kg] {
			e.PutI32(int32(len(c.Data)))
			e.PutBytes(c.Data)
		}
	}
	return e.B
}

// toFileLogs rewrites md's inline change logs as tag-13 logs in change-log
// files (one per operator, each handle's change set at its own offset; a
// filler change set first so that offsets are not 0) and stores files and
// metadata in st, with the fixture's operator-state files. It returns the
// number of change sets written.
func toFileLogs(t *testing.T, md *Metadata, st s3.Storage, compress bool) int {
	t.Helper()
	ctx := context.Background()
	dir := moreFixtureDir(t, fixtureChangelog)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == MetadataName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, e.Name(), bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	sets := 0
	for i, op := range md.Operators {
		name := fmt.Sprintf("changelog-%d", i)
		payload := changeSetBytes([]StateChange{{KeyGroup: 0, Data: []byte{1, 0, 9}}})
		type ref struct {
			l   *StateChangelogHandle
			off int64
		}
		var refs []ref
		for _, sub := range op.Subtasks {
			h, ok := sub.ManagedKeyed.(*ChangelogHandle)
			if !ok {
				continue
			}
			for _, l := range h.NonMaterialized {
				refs = append(refs, ref{l, int64(len(payload))})
				payload = append(payload, changeSetBytes(l.Changes)...)
				sets++
			}
		}
		if len(refs) == 0 {
			continue
		}
		file := []byte{0}
		if compress {
			file = flinkwrite.AppendSnappyFramed([]byte{1}, payload)
		} else {
			file = append(file, payload...)
		}
		if err := st.Put(ctx, name, bytes.NewReader(file), int64(len(file))); err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			*r.l = StateChangelogHandle{Tag: TagChangelogFileIncrementV2, StartKeyGroup: r.l.StartKeyGroup, NumKeyGroups: r.l.NumKeyGroups,
				Streams: []ChangelogStream{{Offset: r.off, Handle: &StreamHandle{Tag: TagRelativeFile, Path: name, Size: int64(len(file))}}},
				Size:    1, CheckpointedSize: 1, StateHandleID: r.l.StateHandleID, StorageID: "filesystem"}
		}
	}
	b, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, MetadataName, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	return sets
}

// TestChangelogFileLogs moves the fixture's real changes into generated
// change-log files (plain and Snappy-framed): the per-state listing from
// the files equals the one from the inline original, and check is clean.
func TestChangelogFileLogs(t *testing.T) {
	raw := readMoreFixture(t, fixtureChangelog)
	orig, err := ParseMetadata(raw, fixtureChangelog)
	if err != nil {
		t.Fatal(err)
	}
	inline := Summarize(&Savepoint{Meta: orig, Store: s3.NewMem(), MetadataKey: MetadataName})
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compressed=%v", compress), func(t *testing.T) {
			md, _ := ParseMetadata(raw, fixtureChangelog)
			st := s3.NewMem()
			if n := toFileLogs(t, md, st, compress); n != 12 {
				t.Fatalf("%d change sets", n)
			}
			sp, err := Open(t.Context(), st, MetadataName)
			if err != nil {
				t.Fatal(err)
			}
			sum := Summarize(sp)
			for i, os := range sum.Operators {
				if c := os.Changelog; c != nil && (len(c.States) != 0 || len(c.Files) != 3 || c.InlineChanges != 0) {
					t.Fatalf("operator %s before the scan: %+v", os.ID, c)
				}
				_ = i
			}
			if err := ScanSummary(t.Context(), sp, sum, ScanOptions{}); err != nil {
				t.Fatal(err)
			}
			for i, os := range sum.Operators {
				a, b := inline.Operators[i].Changelog, os.Changelog
				if (a == nil) != (b == nil) {
					t.Fatalf("operator %s: changelog %v vs %v", os.ID, a, b)
				}
				if a == nil {
					continue
				}
				if a.statesString() != b.statesString() || a.MetadataChanges != b.MetadataChanges || b.Undecoded != 0 {
					t.Errorf("operator %s: files %q (%d metadata), inline %q (%d metadata)", os.ID, b.statesString(), b.MetadataChanges, a.statesString(), a.MetadataChanges)
				}
				for j, s := range a.States {
					if b.States[j].KeyGroups != s.KeyGroups || b.States[j].Bytes != s.Bytes {
						t.Errorf("state %s: %d key groups %d B, inline %d key groups %d B", s.Name, b.States[j].KeyGroups, b.States[j].Bytes, s.KeyGroups, s.Bytes)
					}
				}
				if !strings.Contains(os.Note, "changes by state: ") {
					t.Errorf("note %q", os.Note)
				}
			}
			probs, _ := Check(t.Context(), sp, CheckOptions{})
			for _, p := range probs {
				t.Errorf("check: %v", p)
			}
		})
	}
}

func TestChangelogFileLogProblems(t *testing.T) {
	raw := readMoreFixture(t, fixtureChangelog)
	md, _ := ParseMetadata(raw, fixtureChangelog)
	st := s3.NewMem()
	toFileLogs(t, md, st, false)
	// Point one log past its file's end and remove another operator's file.
	var bad *ChangelogStream
	for _, op := range md.Operators {
		for _, sub := range op.Subtasks {
			if h, ok := sub.ManagedKeyed.(*ChangelogHandle); ok && bad == nil {
				bad = &h.NonMaterialized[0].Streams[0]
			}
		}
	}
	bad.Offset = bad.Handle.Size + 5
	b, _ := EncodeMetadata(md)
	ctx := t.Context()
	if err := st.Put(ctx, MetadataName, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "changelog-2"); err != nil {
		t.Fatal(err)
	}
	sp, err := Open(ctx, st, MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	probs, _ := Check(ctx, sp, CheckOptions{})
	kinds := map[string]int{}
	for _, p := range probs {
		kinds[p.Kind]++
	}
	if kinds[ProblemChangelog] != 1 || kinds[ProblemMissing] != 3 || len(probs) != 4 {
		t.Errorf("problems %v: %v", kinds, probs)
	}
	sum := Summarize(sp)
	err = ScanSummary(ctx, sp, sum, ScanOptions{})
	if err == nil || !strings.Contains(err.Error(), "offset") {
		t.Errorf("scan: %v", err)
	}
}

// TestChangeSetHostile cuts a change-log file at every length and feeds
// absurd counts: each read fails with the file and an offset, never panics.
func TestChangeSetHostile(t *testing.T) {
	changes := []StateChange{{KeyGroup: -1, Data: []byte{8, 0, 0, 0, 6, 0, 1, 'x', 0, 0, 0}}, {KeyGroup: 3, Data: []byte{1, 0, 0, 7, 7}}}
	good := append([]byte{0}, changeSetBytes(changes)...)
	read := func(file []byte, off int64) error {
		st := s3.NewMem()
		if err := st.Put(context.Background(), "f", bytes.NewReader(file), int64(len(file))); err != nil {
			t.Fatal(err)
		}
		sp := &Savepoint{Meta: &Metadata{Version: 3}, Store: st, MetadataKey: MetadataName}
		h := &ChangelogHandle{Tag: TagChangelogV2, NonMaterialized: []*StateChangelogHandle{{Tag: TagChangelogFileIncrement,
			Streams: []ChangelogStream{{Offset: off, Handle: &StreamHandle{Tag: TagRelativeFile, Path: "f", Size: int64(len(file))}}}}}}
		n := 0
		err := sp.WalkStateChanges(context.Background(), h, false, func(c StateChange) error {
			if _, err := ParseStateChange(c); err != nil {
				return err
			}
			n++
			return nil
		})
		if err == nil && n != 2 {
			return fmt.Errorf("%d changes", n)
		}
		return err
	}
	if err := read(good, 0); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n++ {
		err := read(good[:n], 0)
		if err == nil || !strings.Contains(err.Error(), "offset") || !strings.Contains(err.Error(), "f") {
			t.Fatalf("cut at %d: %v", n, err)
		}
	}
	e := func(vals ...int32) []byte {
		var b binfmt.Encbuf
		b.PutU8(0)
		for _, v := range vals {
			b.PutI32(v)
		}
		return b.B
	}
	for name, file := range map[string][]byte{
		"huge group count":   e(1 << 30),
		"negative group":     e(-1),
		"huge change count":  e(1, 1<<30, 3),
		"huge change length": e(1, 1, 3, 0x7fffffff),
		"negative length":    e(1, 1, 3, -2),
		"bad flag":           {7, 0, 0, 0, 0},
		"bad snappy":         {1, 0xff, 6, 0, 0, 's', 'N', 'a', 'P', 'p', 'X'},
	} {
		if err := read(file, 0); err == nil || !strings.Contains(err.Error(), "offset") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The position as an errclass.CorruptionError: the group count right
	// after the flag byte is at file offset 1.
	err := read(e(1<<30), 0)
	var ce *errclass.CorruptionError
	if !errors.Is(err, errclass.ErrCorrupt) || !errors.As(err, &ce) || !strings.HasSuffix(ce.File, "f") || ce.Offset != 1 {
		t.Errorf("huge group count: %v (position %+v)", err, ce)
	}
	if err := read(good, 100); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("offset past the end: %v", err)
	}
	for name, c := range map[string]StateChange{
		"metadata op":      {KeyGroup: -1, Data: []byte{3, 0, 0, 0, 6, 0, 0, 0, 0, 0}},
		"metadata version": {KeyGroup: -1, Data: []byte{8, 0x7f, 0, 0, 6, 0, 0, 0, 0, 0}},
		"metadata short":   {KeyGroup: -1, Data: []byte{8, 0, 0, 0, 6, 0, 1, 'x', 0}},
		"data op":          {KeyGroup: 1, Data: []byte{12, 0, 0}},
		"data short":       {KeyGroup: 1, Data: []byte{1, 0}},
		"empty":            {KeyGroup: 1},
	} {
		if _, err := ParseStateChange(c); err == nil || !strings.Contains(err.Error(), "offset") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzStateChangeFile reads arbitrary bytes as a change-log file at
// arbitrary offsets and decodes every change it yields.
func FuzzStateChangeFile(f *testing.F) {
	changes := []StateChange{{KeyGroup: -1, Data: []byte{8, 0, 0, 0, 6, 0, 1, 'x', 0, 0, 0}}, {KeyGroup: 3, Data: []byte{1, 0, 0, 7, 7}}}
	set := changeSetBytes(changes)
	f.Add(append([]byte{0}, set...), int64(0))
	f.Add(flinkwrite.AppendSnappyFramed([]byte{1}, append(append([]byte(nil), set...), set...)), int64(len(set)))
	st := s3.NewMem()
	f.Fuzz(func(t *testing.T, file []byte, off int64) {
		if err := st.Put(context.Background(), "f", bytes.NewReader(file), int64(len(file))); err != nil {
			t.Fatal(err)
		}
		sp := &Savepoint{Meta: &Metadata{Version: 3}, Store: st, MetadataKey: MetadataName}
		h := &ChangelogHandle{Tag: TagChangelogV2, NonMaterialized: []*StateChangelogHandle{{Tag: TagChangelogFileIncrementV2,
			Streams: []ChangelogStream{{Offset: off % (1 << 20), Handle: &StreamHandle{Tag: TagRelativeFile, Path: "f", Size: int64(len(file))}}}}}}
		c := &ChangelogSummary{}
		l := newChangeLister(c)
		err := sp.WalkStateChanges(context.Background(), h, false, l.add)
		if err != nil && !strings.Contains(err.Error(), "offset") {
			t.Fatalf("error without offset: %v", err)
		}
		_ = c.String()
	})
}

// TestCheckInlineChanges reports an inline change whose frame does not
// decode, with the subtask and key group.
func TestCheckInlineChanges(t *testing.T) {
	raw := readMoreFixture(t, fixtureChangelog)
	md, err := ParseMetadata(raw, fixtureChangelog)
	if err != nil {
		t.Fatal(err)
	}
	st := s3.NewMem()
	dir := moreFixtureDir(t, fixtureChangelog)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != MetadataName {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			_ = st.Put(t.Context(), e.Name(), bytes.NewReader(b), int64(len(b)))
		}
	}
	h := md.Operators[1].Subtasks[0].ManagedKeyed.(*ChangelogHandle)
	h.NonMaterialized[0].Changes[1].Data[0] = 42 // unknown operation
	b, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Put(t.Context(), MetadataName, bytes.NewReader(b), int64(len(b)))
	sp, err := Open(t.Context(), st, MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	probs, _ := Check(t.Context(), sp, CheckOptions{})
	if len(probs) != 1 || probs[0].Kind != ProblemChangelog || probs[0].Subtask != 1 || probs[0].KeyGroup != 1 || !strings.Contains(probs[0].Message, "unknown state change operation 42") {
		t.Fatalf("%v", probs)
	}
	sum := Summarize(sp)
	if c := sum.Operators[1].Changelog; c.Undecoded != 1 || !strings.Contains(sum.Operators[1].Note, "1 changes not decoded") {
		t.Errorf("%+v / %q", c, sum.Operators[1].Note)
	}
}
