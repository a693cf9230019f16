//go:build !linux

package savepoint

import "errors"

func limitAddressSpace(uint64) (uint64, error) { return 0, errors.New("no RLIMIT_AS on this system") }
