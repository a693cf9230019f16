// Package demo is `sfstate demo`: the whole toolkit end to end on a
// generated job, with nothing to configure.
//
// Run drives seven steps and stops at the first failure with a StepError
// naming it:
//
//  1. a Nexmark-shaped stream (persons, auctions, bids; hot keys; a fixed
//     seed) through one keyed operator at parallelism 2 on RocksDB, key
//     groups split as Flink splits them: a group aggregate with a 24 h TTL,
//     a MIN/MAX-with-retraction multiset, a Top-1 and an inner join of
//     auctions with bids in recordstore's bucket layout. Processing time
//     spans 30 h ending at the run, so part of the TTL state has expired;
//  2. a native checkpoint (checkpoint) and a canonical savepoint
//     (canonical) of the job;
//  3. `sfstate inspect` on both, with the HTML report;
//  4. `sfstate migrate` of the checkpoint's join state to the record
//     layout, with rows, sums of counts, association counts and the hash
//     of (row, count, timestamp) per side before and after;
//  5. `sfstate rescale -p 3`, then a restore of the three new subtasks
//     through the plan (checkpoint.RestorePlanned) and a checkpoint at 3, with the
//     bytes moved next to what a full-download restore would move;
//  6. `sfstate verify` of that checkpoint into rocksdb and heap at 3 and
//     back at 2 with the TTL, against the original checkpoint, and of the
//     canonical savepoint; then `sfstate convert` of both engine
//     checkpoints (taken with the job's schema, so their join state leaves
//     as Flink's two join states) to canonical savepoints, which
//     `sfstate diff` finds equal;
//  7. `sfstate inspect` and `sfstate verify` of savepoints written by Flink
//     itself (when the fixtures are beside the repository).
//
// The commands run in-process through Config.Exec (the CLI passes its own
// Main), so the demo shows exactly what users get. Stores are a local
// directory or, with Config.S3, a loopback versitygw server.
//
// The package needs cgo (it drives the engine); without cgo it is empty.
package demo
