// Package verify proves that a savepoint restores without loss: it checks
// the savepoint's structure, computes a logical digest of its keyed state
// per operator, state and key group, restores it into state backends at
// chosen parallelisms (through a Restorer; package verify/restore uses the
// engine), digests what each backend returns after a canonical re-export,
// and compares. An operator whose max parallelism is below a target's
// parallelism (a global operator has 1) is restored at its max
// parallelism, and the target's result names it (RestoredParallelism); a
// savepoint without keyed state has nothing to restore (Skipped). Keyed
// state a Restorer cannot restore (state only in a changelog handle's
// change log; a state whose serializer snapshot could not be read and that
// the engine cannot hold) is listed in SkippedStates and left out of the
// comparison on both sides; when that is all of it, the target and the
// report are Unsupported: valid input of which nothing was verified.
//
// A group digest holds the number of entries, the sum of multiset counts
// (the Integer values of MapState<RowData, Integer> join records) and of
// outer-join association counts (Tuple2 values whose second field is an
// Integer), the number, minimum, maximum and an order-independent hash of
// the TTL last-access timestamps, and an order-independent hash of every
// entry's decoded (key, namespace, user key, value, TTL timestamp). Hashes
// are sums of SHA-256 prefixes in two 64-bit lanes, so entry order, file
// split, parallelism and byte-level encoding do not matter and duplicates do
// not cancel. A difference names the operator, state and key group and the
// first field that differs, and shows the first differing entries decoded
// side by side. The digest model (Digest, Group, the entry hash, its JSON
// form) is package savepoint/digest's; verify names its types for its
// reports.
//
// With a TTL and a time (TTLCheck), the source is also digested as Flink
// would return it at that time (an entry is expired when lastAccess + ttl
// <= now); restored backends must return exactly those entries, and the
// report counts the expired ones.
//
// Work can be split into shards (Shard: contiguous key-group ranges of every
// operator, a function of the max parallelism only); each shard's report is
// a digest file, and Merge combines them into the final verdict.
//
// Flink's native RocksDB snapshots (keyed handles of tag 5/11) are read
// through package convert: the entries its single read of each RocksDB
// instance decodes are digested as the source, and the canonical savepoint
// it writes into a scratch directory (removed when Run returns) is what the
// targets restore from and what samples decode; the report notes it
// (NoteNativeSource). Reading RocksDB needs cgo: without it such a source
// fails with ErrUnreadable and savepoint.ErrNativeLayout.
//
// Native checkpoints of the engine are digested from their stored bytes
// (RawEntry, AddRaw) by package verify/restore, which also digests join
// state from its logical content so that its two layouts compare equal;
// BuildReport compares such digests.
//
// Reports render as a table, JSON (every digest) or JUnit XML (one test
// case per operator and state for each target). The package is pure Go
// (convert links RocksDB only in cgo builds).
package verify
