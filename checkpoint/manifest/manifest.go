// Package manifest is the format of an engine native checkpoint's
// manifest: chk-<id>/manifest.json beside the checkpoint's `_metadata`,
// sfstate's own record of which RocksDB files (shared SST files under
// shared/, private files under chk-<id>/) make up each subtask's state,
// with sizes, CRC-32C and key-group ranges, and which states the engine
// declared. Package checkpoint writes and restores checkpoints; the native
// snapshot reader (savepoint/native) and the rescale planner read the
// manifest through this package too, so every reader applies the same
// validation.
//
// The manifest is JSON (Manifest, field names as tagged). Readers refuse
// another format, a newer version, a checkpoint id other than the one
// asked for, out-of-range parallelism or key groups, overlapping
// subtasks, hostile or repeated file names, keys outside shared/ (SST
// files) or chk-<id>/ (private files) and sizes beyond 1 TiB; Read's
// errors are *errclass.CorruptionError naming the manifest.
package manifest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/s3"
)

// Manifest format identification. The manifest is sfstate's own record of
// a native checkpoint, written beside `_metadata`; readers refuse other
// formats and newer versions.
const (
	Format  = "sfstate-native-checkpoint"
	Version = 1
	// Name is the manifest's name inside chk-<id>/.
	Name = "manifest.json"
	// maxManifestSize bounds the manifest read into memory.
	maxManifestSize = 256 << 20
	// MaxSubtasks bounds the subtasks of a checkpoint.
	MaxSubtasks = 1 << 15
	maxFiles    = 1 << 22
)

// Manifest describes one native checkpoint.
type Manifest struct {
	Format         string      `json:"format"`
	Version        int         `json:"version"`
	CheckpointID   int64       `json:"checkpointId"`
	MaxParallelism int         `json:"maxParallelism"`
	States         []StateInfo `json:"states"`
	Subtasks       []Subtask   `json:"subtasks"`
	// BytesUploaded is what this checkpoint uploaded (new SST files and
	// private files); BytesReferenced the SST bytes it reuses from earlier
	// checkpoints.
	BytesUploaded   int64 `json:"bytesUploaded"`
	BytesReferenced int64 `json:"bytesReferenced"`
}

// StateInfo is one declared state.
type StateInfo struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	TTLMillis int64  `json:"ttlMillis,omitempty"`
}

// Subtask is one subtask's RocksDB checkpoint.
type Subtask struct {
	Index int `json:"index"`
	// BackendID names the RocksDB instance (a UUID per opened backend);
	// shared file names start with it.
	BackendID string `json:"backendId"`
	// StartKeyGroup and EndKeyGroup are the subtask's inclusive range.
	StartKeyGroup int        `json:"startKeyGroup"`
	EndKeyGroup   int        `json:"endKeyGroup"`
	Shared        []SSTEntry `json:"shared"`
	Private       []Object   `json:"private"`
}

// Object is one stored file: its local name inside the RocksDB directory,
// its object key, size and CRC-32C.
type Object struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	Size int64  `json:"size"`
	CRC  uint32 `json:"crc32c"`
}

// SSTEntry is one shared SST file with what a restore needs to select it.
type SSTEntry struct {
	Object
	ColumnFamily string `json:"columnFamily"`
	Level        int    `json:"level"`
	// Smallest / Largest user keys (base64 in JSON).
	Smallest []byte `json:"smallest"`
	Largest  []byte `json:"largest"`
	// FirstKeyGroup and LastKeyGroup: the key groups of Smallest and
	// Largest, the range of key groups the file may hold.
	FirstKeyGroup int    `json:"firstKeyGroup"`
	LastKeyGroup  int    `json:"lastKeyGroup"`
	SmallestSeqno uint64 `json:"smallestSeqno"`
	LargestSeqno  uint64 `json:"largestSeqno"`
	Entries       uint64 `json:"entries"`
	Deletions     uint64 `json:"deletions"`
	// Uploaded is true when this checkpoint uploaded the file (false:
	// reused from an earlier one).
	Uploaded bool `json:"uploaded"`
}

// Overlaps reports whether the file may hold keys of key groups [start, end].
func (e SSTEntry) Overlaps(start, end int) bool {
	return e.FirstKeyGroup <= end && e.LastKeyGroup >= start
}

// Dir is the key prefix of checkpoint id: "chk-<id>".
func Dir(id int64) string { return "chk-" + strconv.FormatInt(id, 10) }

// MetadataKey is the key of checkpoint id's `_metadata`.
func MetadataKey(id int64) string { return Dir(id) + "/" + s3.MetadataName }

// Key is the key of checkpoint id's manifest.
func Key(id int64) string { return Dir(id) + "/" + Name }

// SharedPrefix holds the shared SST objects.
const SharedPrefix = "shared/"

// ErrForeign marks a manifest.json of another format (some other tool's
// file beside a `_metadata`, not an engine checkpoint's).
var ErrForeign = errors.New("not a native checkpoint manifest")

// Encode is the manifest as written.
func Encode(m *Manifest) ([]byte, error) {
	return json.MarshalIndent(m, "", " ")
}

// Read reads and validates checkpoint id's manifest from the store root
// st (chk-<id>/manifest.json).
func Read(ctx context.Context, st s3.Storage, id int64) (*Manifest, error) {
	return ReadKey(ctx, st, Key(id), id)
}

// ReadKey reads and validates the manifest of checkpoint id at key of st
// (a manifest found beside a `_metadata` opened by path).
func ReadKey(ctx context.Context, st s3.Storage, key string, id int64) (*Manifest, error) {
	name := strings.TrimSuffix(st.String(), "/") + "/" + key
	rc, err := st.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", name, err)
	}
	if len(b) > maxManifestSize {
		return nil, fmt.Errorf("checkpoint: %w", errclass.Corruptf(name, -1, "manifest exceeds %d bytes", maxManifestSize))
	}
	return Decode(b, name, id)
}

