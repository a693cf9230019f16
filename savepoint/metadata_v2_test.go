package savepoint

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// The fixtures of layouts added after the main set live beside it, in
// ../shared/flink-fixtures-more.
const (
	fixtureV2        = "flink1.9-heap-savepoint-metadata-v2"
	fixtureChangelog = "flink1.17-hashmap-changelog-checkpoint"
)

// moreFixtureDir returns the savepoint directory of a fixture in
// flink-fixtures-more (skipped, or failed under CI=true, when missing).
func moreFixtureDir(t testing.TB, name string) string {
	t.Helper()
	d := filepath.Join(fixtures.Require(t), "..", "flink-fixtures-more", name, "savepoint")
	if _, err := os.Stat(filepath.Join(d, "_metadata")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("fixture %s missing: %v", name, err)
		}
		t.Skipf("fixture %s missing: %v", name, err)
	}
	return d
}

func readMoreFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moreFixtureDir(t, name), "_metadata"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectedEntry is one line of _expected/<dir>.entries.jsonl (only the
// fields these tests read).
type expectedEntry struct {
	KG      int             `json:"kg"`
	State   string          `json:"state"`
	Type    string          `json:"type"`
	Key     json.RawMessage `json:"key"`
	Value   int64           `json:"value"`
	Op      string          `json:"op"`
	Subtask int             `json:"subtask"`
}

func readMoreExpected(t testing.TB, name string) []expectedEntry {
	t.Helper()
	p := filepath.Join(moreFixtureDir(t, name), "..", "..", "_expected", name+".entries.jsonl")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []expectedEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e expectedEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no expected entries", p)
	}
	return out
}

func TestMetadataV2Fixture(t *testing.T) {
	raw := readMoreFixture(t, fixtureV2)
	md, err := ParseMetadata(raw, fixtureV2)
	if err != nil {
		t.Fatal(err)
	}
	if md.Version != 2 || md.Trailer != nil || md.CheckpointID != 21 {
		t.Fatalf("version %d, checkpoint %d, trailer %d bytes", md.Version, md.CheckpointID, len(md.Trailer))
	}
	out, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, raw) {
		t.Fatalf("re-encoding differs (%d vs %d bytes)", len(out), len(raw))
	}
	if len(md.Operators) != 8 {
		t.Fatalf("%d operators", len(md.Operators))
	}
	keyedSubtasks := 0
	for _, op := range md.Operators {
		if op.LegacyChainLength != 1 || op.Coordinator != nil || op.Name != "" || op.UID != "" {
			t.Errorf("operator %s: chain length %d, coordinator %v, name %q uid %q", op.ID, op.LegacyChainLength, op.Coordinator, op.Name, op.UID)
		}
		for _, st := range op.Subtasks {
			if st.LegacyDuration != -1 || st.Finished || len(st.InputChannels)+len(st.OutputChannels) != 0 {
				t.Errorf("operator %s subtask %d: duration %d finished %v", op.ID, st.Index, st.LegacyDuration, st.Finished)
			}
			if st.ManagedKeyed == nil {
				continue
			}
			keyedSubtasks++
			h, ok := st.ManagedKeyed.(*KeyGroupsHandle)
			if !ok || h.Tag != TagKeyGroups {
				t.Fatalf("operator %s subtask %d: keyed handle %T tag %d, want tag 3", op.ID, st.Index, st.ManagedKeyed, st.ManagedKeyed.HandleTag())
			}
			// Everything is inline; offsets lie inside the stream.
			if h.Delegate == nil || h.Delegate.Tag != TagByteStream {
				t.Fatalf("operator %s subtask %d: delegate %v, want inline", op.ID, st.Index, h.Delegate.Describe())
			}
			for _, off := range h.Offsets {
				if off >= int64(len(h.Delegate.Data)) {
					t.Errorf("offset %d beyond %d inline bytes", off, len(h.Delegate.Data))
				}
			}
		}
	}
	if keyedSubtasks != 14 {
		t.Errorf("%d subtasks with keyed state, want 14", keyedSubtasks)
	}
	// Every entry the reference decoder found lies in a key group that the
	// parsed handle of its subtask covers with a non-zero offset.
	for _, e := range readMoreExpected(t, fixtureV2) {
		id, err := ParseOperatorID(e.Op)
		if err != nil {
			t.Fatal(err)
		}
		var op *OperatorState
		for _, o := range md.Operators {
			if o.ID == id {
				op = o
			}
		}
		if op == nil || op.Subtask(e.Subtask) == nil {
			t.Fatalf("expected entry in operator %s subtask %d: not in the metadata", e.Op, e.Subtask)
		}
		h := op.Subtask(e.Subtask).ManagedKeyed.(*KeyGroupsHandle)
		if s, end := h.KeyGroupRange(); e.KG < s || e.KG > end || h.Offset(e.KG) == 0 {
			t.Errorf("expected entry in key group %d of %s/%d: handle covers [%d, %d], offset %d", e.KG, e.Op, e.Subtask, s, end, h.Offset(e.KG))
		}
	}
}

