// Package recordstore keeps the state of streaming inner joins on the
// engine's backends (RocksDB or heap), in one of two layouts with the same
// logical content: for every (join key, side) the multiset of rows with
// their counts, association counts and last-write timestamps.
//
// # Record layout (inner joins, mini-batching off)
//
// One stored entry per distinct row, in the engine state RecordStateName:
//
//	key:   kg | side | uvarint(len k) | k | row
//	value: ts (8 B BE) | count (8 B BE, > 0) | assoc (8 B BE, >= 0)
//
// kg is the Flink key group of the equality key k (a BinaryRowData,
// keygroups.HashRow), big-endian in Flink's width (1 byte up to max
// parallelism 128, else 2); side is 0 (left) or 1 (right); row is the row
// payload in the engine's compact row encoding (rowcodec) without its TTL
// prefix, running to the end of the key. The value starts with the engine's
// 8-byte TTL prefix, so its compaction filter expires records one by one.
// The association count is reserved for outer joins and is 0 here.
//
// A bundle reads the count of every input row with one batched point
// lookup (an absent entry says only that this row is absent, nothing about
// its key), iterates the opposite side's records of the key with a prefix
// iterator, and writes only the records whose count changed (put, or
// delete at zero) — never the whole multiset.
//
// Opposite-side reuse: a group read from the store is kept for the rest of
// the bundle when its bytes can be charged to the slot's shared pool
// (engine.Pool; Options.CacheAllowance is a test-only cap). A group that
// cannot get a reservation is read lazily and its output leaves in bounded
// chunks; a refused reservation first asks the join driver to drain its
// pending output (releasing that output's reservation) and retries the same
// record once. Expired records are skipped on their 8-byte timestamp before
// anything is copied. Every reservation is released at Commit or Abort.
// Begin counts, from the probes, how often the bundle will visit each
// group: a group visited once is streamed without being cached (copying
// it would buy nothing), and a cached group's reservation goes back to the
// pool right after its last planned visit. Visits nobody probed for keep
// their groups cached. Commit writes the changed records in key order.
//
// # Bucket layout (legacy)
//
// One entry per (kg, side, k) in the engine state BucketStateName, keyed
// by the record layout's group prefix, holding the whole multiset:
//
//	ts (8 B BE, newest row timestamp) | version 0x01 | uvarint n |
//	n × ( uvarint len | row | uvarint count | uvarint assoc | ts (8 B BE) )
//
// rows strictly ascending by payload bytes, counts positive. See
// DecodeBucketValue, which migration uses. A bundle hydrates both sides'
// buckets of every probed key with one batched read and rewrites every
// touched bucket whole. Outer, semi and anti joins and mini-batched joins
// keep this layout: they need the association counts of the whole
// multiset, or process whole keys at once, which the record layout's
// per-row entries do not make cheaper.
//
// # Logical content and checks
//
// JoinState.Logical visits both layouts' live content in key-group order,
// then side, then key, rows by payload bytes; canonical savepoints,
// migration and verification build on it. JoinState.Check validates every
// entry (decodable key and value, key group equal to the key's hash and
// inside the subtask's range, row payloads if a validator is given) and
// returns every problem found.
//
// # Cost of the record layout on unique keys
//
// A straightforward port is about 2x slower than the bucket layout when
// every key is new. Measured here, the gap came from the group iteration,
// not from the row format: engine.Backend.Scan opens a RocksDB iterator
// (and read options) per call, i.e. per probed key; with that, the unique
// shape cost about 30–40% more CPU and twice the wall time. The record
// layout therefore keeps one iterator per bundle (nothing is written before
// Commit, so it sees a consistent state) and only seeks it per group, with
// engine.PrefixCursor: one cgo call seeks and copies a batch of the group's
// entries, instead of four calls per entry. It also does no prefill scan:
// a group is iterated on its first visit, and that single pass both emits
// output and fills the cache; empty groups visited again are cached too,
// so repeated misses on one key cost one seek per bundle. When
// a side's rows are declared unique (Options.UniqueRows, the planner's
// unique-key input spec) the bundle knows an insert is new and skips the
// own-row point read altogether: an insert writes count 1, a retraction a
// delete. What remains per new row is one seek and one write, against the
// bucket layout's two point reads and one write.
//
// Once the records spill from the memtables into SSTs, that seek dominates
// the record layout's CPU on unique keys (profiled with
// BenchmarkJoinUnique: the largest share of the process CPU, the batch write
// about a quarter): without a filter it positions in every L0 file, while the
// bucket layout's point reads skip files on the whole-key bloom filter.
// The record layout therefore installs, by default, a prefix extractor on
// its column family (engine.RecordPrefixExtractor, a mutable RocksDB option,
// so the engine's own options stay as they are) whose prefix of a record
// key is exactly its group prefix kg | side | uvarint len | k; the engine's
// bloom filters then also hold group prefixes, which a group seek checks
// per SST file, and a memtable prefix bloom does the same for the
// memtables. Keys without a complete group prefix (key-group bounds) are
// outside the extractor's domain, so range scans by key group and full
// scans (checkpoints, canonical export, migration, verification) stay
// total-order. Neither option is persisted with the data: SST files
// written without the extractor are read without prefix filtering, and
// files written with it read back the same in a process that does not set
// it. Options.NoPrefixBloom turns it off (`sfstate bench join
// --prefix-bloom=false`). Bounding the bundle iterator per group
// (iterate_upper_bound) does not help: every seek either lands in its
// group or stops at the first key past it.
//
// `sfstate bench join` measures both layouts and the reuse policies.
//
// The pure formats (format.go) build without cgo; the states and the join
// driver need the engine and hence cgo.
package recordstore
