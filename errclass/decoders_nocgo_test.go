//go:build !cgo

package errclass_test

import "testing"

// cgoFailures: the packages that link RocksDB are not in this build.
func cgoFailures(*testing.T) []decoderFailure { return nil }
