// Package convert turns native Flink snapshots into canonical savepoints
// that Flink restores into any state backend (sfstate convert --to
// canonical).
//
// # Sources
//
//   - Heap key-group layout (hashmap backend: NATIVE savepoints, retained
//     checkpoints, heap savepoints before Flink 1.13; key-groups handles tag
//     3/12): the savepoint package reads these entries in the canonical
//     shape (keyed.ReadOptions.Heap).
//   - Native RocksDB (Flink's incremental and full native checkpoints and
//     savepoints, tag 5/11 handles): each handle's files are downloaded into
//     a temporary directory, opened read-only with RocksDB and every column
//     family entry is decoded (package savepoint/native). Flink's RocksDB
//     layout already holds canonical keys and values (key-group prefix,
//     key, namespace, user key; LIST elements joined by ',', MAP values
//     with a null flag, TTL wrappers, timers as key-group prefix plus
//     TimerSerializer bytes), so entries are written as they are. Reading
//     RocksDB needs cgo; a build without it converts heap sources and
//     refuses RocksDB ones with ErrNoRocksDB.
//   - Canonical handles (tag 7, or canonical-layout tag 12 handles of full
//     RocksDB checkpoints) are rewritten too, so every output handle is a
//     tag-7 savepoint handle.
//
// # Output
//
// The conversion is rescale.Run in its Canonical mode, so both commands
// share one rewriter: per keyed operator, at its own parallelism and max
// parallelism, one canonical file per subtask (the keyed-state header of
// the source, byte for byte — the same serializer snapshots — then the key
// groups in ascending order, per key group the states by id, entries by
// key; written with flinkwrite.KeyedWriter) referenced by a tag-7 handle.
// Operator state, coordinator state and inline streams pass through
// unchanged; the files they live in are copied into the destination
// (absolute ones too), so the result does not depend on the source. The
// `_metadata` keeps everything else (checkpoint id, master states,
// operator ids), is at least version 4 and carries a savepoint trailer of
// format CANONICAL.
//
// The entries of one operator are gathered in memory before its files are
// written (at most rescale.MaxRewriteBytes of keys and values; a larger
// operator is refused with rescale.ErrUnsupported). Entries a RocksDB
// instance keeps outside its handle's key-group range (left over from a
// rescale until compaction; the owning subtask has its own copy) are
// skipped, and the operator's note says how many.
//
// The engine's own native checkpoints (sfstate-engine layout, recognised by
// their manifest) hold engine-encoded keys and values, not Flink's, so this
// package refuses them with rescale.ErrUnsupported: converting them means
// restoring them into the engine and exporting through package canonical,
// which sits above this layer. restore.ConvertNative (package
// verify/restore) does that, and `sfstate convert` sends such sources there.
//
// Before anything is published the logical content of every rewritten
// operator (per state: entry count, order-independent digest of the
// decoded entries, TTL timestamps included) is compared with the source.
// Data files are written first, `_metadata` last and only if absent, so a
// failed or interrupted run leaves no `_metadata` (and removes the files
// it wrote); the source is never written.
package convert

import (
	"context"
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// ErrNoRocksDB is returned for native RocksDB sources by a build without
// RocksDB (CGO_ENABLED=0).
var ErrNoRocksDB = errors.New("convert: this sfstate was built without RocksDB support (CGO_ENABLED=0); rebuild with cgo to convert native RocksDB state")

// ErrExists is returned when the destination already holds a `_metadata`.
var ErrExists = rescale.ErrExists

// Request is one conversion.
type Request struct {
	// Src is the source snapshot (savepoint.Open / Locate).
	Src *savepoint.Savepoint
	// Dst is the destination store rooted at the new savepoint directory.
	Dst s3.Storage
	// Progress, when set, is advanced by the bytes written.
	Progress rescale.Progress
	// Concurrency bounds concurrent copies (default 4).
	Concurrency int
	// TempDir is where native handles are downloaded ("" = os.TempDir()).
	TempDir string
	// OnNative, when set, is called for every native RocksDB handle before
	// its entries are read, and returns the function then called with each
	// entry the rewrite uses (in the canonical shape, decoded; valid only
	// during the call; entries outside the handle's key-group range are
	// not passed). An error it returns ends the conversion. Callers use it
	// to digest the native source in the same single read (sfstate verify).
	OnNative func(op *savepoint.OperatorState, h *rescale.NativeHandle) func(*keyed.Entry) error
}

// Result reports what Run did (rescale's report of the rewrite).
type Result = rescale.Result

// Run converts req.Src into a canonical savepoint at req.Dst.
func Run(ctx context.Context, req Request) (*Result, error) {
	if req.Src == nil || req.Dst == nil {
		return nil, errors.New("convert: source and destination are required")
	}
	for _, op := range req.Src.Meta.Operators {
		kind, err := rescale.Classify(op)
		if err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
		if kind == rescale.KindNative && dirReader == nil {
			return nil, fmt.Errorf("%w (operator %s holds native RocksDB handles)", ErrNoRocksDB, op.ID)
		}
	}
	rreq := rescale.Request{Src: req.Src, Dst: req.Dst, Native: nativeSource(req.TempDir, req.OnNative), Options: rescale.Options{
		Canonical: true, Progress: req.Progress, Concurrency: max(1, req.Concurrency),
	}}
	return rescale.Run(ctx, rreq)
}
