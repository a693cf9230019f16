package checkpoint

import (
	"context"

	"github.com/sfstate/sfstate/checkpoint/manifest"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// The manifest of a native checkpoint (format: package manifest).
type (
	Manifest  = manifest.Manifest
	StateInfo = manifest.StateInfo
	Subtask   = manifest.Subtask
	Object    = manifest.Object
	SSTEntry  = manifest.SSTEntry
)

// Manifest identification and layout of a checkpoint directory.
const (
	ManifestFormat  = manifest.Format
	ManifestVersion = manifest.Version
	ManifestName    = manifest.Name
	SharedPrefix    = manifest.SharedPrefix
)

// Dir is the key prefix of checkpoint id: "chk-<id>".
func Dir(id int64) string { return manifest.Dir(id) }

// MetadataKey is the key of checkpoint id's `_metadata`.
func MetadataKey(id int64) string { return manifest.MetadataKey(id) }

// ManifestKey is the key of checkpoint id's manifest.
func ManifestKey(id int64) string { return manifest.Key(id) }

// ReadManifest reads and validates checkpoint id's manifest (manifest.Read).
func ReadManifest(ctx context.Context, st s3.Storage, id int64) (*Manifest, error) {
	return manifest.Read(ctx, st, id)
}

// sstFile is the engine's view of a shared SST file of the manifest.
func sstFile(e manifest.SSTEntry) engine.SSTFile {
	return engine.SSTFile{
		Name: e.Name, ColumnFamily: e.ColumnFamily, Level: e.Level, Size: e.Size,
		Smallest: e.Smallest, Largest: e.Largest,
		SmallestSeqno: e.SmallestSeqno, LargestSeqno: e.LargestSeqno,
		Entries: e.Entries, Deletions: e.Deletions,
	}
}

// KeyGroupOf reads the key-group prefix (width 1 or 2 bytes) of a stored
// key; a key shorter than the prefix (never written by the engine) maps to
// the lowest key group when low is set, else to the highest the prefix can
// hold.
func KeyGroupOf(key []byte, width int, low bool) int {
	kg, err := keygroups.ReadPrefix(key, width)
	if err == nil {
		return kg
	}
	if low {
		return 0
	}
	return 1<<(8*width) - 1
}
