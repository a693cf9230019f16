// Package stateexport writes the keyed and operator state of a canonical
// savepoint or checkpoint as typed tables: Parquet (zstd or snappy,
// statistics on), Arrow IPC files, CSV or JSON lines, to any s3.Storage.
//
// Export writes one table per (operator, keyed state) and per (operator,
// operator state) under "<operator uid or id>.<state>/part-<i>-of-<n>.<ext>"
// (operator state: first shard only, see operator.go), the metadata tables
// _operators and _states, and last a manifest (ManifestKey) with
// put-if-absent, so a dataset with a manifest is complete. Each object is
// streamed to Storage.Put, which publishes it whole.
//
// Columns are typed from the serializer snapshots (see snapshotNode and
// logicalNode): SQL rows, tuples, POJOs and time windows at the top of a
// key, namespace, user key or value give one column per field; nested rows
// become structs, arrays lists, maps maps; DECIMAL keeps precision and
// scale, TIMESTAMP its unit (ms/µs/ns by precision), TIMESTAMP_LTZ is UTC.
// Data no decoder types is kept as bytes with the serializer class in the
// field metadata (MetaSerializer). LIST states give one row per element.
// Rows are buffered per table up to Options.RowGroupRows and written as one
// row group (record batch), which bounds memory.
//
// Speed: states the columnar decoder reads (savepoint.ScanColumns: SQL
// rows of scalar, string and TIMESTAMP(p ≤ 3) fields, primitives, strings,
// TTL, timers, VoidNamespace) are copied batch by batch into Arrow buffers
// that are reused from row group to row group (columnar.go); other states
// go entry by entry through the generic decoder and Arrow builders. Each
// table has an encoder goroutine, so decoding overlaps encoding; Parquet
// tables of top-level columns encode the columns of a row group in
// parallel (parquet.go). Output bytes do not depend on timing or on which
// path decoded the rows (tests compare both).
//
// docs/export.md describes the dataset layout and how to read it.
package stateexport