// TestMetadataV2SameJobAsV4 compares the V2 file with a Flink 1.20
// savepoint of the same job: the operator ids, parallelisms and the
// subtasks with keyed state agree.
func TestMetadataV2SameJobAsV4(t *testing.T) {
	v2, err := ParseMetadata(readMoreFixture(t, fixtureV2), fixtureV2)
	if err != nil {
		t.Fatal(err)
	}
	name := "flink1.20-hashmap-canonical-valuestate-timers"
	v4, err := ParseMetadata(readFixtureMetadata(t, name), name)
	if err != nil {
		t.Fatal(err)
	}
	shape := func(md *Metadata) map[OperatorID]string {
		m := map[OperatorID]string{}
		for _, op := range md.Operators {
			var b strings.Builder
			b.WriteString(string(rune('0' + op.Parallelism)))
			for _, st := range op.Subtasks {
				if st.ManagedKeyed != nil {
					s, e := st.ManagedKeyed.KeyGroupRange()
					b.WriteString(" " + string(rune('0'+s)) + "-" + string(rune('0'+e)))
				}
			}
			m[op.ID] = b.String()
		}
		return m
	}
	a, b := shape(v2), shape(v4)
	if len(a) != len(b) {
		t.Fatalf("%d vs %d operators", len(a), len(b))
	}
	for id, s := range a {
		if b[id] != s {
			t.Errorf("operator %s: V2 %q, 1.20 %q", id, s, b[id])
		}
	}
}

func TestChangelogFixture(t *testing.T) {
	raw := readMoreFixture(t, fixtureChangelog)
	md, err := ParseMetadata(raw, fixtureChangelog)
	if err != nil {
		t.Fatal(err)
	}
	out, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, raw) {
		t.Fatalf("re-encoding differs (%d vs %d bytes)", len(out), len(raw))
	}
	handles := 0
	for _, op := range md.Operators {
		for _, st := range op.Subtasks {
			if st.ManagedKeyed == nil {
				continue
			}
			h, ok := st.ManagedKeyed.(*ChangelogHandle)
			if !ok || h.Tag != TagChangelogV2 {
				t.Fatalf("operator %s subtask %d: %T, want a tag-14 changelog handle", op.ID, st.Index, st.ManagedKeyed)
			}
			handles++
			// Key groups of a parallelism-4, max-parallelism-4 job: one each.
			if s, e := h.KeyGroupRange(); s != st.Index || e != st.Index {
				t.Errorf("subtask %d covers [%d, %d]", st.Index, s, e)
			}
			if h.CheckpointID != md.CheckpointID || h.MaterializationID != 0 || len(h.Materialized) != 0 || len(h.StateHandleID) != 36 {
				t.Errorf("handle: checkpoint %d materialization %d, %d materialized, id %q", h.CheckpointID, h.MaterializationID, len(h.Materialized), h.StateHandleID)
			}
			if len(h.NonMaterialized) != 1 {
				t.Fatalf("%d change logs", len(h.NonMaterialized))
			}
			l := h.NonMaterialized[0]
			if l.Tag != TagChangelogByteIncrement || l.StartKeyGroup != h.StartKeyGroup || l.NumKeyGroups != h.NumKeyGroups {
				t.Errorf("change log tag %d range %d+%d", l.Tag, l.StartKeyGroup, l.NumKeyGroups)
			}
			// The sequence numbers count the changes, and the handle's
			// checkpointed size is the bytes of its inline changes.
			if l.To-l.From != int64(len(l.Changes)) || h.CheckpointedSize != l.Len() {
				t.Errorf("changes %d (seq %d..%d), %d bytes, checkpointed size %d", len(l.Changes), l.From, l.To, l.Len(), h.CheckpointedSize)
			}
			for _, c := range l.Changes {
				if c.KeyGroup != -1 && int(c.KeyGroup) != st.Index {
					t.Errorf("change in key group %d of subtask %d", c.KeyGroup, st.Index)
				}
			}
		}
	}
	if handles != 12 {
		t.Errorf("%d changelog handles, want 12", handles)
	}
	// Readers see no materialized state: the subtasks stay, without keyed
	// handles.
	for _, op := range md.Operators {
		rs := ReadableSubtasks(op)
		if len(rs) != len(op.Subtasks) {
			t.Fatalf("%d readable subtasks of %d", len(rs), len(op.Subtasks))
		}
		for _, st := range rs {
			if st.ManagedKeyed != nil {
				t.Errorf("operator %s subtask %d: readable keyed handle %T", op.ID, st.Index, st.ManagedKeyed)
			}
		}
	}
}

