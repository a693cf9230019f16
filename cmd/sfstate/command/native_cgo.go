//go:build cgo

package command

import "github.com/sfstate/sfstate/engine"

// Builds with cgo read native RocksDB directories (export --deep).
func init() { nativeDirReader = engine.ReadNativeDir }
