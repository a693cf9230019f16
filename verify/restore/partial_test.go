//go:build cgo

package restore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/verify"
)

// hideSerializers copies the fixture savepoint name into a temporary
// directory, replacing in its files the first n occurrences (all for n < 0)
// of each given serializer snapshot class name by a name of the same length
// that no reader knows ("org.apache.flink" becomes "com.example.xyzq"), so
// every offset stays valid and the header parser has to step over those
// snapshots (their states become partial).
func hideSerializers(t *testing.T, name string, classes map[string]int) *savepoint.Savepoint {
	t.Helper()
	src := fixtures.Path(t, name)
	if _, err := os.Stat(filepath.Join(src, savepoint.MetadataName)); err != nil {
		src = filepath.Join(src, "savepoint")
	}
	dir := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	for c, n := range classes {
		left[c] = n
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for c := range classes {
			hidden := []byte("com.example.xyzq" + strings.TrimPrefix(c, "org.apache.flink"))
			if len(hidden) != len(c) {
				t.Fatalf("class %s is not under org.apache.flink", c)
			}
			for left[c] != 0 {
				i := bytes.Index(b, []byte(c))
				if i < 0 {
					break
				}
				copy(b[i:], hidden)
				left[c]--
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for c, n := range left {
		if n > 0 || n == classes[c] {
			t.Fatalf("%s: class %s not found (%d occurrences left)", name, c, n)
		}
	}
	sp, err := savepoint.Open(context.Background(), mustLocal(t, dir), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// partialStates lists the partial states of sp's keyed headers, by name.
func partialStates(t *testing.T, sp *savepoint.Savepoint) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := sp.WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeRaw}, func(e *savepoint.KeyedEntry) error {
		for _, m := range e.Header.States {
			if m.Partial != "" {
				out[m.Name] = m.Partial
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const (
	classList    = "org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot"
	classMap     = "org.apache.flink.api.common.typeutils.base.MapSerializerSnapshot"
	classRowData = "org.apache.flink.table.runtime.typeutils.RowDataSerializer$RowDataSerializerSnapshot"
)

// TestVerifyPartialListAndMap: a LIST and a MAP state whose list and map
// serializer snapshots no reader knows (partial states) restore as opaque
// bytes (the whole ','-joined list as one engine element; raw user keys and
// values) and export back without loss, on both backends and at another
// parallelism; the entries are those of the unmodified fixture.
func TestVerifyPartialListAndMap(t *testing.T) {
	ctx := context.Background()
	name := "sql-rocksdb-canonical-udagg-liststate-mapstate"
	sp := hideSerializers(t, name, map[string]int{classList: -1, classMap: -1})
	partial := partialStates(t, sp)
	if len(partial) < 2 {
		t.Fatalf("partial states %v, want the LIST and the MAP state", partial)
	}
	r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || r.Unsupported {
		t.Fatalf("verification failed (unsupported %v):\n%s", r.Unsupported, strings.Join(r.Failures(), "\n"))
	}
	orig, err := savepoint.Open(ctx, mustLocal(t, fixtures.Path(t, name, "savepoint")), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	want, err := verify.ComputeDigest(ctx, orig, verify.DigestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for st := range partial {
		n := r.Digest.Total("", st).Entries
		if n == 0 || n != want.Total("", st).Entries {
			t.Fatalf("state %q: %d entries, %d in the unmodified fixture", st, n, want.Total("", st).Entries)
		}
		for _, tr := range r.Targets {
			if len(tr.SkippedStates) > 0 || tr.Digest.Total("", st).Entries != n {
				t.Fatalf("%s: state %q: %d entries restored of %d (skipped %v)", tr.Name, st, tr.Digest.Total("", st).Entries, n, tr.SkippedStates)
			}
		}
	}
}

// TestVerifyPartialKeySkipped: an operator whose key serializer no reader
// knows cannot be restored (the engine needs the key type): its keyed state
// is skipped with a note naming the operator and the key serializer, left
// out of the comparison on both sides; as it is the only keyed operator,
// nothing is restored and the report is unsupported, not failed.
func TestVerifyPartialKeySkipped(t *testing.T) {
	ctx := context.Background()
	// The first RowData snapshot is nested in an operator-state
	// serializer, the second is the keyed stream's key serializer.
	sp := hideSerializers(t, "sql-rocksdb-canonical-udagg-liststate-mapstate", map[string]int{classRowData: 2})
	if p := partialStates(t, sp); len(p) == 0 || !strings.Contains(p["accState"], "key serializer") {
		t.Fatalf("partial states %v, want every state, for the key serializer", p)
	}
	r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || !r.Unsupported {
		t.Fatalf("ok %v, unsupported %v:\n%s", r.OK, r.Unsupported, strings.Join(r.Failures(), "\n"))
	}
	if r.Digest.Total("", "accState").Entries == 0 {
		t.Fatal("the source's entries are not digested")
	}
	var keyedOp string
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			if st.ManagedKeyed != nil {
				keyedOp = op.ID.String()
			}
		}
	}
	for _, tr := range r.Targets {
		if !tr.Unsupported || len(tr.SkippedStates) != 1 {
			t.Fatalf("%s: unsupported %v, skipped %v", tr.Name, tr.Unsupported, tr.SkippedStates)
		}
		x := tr.SkippedStates[0]
		if x.Operator != keyedOp || x.State != "" || !strings.Contains(x.Reason, "key serializer") || !strings.Contains(tr.Skipped, "key serializer") {
			t.Fatalf("%s: skipped %v (%q)", tr.Name, x, tr.Skipped)
		}
	}
	var tab strings.Builder
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.String(), "skipped") || !strings.Contains(tab.String(), "NOT VERIFIED") {
		t.Fatalf("states not marked skipped:\n%s", tab.String())
	}
}
