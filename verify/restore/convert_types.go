package restore

// The types of ConvertNative build without cgo too, so that callers can
// name them in files every build compiles.

import (
	"time"

	"github.com/sfstate/sfstate/errclass"
)

// ErrNoSchema is returned by ConvertNative for a checkpoint taken without
// a schema: its meta-state stream names Flink's byte-array serializers, so
// the engine's keys and values have no Flink type to be converted to. A
// join-record state described by byte arrays alone, without the join
// description of engine.JoinSides.Describe (checkpoints of sfstate before
// join descriptions existed could not have one), fails with it too. It is
// unsupported input (errclass.ErrUnsupported): the checkpoint is valid,
// its state has no Flink types to convert to.
var ErrNoSchema = errclass.New(errclass.ErrUnsupported, "the checkpoint was taken without a schema (its meta-state stream names byte-array serializers): the engine's keys and values have no Flink types to convert to; take it with checkpoint.Options.Schema")

// ConvertOptions tunes ConvertNative.
type ConvertOptions struct {
	// TempDir holds the scratch directory (restored subtasks, staged
	// streams); "" = os.TempDir().
	TempDir string
	// FlinkVersion selects the `_metadata` version as for canonical.Export
	// (default "1.20": V4 with a CANONICAL savepoint trailer).
	FlinkVersion string
	// Progress, when set, is advanced by the bytes of every stream staged.
	Progress interface{ Add(int64) }
}

// ConvertResult reports a conversion of an engine checkpoint.
type ConvertResult struct {
	Destination    string `json:"destination"`
	Checkpoint     int64  `json:"checkpoint"`
	Operator       string `json:"operator"`
	Parallelism    int    `json:"parallelism"`
	MaxParallelism int    `json:"maxParallelism"`
	// States are the states of the savepoint, in the checkpoint's order (a
	// join-record state as its two Flink join states, left then right).
	States []string `json:"states"`
	// Entries is the number of entries written, equal per state and key
	// group to the entries the restored backends hold (join-record states:
	// their rows per side) (Verified).
	Entries  int64 `json:"entries,string"`
	Verified bool  `json:"verified"`
	// Files and Inline count the keyed streams written as files and inlined
	// into `_metadata`; StreamBytes are their bytes, MetadataBytes those of
	// `_metadata`.
	Files         int   `json:"files"`
	Inline        int   `json:"inline"`
	StreamBytes   int64 `json:"streamBytes,string"`
	MetadataBytes int64 `json:"metadataBytes,string"`
	// BytesDownloaded is what the restores fetched from the checkpoint.
	BytesDownloaded int64         `json:"bytesDownloaded,string"`
	Elapsed         time.Duration `json:"elapsedNanos,string"`
}
