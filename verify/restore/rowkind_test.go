//go:build cgo

package restore

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
	"github.com/sfstate/sfstate/verify"
)

// rowKindsOf counts the row kinds of the decoded rows (values, list
// elements, map user keys and values) of sp.
func rowKindsOf(t *testing.T, sp *savepoint.Savepoint) map[keygroups.RowKind]int {
	t.Helper()
	out := map[keygroups.RowKind]int{}
	var add func(v serde.Value)
	add = func(v serde.Value) {
		switch x := v.(type) {
		case *serde.TTLValue:
			add(x.Value)
		case serde.List:
			for _, el := range x {
				add(el)
			}
		case *serde.Row:
			if x != nil {
				out[x.Kind]++
			}
		}
	}
	err := sp.WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
		add(e.Value)
		add(e.UserKey)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withRowKinds copies an uncompressed fixture into a temporary directory
// and sets the RowKind byte (byte 0 of BinaryRowData) of its value rows,
// list-element rows and map user-key and user-value rows to -U, +U, -D, +I
// in turn. Entries are i32 key length, key, i32 value length, value; a
// row is an i32 size and BinaryRowData, after the 8-byte TTL timestamp of
// a TTL state and the null flag of a map value. Lengths do not change, so
// the handles' offsets stay valid. It returns the savepoint and the
// number of rows changed.
func withRowKinds(t *testing.T, name string) (*savepoint.Savepoint, int) {
	t.Helper()
	src := fixtures.Path(t, name)
	if _, err := os.Stat(filepath.Join(src, savepoint.MetadataName)); err != nil {
		src = filepath.Join(src, "savepoint")
	}
	orig, err := savepoint.Open(context.Background(), mustLocal(t, src), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(src, e.Name())); err == nil && !e.IsDir() {
			files[e.Name()] = b
		}
	}
	// The stream of each (operator, subtask): a file, or the inline bytes
	// of the metadata model md, which is written back.
	md, err := savepoint.ParseMetadata(files[savepoint.MetadataName], savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	type task struct {
		op      savepoint.OperatorID
		subtask int
	}
	streams := map[task][]byte{}
	for _, op := range md.Operators {
		for _, st := range op.Subtasks {
			h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
			if !ok || h.Delegate == nil {
				continue
			}
			if h.Delegate.Tag == savepoint.TagByteStream {
				h.Delegate.Data = append([]byte{}, h.Delegate.Data...)
				streams[task{op.ID, st.Index}] = h.Delegate.Data
			} else {
				streams[task{op.ID, st.Index}] = files[filepath.Base(h.Delegate.Path)]
			}
		}
	}
	n := 0
	isRow := func(s *serde.Snapshot) bool {
		if s != nil && s.Class == serde.ClassTTL && len(s.Nested) == 2 {
			s = s.Nested[1]
		}
		return s != nil && s.Class == serde.ClassRowData
	}
	// mark sets the kind of the row whose i32 size is at b[pos:].
	mark := func(b []byte, pos int) int {
		size := int(binary.BigEndian.Uint32(b[pos:]))
		if size < 8 || pos+4+size > len(b) || b[pos+4] != 0 {
			t.Fatalf("%s: no +I row at %d (size %d)", name, pos, size)
		}
		n++
		b[pos+4] = byte(n % 4)
		return pos + 4 + size
	}
	err = orig.WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeSplit}, func(e *savepoint.KeyedEntry) error {
		if e.Header.Compressed {
			t.Fatalf("%s: compressed fixture", name)
		}
		b := streams[task{e.Operator.ID, e.Subtask}]
		if b == nil {
			t.Fatalf("%s: no stream for operator %s subtask %d", name, e.Operator.ID, e.Subtask)
		}
		ttl := 0
		if e.State.TTL {
			ttl = 8
		}
		valPos := int(e.Offset) + 4 + len(e.KeyBytes) + 4
		switch e.State.Kind {
		case "VALUE", "AGGREGATING", "REDUCING":
			if isRow(e.State.Value) {
				mark(b, valPos+ttl)
			}
		case "LIST":
			if !isRow(e.State.Element) {
				return nil
			}
			for p, end := valPos, valPos+len(e.ValueBytes); p < end; p++ {
				p = mark(b, p+ttl)
				if p < end && b[p] != ',' {
					t.Fatalf("%s: list element not followed by ','", name)
				}
			}
		case "MAP":
			if isRow(e.State.UserKey) {
				mark(b, int(e.Offset)+4+len(e.KeyBytes)-len(e.UserKeyBytes))
			}
			if isRow(e.State.UserValue) && e.ValueBytes[0] == 0 {
				mark(b, valPos+1+ttl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files[savepoint.MetadataName], err = savepoint.EncodeMetadata(md); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sp, err := savepoint.Open(context.Background(), mustLocal(t, dir), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp, n
}

func mustLocal(t *testing.T, dir string) s3.Storage {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestVerifyRowKinds: SQL savepoints whose rows carry every RowKind (the
// real fixtures, rewritten) restore losslessly into both backends at
// parallelism 1 and 2; a restore that changes one row's kind fails.
func TestVerifyRowKinds(t *testing.T) {
	ctx := context.Background()
	// What the real fixture holds: only +I rows.
	dedup := "sql-rocksdb-canonical-deduplicate-valuestate"
	orig, err := savepoint.Open(ctx, mustLocal(t, fixtures.Path(t, dedup, "savepoint")), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	if k := rowKindsOf(t, orig); len(k) != 1 || k[keygroups.Insert] == 0 {
		t.Fatalf("%s: row kinds %v, want only +I", dedup, k)
	}
	for _, fx := range fixtures.All(t) {
		if !strings.HasPrefix(fx.Name, "sql-") {
			continue
		}
		t.Run(fx.Name, func(t *testing.T) {
			sp, n := withRowKinds(t, fx.Name)
			kinds := rowKindsOf(t, sp)
			t.Logf("%d rows marked: %v", n, kinds)
			if n >= 4 && (kinds[keygroups.UpdateBefore] == 0 || kinds[keygroups.UpdateAfter] == 0 || kinds[keygroups.Delete] == 0) {
				t.Fatalf("rewrite left kinds %v", kinds)
			}
			r, err := runVerify(ctx, t, sp, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK {
				t.Fatalf("verification failed:\n%s", strings.Join(r.Failures(), "\n"))
			}
		})
	}
	// The kind is compared: a restore that turns the +U row back into +I
	// (what an engine keeping only +I would do) fails.
	sp, _ := withRowKinds(t, dedup)
	var h hit
	r, err := runVerify(ctx, t, sp, mutateFirst("deduplicate-state", &h, func(rf ref, key, val []byte) error {
		if rowcodec.Kind(val) == keygroups.Insert {
			val[rowcodec.TTLSize] = 0x21 // +U
		} else if err := rowcodec.SetKind(val, keygroups.Insert); err != nil {
			return err
		}
		return rf.apply(func(b interface {
			Put(int, []byte, []byte)
			Delete(int, []byte)
		}) {
			b.Put(rf.state, key, val)
		})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r.OK {
		t.Fatal("a changed row kind verified OK")
	}
	if fs := strings.Join(r.Failures(), "\n"); !strings.Contains(fs, "deduplicate-state") {
		t.Fatalf("failures do not name the state:\n%s", fs)
	}
}

// runVerify verifies sp on both backends at parallelism 1 and 2.
func runVerify(ctx context.Context, t *testing.T, sp *savepoint.Savepoint, mutate func(*canonical.ImportResult) error) (*verify.Report, error) {
	return verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{Mutate: mutate}, TempDir: t.TempDir()})
}