func TestChangelogFixtureSummary(t *testing.T) {
	sp, err := Open(t.Context(), mustLocal(t, moreFixtureDir(t, fixtureChangelog)), MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(sp)
	n := 0
	for _, os := range s.Operators {
		c := os.Changelog
		if c == nil {
			if os.KeyedLayout != "" {
				t.Errorf("operator %s: layout %q without changelog", os.ID, os.KeyedLayout)
			}
			continue
		}
		n++
		if os.KeyedLayout != LayoutChangelog || c.Handles != 3 || c.MaterializedHandles != 0 || len(c.MaterializationIDs) != 1 || c.ChangeLogs != 3 {
			t.Errorf("operator %s: layout %q, %+v", os.ID, os.KeyedLayout, c)
		}
		if c.InlineBytes != os.KeyedBytes || c.CheckpointedBytes != c.InlineBytes || c.InlineChanges == 0 {
			t.Errorf("operator %s: inline %d B in %d changes, keyed %d B, checkpointed %d B", os.ID, c.InlineBytes, c.InlineChanges, os.KeyedBytes, c.CheckpointedBytes)
		}
		if !strings.Contains(os.Note, "changelog state backend") {
			t.Errorf("note %q", os.Note)
		}
	}
	if n != 4 {
		t.Errorf("%d operators with changelog state, want 4", n)
	}
	if err := ScanSummary(t.Context(), sp, s, ScanOptions{}); err != nil {
		t.Fatal(err)
	}
	probs, _ := Check(t.Context(), sp, CheckOptions{})
	for _, p := range probs {
		t.Errorf("check: %v", p)
	}
}

// genStream returns stream handles of every simple kind.
func genStreams() []*StreamHandle {
	return []*StreamHandle{
		{Tag: TagByteStream, Name: "inline-1", Data: []byte("change bytes")},
		{Tag: TagFile, Path: "file:///tmp/changelog/0001", Size: 4096},
		{Tag: TagRelativeFile, Path: "rel-0002", Size: 17},
		nil,
	}
}

// genChangelogMetadata builds V4-shaped metadata (V3 layout, since the
// model keeps no trailer) whose subtasks hold every changelog form.
func genChangelogMetadata() *Metadata {
	ss := genStreams()
	kg := &KeyGroupsHandle{Tag: TagKeyGroupsV2, StartKeyGroup: 0, Offsets: []int64{10, 0, 30}, Delegate: ss[1], StateHandleID: "kg-id"}
	inc := &IncrementalHandle{Tag: TagIncrementalKeyGroupsV2, CheckpointID: 5, BackendID: "b", StartKeyGroup: 0, NumKeyGroups: 3, CheckpointedSize: 99,
		Meta: ss[2], Shared: []NamedStream{{Name: "000001.sst", Handle: ss[1]}}, StateHandleID: "inc-id"}
	mem := &StateChangelogHandle{Tag: TagChangelogByteIncrement, StartKeyGroup: 0, NumKeyGroups: 3, From: 4, To: 6,
		Changes: []StateChange{{KeyGroup: -1, Data: []byte{8, 0, 0, 0, 6}}, {KeyGroup: 2, Data: []byte{1, 0, 0}}}, StateHandleID: "mem-id"}
	file1 := &StateChangelogHandle{Tag: TagChangelogFileIncrement, StartKeyGroup: 0, NumKeyGroups: 3,
		Streams: []ChangelogStream{{Offset: 12, Handle: ss[1]}, {Offset: 0, Handle: ss[0]}}, Size: 300, CheckpointedSize: 200, StateHandleID: "f1"}
	file2 := &StateChangelogHandle{Tag: TagChangelogFileIncrementV2, StartKeyGroup: 0, NumKeyGroups: 3,
		Streams: []ChangelogStream{{Offset: 7, Handle: ss[2]}}, Size: 5, CheckpointedSize: 5, StateHandleID: "f2", StorageID: "filesystem"}
	op := &OperatorState{ID: OperatorID{1, 2, 3}, Parallelism: 4, MaxParallelism: 3}
	op.Subtasks = []*SubtaskState{
		{Index: 0, ManagedKeyed: &ChangelogHandle{Tag: TagChangelogV2, StartKeyGroup: 0, NumKeyGroups: 3, CheckpointedSize: 1234,
			Materialized: []KeyedHandle{kg, nil, inc}, NonMaterialized: []*StateChangelogHandle{mem, file1, nil, file2},
			MaterializationID: 7, CheckpointID: 9, StateHandleID: "cl-id"}},
		{Index: 1, ManagedKeyed: &ChangelogHandle{Tag: TagChangelog, StartKeyGroup: 1, NumKeyGroups: 0, MaterializationID: 3, StateHandleID: "empty"},
			RawKeyed: &ChangelogHandle{Tag: TagChangelogV2, Materialized: []KeyedHandle{&KeyGroupsHandle{Tag: TagKeyGroups, Offsets: []int64{0}}}, StateHandleID: "raw"}},
		{Index: 2, ManagedKeyed: kg},
	}
	return &Metadata{Version: 3, CheckpointID: 9, Operators: []*OperatorState{op}}
}

func genV2Metadata() *Metadata {
	ss := genStreams()
	op1 := &OperatorState{ID: OperatorID{9}, Parallelism: 2, MaxParallelism: 128, LegacyChainLength: 1}
	op1.Subtasks = []*SubtaskState{
		{Index: 1, LegacyDuration: -1,
			ManagedOperator: &OperatorHandle{Tag: TagPartitionableOperator, States: []OperatorStateMeta{{Name: "s", Mode: ModeUnion, Offsets: []int64{4, 9}}}, Delegate: ss[0]},
			ManagedKeyed:    &KeyGroupsHandle{Tag: TagKeyGroups, StartKeyGroup: 64, Offsets: []int64{5, 0, 77}, Delegate: ss[1]},
			RawKeyed:        &IncrementalHandle{Tag: TagIncrementalKeyGroups, CheckpointID: 3, BackendID: "x", StartKeyGroup: 64, NumKeyGroups: 64, Meta: ss[2]}},
		{Index: 0, LegacyDuration: 12345},
	}
	op2 := &OperatorState{ID: OperatorID{8}, Parallelism: 1, MaxParallelism: 1, LegacyChainLength: 0}
	return &Metadata{Version: 2, CheckpointID: 77,
		MasterStates: []MasterState{{Version: 1, Name: "hook", Payload: []byte("payload")}},
		Operators:    []*OperatorState{op1, op2}}
}

// roundTrip encodes md, parses the bytes back and checks that encoding the
// parsed model gives the same bytes.
func roundTrip(t *testing.T, md *Metadata) (*Metadata, []byte) {
	t.Helper()
	b, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseMetadata(b, "generated")
	if err != nil {
		t.Fatal(err)
	}
	again, err := EncodeMetadata(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Fatal("parsed model re-encodes differently")
	}
	return back, b
}

func TestGeneratedV2RoundTrip(t *testing.T) {
	back, _ := roundTrip(t, genV2Metadata())
	if back.Version != 2 || back.CheckpointID != 77 || len(back.MasterStates) != 1 || len(back.Operators) != 2 {
		t.Fatalf("%+v", back)
	}
	op := back.Operators[0]
	if op.LegacyChainLength != 1 || back.Operators[1].LegacyChainLength != 0 {
		t.Errorf("chain lengths %d %d", op.LegacyChainLength, back.Operators[1].LegacyChainLength)
	}
	if op.Subtasks[0].LegacyDuration != -1 || op.Subtasks[1].LegacyDuration != 12345 {
		t.Errorf("durations %d %d", op.Subtasks[0].LegacyDuration, op.Subtasks[1].LegacyDuration)
	}
	kg := op.Subtasks[0].ManagedKeyed.(*KeyGroupsHandle)
	if kg.Offset(66) != 77 || kg.Delegate.Path != "file:///tmp/changelog/0001" {
		t.Errorf("key-groups handle %+v", kg)
	}
	if inc := op.Subtasks[0].RawKeyed.(*IncrementalHandle); inc.NumKeyGroups != 64 || inc.Meta.Path != "rel-0002" {
		t.Errorf("incremental handle %+v", inc)
	}
}

func TestGeneratedChangelogRoundTrip(t *testing.T) {
	for _, v := range []int{2, 3, 4, 7} {
		md := genChangelogMetadata()
		md.Version = v
		if v >= 4 {
			md.Trailer = []byte{0xAC, 0xED, 0, 5, 'x'} // kept verbatim
		}
		back, _ := roundTrip(t, md)
		st := back.Operators[0].Subtasks[0]
		h := st.ManagedKeyed.(*ChangelogHandle)
		if h.Tag != TagChangelogV2 || h.CheckpointID != 9 || h.MaterializationID != 7 || h.CheckpointedSize != 1234 || h.StateHandleID != "cl-id" {
			t.Errorf("v%d: handle %+v", v, h)
		}
		if len(h.Materialized) != 3 || h.Materialized[1] != nil || h.Materialized[0].HandleTag() != TagKeyGroupsV2 || h.Materialized[2].HandleTag() != TagIncrementalKeyGroupsV2 {
			t.Fatalf("v%d: materialized %v", v, h.Materialized)
		}
		if len(h.NonMaterialized) != 4 || h.NonMaterialized[2] != nil {
			t.Fatalf("v%d: non-materialized %v", v, h.NonMaterialized)
		}
		mem, f1, f2 := h.NonMaterialized[0], h.NonMaterialized[1], h.NonMaterialized[3]
		if mem.From != 4 || mem.To != 6 || len(mem.Changes) != 2 || mem.Changes[0].KeyGroup != -1 || string(mem.Changes[1].Data) != "\x01\x00\x00" || mem.Len() != 8 {
			t.Errorf("v%d: in-memory log %+v", v, mem)
		}
		if len(f1.Streams) != 2 || f1.Streams[0].Offset != 12 || f1.Streams[1].Handle.Name != "inline-1" || f1.Size != 300 || f1.CheckpointedSize != 200 || f1.StorageID != "" {
			t.Errorf("v%d: file log %+v", v, f1)
		}
		if f2.StorageID != "filesystem" || f2.Streams[0].Handle.Path != "rel-0002" || f2.Len() != 5 {
			t.Errorf("v%d: file log v2 %+v", v, f2)
		}
		st1 := back.Operators[0].Subtasks[1]
		if h1 := st1.ManagedKeyed.(*ChangelogHandle); h1.Tag != TagChangelog || h1.CheckpointID != 0 || h1.MaterializationID != 3 {
			t.Errorf("v%d: tag-8 handle %+v", v, h1)
		}
		// Readers: subtask 0 becomes two handles (key groups, incremental).
		rs := ReadableSubtasks(back.Operators[0])
		if len(rs) != 4 || rs[0].Index != 0 || rs[1].Index != 0 || rs[0].ManagedKeyed.HandleTag() != TagKeyGroupsV2 || rs[1].ManagedKeyed.HandleTag() != TagIncrementalKeyGroupsV2 {
			t.Fatalf("v%d: readable %v", v, rs)
		}
		if rs[2].ManagedKeyed != nil || rs[2].RawKeyed == nil || rs[2].RawKeyed.HandleTag() != TagKeyGroups || rs[3] != back.Operators[0].Subtasks[2] {
			t.Errorf("v%d: readable subtask 1/2: %+v %+v", v, rs[2], rs[3])
		}
	}
}

func TestGeneratedChangelogSummary(t *testing.T) {
	md := genChangelogMetadata()
	sp := &Savepoint{Meta: md, Store: mustLocal(t, t.TempDir()), MetadataKey: MetadataName}
	s := Summarize(sp)
	c := s.Operators[0].Changelog
	if c == nil {
		t.Fatal("no changelog summary")
	}
	if c.Handles != 3 || c.MaterializedHandles != 3 || c.ChangeLogs != 3 || c.InlineChanges != 2 || c.InlineBytes != 8 {
		t.Errorf("%+v", c)
	}
	if len(c.MaterializationIDs) != 3 || c.MaterializationIDs[0] != 0 || c.MaterializationIDs[1] != 3 || c.MaterializationIDs[2] != 7 {
		t.Errorf("materialization ids %v", c.MaterializationIDs)
	}
	// Three streams: file, inline, relative.
	if len(c.Files) != 3 || c.FileBytes != 4096+12+17 || c.Files[0].Name != "file:///tmp/changelog/0001" {
		t.Errorf("files %+v (%d B)", c.Files, c.FileBytes)
	}
	if got := s.Operators[0].KeyedTags; len(got) != 5 {
		t.Errorf("keyed tags %v (want 3, 8, 11, 12, 14)", got)
	}
	if s.Operators[0].KeyedLayout != LayoutMixed {
		t.Errorf("layout %q", s.Operators[0].KeyedLayout)
	}
}

func TestEncodeV2Refuses(t *testing.T) {
	cases := map[string]func(md *Metadata){
		"trailer":     func(md *Metadata) { md.Trailer = []byte{0xAC, 0xED} },
		"coordinator": func(md *Metadata) { md.Operators[0].Coordinator = &StreamHandle{Tag: TagByteStream} },
		"finished op": func(md *Metadata) { md.Operators[1].FullyFinished = true },
		"finished subtask": func(md *Metadata) {
			md.Operators[1].Subtasks = []*SubtaskState{{Index: 0, Finished: true}}
		},
		"channels": func(md *Metadata) {
			md.Operators[0].Subtasks[0].InputChannels = []*ChannelHandle{{Delegate: &StreamHandle{Tag: TagByteStream}}}
		},
		"name": func(md *Metadata) { md.Operators[0].UID = "u" },
	}
	for name, f := range cases {
		md := genV2Metadata()
		f(md)
		if _, err := EncodeMetadata(md); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	md := genChangelogMetadata()
	md.Operators[0].Subtasks[2].ManagedKeyed = &ChangelogHandle{Tag: TagChangelogV2, Materialized: []KeyedHandle{&ChangelogHandle{Tag: TagChangelog}}}
	if _, err := EncodeMetadata(md); err == nil || !strings.Contains(err.Error(), "nested") {
		t.Errorf("nested changelog handle: %v", err)
	}
	md = genChangelogMetadata()
	md.Operators[0].Subtasks[2].ManagedKeyed = &StateChangelogHandle{Tag: TagKeyGroups}
	if _, err := EncodeMetadata(md); err == nil {
		t.Error("state change log with tag 3 encoded")
	}
}

// v2Body returns the bytes of a V2 file with one operator and one subtask
// whose body is written by sub.
func v2Body(sub func(e *binfmt.Encbuf)) []byte {
	e := header(2)
	e.PutI64(1)
	e.PutI32(0)
	e.PutI32(1)
	e.PutBytes(make([]byte, 16))
	e.PutI32(2)
	e.PutI32(8)
	e.PutI32(1) // chain length
	e.PutI32(1)
	e.PutI32(0) // subtask 0
	sub(e)
	return e.B
}

// changelogBody returns a V3 file whose only subtask's managed keyed
// handle is written by kh.
func changelogBody(kh func(e *binfmt.Encbuf)) []byte {
	e := header(3)
	e.PutI64(1)
	e.PutI32(0)
	e.PutI32(1)
	e.PutBytes(make([]byte, 16))
	e.PutI32(1)
	e.PutI32(8)
	e.PutU8(TagNull)
	e.PutI32(1)
	e.PutI32(0)
	e.PutI32(0)
	e.PutI32(0)
	kh(e)
	return e.B
}

func TestHostileV2AndChangelog(t *testing.T) {
	cl := func(e *binfmt.Encbuf, start, n int32) {
		e.PutU8(TagChangelogV2)
		e.PutI32(start)
		e.PutI32(n)
		e.PutI64(0)
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"v2 legacy states", v2Body(func(e *binfmt.Encbuf) { e.PutI64(-1); e.PutI32(1) }), "1 legacy task states"},
		{"v2 negative subtask", func() []byte {
			b := v2Body(func(e *binfmt.Encbuf) {})
			b[len(b)-4] = 0xff
			return b
		}(), "negative subtask index"},
		{"v2 finished marker", func() []byte {
			b := v2Body(func(e *binfmt.Encbuf) {})
			b = b[:len(b)-8]
			return append(b, 0xff, 0xff, 0xff, 0xff)
		}(), "subtask count -1"},
		{"v2 trailing bytes", v2Body(func(e *binfmt.Encbuf) {
			e.PutI64(-1)
			e.PutI32(0)
			e.PutI32(0)
			e.PutI32(0)
			e.PutU8(0)
			e.PutU8(0)
			e.PutU8(0xAC)
		}), "1 unexpected trailing bytes after a version 2 body"},
		{"negative key group", changelogBody(func(e *binfmt.Encbuf) { cl(e, -1, 1) }), "key-group range -1+1"},
		{"huge key-group range", changelogBody(func(e *binfmt.Encbuf) { cl(e, 32000, 32000) }), "key-group range 32000+32000"},
		{"huge materialized count", changelogBody(func(e *binfmt.Encbuf) { cl(e, 0, 1); e.PutI32(0x7fffffff) }), "materialized keyed handle count"},
		{"huge change log count", changelogBody(func(e *binfmt.Encbuf) { cl(e, 0, 1); e.PutI32(0); e.PutI32(1 << 23) }), "state change log handle count"},
		{"plain handle among change logs", changelogBody(func(e *binfmt.Encbuf) {
			cl(e, 0, 1)
			e.PutI32(0)
			e.PutI32(1)
			e.PutU8(TagKeyGroups)
			e.PutI32(0)
			e.PutI32(0)
			e.PutU8(TagNull)
			e.PutI64(0)
			e.PutI64(0)
			e.PutU16(0)
		}), "keyed handle tag 3 among the state change logs"},
		{"huge change count", changelogBody(func(e *binfmt.Encbuf) {
			e.PutU8(TagChangelogByteIncrement)
			e.PutI32(0)
			e.PutI32(1)
			e.PutI64(0)
			e.PutI64(0)
			e.PutI32(1 << 22)
		}), "state change count"},
		{"huge change length", changelogBody(func(e *binfmt.Encbuf) {
			e.PutU8(TagChangelogByteIncrement)
			e.PutI32(0)
			e.PutI32(1)
			e.PutI64(0)
			e.PutI64(0)
			e.PutI32(1)
			e.PutI32(2)
			e.PutI32(0x7fffff00)
		}), "state change bytes count"},
		{"negative change length", changelogBody(func(e *binfmt.Encbuf) {
			e.PutU8(TagChangelogByteIncrement)
			e.PutI32(0)
			e.PutI32(1)
			e.PutI64(0)
			e.PutI64(0)
			e.PutI32(1)
			e.PutI32(2)
			e.PutI32(-3)
		}), "state change bytes count -3"},
		{"huge stream count", changelogBody(func(e *binfmt.Encbuf) {
			e.PutU8(TagChangelogFileIncrementV2)
			e.PutI32(0)
			e.PutI32(1)
			e.PutI32(1 << 24)
		}), "state change stream count"},
		{"bad stream tag", changelogBody(func(e *binfmt.Encbuf) {
			e.PutU8(TagChangelogFileIncrement)
			e.PutI32(0)
			e.PutI32(1)
			e.PutI32(1)
			e.PutI64(0)
			e.PutU8(99)
			e.PutBytes(make([]byte, 40))
		}), "unknown stream state handle tag 99"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMetadata(tc.b, "hostile/_metadata")
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "hostile/_metadata") || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error %q, want %q with file and offset", err, tc.want)
			}
		})
	}
}