// Decode decodes and validates a manifest of checkpoint id read from name. Its
// errors are *errclass.CorruptionError of name: class errclass.ErrCorrupt
// (at the offset of a JSON error, at an unknown one for a manifest that
// decodes but breaks a rule), errclass.ErrUnsupported for a newer version.
func Decode(b []byte, name string, id int64) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		off := dec.InputOffset()
		if se, ok := err.(*json.SyntaxError); ok {
			off = se.Offset
		}
		// "checkpoint: NAME: invalid manifest: at offset N: json error"
		cause := errclass.AtOffset(errclass.Mark(errclass.ErrCorrupt, err), off)
		return nil, fmt.Errorf("checkpoint: %w", &errclass.CorruptionError{File: name, Offset: off, Err: fmt.Errorf("invalid manifest: %w", cause)})
	}
	if err := m.validate(id); err != nil {
		// A CorruptionError is of class ErrCorrupt unless its cause is
		// unsupported (a newer manifest version).
		return nil, fmt.Errorf("checkpoint: %w", &errclass.CorruptionError{File: name, Offset: -1, Err: err})
	}
	return &m, nil
}

func (m *Manifest) validate(id int64) error {
	if m.Format != Format {
		return fmt.Errorf("%w (format %q)", ErrForeign, m.Format)
	}
	if m.Version < 1 {
		return fmt.Errorf("manifest version %d invalid", m.Version)
	}
	if m.Version > Version {
		return errclass.Mark(errclass.ErrUnsupported, fmt.Errorf("manifest version %d not supported (max %d)", m.Version, Version))
	}
	if m.CheckpointID != id {
		return fmt.Errorf("manifest is for checkpoint %d, not %d", m.CheckpointID, id)
	}
	if m.MaxParallelism < 1 || m.MaxParallelism > 1<<15 {
		return fmt.Errorf("max parallelism %d out of range", m.MaxParallelism)
	}
	if len(m.States) == 0 || len(m.States) > 1<<15 {
		return fmt.Errorf("%d states", len(m.States))
	}
	if len(m.Subtasks) > MaxSubtasks {
		return fmt.Errorf("%d subtasks", len(m.Subtasks))
	}
	seen := map[int]bool{}
	files := 0
	for i, s := range m.Subtasks {
		if s.StartKeyGroup < 0 || s.EndKeyGroup < s.StartKeyGroup || s.EndKeyGroup >= m.MaxParallelism {
			return fmt.Errorf("subtask %d: key-group range [%d, %d] invalid", s.Index, s.StartKeyGroup, s.EndKeyGroup)
		}
		if s.Index < 0 || seen[s.Index] {
			return fmt.Errorf("subtask entry %d: index %d invalid or repeated", i, s.Index)
		}
		seen[s.Index] = true
		for _, o := range m.Subtasks[:i] {
			if s.StartKeyGroup <= o.EndKeyGroup && o.StartKeyGroup <= s.EndKeyGroup {
				return fmt.Errorf("subtasks %d and %d have overlapping key-group ranges", o.Index, s.Index)
			}
		}
		files += len(s.Shared) + len(s.Private)
		if files > maxFiles {
			return fmt.Errorf("more than %d files", maxFiles)
		}
		names := map[string]bool{}
		check := func(o Object, shared bool) error {
			if o.Name == "" || o.Name != path.Base(o.Name) || o.Name == "." || o.Name == ".." || strings.ContainsAny(o.Name, "\\\x00") {
				return fmt.Errorf("subtask %d: hostile file name %q", s.Index, o.Name)
			}
			if names[o.Name] {
				return fmt.Errorf("subtask %d: file %q listed twice", s.Index, o.Name)
			}
			names[o.Name] = true
			if err := s3.ValidateKey(o.Key); err != nil {
				// %v: a bad key here is damaged input, not the
				// command line's s3.ErrBadKey.
				return fmt.Errorf("subtask %d: file %q: %v", s.Index, o.Name, err)
			}
			if shared && !strings.HasPrefix(o.Key, SharedPrefix) {
				return fmt.Errorf("subtask %d: shared file %q at %q outside %s", s.Index, o.Name, o.Key, SharedPrefix)
			}
			if !shared && !strings.HasPrefix(o.Key, Dir(m.CheckpointID)+"/") {
				return fmt.Errorf("subtask %d: private file %q at %q outside %s/", s.Index, o.Name, o.Key, Dir(m.CheckpointID))
			}
			if o.Size < 0 || o.Size > 1<<40 {
				return fmt.Errorf("subtask %d: file %q has size %d", s.Index, o.Name, o.Size)
			}
			return nil
		}
		for _, f := range s.Shared {
			if err := check(f.Object, true); err != nil {
				return err
			}
			if !strings.HasSuffix(f.Name, ".sst") {
				return fmt.Errorf("subtask %d: shared file %q is not an SST file", s.Index, f.Name)
			}
			if f.FirstKeyGroup < 0 || f.LastKeyGroup < f.FirstKeyGroup || f.Level < 0 || f.Level > 64 {
				return fmt.Errorf("subtask %d: SST %q: key groups [%d, %d], level %d invalid", s.Index, f.Name, f.FirstKeyGroup, f.LastKeyGroup, f.Level)
			}
		}
		for _, f := range s.Private {
			if err := check(f, false); err != nil {
				return err
			}
		}
	}
	return nil
}
