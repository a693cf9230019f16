package native

import (
	"errors"
	"testing"

	"github.com/sfstate/sfstate/errclass"
)

// A RocksDB failure is corrupt input only when RocksDB reports a
// Corruption status; its position is the savepoint file and, for a block
// checksum mismatch, the block's offset.
func TestFileErrorClass(t *testing.T) {
	rocks := errors.New("Corruption: block checksum mismatch: stored = 1, computed = 2, type = 1  in /tmp/d/000010.sst offset 4096 size 31")
	fe := &FileError{Files: []string{"sp/68a6"}, Msg: "operator x subtask 1: Corruption: block checksum mismatch: stored = 1, computed = 2, type = 1  in sp/68a6 (000010.sst) offset 4096 size 31", Err: rocks}
	var ce *errclass.CorruptionError
	if !errors.Is(fe, errclass.ErrCorrupt) || !errors.As(fe, &ce) || ce.File != "sp/68a6" || ce.Offset != 4096 {
		t.Errorf("checksum mismatch: corrupt=%v position %+v", errors.Is(fe, errclass.ErrCorrupt), ce)
	}
	// A corruption without a block position, and one naming two files.
	fe = &FileError{Files: []string{"sp/a"}, Msg: "Corruption: truncated block read from sp/a (000011.sst)", Err: rocks}
	if ce = nil; !errors.As(fe, &ce) || ce.Offset != -1 {
		t.Errorf("truncated: position %+v", ce)
	}
	fe = &FileError{Files: []string{"sp/a", "sp/b"}, Msg: "Corruption: in sp/a offset 1 size 2, sp/b", Err: rocks}
	if ce = nil; !errors.As(fe, &ce) || ce.File != "sp/a" || ce.Offset != -1 {
		t.Errorf("two files: position %+v", ce)
	}
	// An I/O failure of the download directory is not corrupt data.
	fe = &FileError{Files: []string{"sp/a"}, Msg: "IO error: No space left on device: While appending to file: sp/a (000011.sst)", Err: errors.New("IO error")}
	if errors.Is(fe, errclass.ErrCorrupt) || errors.As(fe, &ce) {
		t.Errorf("IO error classed corrupt: %v", fe)
	}
}
