package savepoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

// fixtureDir returns the directory holding a fixture's _metadata (SQL
// fixtures keep it in a savepoint/ subdirectory).
func fixtureDir(t testing.TB, name string) string {
	t.Helper()
	d := fixtures.Path(t, name)
	if _, err := os.Stat(filepath.Join(d, "_metadata")); err == nil {
		return d
	}
	return filepath.Join(d, "savepoint")
}

func readFixtureMetadata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir(t, name), "_metadata"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func allFixtures(t testing.TB) []string {
	t.Helper()
	d := fixtures.Require(t)
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "_") {
			continue
		}
		for _, sub := range []string{"_metadata", "savepoint/_metadata"} {
			if _, err := os.Stat(filepath.Join(d, e.Name(), sub)); err == nil {
				out = append(out, e.Name())
				break
			}
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatal("no savepoint fixtures found")
	}
	return out
}

func TestParseFixturesRoundTrip(t *testing.T) {
	for _, name := range allFixtures(t) {
		t.Run(name, func(t *testing.T) {
			raw := readFixtureMetadata(t, name)
			md, err := ParseMetadata(raw, name)
			if err != nil {
				t.Fatal(err)
			}
			if md.Version < 3 || md.Version > 4 {
				t.Fatalf("version %d", md.Version)
			}
			if md.Version == 3 && md.Trailer != nil {
				t.Fatal("V3 with trailer")
			}
			if md.Version >= 4 {
				if len(md.Trailer) < 4 || !bytes.Equal(md.Trailer[:4], []byte{0xAC, 0xED, 0, 5}) {
					t.Fatalf("trailer does not start with a Java stream header: % x", md.Trailer[:min(4, len(md.Trailer))])
				}
				props, err := md.Properties()
				if err != nil {
					t.Fatal(err)
				}
				if props.FormatType != FormatCanonical && props.FormatType != FormatNative {
					t.Fatalf("format type %q", props.FormatType)
				}
				wantNative := strings.Contains(name, "NATIVE")
				if (props.FormatType == FormatNative) != wantNative {
					t.Fatalf("format type %s for %s", props.FormatType, name)
				}
			}
			out, err := EncodeMetadata(md)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, raw) {
				i := 0
				for i < len(out) && i < len(raw) && out[i] == raw[i] {
					i++
				}
				t.Fatalf("re-encoded metadata differs at byte %d (len %d vs %d)", i, len(out), len(raw))
			}
			md2, err := ParseMetadata(out, name)
			if err != nil {
				t.Fatal(err)
			}
			md.trailerOffset, md2.trailerOffset = 0, 0
			if !reflect.DeepEqual(md, md2) {
				t.Fatal("parse(write(parse(x))) != parse(x)")
			}
		})
	}
}

// TestWriteV3FromV4 drops the trailer and writes V3, which must parse back
// to the same operators.
func TestWriteV3FromV4(t *testing.T) {
	raw := readFixtureMetadata(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	md, err := ParseMetadata(raw, "x")
	if err != nil {
		t.Fatal(err)
	}
	md.Version, md.Trailer = 3, nil
	out, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) >= len(raw) {
		t.Fatalf("V3 output %d bytes, V4 input %d", len(out), len(raw))
	}
	md2, err := ParseMetadata(out, "v3")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(md.Operators, md2.Operators) {
		t.Fatal("operators differ after V3 rewrite")
	}
	// V5 adds name/uid; V7 adds ref checkpoint markers.
	for _, v := range []int{5, 6, 7} {
		md.Version, md.Trailer = v, raw[len(raw)-745:]
		md.Operators[0].UID = "some-uid"
		md.Operators[0].Name = "Some Name ✓"
		if v == 7 {
			for _, op := range md.Operators {
				for _, st := range op.Subtasks {
					if !st.Finished {
						st.HasRefCheckpoint, st.RefCheckpointID = true, 42
						break
					}
				}
			}
		}
		out, err := EncodeMetadata(md)
		if err != nil {
			t.Fatal(err)
		}
		md3, err := ParseMetadata(out, "v")
		if err != nil {
			t.Fatalf("V%d: %v", v, err)
		}
		md3.trailerOffset, md.trailerOffset = 0, 0
		if !reflect.DeepEqual(md, md3) {
			t.Fatalf("V%d round trip differs", v)
		}
	}
}

// expectedDoc is the part of _expected/*.metadata.json that describes _metadata.
type expectedDoc struct {
	MetadataVersion      int             `json:"metadataVersion"`
	CheckpointID         int64           `json:"checkpointId"`
	MasterStates         []any           `json:"masterStates"`
	CheckpointProperties *Properties     `json:"checkpointProperties"`
	Operators            []expectedOpDoc `json:"operators"`
}

