// Package keygroups reproduces, bit for bit, how Apache Flink spreads keyed
// state over key groups and key groups over parallel subtasks, so that state
// written or rescaled by sfstate lands exactly where a Flink job expects it.
//
// # Key → key group
//
// Flink never hashes key bytes directly. It takes the key object's Java
// hashCode(), scrambles it once more with a single MurmurHash3 round
// (MathUtils.murmurHash in flink-core) and reduces it modulo the operator's
// max parallelism (KeyGroupRangeAssignment.assignToKeyGroup →
// computeKeyGroupForKeyHash):
//
//	keyGroup = murmurHash(key.hashCode()) % maxParallelism
//
// murmurHash(c) mixes c as one 4-byte block with seed 0, xors in the length
// 4, applies the fmix32 finaliser and makes the result non-negative
// (Integer.MIN_VALUE becomes 0). See MurmurHash and KeyGroupFor.
//
// The hashCode() part depends on the key's Java class; this package has the
// ones keyed streams use in practice (the Key interface and its types):
//
//   - Integer, Short, Byte, Character: the value; Long: (int)(v ^ v>>>32);
//     Boolean: 1231 / 1237; Float/Double: the IEEE bits with NaN
//     canonicalised, folded like Long.
//   - String: s[0]*31^(n-1) + … + s[n-1] over UTF-16 code units (Go strings
//     are UTF-8 and are converted; see HashString for invalid UTF-8).
//   - Tuple1..Tuple25 (org.apache.flink.api.java.tuple): h = hash(f0), then
//     h = 31*h + hash(fi) for each further field, null fields hashing to 0.
//     A Tuple1 therefore hashes exactly like its single field.
//   - SQL keys are BinaryRowData rows (flink-table-common). Their hashCode()
//     is BinarySegmentUtils.hashByWords → MurmurHashUtils.hashBytesByWords:
//     MurmurHash3_x86_32 over the whole row (RowKind byte, null bits, padding
//     included) read as little-endian 4-byte words, seed 42, finalised with
//     h ^= sizeInBytes and fmix32. See HashRow. SQL key rows always carry
//     RowKind INSERT (+I).
//
// # Binary rows
//
// RowBuilder writes the BinaryRowData bytes of a row from typed Go values,
// laid out the way Flink's BinaryRowWriter (AbstractBinaryWriter) and the
// planner's generated key projections lay them out: an 8-byte-aligned header
// holding the RowKind byte and the null bits, one 8-byte little-endian slot
// per field, then an 8-byte-aligned variable-length part for strings and
// binaries longer than 7 bytes, non-compact decimals (precision > 18) and
// non-compact timestamps (precision > 3). Strings and binaries of at most 7
// bytes are stored inline in their slot with 0x80|len in the slot's last
// byte. A NULL non-compact decimal or timestamp still reserves its
// variable-length space (16 resp. 8 zero bytes), as generated Flink code
// does. The supported SQL types are listed with Kind. RowBuilder writes
// through RowWriter, the field-by-field writer that every BinaryRowData of
// the module goes through (the engine's row codec uses it too).
//
// # Key groups → subtasks
//
// A subtask i of P owns a contiguous, inclusive key-group range
// (KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex):
//
//	start = ceil(i*M / P) = (i*M + P - 1) / P
//	end   = floor(((i+1)*M - 1) / P)
//
// and a key group kg belongs to subtask kg*P/M
// (computeOperatorIndexForKeyGroup). The two agree for every 1 ≤ P ≤ M ≤
// 32768. When a job does not set a max parallelism, Flink derives one from
// the first parallelism it runs with (computeDefaultMaxParallelism):
// min(max(roundUpToPowerOfTwo(P + P/2), 128), 32768).
//
// In RocksDB and in canonical savepoint files every keyed entry starts with
// the key group as a big-endian prefix of 1 byte when M ≤ 128 and 2 bytes
// otherwise (CompositeKeySerializationUtils.writeKeyGroup,
// computeRequiredBytesInKeyGroupPrefix); see PrefixWidth and AppendPrefix.
//
// # Rescaling
//
// When the parallelism changes from P to P', Flink's
// StateAssignmentOperation gives new subtask j every old keyed handle whose
// key-group range intersects j's new range, cut down to the intersection
// (KeyGroupsStateHandle.getIntersection). Plan computes exactly those
// pieces. With P' == P, subtask i keeps old subtask i's handle unchanged.
//
// Everything here is pure computation: no I/O, no cgo, no global state, safe
// for concurrent use.
package keygroups
