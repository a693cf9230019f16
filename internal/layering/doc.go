// Package layering holds no code: its test (layering_test.go) enforces the
// module's import rules — cgo and RocksDB only inside engine/, test support
// only in tests, commands and benchmark harnesses, and no package importing
// a layer above its own (the table in the test; README "Layering").
package layering