// TestTruncatedV2AndChangelog cuts both real files at every offset: each
// prefix fails with an error naming the file and an offset, except cuts
// inside the V4 trailer of the changelog file, which parse with a shorter
// trailer (its decoding then fails); a cut that drops the whole trailer
// fails.
func TestTruncatedV2AndChangelog(t *testing.T) {
	for _, name := range []string{fixtureV2, fixtureChangelog} {
		raw := readMoreFixture(t, name)
		md, err := ParseMetadata(raw, name)
		if err != nil {
			t.Fatal(err)
		}
		body := len(raw) - len(md.Trailer)
		for n := 0; n < len(raw); n++ {
			_, err := ParseMetadata(raw[:n], name)
			if n > body {
				if err != nil {
					t.Fatalf("%s: cut at %d in the trailer: %v", name, n, err)
				}
				continue
			}
			if err == nil {
				t.Fatalf("%s: prefix of %d bytes (body %d) parsed", name, n, body)
			}
			if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("%s: cut at %d: error %q names no file/offset", name, n, err)
			}
		}
	}
}

// FuzzMetadataV2Changelog parses arbitrary bytes seeded with the V2 and
// changelog fixtures and generated files; whatever parses re-encodes to the
// same bytes.
func FuzzMetadataV2Changelog(f *testing.F) {
	if d := fixtures.Dir(); d != "" {
		for _, name := range []string{fixtureV2, fixtureChangelog} {
			if b, err := os.ReadFile(filepath.Join(d, "..", "flink-fixtures-more", name, "savepoint", "_metadata")); err == nil {
				f.Add(b)
			}
		}
	}
	for _, md := range []*Metadata{genV2Metadata(), genChangelogMetadata()} {
		if b, err := EncodeMetadata(md); err == nil {
			f.Add(b)
		}
	}
	md := genChangelogMetadata()
	md.Version = 2
	if b, err := EncodeMetadata(md); err == nil {
		f.Add(b)
	}
	st, err := s3.NewLocal(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := ParseMetadata(b, "fuzz")
		if err != nil {
			if !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error without offset: %v", err)
			}
			return
		}
		for _, op := range md.Operators {
			_ = ReadableSubtasks(op)
		}
		_ = Summarize(&Savepoint{Meta: md, Store: st, MetadataKey: MetadataName})
		out, err := EncodeMetadata(md)
		if err != nil {
			if md.Version >= 4 && len(md.Trailer) == 0 {
				return
			}
			t.Fatalf("encode of parsed metadata failed: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatal("re-encoding differs")
		}
	})
}