type expectedOpDoc struct {
	OperatorID       string                                `json:"operatorId"`
	Name             *string                               `json:"name"`
	UID              *string                               `json:"uid"`
	Parallelism      int32                                 `json:"parallelism"`
	MaxParallelism   int32                                 `json:"maxParallelism"`
	CoordinatorState map[string]any                        `json:"coordinatorState"`
	Subtasks         map[string]map[string]json.RawMessage `json:"subtasks"`
}

type expectedKeyed struct {
	Type              string          `json:"type"`
	Tag               int             `json:"tag"`
	KeyGroups         []int           `json:"keyGroups"`
	NonEmptyKeyGroups []int           `json:"nonEmptyKeyGroups"`
	Delegate          *expectedStream `json:"delegate"`
	CheckpointID      int64           `json:"checkpointId"`
	Private           []string        `json:"private"`
	Shared            []string        `json:"shared"`
}

type expectedStream struct {
	Type     string `json:"type"`
	Relative string `json:"relative"`
	Size     int64  `json:"size"`
	Name     string `json:"name"`
	Data     string `json:"data"`
}

type expectedOperatorHandle struct {
	OperatorStates map[string]struct {
		Mode    string  `json:"mode"`
		Offsets []int64 `json:"offsets"`
	} `json:"operatorStates"`
	Delegate *expectedStream `json:"delegate"`
}

func compareStream(h *StreamHandle, e *expectedStream) error {
	if e == nil {
		if h != nil {
			return fmt.Errorf("unexpected delegate %s", h.Describe())
		}
		return nil
	}
	if h == nil {
		return fmt.Errorf("missing delegate %+v", *e)
	}
	switch e.Type {
	case "RelativeFileStateHandle":
		if h.Tag != TagRelativeFile || h.Path != e.Relative || h.Size != e.Size {
			return fmt.Errorf("delegate %+v, want %+v", h, e)
		}
	case "ByteStreamStateHandle":
		want := fmt.Sprintf("%d inline bytes", len(h.Data))
		if h.Tag != TagByteStream || h.Name != e.Name || e.Data != want {
			return fmt.Errorf("inline delegate %s (%d bytes), want %s %q", h.Name, len(h.Data), e.Name, e.Data)
		}
	default:
		return fmt.Errorf("unknown expected delegate type %q", e.Type)
	}
	return nil
}

func TestMetadataAgreesWithExpected(t *testing.T) {
	for _, name := range allFixtures(t) {
		t.Run(name, func(t *testing.T) {
			eb, err := os.ReadFile(fixtures.Path(t, "_expected", name+".metadata.json"))
			if errors.Is(err, os.ErrNotExist) {
				t.Skip("no expected decoding")
			}
			if err != nil {
				t.Fatal(err)
			}
			var exp expectedDoc
			if err := json.Unmarshal(eb, &exp); err != nil {
				t.Fatal(err)
			}
			md, err := ParseMetadata(readFixtureMetadata(t, name), name)
			if err != nil {
				t.Fatal(err)
			}
			if md.Version != exp.MetadataVersion || md.CheckpointID != exp.CheckpointID || len(md.MasterStates) != len(exp.MasterStates) {
				t.Fatalf("header: v%d id %d masters %d; want v%d id %d masters %d", md.Version, md.CheckpointID, len(md.MasterStates), exp.MetadataVersion, exp.CheckpointID, len(exp.MasterStates))
			}
			props, err := md.Properties()
			if err != nil {
				t.Fatal(err)
			}
			if exp.CheckpointProperties != nil {
				if props == nil {
					t.Fatal("no properties")
				}
				var raw struct {
					CT struct {
						FormatType string `json:"formatType"`
						Name       string `json:"name"`
						Action     string `json:"postCheckpointAction"`
					} `json:"checkpointType"`
				}
				var whole map[string]json.RawMessage
				_ = json.Unmarshal(eb, &whole)
				_ = json.Unmarshal(whole["checkpointProperties"], &raw)
				got := *props
				want := *exp.CheckpointProperties
				want.SnapshotClass, want.FormatType, want.Name, want.PostCheckpointAction = got.SnapshotClass, raw.CT.FormatType, raw.CT.Name, raw.CT.Action
				if got != want {
					t.Errorf("properties %+v, want %+v", got, want)
				}
			} else if props != nil {
				t.Errorf("unexpected properties %+v", props)
			}
			if len(md.Operators) != len(exp.Operators) {
				t.Fatalf("%d operators, want %d", len(md.Operators), len(exp.Operators))
			}
			for i, eo := range exp.Operators {
				op := md.Operators[i]
				if op.ID.String() != eo.OperatorID || op.Parallelism != eo.Parallelism || op.MaxParallelism != eo.MaxParallelism {
					t.Errorf("operator %d: %s p%d mp%d, want %s p%d mp%d", i, op.ID, op.Parallelism, op.MaxParallelism, eo.OperatorID, eo.Parallelism, eo.MaxParallelism)
				}
				if (eo.CoordinatorState != nil) != (op.Coordinator != nil) {
					t.Errorf("operator %s: coordinator state presence differs", op.ID)
				}
				if (eo.Name == nil) != (op.Name == "") || (eo.UID == nil) != (op.UID == "") {
					t.Errorf("operator %s: name/uid presence differs", op.ID)
				}
				if len(op.Subtasks) != len(eo.Subtasks) {
					t.Errorf("operator %s: %d subtasks, want %d", op.ID, len(op.Subtasks), len(eo.Subtasks))
				}
				for idx, es := range eo.Subtasks {
					n, _ := strconv.Atoi(idx)
					st := op.Subtask(n)
					if st == nil {
						t.Errorf("operator %s: subtask %d missing", op.ID, n)
						continue
					}
					if err := compareSubtask(st, es); err != nil {
						t.Errorf("operator %s subtask %d: %v", op.ID, n, err)
					}
				}
			}
		})
	}
}

