// Package checkpoint takes native (RocksDB) checkpoints of the engine's
// backends into a store (s3.Storage: local directory or S3), restores them
// at the same or another parallelism, and applies retention.
//
// # Taking a checkpoint
//
// At a barrier the caller commits its bundles and calls Checkpointer.Take
// with one backend per subtask. For each backend Take flushes the
// memtables (atomically across states) and creates a RocksDB checkpoint:
// a directory of hard links to the live SST files plus copies of
// MANIFEST, CURRENT and OPTIONS. Take returns then; its cost is a memtable
// flush and one link per file, independent of how much was written since
// the previous checkpoint. The upload runs in the background, past the
// context of Take (Pending.Wait; Pending.Cancel stops it; TakeSync waits,
// and cancels the upload when its context ends):
//
//  1. every SST file not uploaded before by this Checkpointer (per
//     subtask; SST files are immutable and named uniquely per RocksDB
//     instance) is uploaded once as a shared object; files already
//     uploaded are referenced, even while their upload for an earlier
//     checkpoint is still running (the new checkpoint waits for it);
//  2. MANIFEST, CURRENT, OPTIONS (and any other non-SST file) are uploaded
//     as private files of the checkpoint;
//  3. the manifest, then `_metadata` with PutIfAbsent, after checking that
//     every object written is visible with its size (s3.CommitMetadata).
//     A checkpoint that fails anywhere has no `_metadata`, and its private
//     objects are deleted (unless `_metadata` landed although its write
//     failed on this side, or the store cannot tell: then they stay).
//
// # Layout on the store
//
//	shared/<backend-id>-<NNNNNN>.sst     SST files, shared by checkpoints
//	chk-<id>/task-<i>/MANIFEST-<n>       private files of subtask i
//	chk-<id>/task-<i>/CURRENT
//	chk-<id>/task-<i>/OPTIONS-<n>
//	chk-<id>/manifest.json               sfstate's manifest (below)
//	chk-<id>/_metadata                   Flink metadata, written last
//
// <backend-id> is a random UUID per opened backend (a Checkpointer reuses
// it while the same Backend value is passed for a subtask).
//
// # `_metadata`
//
// Flink's checkpoint metadata, version 3, one operator (Options.OperatorID,
// default DefaultOperatorID) whose subtasks each carry one
// IncrementalRemoteKeyedStateHandle (tag 11): checkpoint id, backend id,
// key-group range, checkpointed size (bytes this checkpoint uploaded for
// the subtask), the meta-state stream inline, the shared SST files as
// absolute file handles (<store>/shared/..., as Flink references its
// shared-scope files) and the private files as paths relative to
// chk-<id>/. `sfstate inspect` and package savepoint read it like a
// Flink native checkpoint. The meta-state stream is a
// KeyedBackendSerializationProxy header (flinkwrite) listing the states in
// column-family order with their kinds; serializers are Flink's byte-array
// serializers (ByteArrayStateMeta) unless Options.Schema (an
// engine.Schema: key type and per-state namespace, value and user-key
// types; see SchemaStateMeta) or Options.StateMeta describes the real
// types, which `sfstate inspect` then shows. A join-record state of package
// recordstore (one column family, two Flink states) keeps one meta info:
// byte arrays for its stored layout and, with a schema, its join
// description (Flink names, input row serializers and outer flags of both
// sides, as option entries and named serializer snapshots, versioned; the
// format is documented at engine.JoinSides.Describe), from which `sfstate
// convert` writes Flink's two join states. The data is the engine's key
// layout (see package engine), so Flink itself cannot restore these
// checkpoints; sfstate can.
//
// # Manifest
//
// chk-<id>/manifest.json (format "sfstate-native-checkpoint", version 1)
// records the states and, per subtask, its key-group range and every file:
// local name, object key, size and CRC-32C; for SST files also column
// family, level, smallest/largest user key, the key groups of those keys,
// sequence numbers and entry counts, and whether this checkpoint uploaded
// it. Readers refuse other formats, newer versions, hostile names or keys
// and out-of-range values. The format and its one reader live in package
// checkpoint/manifest, which the native snapshot reader and the rescale
// planner (below the engine) use too.
//
// # Restore
//
// Restore(store, id, range, dir) rebuilds the key groups of range into a
// new backend. When the SST files of every overlapping old subtask that
// may hold key groups of the range can be imported together as one LSM —
// no two files of different subtasks overlap, and their levels fit — they
// are downloaded and imported in one step, scale-in included: no key is
// copied. Imported files take the last levels (the oldest data the bottom
// one), so a restore of tens of key-group files puts nothing on level 0
// and never starts in a write stall. Otherwise, as Flink does, the old
// subtask with the largest overlap is the base (imported from its
// overlapping files, or whole with its checkpoint MANIFEST) and the
// others are copied key by key. Keys outside the range are then removed
// with DeleteRange; for an imported restore the clipped ranges are also
// compacted, in the background after Restore returns (Checkpointer.Take
// waits for it, WaitTidy), so that the next checkpoint has no file
// reaching into other subtasks' key groups. Every import is bounded by
// engine.ImportTimeout and the context; an abandoned import falls back to
// downloading whole subtasks (RestoreStats.ImportsAbandoned). Downloads
// are parallel (RestoreOptions.Parallel), verify size and CRC-32C (a
// mismatch is an ErrCorrupt error naming the object), and a failed
// restore removes dir.
//
// After a restore from all of a subtask's files (same parallelism, or a
// scale-out that could not import a subset), RestoreStats.Reusable lists
// the shared files the new directory holds unchanged; Checkpointer.Adopt
// lets the next checkpoints reference them instead of uploading them again
// (as Flink does after a restore).
//
// # Key-group SST files
//
// engine.OpenRocksDBKeyGroupFiles opens a backend whose compactions cut SST
// files at key-group boundaries (RocksDB's fixed-prefix SST partitioner over
// the key-group prefix); flushes still write files spanning every key
// group. A rescaled restore then fetches almost only the files of its key
// groups. The price is more, smaller files: with 128 key groups, 1 GiB of
// state became 136 files of 8.3 MiB on average instead of 18 of 63 MiB
// (`sfstate bench checkpoint`), and with a large maximum parallelism (up to
// 32768 key groups) files get correspondingly small. Measured boundary
// waste of a 2→3 rescaled restore (bytes fetched over checkpoint size):
// x1.01 with key-group files, x1.12 with default files of 1 GiB state and
// x2.00 with default files of 64 MiB state (whole handles fetched).
//
// # Retention
//
// With Options.Retain = N, after each completed checkpoint the newest N
// completed checkpoints are kept; older ones are deleted (`_metadata`
// first), leftovers of failed checkpoints are deleted, and so is every
// shared object that no retained checkpoint's manifest, no checkpoint in
// flight and no future incremental checkpoint of this Checkpointer can
// reference. Retention never runs while a checkpoint is between upload and
// publication, and deletes no shared object when a retained manifest
// cannot be read. One Checkpointer must be the only writer of its store.
//
// # Known limits
//
// Shared files are absolute handles outside chk-<id>/ (Flink's layout for
// incremental checkpoints); `sfstate check`, which refuses to read files
// outside the snapshot directory, reports them. A new Checkpointer (a new
// process) knows nothing of the uploads of an earlier one: its first
// checkpoint uploads everything unless Adopt is used after a restore.
package checkpoint