// TestMetadataV2FixtureSummary opens the V2 savepoint: no trailer, so the
// format is inferred from the probed keyed blocks (the heap backend's
// layout of Flink 1.9), and check finds nothing wrong.
func TestMetadataV2FixtureSummary(t *testing.T) {
	sp, err := Open(t.Context(), mustLocal(t, moreFixtureDir(t, fixtureV2)), MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Props != nil || sp.PropsErr != nil || sp.FormatType() != "" {
		t.Fatalf("properties %+v / %v", sp.Props, sp.PropsErr)
	}
	s := Summarize(sp)
	if s.MetadataVersion != 2 || s.CheckpointID != 21 || s.Files != 0 || s.InlineBytes == 0 || s.InlineBytes != s.TotalBytes {
		t.Errorf("summary %+v", s)
	}
	if err := ScanSummary(t.Context(), sp, s, ScanOptions{}); err != nil {
		t.Fatal(err)
	}
	if s.FormatType != FormatNative || !s.FormatInferred {
		t.Errorf("format %q inferred %v", s.FormatType, s.FormatInferred)
	}
	keyed := 0
	for _, os := range s.Operators {
		if os.Changelog != nil {
			t.Errorf("operator %s: changelog summary", os.ID)
		}
		if os.KeyedLayout == "" {
			continue
		}
		keyed++
		if os.KeyedLayout != LayoutNativeHeap || len(os.KeyedTags) != 1 || os.KeyedTags[0] != TagKeyGroups || len(os.KeyedStates) == 0 {
			t.Errorf("operator %s: layout %q tags %v, %d states", os.ID, os.KeyedLayout, os.KeyedTags, len(os.KeyedStates))
		}
	}
	if keyed != 4 {
		t.Errorf("%d keyed operators, want 4", keyed)
	}
	probs, _ := Check(t.Context(), sp, CheckOptions{})
	for _, p := range probs {
		t.Errorf("check: %v", p)
	}
}
