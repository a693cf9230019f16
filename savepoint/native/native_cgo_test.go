//go:build cgo

package native_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/native"
)

const (
	nativeFixture    = "flink1.20-rocksdb-NATIVE-incremental-for-contrast"
	canonicalFixture = "flink1.20-rocksdb-canonical-valuestate-timers"
)

func openDir(t *testing.T, dir string) *savepoint.Savepoint {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// normalize turns one reference-shaped entry into a comparable string:
// processing-time timer timestamps depend on the wall clock of the run
// that took the savepoint, so they are dropped.
func normalize(t *testing.T, b []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if st, _ := m["state"].(string); strings.HasPrefix(st, "_timer_state/processing") {
		if tm, ok := m["timer"].([]any); ok && len(tm) == 2 {
			if obj, ok := tm[1].(map[string]any); ok {
				delete(obj, "ts")
			}
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func walkAll(t *testing.T, sp *savepoint.Savepoint, o savepoint.ScanOptions, tmp string) (*native.Snapshot, []string) {
	t.Helper()
	snap, err := native.Open(context.Background(), sp, o)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = snap.Walk(context.Background(), sp, engine.ReadNativeDir, native.WalkOptions{KeyGroupTo: -1, TempDir: tmp}, func(h *native.Handle, e *keyed.Entry) error {
		b, err := e.MarshalJSON()
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		m["op"] = h.Operator.ID.String()
		m["subtask"] = h.Subtask
		b, _ = json.Marshal(m)
		got = append(got, normalize(t, b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap, got
}

func TestFlinkNativeMatchesCanonicalTwin(t *testing.T) {
	sp := openDir(t, fixtures.Path(t, nativeFixture))
	tmp := t.TempDir()
	snap, err := native.Open(context.Background(), sp, savepoint.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Layout != native.LayoutFlink {
		t.Fatalf("layout %s, want %s", snap.Layout, native.LayoutFlink)
	}
	if len(snap.Handles) == 0 {
		t.Fatal("no native handles")
	}
	_, got := walkAll(t, sp, savepoint.ScanOptions{}, tmp)
	ents, err := os.ReadDir(tmp)
	if err != nil || len(ents) != 0 {
		t.Fatalf("temporary files left: %v %v", ents, err)
	}

	f, err := os.Open(fixtures.Path(t, "_expected", canonicalFixture+".entries.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		want = append(want, normalize(t, sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	sort.Strings(want)
	t.Logf("%d native entries, %d canonical", len(got), len(want))
	if len(got) != len(want) {
		t.Errorf("native decodes %d entries, canonical twin has %d", len(got), len(want))
	}
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("entry %d differs:\n native    %s\n canonical %s", i, g, w)
			break
		}
	}
}
