// Package flinkwrite writes Flink's canonical keyed-state format: the
// Java-serialized LogicalTypes and serializer snapshots of the header, the
// value encodings, and the keyed-state stream itself.
package flinkwrite
