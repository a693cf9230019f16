// Package engine is sfstate's keyed-state store: one RocksDB instance per
// operator subtask (grocksdb over the system librocksdb, plus a small C/C++
// shim), or an in-memory heap backend with identical semantics.
//
// # States and key layout
//
// An operator declares its states (StateDesc: name, kind, TTL). Each state
// is one column family (RocksDB) or one ordered map (heap). Every stored key
// starts with the key group, big-endian, in Flink's width: 1 byte when the
// maximum parallelism is at most 128, else 2. A key-group range is therefore
// one contiguous key range per state, which is what savepoint export,
// rescale clipping (DeleteRange) and verification iterate.
//
//	value, list:     kg | uvarint(len key) key | uvarint(len ns) ns
//	map, multiset:   kg | uvarint(len key) key | uvarint(len ns) ns | user key
//	priority queue:  kg | priority (big-endian, sign bit flipped) | element
//
// Map and multiset entries of one (key, namespace) are contiguous and
// ordered by user-key bytes. Every stored value starts with an 8-byte
// big-endian last-access timestamp (milliseconds), followed by the payload:
// opaque bytes for values and map entries (the row codec's compact rows),
// the elements for lists (see Lists), an 8-byte big-endian count for
// multisets.
//
// # TTL
//
// A state with a TTL refreshes the timestamp on create and write (Flink's
// OnCreateAndWrite); reads never return a value whose timestamp plus TTL is
// at or before the clock. A native compaction filter reads only the 8-byte
// prefix and drops expired entries; it runs on RocksOptions.Clock and is
// off when that is nil, so a backend opened by a tool with another notion of
// "now" never loses entries its operator still considers live. Pass the
// Operator's clock (SystemClock in production, a manual Clock in tests and
// tools).
//
// # Lists
//
// A list's TTL applies per element, as Flink's: lists of TTL states are
// stored per-element (bit 63 of the value prefix set; the rest of the
// prefix is the newest element's time; each element is an 8-byte
// big-endian last-access time, uvarint length, bytes), lists of other
// states whole-list (uvarint length, bytes per element). Appends need no
// read: a bundle appending to a key it has not read writes one RocksDB
// merge per key, and the native "sfstate.list" merge operator concatenates
// (the heap backend applies the same merge at commit). Reads skip expired
// elements; the native list compaction filter drops a list whose newest
// element expired and rewrites a per-element list without its expired
// elements (it sees merged values, so blind appends are filtered from the
// compaction after the one that merged them). A whole-list value in a TTL
// state, as an import writes it, reads as elements timestamped with the
// value. Outside the bundle internals every list payload (Get, Put,
// State.Get, State.MultiGet, ScanKeyGroups) is the whole-list encoding of
// the live elements; ScanKeyGroups reports the newest live element's time.
//
// # Write path
//
// Bundle.Begin hydrates every key the bundle will touch with one batched
// MultiGet per state (RocksDB's batched_multi_get_cf with pinned slices:
// values are handed over straight from RocksDB's memory, released after the
// batch, in input order). Keys declared WriteOnly (blind writes: puts,
// deletes, list updates and appends) are not read. Operators read and update the bundle's working
// map; Commit writes the dirty set with one WriteBatch, WAL off — one write
// per touched key per bundle, deletes included — and clears the map. There
// is no memory-pressure flush: RocksDB's background threads own flushing.
//
// Commit sorts the dirty set (an MSD radix sort on state and key bytes) and
// builds the WriteBatch's bytes in Go, handed to RocksDB in one call. The
// sorted order pays off in the memtable: every state's column family uses
// the finger memtable (memtable.cc), a skip list whose inserts start from
// the previous insert's position and climb only as far as the new key
// requires, O(log D) for keys D entries apart instead of O(log N) from the
// head. A bundle's sorted keys are N/B apart in a memtable of N entries.
// RocksDB's own skip list (RocksOptions.SkipListMemTable) keeps its finger
// only for strictly adjacent inserts. The finger memtable has one writer
// (allow_concurrent_memtable_write off); readers run alongside it as on
// RocksDB's skip list.
//
// # Durability (WAL off)
//
// Bundles are atomic: a crash never exposes part of a bundle. With the WAL
// off and atomic flush on, what survives a crash is the state after some
// prefix of the committed bundles, at least every bundle committed before
// the last completed Flush; later bundles may or may not survive (background
// flushes can persist them). Flush is the durability point checkpoints use.
//
// # Memory
//
// SlotMemory follows Flink's managed-memory governance: one LRU block cache
// of (3 − r)·M/3 bytes with a high-priority pool for index and filter blocks,
// and one write-buffer manager of 2·M·r/3 bytes charged to that cache, shared
// by every RocksDB instance of the slot; arena blocks are one eighth of the
// smaller of the configured write buffer and the shared capacity, 4 KiB
// aligned. Native memory is bounded by M regardless of operator count.
// Pool hands out reservations for Go-side caches (WinnerCache, join probe
// caches, migration buffers); a reservation that cannot be had is a normal
// outcome.
//
// Every memtable holding data owns at least one arena block, and the
// write-buffer manager charges whole blocks, so with a fixed write buffer
// memtable memory would grow with the number of column families holding
// data. The rule that keeps it flat: each state family's write buffer is
// the smaller of the configured one (64 MiB by default) and its share of
// the slot's write-buffer capacity W — W divided by the number F of state
// families open in the slot, rounded down to a power of two, at least
// 64 KiB (WriteBufferShare) — and its arena block is one eighth of that
// (ArenaBlockSize, which is the formula above with the share as the
// configured size). Active memtables then fit in W, and the arena blocks
// they hold total at most W/8 whatever F is. When an instance opens and
// the share halves, the slot resizes every open instance (RocksDB's
// SetOptions: write_buffer_size and arena_block_size apply from each
// family's next memtable) and each of them flushes its current memtables
// once after its next write; instances that close leave the others' sizes
// alone. TestNativeMemoryBoundedByOperatorCount (1, 4, 16 operators at the
// default write buffer: total native memory = cache usage including
// memtables + table readers stays within M) and `sfstate bench state`
// measure it.
//
// # Top-1 winners
//
// WinnerCache keeps clean decoded Top-1 winners across bundles for one
// state, bounded by a pool reservation; writes still go straight to
// RocksDB, eviction never writes, and keys created in the admitting bundle
// bypass admission.
//
// # Native access
//
// Only this package and its subpackages link RocksDB. Tools that need more
// than Backend use the native API (native.go): NativeOf gives a RocksDB
// backend's prefix cursors, mutable column-family options and SST
// ingestion by state id; NativeDB opens a RocksDB directory on its own
// (read-only batched scans, or bulk loading); SSTWriter writes SST files
// from entries or Frames batches. PerRecord, ThreadCPU and SetPerfLevel
// serve the benchmark harnesses (internal/bench).
package engine
