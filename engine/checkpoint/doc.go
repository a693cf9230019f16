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
// the previous checkpoint. The upload runs in the background
// (Pending.Wait; TakeSync waits):
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
//     objects are deleted.
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
// serializers (ByteArrayStateMeta) unless Options.StateMeta describes the
// real types. The data is the engine's key layout (see package engine),
// so Flink itself cannot restore these checkpoints; sfstate can.
//
// # Manifest
//
// chk-<id>/manifest.json (format "sfstate-native-checkpoint", version 1)
// records the states and, per subtask, its key-group range and every file:
// local name, object key, size and CRC-32C; for SST files also column
// family, level, smallest/largest user key, the key groups of those keys,
// sequence numbers and entry counts, and whether this checkpoint uploaded
// it. Readers refuse other formats, newer versions, hostile names or keys
// and out-of-range values.
//
// # Restore
//
// Restore(store, id, range, dir) rebuilds the key groups of range into a
// new backend. As Flink does, the old subtask with the largest overlap is
// the base and the others (scale-in) are copied key by key. For each old
// subtask only the SST files whose key groups overlap the range are
// downloaded when RocksDB can import them as one LSM (no two files of a
// level overlap); otherwise every file of the subtask is downloaded and
// its checkpoint MANIFEST is used. Keys outside the range are then removed
// with DeleteRange. Downloads are parallel (RestoreOptions.Parallel),
// verify size and CRC-32C (a mismatch is an ErrCorrupt error naming the
// object), and a failed restore removes dir.
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
package checkpoint
