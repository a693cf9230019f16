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
// Checkpoint migrates a native checkpoint (package checkpoint) from
// one store to another. Per subtask (Options.Parallel at once):
//
//  1. the subtask's files are fetched and checked against the manifest's
//     size and CRC-32C (hard links from a local store, downloads else);
//  2. the bucket family is read with a read-only RocksDB, merged by key with
//     any records an online migration already wrote, converted and written
//     with RocksDB's SST writer (then ingested, files moved) or through
//     write batches (WriteMode); reads and writes cross into C once per
//     batch of about 1 MiB whose buffers are reserved from the pool, and a
//     bucket larger than the buffer is converted in place from RocksDB's
//     memory;
//  3. the output RocksDB imports the subtask's untouched SST files (hard
//     links) beside the records, and a RocksDB checkpoint of it is listed;
//  4. the record family is read back and its digest compared with the
//     source's, per side and key group (ErrMismatch on any difference);
//  5. new files are uploaded; files that are links of source files keep the
//     source's object key and are carried over by reference (hard link
//     between local stores, or Options.CopyReferenced, e.g. a server-side
//     copy inside one S3 bucket);
//  6. a journal entry chk-<id>/_migrate/task-<i>.json records the subtask.
//
// The manifest and then `_metadata` (PutIfAbsent, after every object was
// confirmed) are written last. A run killed anywhere leaves no `_metadata`;
// rerun with the same arguments, it skips journaled subtasks and produces
// the same checkpoint. The source is never written.
//
// # Online
//
// MigratingJoinState wraps a record-layout recordstore.JoinState whose
// backend still holds bucket entries: Begin converts the buckets of every
// probed key (both sides) into a private in-memory record state that
// serves the bundle's reads and writes of those groups (the conversion's
// bytes reserved from the pool until the bundle ends), and Commit writes
// the groups' records and deletes their buckets in the bundle's own atomic
// batch; an aborted or failed bundle leaves the buckets in place. A group
// whose conversion the pool refuses is deferred: it stays in the bucket
// layout, a bucket-layout state serves the bundle (visits in the record
// layout's order, its rewritten bucket in the same batch), and a later
// bundle converts it; a group is never in both layouts. Sweep finishes a
// migration between bundles (in batches within the pool; a bucket that
// does not fit waits). Its Logical merges both layouts,
// and MergedSubtask presents mixed state to canonical.Export as one record
// state (a MergedView), so a canonical savepoint taken mid-migration is
// byte for byte the one taken before it.
package migrate
