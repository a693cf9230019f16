// Package rowcodec is the compact row encoding of the engine's state values.
//
// The engine keeps one RocksDB value per (key, namespace). Every value is an
// 8-byte last-access timestamp followed by one row of the state's Arrow
// schema. Rows are written for storage, not for comparison: the encoding is
// compact and fast to produce from Arrow columns and to append back into
// Arrow builders, but it is not order-preserving (keys use a different
// encoding).
//
// # Value layout
//
//		+----------------+---------+-----------+--------------+---------------------+
//		| ttl            | version | n         | null bitmap  | fields              |
//		| 8 B big-endian | 1 B     | uvarint   | ceil(n/8) B  | non-null fields, in |
//		| int64          | = 0x01  | #fields   | LSB first    | schema order        |
//		+----------------+---------+-----------+--------------+---------------------+
//
//	  - ttl: the last-access time in epoch milliseconds (Flink's TTL
//	    semantics), big-endian so a compaction filter reads it as one integer.
//	    NoTTL (0) when the state has no TTL.
//	  - version: FormatV1 in the low four bits; bits 4-5 hold the Flink
//	    RowKind of the row (0 = +I, 1 = -U, 2 = +U, 3 = -D), bits 6-7 are
//	    zero, so an insert row's byte is 0x01 and an update-after row's
//	    0x21. A decoder rejects any other value. The kind comes from the
//	    BinaryRowData a row was converted from (FlinkRow) and goes back
//	    into it; Arrow batches carry none (EncodeBatch and EncodeRow write
//	    +I, decoders accept every kind), see Kind and SetKind.
//	  - n: the number of top-level fields; it must equal the schema's field
//	    count, which catches most schema mix-ups.
//	  - null bitmap: bit i (byte i>>3, mask 1<<(i&7)) set means field i is
//	    null. Bits at positions >= n must be zero.
//	  - fields: each non-null field, encoded as below. A null field takes no
//	    bytes beyond its bitmap bit. Nothing may follow the last field.
//
// # Field encodings
//
//	bool                       1 B: 0x00 or 0x01 (anything else is corrupt)
//	int8, uint8                1 B
//	int16, uint16              2 B little-endian
//	int32, uint32, float32,    4 B little-endian (floats as IEEE-754 bits)
//	date32, time32
//	int64, uint64, float64,    8 B little-endian (the unit lives in the
//	date64, time64,            schema, not in the value)
//	timestamp, duration
//	decimal128                 16 B: low 64 bits LE, then high 64 bits LE
//	string, large_string,      uvarint byte length, then the bytes
//	binary, large_binary
//	struct<f1..fm>             a nested row without version or count:
//	                           ceil(m/8) B null bitmap, then the non-null
//	                           children
//	list<t>                    uvarint element count k, ceil(k/8) B element
//	                           null bitmap, then the non-null elements
//
// Example: schema (a int64, b string, c int32) and row (7, "hi", NULL) with
// no TTL encode to 22 bytes:
//
//	00 00 00 00 00 00 00 00   ttl = NoTTL
//	01                        version
//	03                        three fields
//	04                        bitmap: field 2 (c) is null
//	07 00 00 00 00 00 00 00   a = 7
//	02 68 69                  b = "hi"
//
// # Robustness
//
// Decoders treat values as untrusted: every length and count is checked
// against the bytes that remain before anything is allocated or sliced, and
// failures are *DecodeError values carrying the value index (in a batch), the
// byte offset within the value and the field path. Decoding never panics.
// Strings are not checked for valid UTF-8; they come back byte for byte.
//
// The encoding is canonical: varints must be minimal, bools 0 or 1 and
// bitmap padding zero, so a value that decodes re-encodes to the same bytes
// (once its row kind is set back with SetKind).
//
// # Batches
//
// Codec.EncodeBatch turns a whole Arrow record into values column by column
// (one pass to size every row, one to write) into one contiguous Arena;
// Codec.DecodeBatch validates a batch of values, then appends it to an
// array.RecordBuilder one column at a time. EncodeRow and DecodeRow are the
// row-at-a-time forms for tests and slow paths. TTL, SetTTL and WithTTL touch
// only the prefix. The aggregate helpers (BuildInt64, Int64Values, ...) build
// and read accumulator columns without per-group temporaries, and FlinkRow
// converts rows to and from Flink's BinaryRowData.
//
// A Codec is immutable and safe for concurrent use; an Arena is not.
package rowcodec
