//go:build !linux

package scanbench

import "errors"

var errNoEvict = errors.New("scanbench: evicting a file from the page cache is only implemented on Linux")

// EvictFile is only implemented on Linux.
func EvictFile(path string) error { return errNoEvict }

// Resident is only implemented on Linux.
func Resident(path string) (float64, error) { return 0, errNoEvict }
