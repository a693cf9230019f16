// Package stateexport writes the keyed state of a canonical savepoint or
// checkpoint as typed tables: Parquet, Arrow IPC files, CSV or JSON lines.
package stateexport
