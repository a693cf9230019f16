// Package canonical moves engine state to and from Flink's canonical
// savepoint format (FLIP-203): the backend-independent layout every Flink
// state backend restores from.
//
// Export walks each subtask's backend key group by key group, state by
// state (one range scan per state and key group, so memory does not grow
// with state size), converts every live entry from the engine's encoding
// to Flink's logical encoding as described by engine.Schema (key rows and
// user-key rows as BinaryRowData behind RowDataSerializer's size prefix,
// value rows from the compact row codec to BinaryRowData, primitives as
// Flink's serializers write them, the last-access timestamp of TTL states as
// the TtlValue timestamp, multiset counts as Integer map values) and writes
// one keyed-state stream per subtask with savepoint/flinkwrite. Streams of
// at most 20 KiB are inlined into `_metadata` (ByteStreamStateHandle),
// larger ones are files referenced relatively (RelativeFileStateHandle), so
// the directory can be moved. `_metadata` is written last with
// PutIfAbsent, after every data file is confirmed (s3.CommitMetadata). It
// is V3, which every Flink from 1.15 to 2.x reads, or the version the named
// target release writes (MetadataVersionFor): V4 with a
// CheckpointProperties trailer for 1.16-1.20, V5 (also each operator's
// name and uid) for 2.x; V6 on request.
//
// Import restores a canonical savepoint (written by Export or by Flink,
// any state backend; tag-7 handles, or tag-3/12 handles whose layout the
// savepoint reader finds canonical, as in Flink 1.11 savepoints and RocksDB
// full checkpoints: savepoint.Savepoint.KeyedLayout; also the heap
// backend's own key-group layout of hashmap checkpoints, NATIVE hashmap
// savepoints and pre-1.13 heap savepoints, which the reader hands out as the
// same canonical entries; and the materialized handles of changelog
// handles, whose logged state changes are not applied: a changelog handle
// without materialized state is reported in ImportResult.SkippedStates)
// into new backends at any parallelism: subtask j of P
// gets Flink's key-group range, and reads from each old stream only the
// key groups of that range, by range reads at the offsets recorded in the
// handle (as Flink's StateAssignmentOperation does). Every stream header is
// read and every state is checked for a supported mapping before any
// backend is created, so an unsupported serializer fails with an error
// naming the operator, the state and the serializer, and nothing is
// written. The imported schema keeps the serializer snapshots as they were
// read, so a later export writes the same snapshots.
//
// Supported: VALUE (also AGGREGATING/REDUCING), LIST (the engine keeps one
// TTL timestamp per list, so a Flink list whose elements carry different
// timestamps is refused) and MAP states; keys that are SQL rows, Long, Int,
// String or a Tuple1 of those; void, Long, TimeWindow and GlobalWindow
// namespaces; values, elements and user values that are flat SQL rows (the
// row codec's types) or Long/Int/String, converted to the engine's
// encodings; TTL on all of them. A row's RowKind (+I, -U, +U, -D, byte 0
// of BinaryRowData) is kept in the row codec's header byte and written
// back. Values, list elements, map user keys and user values of any other
// serializer (tuples of several fields, rows with structured, nested or
// RAW fields, Boolean, Kryo, user serializers package serde cannot decode,
// ...) are carried raw, opaque to the engine: it keeps Flink's bytes under
// the kept snapshot and writes them back unchanged, NULL map values
// included (a flag byte ahead of the raw bytes). Raw elements of a
// TTL list need a fixed length (the engine takes each element's timestamp
// off); a list without TTL whose elements have no fixed length is kept as
// one engine element holding Flink's ','-joined list. Timers and other
// priority-queue states are carried as raw elements too (key-group prefix
// stripped). NULL user values of a typed (row or primitive) map fail the
// import, and so do key and namespace serializers without a typed mapping
// (up front). Headers are parsed up to the first key-group offset, so
// serializer snapshots of unknown classes are stepped over as the reader
// does (keyed.ParseHeaderWithin); such partial states import as raw bytes
// (a LIST as its whole ','-joined list, a MAP with raw user keys and
// values), or, with ImportOptions.SkipUnsupported, are skipped and listed
// when they have no mapping (an unreadable key serializer skips the
// operator).
// Non-keyed operator state is not imported (Import reports what it skipped
// in ImportResult.Skipped).
//
// # Join records
//
// Flink's regular join keeps, per input side, a MAP state
// ("left-records", "right-records") from the input row to its count, with
// a per-entry TTL; an outer side (the left of a LEFT join, the right of a
// RIGHT join, both of a FULL join; inputs without unique key) maps the row
// to Tuple2<Integer, Integer>: its count and its number of associated rows
// on the other side. A recordstore join state (engine.StateSchema.Join;
// record or bucket layout; JoinSides.LeftOuter/RightOuter name the outer
// sides) is exported as exactly these two states, read through
// recordstore's logical view, so counts, association counts and per-row
// last-write timestamps survive. Import brings them back as two plain
// states (inner sides as engine multisets, outer sides as maps with raw
// Tuple2 values) or, with ImportOptions.JoinRecords, as one recordstore
// state in the record layout, outer sides with their association counts,
// at any parallelism. In a native checkpoint of the engine the join state
// is one meta info carrying its join description (engine.JoinSides.Describe);
// SchemaOfHeader turns it back into the StateSchema with Join set, so that
// the checkpoint converts to the same two states.
//
// Rewrite copies a savepoint through the reader and the writer: each
// key-group block is decoded entry by entry (framing, key-group prefixes,
// snappy checksums) and, when the entries account for exactly its bytes,
// copied verbatim, so compressed and uncompressed streams alike come out
// byte for byte as Flink wrote them; a block with trailing bytes is written
// again from its entries. Headers are kept as read, other streams are copied,
// and the metadata is re-encoded from the parsed model.
package canonical
