// Package migrate moves streaming inner-join state from the legacy bucket
// layout (one value per join key and side holding the whole multiset) to
// the record layout (one entry per distinct row), losing nothing: every
// row, count, association count and per-row last-write timestamp survives,
// expired rows included (they keep their timestamps and expire as before).
// See package recordstore for both layouts.
//
// # Pure core
//
// ConvertBucket turns one bucket entry into its record entries, in record
// key order (bucket keys are prefix-free, so converting buckets in key order
// yields record keys in key order: an SST writer can take them directly).
// Digest summarizes join state per (side, key group): distinct rows, sum of
// counts, sum of association counts and an order-independent hash of every
// (row, count, timestamp); a source and its migration must have equal
// digests. Both build without cgo.
//
// # Engine state (cgo)
//
// MigrateBackend converts the bucket state of an engine backend into the
// record state of the same or another backend, key group by key group,
// committing in chunks whose buffered bytes are reserved from an
// engine.Pool (a key whose multiset does not fit is split over several
// batches).
//
// # Native checkpoints (cgo)
//
// Checkpoint migrates a native checkpoint (package engine/checkpoint) from
// one store to another: per subtask, the bucket state's SST files are
// fetched and read, the record entries are written with RocksDB's SST
// writer and ingested into a RocksDB directory that also imports the
// subtask's untouched SST files (hard links), the result is listed and
// uploaded; untouched files keep their object keys and are carried over by
// reference (hard link between local stores, server-side copy on one S3
// bucket). A journal under the destination records finished subtasks, so a
// killed run resumes where it stopped; `_metadata` is written last, after
// the migrated content's digest was checked against the source's.
//
// # Online
//
// MigratingJoinState wraps a record-layout recordstore.JoinState whose
// backend still holds bucket entries: the first bundle touching a key
// converts that key's buckets (both sides) and deletes them in the same
// atomic batch as the bundle's own writes.
package migrate
