// Package fuzzcorpus writes seed-corpus files for Go's native fuzzing.
//
// A corpus file lives at <package dir>/testdata/fuzz/<FuzzTarget>/<name>
// and holds the line "go test fuzz v1" followed by one Go literal per
// argument of the fuzz function, in order, e.g.
//
//	go test fuzz v1
//	[]byte("\xac\xed\x00\x05")
//	bool(true)
//
// `go test` runs every such file as a sub-test of its target, so
// committed inputs are regression tests. Write names a file after the
// SHA-256 of its contents (the first 16 hex digits), as the go command
// does for inputs it saves.
package fuzzcorpus

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// Header is the first line of every corpus file.
const Header = "go test fuzz v1"

// Encode returns the corpus-file contents for one input. Supported
// argument types: []byte, string, bool and the sized integer types.
func Encode(args ...any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(Header + "\n")
	for i, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		case bool:
			fmt.Fprintf(&b, "bool(%t)\n", v)
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
			fmt.Fprintf(&b, "%T(%d)\n", v, v)
		default:
			return nil, fmt.Errorf("fuzzcorpus: argument %d has unsupported type %T", i, a)
		}
	}
	return b.Bytes(), nil
}

// Write stores one input of target under pkgDir/testdata/fuzz/target and
// returns the file's path.
func Write(pkgDir, target string, args ...any) (string, error) {
	b, err := Encode(args...)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	dir := filepath.Join(pkgDir, "testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, hex.EncodeToString(sum[:8]))
	return p, os.WriteFile(p, b, 0o644)
}
