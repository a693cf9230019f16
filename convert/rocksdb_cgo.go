//go:build cgo

package convert

import "github.com/sfstate/sfstate/engine"

// RocksDB builds read native handles with the engine's read-only opener.
func init() { dirReader = engine.ReadNativeDir }
