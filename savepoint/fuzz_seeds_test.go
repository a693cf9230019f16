package savepoint

import (
	"os"
	"testing"

	"github.com/sfstate/sfstate/internal/fuzzcorpus"
)

// writeCorpusEnv, when set to 1, makes the seed tests write their inputs
// into testdata/fuzz/ (the committed seed corpus).
const writeCorpusEnv = "SFSTATE_WRITE_FUZZ_CORPUS"

// seedMetadata returns a small generated _metadata of each version
// MinMetadataVersion..MaxMetadataVersion: one operator with inline
// operator and keyed state, the V2 legacy fields, the V4+ trailer, the
// V5+ name and uid and the V7 reference-checkpoint marker.
func seedMetadata(t *testing.T) map[int][]byte {
	trailer, err := SavepointTrailer(Properties{FormatType: "CANONICAL", Name: "Savepoint", PostCheckpointAction: "NONE"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]byte{}
	for v := MinMetadataVersion; v <= MaxMetadataVersion; v++ {
		keyedTag := byte(TagSavepointKeyGroups)
		if v == 2 {
			keyedTag = TagKeyGroups
		}
		sub := &SubtaskState{Index: 0,
			ManagedOperator: &OperatorHandle{Tag: TagPartitionableOperator, Delegate: &StreamHandle{Tag: TagByteStream, Name: "op", Data: []byte{0, 0, 0, 1}}},
			ManagedKeyed: &KeyGroupsHandle{Tag: keyedTag, StartKeyGroup: 0, Offsets: []int64{0, 4},
				Delegate: &StreamHandle{Tag: TagByteStream, Name: "kg", Data: []byte{0, 0, 0, 1, 0, 0, 0, 1}}}}
		op := &OperatorState{ID: OperatorID{byte(v), 0xfe}, Parallelism: 1, MaxParallelism: 2, Subtasks: []*SubtaskState{sub}}
		md := &Metadata{Version: v, CheckpointID: int64(v), Operators: []*OperatorState{op}}
		switch {
		case v == 2:
			op.LegacyChainLength, sub.LegacyDuration = 1, -1
		case v >= 4:
			md.Trailer = trailer
		}
		if v >= 5 {
			op.UID, op.Name = "uid-1", "Keyed Operator"
		}
		if v == 7 {
			sub.HasRefCheckpoint, sub.RefCheckpointID = true, 6
		}
		b, err := EncodeMetadata(md)
		if err != nil {
			t.Fatalf("V%d: %v", v, err)
		}
		out[v] = b
	}
	return out
}

// TestMetadataFuzzSeeds checks that every generated seed parses as its
// version and re-encodes to the same bytes; with SFSTATE_WRITE_FUZZ_CORPUS=1
// it also writes them to testdata/fuzz/FuzzParseMetadata.
func TestMetadataFuzzSeeds(t *testing.T) {
	for v, b := range seedMetadata(t) {
		md, err := ParseMetadata(b, "seed")
		if err != nil || md.Version != v {
			t.Fatalf("V%d seed: version %v, %v", v, md, err)
		}
		if _, err := md.Properties(); err != nil {
			t.Fatalf("V%d seed trailer: %v", v, err)
		}
		out, err := EncodeMetadata(md)
		if err != nil || string(out) != string(b) {
			t.Fatalf("V%d seed does not re-encode to itself: %v", v, err)
		}
		if os.Getenv(writeCorpusEnv) == "1" {
			if _, err := fuzzcorpus.Write(".", "FuzzParseMetadata", b); err != nil {
				t.Fatal(err)
			}
		}
	}
	// FuzzMetadataV2Changelog: the generated V2 file and changelog
	// checkpoint (V4 and V2 layouts).
	v2cl := genChangelogMetadata()
	v2cl.Version = 2
	for _, md := range []*Metadata{genV2Metadata(), genChangelogMetadata(), v2cl} {
		b, err := EncodeMetadata(md)
		if err != nil {
			continue // V2 cannot hold every changelog field
		}
		got, err := ParseMetadata(b, "seed")
		if err != nil || got.Version != md.Version {
			t.Fatalf("V%d changelog seed: %v", md.Version, err)
		}
		if os.Getenv(writeCorpusEnv) == "1" {
			if _, err := fuzzcorpus.Write(".", "FuzzMetadataV2Changelog", b); err != nil {
				t.Fatal(err)
			}
		}
	}
}
