//go:build cgo

package errclass_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

// cgoFailures: the decoders of packages that link RocksDB.
func cgoFailures(t *testing.T) []decoderFailure {
	var out []decoderFailure

	// A checkpoint object whose bytes differ from the manifest's CRC-32C.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shared-1.sst"), []byte("not the recorded bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	o := checkpoint.Object{Name: "000001.sst", Key: "shared-1.sst", Size: 22, CRC: 0xDEADBEEF}
	err = checkpoint.FetchObject(context.Background(), st, o, filepath.Join(t.TempDir(), "000001.sst"))
	if err != nil && !errors.Is(err, s3.ErrIntegrity) && !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("checkpoint CRC mismatch: %v", err)
	}
	out = append(out, decoderFailure{name: "checkpoint object CRC mismatch", err: err, sentinel: checkpoint.ErrCorrupt, file: "shared-1.sst", offset: -1})

	// A join-state record value of the wrong size and a bucket value
	// cut short.
	_, _, _, _, err = recordstore.DecodeRecordValue([]byte{1, 2, 3})
	out = append(out, decoderFailure{name: "recordstore corrupt record value", err: err, sentinel: recordstore.ErrCorrupt, offset: -1})
	_, _, _, _, _, err = recordstore.DecodeGroupKey([]byte{3, 7, 0x80}, 1)
	out = append(out, decoderFailure{name: "recordstore corrupt key", err: err, sentinel: recordstore.ErrCorrupt, offset: -1})
	return out
}
