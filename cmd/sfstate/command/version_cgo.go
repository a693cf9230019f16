//go:build cgo

package command

import "github.com/sfstate/sfstate/engine"

func init() { rocksDBVersion = engine.RocksDBVersion }