func compareSubtask(st *SubtaskState, es map[string]json.RawMessage) error {
	if raw, ok := es["managedKeyedState"]; ok {
		var ek expectedKeyed
		if err := json.Unmarshal(raw, &ek); err != nil {
			return err
		}
		if st.ManagedKeyed == nil {
			return fmt.Errorf("missing keyed handle")
		}
		if int(st.ManagedKeyed.HandleTag()) != ek.Tag {
			return fmt.Errorf("keyed tag %d, want %d", st.ManagedKeyed.HandleTag(), ek.Tag)
		}
		s, e := st.ManagedKeyed.KeyGroupRange()
		if len(ek.KeyGroups) != 2 || s != ek.KeyGroups[0] || e != ek.KeyGroups[1] {
			return fmt.Errorf("key groups [%d,%d], want %v", s, e, ek.KeyGroups)
		}
		switch h := st.ManagedKeyed.(type) {
		case *KeyGroupsHandle:
			var ne []int
			for i, o := range h.Offsets {
				if o != 0 {
					ne = append(ne, int(h.StartKeyGroup)+i)
				}
			}
			if !reflect.DeepEqual(ne, ek.NonEmptyKeyGroups) && !(len(ne) == 0 && len(ek.NonEmptyKeyGroups) == 0) {
				return fmt.Errorf("non-empty key groups %v, want %v", ne, ek.NonEmptyKeyGroups)
			}
			if err := compareStream(h.Delegate, ek.Delegate); err != nil {
				return err
			}
		case *IncrementalHandle:
			var priv, shared []string
			for _, ns := range h.Private {
				priv = append(priv, ns.Name)
			}
			for _, ns := range h.Shared {
				shared = append(shared, ns.Name)
			}
			if h.CheckpointID != ek.CheckpointID || fmt.Sprint(priv) != fmt.Sprint(ek.Private) || fmt.Sprint(shared) != fmt.Sprint(ek.Shared) {
				return fmt.Errorf("incremental handle %d %v %v, want %d %v %v", h.CheckpointID, priv, shared, ek.CheckpointID, ek.Private, ek.Shared)
			}
		}
	} else if st.ManagedKeyed != nil {
		return fmt.Errorf("unexpected keyed handle")
	}
	if raw, ok := es["managedOperatorState"]; ok {
		var eo expectedOperatorHandle
		if err := json.Unmarshal(raw, &eo); err != nil {
			return err
		}
		oh := st.ManagedOperator
		if oh == nil {
			return fmt.Errorf("missing operator handle")
		}
		if len(oh.States) != len(eo.OperatorStates) {
			return fmt.Errorf("%d operator states, want %d", len(oh.States), len(eo.OperatorStates))
		}
		for _, m := range oh.States {
			em, ok := eo.OperatorStates[m.Name]
			if !ok || em.Mode != ModeName(m.Mode) || fmt.Sprint(em.Offsets) != fmt.Sprint(m.Offsets) {
				return fmt.Errorf("operator state %q %s %v, want %+v", m.Name, ModeName(m.Mode), m.Offsets, em)
			}
		}
		if err := compareStream(oh.Delegate, eo.Delegate); err != nil {
			return err
		}
	} else if st.ManagedOperator != nil {
		return fmt.Errorf("unexpected operator handle")
	}
	return nil
}

func fixturesDirOrEmpty() string { return fixtures.Dir() }

func fixtureMetadataFiles(d string) [][]byte {
	var out [][]byte
	ms, _ := filepath.Glob(filepath.Join(d, "*", "_metadata"))
	ms2, _ := filepath.Glob(filepath.Join(d, "*", "savepoint", "_metadata"))
	for _, m := range append(ms, ms2...) {
		if b, err := os.ReadFile(m); err == nil {
			out = append(out, b)
		}
	}
	return out
}
