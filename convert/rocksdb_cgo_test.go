//go:build cgo

package convert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// TestRocksDBNativeEqualsCanonicalTwin converts Flink 1.20's native
// (incremental RocksDB) savepoint and compares it entry by entry with the
// canonical savepoint Flink took of the same job with the same backend.
func TestRocksDBNativeEqualsCanonicalTwin(t *testing.T) {
	twin := openDir(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
	want := entries(t, twin)
	if len(want) != 32 {
		t.Fatalf("canonical twin has %d entries, the manifest says 32", len(want))
	}
	src, out, res := convertDir(t, fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	if res.Entries != int64(len(want)) {
		t.Fatalf("verified %d entries, want %d", res.Entries, len(want))
	}
	checkConverted(t, src, out)
	sameLines(t, "converted vs canonical twin", want, entries(t, out))
	// The header is the native meta state's, byte for byte the twin's:
	// same serializer snapshots, same state order (RocksDB lists the
	// timers first).
	sameHeaders(t, twin, out)
}

// TestRocksDBNativeFilesMatchFlink compares the converted keyed files of
// the flatMap operators (value state only, no wall-clock timers) with the
// files Flink wrote for its canonical savepoint: byte for byte, offsets
// included, as Flink orders entries the same way (key group, state id,
// key bytes).
func TestRocksDBNativeFilesMatchFlink(t *testing.T) {
	twin := openDir(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
	_, out, _ := convertDir(t, fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	n := 0
	for _, id := range []string{"d5c8b168c6cbfe8c507a10f88b325243", "dab25811652d3d4983a30c6e4afacb1c"} {
		top, oop := twin.FindOperator(id), out.FindOperator(id)
		if top == nil || oop == nil {
			t.Fatalf("operator %s missing", id)
		}
		for _, tst := range top.Subtasks {
			th, ok := tst.ManagedKeyed.(*savepoint.KeyGroupsHandle)
			if !ok {
				continue
			}
			ost := oop.Subtask(tst.Index)
			if ost == nil || ost.ManagedKeyed == nil {
				t.Fatalf("operator %s subtask %d: no keyed handle in the output", id, tst.Index)
			}
			oh := ost.ManagedKeyed.(*savepoint.KeyGroupsHandle)
			if fmt.Sprint(oh.Offsets) != fmt.Sprint(th.Offsets) || oh.StartKeyGroup != th.StartKeyGroup {
				t.Fatalf("operator %s subtask %d: offsets %v from %d, Flink %v from %d", id, tst.Index, oh.Offsets, oh.StartKeyGroup, th.Offsets, th.StartKeyGroup)
			}
			if !bytes.Equal(streamBytes(t, out, oh.Delegate), streamBytes(t, twin, th.Delegate)) {
				t.Fatalf("operator %s subtask %d: keyed file differs from Flink's", id, tst.Index)
			}
			n++
		}
	}
	if n != 6 {
		t.Fatalf("compared %d files, want 6", n)
	}
}

// TestRocksDBNativeOnNative: Request.OnNative sees every native handle
// with its header and exactly the entries the conversion writes (those of
// the canonical twin); an error it returns ends the conversion before any
// `_metadata` is written.
func TestRocksDBNativeOnNative(t *testing.T) {
	want := entries(t, openDir(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")))
	src := openDir(t, fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	var got []string
	handles := 0
	observe := func(op *savepoint.OperatorState, h *rescale.NativeHandle) func(*keyed.Entry) error {
		if h.Header == nil || len(h.Header.States) == 0 {
			t.Errorf("operator %s subtask %d: handle without states", op.ID, h.Subtask)
		}
		handles++
		return func(e *keyed.Entry) error {
			if e.State == nil || h.Header.State(e.State.Name) == nil {
				t.Errorf("entry of a state the header does not declare: %+v", e.State)
			}
			got = append(got, entryLine(op.ID.String(), e))
			return nil
		}
	}
	dstDir := t.TempDir()
	dst, err := s3.NewLocal(dstDir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Request{Src: src, Dst: dst, TempDir: t.TempDir(), OnNative: observe})
	if err != nil || !res.Verified {
		t.Fatalf("%v %+v", err, res)
	}
	sort.Strings(got)
	sameLines(t, "observed vs canonical twin", want, got)
	if handles == 0 {
		t.Fatal("no handle observed")
	}

	stop := errors.New("observer says stop")
	dstDir = t.TempDir()
	dst, _ = s3.NewLocal(dstDir)
	_, err = Run(context.Background(), Request{Src: src, Dst: dst, TempDir: t.TempDir(),
		OnNative: func(*savepoint.OperatorState, *rescale.NativeHandle) func(*keyed.Entry) error {
			return func(*keyed.Entry) error { return stop }
		}})
	if !errors.Is(err, stop) {
		t.Fatalf("conversion with a failing observer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dstDir, savepoint.MetadataName)); !os.IsNotExist(err) {
		t.Fatalf("_metadata written although the observer failed: %v", err)
	}
}
