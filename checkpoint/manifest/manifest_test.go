package manifest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/s3"
)

func TestManifestRejectsHostileInput(t *testing.T) {
	good := &Manifest{Format: Format, Version: 1, CheckpointID: 3, MaxParallelism: 128,
		States: []StateInfo{{Name: "s", Kind: "value"}},
		Subtasks: []Subtask{{Index: 0, StartKeyGroup: 0, EndKeyGroup: 127,
			Shared:  []SSTEntry{{Object: Object{Name: "000009.sst", Key: "shared/x-000009.sst", Size: 10}, FirstKeyGroup: 0, LastKeyGroup: 5}},
			Private: []Object{{Name: "CURRENT", Key: "chk-3/task-0/CURRENT", Size: 16}}}}}
	b, _ := Encode(good)
	if _, err := Decode(b, "m", 3); err != nil {
		t.Fatalf("good manifest refused: %v", err)
	}
	for name, mutate := range map[string]func(m *Manifest){
		"format":      func(m *Manifest) { m.Format = "other" },
		"version":     func(m *Manifest) { m.Version = 99 },
		"id":          func(m *Manifest) { m.CheckpointID = 4 },
		"traversal":   func(m *Manifest) { m.Subtasks[0].Private[0].Name = "../CURRENT" },
		"key":         func(m *Manifest) { m.Subtasks[0].Shared[0].Key = "shared/../../etc" },
		"private-out": func(m *Manifest) { m.Subtasks[0].Private[0].Key = "chk-2/task-0/CURRENT" },
		"shared-out":  func(m *Manifest) { m.Subtasks[0].Shared[0].Key = "chk-3/x.sst" },
		"range":       func(m *Manifest) { m.Subtasks[0].EndKeyGroup = 128 },
		"negative":    func(m *Manifest) { m.Subtasks[0].Shared[0].Size = -1 },
		"kg":          func(m *Manifest) { m.Subtasks[0].Shared[0].LastKeyGroup = -3 },
		"maxpar":      func(m *Manifest) { m.MaxParallelism = 0 },
		"dup-subtask": func(m *Manifest) { m.Subtasks = append(m.Subtasks, m.Subtasks[0]) },
		"not-sst":     func(m *Manifest) { m.Subtasks[0].Shared[0].Name = "MANIFEST-000001" },
		"no-states":   func(m *Manifest) { m.States = nil },
	} {
		var m Manifest
		_ = decodeJSONCopy(good, &m)
		mutate(&m)
		b, _ := Encode(&m)
		_, err := Decode(b, "m", 3)
		if err == nil {
			t.Errorf("%s: hostile manifest accepted", name)
			continue
		}
		checkManifestErr(t, name, err, name == "version", -1)
	}
	for _, b := range [][]byte{nil, []byte("{"), []byte(`{"format":1}`), b[:len(b)/2]} {
		_, err := Decode(b, "m", 3)
		if err == nil || !strings.Contains(err.Error(), "m:") {
			t.Errorf("truncated manifest %q: %v", b, err)
			continue
		}
		checkManifestErr(t, fmt.Sprintf("truncated manifest %q", b), err, false, 0)
	}
}

// checkManifestErr asserts a manifest error's class (unsupported or
// corrupt) and that its position names the manifest "m", at an offset
// (minOff 0) or an unknown one (minOff -1).
func checkManifestErr(t *testing.T, what string, err error, unsupported bool, minOff int64) {
	t.Helper()
	if got := errors.Is(err, errclass.ErrUnsupported); got != unsupported {
		t.Errorf("%s: unsupported %v, want %v: %v", what, got, unsupported, err)
	}
	if got := errors.Is(err, errclass.ErrCorrupt); got == unsupported {
		t.Errorf("%s: corrupt %v, want %v: %v", what, got, !unsupported, err)
	}
	if errors.Is(err, s3.ErrBadKey) {
		t.Errorf("%s: a damaged manifest reads as a bad command-line key: %v", what, err)
	}
	file, off := errclass.Position(err)
	if file != "m" || off < minOff || minOff < 0 && off != -1 {
		t.Errorf("%s: position %q at %d: %v", what, file, off, err)
	}
}

func decodeJSONCopy(src *Manifest, dst *Manifest) error {
	b, err := Encode(src)
	if err != nil {
		return err
	}
	m, err := Decode(b, "copy", src.CheckpointID)
	if err != nil {
		return err
	}
	*dst = *m
	return nil
}

// FuzzDecode: any bytes decode to a manifest that passed validation or to
// a classed error naming the manifest, never a panic.
func FuzzDecode(f *testing.F) {
	good := &Manifest{Format: Format, Version: 1, CheckpointID: 3, MaxParallelism: 128,
		States: []StateInfo{{Name: "s", Kind: "value"}},
		Subtasks: []Subtask{{Index: 0, StartKeyGroup: 0, EndKeyGroup: 127,
			Shared:  []SSTEntry{{Object: Object{Name: "000009.sst", Key: "shared/x-000009.sst", Size: 10}, FirstKeyGroup: 0, LastKeyGroup: 5}},
			Private: []Object{{Name: "CURRENT", Key: "chk-3/task-0/CURRENT", Size: 16}}}}}
	b, err := Encode(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"format":"other"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, "m", 3)
		if err != nil {
			if !errors.Is(err, errclass.ErrCorrupt) && !errors.Is(err, errclass.ErrUnsupported) {
				t.Fatalf("unclassed error: %v", err)
			}
			if file, _ := errclass.Position(err); file != "m" {
				t.Fatalf("error names %q: %v", file, err)
			}
			return
		}
		for _, s := range m.Subtasks {
			if s.StartKeyGroup < 0 || s.EndKeyGroup >= m.MaxParallelism {
				t.Fatalf("accepted subtask range [%d, %d] of max parallelism %d", s.StartKeyGroup, s.EndKeyGroup, m.MaxParallelism)
			}
		}
	})
}
