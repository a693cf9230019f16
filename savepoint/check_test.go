package savepoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckCleanFixtures(t *testing.T) {
	for _, name := range allFixtures(t) {
		sp := openFixture(t, name)
		probs, stats := Check(context.Background(), sp, CheckOptions{})
		for _, p := range probs {
			t.Errorf("%s: %s", name, p)
		}
		t.Logf("%s: %+v", name, stats)
	}
}

// TestCheckDecodesCompressedOperatorState: the Snappy-compressed operator
// state of the 1.19 fixture is decoded element by element, not skipped, and
// a flipped byte inside a chunk is reported.
func TestCheckDecodesCompressedOperatorState(t *testing.T) {
	sp := openFixture(t, fixtureSnap)
	probs, stats := Check(context.Background(), sp, CheckOptions{})
	if len(probs) != 0 || stats.OperatorStatesVerified == 0 || stats.OperatorStatesUnverified != 0 {
		t.Fatalf("problems %v, stats %+v", probs, stats)
	}
	dir := copyFixture(t, fixtureSnap)
	sp = openDir(t, dir)
	var oh *OperatorHandle
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			if st.ManagedOperator != nil && st.ManagedOperator.Delegate != nil && len(st.ManagedOperator.States) > 0 {
				oh = st.ManagedOperator
			}
		}
	}
	if oh == nil {
		t.Fatal("fixture has no operator state")
	}
	off := oh.States[0].Offsets[len(oh.States[0].Offsets)-1]
	path := filepath.Join(dir, oh.Delegate.Path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	patchFile(t, path, off+9, data[off+9]^0x5A) // inside the chunk payload
	probs, _ = Check(context.Background(), openDir(t, dir), CheckOptions{})
	found := false
	for _, p := range probs {
		if p.Kind == ProblemOpState && strings.Contains(p.Message, "snappy") {
			found = true
		}
	}
	if !found {
		t.Fatalf("corrupted compressed chunk not reported: %v", probs)
	}
}

// copyFixture copies a fixture savepoint directory (the one holding
// _metadata) into a temporary directory and returns it.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src := fixtureDir(t, name)
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func openDir(t testing.TB, dir string) *Savepoint {
	t.Helper()
	sp, err := Open(context.Background(), mustLocal(t, dir), MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// firstKeyedFile returns the operator, handle and file path of the keyed
// handle of operator opID, subtask sub.
func keyedFileOf(t *testing.T, sp *Savepoint, dir, opID string, sub int) (*KeyGroupsHandle, string) {
	t.Helper()
	op := sp.FindOperator(opID)
	if op == nil || op.Subtask(sub) == nil {
		t.Fatalf("operator %s subtask %d not found", opID, sub)
	}
	h := op.Subtask(sub).ManagedKeyed.(*KeyGroupsHandle)
	return h, filepath.Join(dir, h.Delegate.Path)
}

func rewriteMetadata(t *testing.T, dir string, sp *Savepoint) {
	t.Helper()
	b, err := EncodeMetadata(sp.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func patchFile(t *testing.T, path string, off int64, b ...byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(data[off:], b)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	fixtureUDF  = "flink1.20-rocksdb-canonical-valuestate-timers"
	flatMap1    = "d5c8b168c6cbfe8c507a10f88b325243"
	timelyOp1   = "4b818c7923a927796d24b727201ba34d"
	fixtureSnap = "flink1.19-rocksdb-canonical-snappy-compressed"
)

func TestCheckDetectsMutations(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		fixture string
		mutate  func(t *testing.T, dir string, sp *Savepoint)
		kind    string
	}{
		{"flip block byte (key length)", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, path := keyedFileOf(t, sp, dir, flatMap1, 2)
			patchFile(t, path, h.Offset(2)+2, 0x7f)
		}, ProblemBlock},
		{"flip key-group prefix", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, path := keyedFileOf(t, sp, dir, flatMap1, 2)
			patchFile(t, path, h.Offset(2)+6, 0x03)
		}, ProblemBlock},
		{"change a key's group", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			// Key Tuple1<Long>(0) in key group 2 becomes 2, which hashes to 3.
			h, path := keyedFileOf(t, sp, dir, flatMap1, 2)
			patchFile(t, path, h.Offset(2)+14, 0x02)
		}, ProblemKeyGroup},
		{"corrupt snappy frame", fixtureSnap, func(t *testing.T, dir string, sp *Savepoint) {
			h, path := keyedFileOf(t, sp, dir, timelyOp1, 2)
			patchFile(t, path, h.Offset(2)+20, 0xAA, 0x55)
		}, ProblemBlock},
		{"garbage after the last block", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			// Append bytes and record the new size: only the block-end
			// check can notice.
			h, path := keyedFileOf(t, sp, dir, flatMap1, 2)
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("junk")); err != nil {
				t.Fatal(err)
			}
			f.Close()
			h.Delegate.Size += 4
			rewriteMetadata(t, dir, sp)
		}, ProblemBlock},
		{"truncate file", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			_, path := keyedFileOf(t, sp, dir, timelyOp1, 1)
			st, _ := os.Stat(path)
			if err := os.Truncate(path, st.Size()-10); err != nil {
				t.Fatal(err)
			}
		}, ProblemSize},
		{"delete file", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			_, path := keyedFileOf(t, sp, dir, timelyOp1, 3)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, ProblemMissing},
		{"move offset", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, _ := keyedFileOf(t, sp, dir, flatMap1, 2)
			h.Offsets[0] += 3
			rewriteMetadata(t, dir, sp)
		}, ProblemBlock},
		{"offset past end", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, _ := keyedFileOf(t, sp, dir, flatMap1, 2)
			h.Offsets[0] = h.Delegate.Size + 100
			rewriteMetadata(t, dir, sp)
		}, ProblemOffset},
		{"offset into header", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, _ := keyedFileOf(t, sp, dir, flatMap1, 2)
			h.Offsets[0] = 10
			rewriteMetadata(t, dir, sp)
		}, ProblemOffset},
		{"overlapping ranges", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, _ := keyedFileOf(t, sp, dir, flatMap1, 2)
			h.StartKeyGroup = 1
			rewriteMetadata(t, dir, sp)
		}, ProblemRange},
		{"range beyond max parallelism", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, _ := keyedFileOf(t, sp, dir, flatMap1, 3)
			h.StartKeyGroup = 9
			rewriteMetadata(t, dir, sp)
		}, ProblemRange},
		{"hostile relative path", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, _ := keyedFileOf(t, sp, dir, flatMap1, 2)
			h.Delegate.Path = "../" + h.Delegate.Path
			rewriteMetadata(t, dir, sp)
		}, ProblemPath},
		{"absolute path outside", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			h, _ := keyedFileOf(t, sp, dir, flatMap1, 2)
			h.Delegate.Tag, h.Delegate.Path = TagFile, "file:/etc/passwd"
			rewriteMetadata(t, dir, sp)
		}, ProblemPath},
		{"corrupt operator state element", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			// The first list element (a Java String) gets a bogus length.
			oh := sp.FindOperator("CheckpointingSource1").Subtask(0).ManagedOperator
			patchFile(t, filepath.Join(dir, oh.Delegate.Path), oh.States[0].Offsets[0], 0x7f, 0x7f)
		}, ProblemOpState},
		{"operator state offset outside", fixtureUDF, func(t *testing.T, dir string, sp *Savepoint) {
			oh := sp.FindOperator("CheckpointingSource1").Subtask(0).ManagedOperator
			oh.States[0].Offsets[1] = 1 << 40
			rewriteMetadata(t, dir, sp)
		}, ProblemOffset},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t, tc.fixture)
			before := openDir(t, dir)
			if probs, _ := Check(ctx, before, CheckOptions{}); len(probs) != 0 {
				t.Fatalf("copy not clean: %v", probs)
			}
			tc.mutate(t, dir, before)
			sp := openDir(t, dir)
			probs, _ := Check(ctx, sp, CheckOptions{})
			if len(probs) == 0 {
				t.Fatal("mutation not detected")
			}
			found := false
			for _, p := range probs {
				if p.Kind == tc.kind {
					found = true
				}
				if p.File == "" {
					t.Errorf("problem without file: %+v", p)
				}
			}
			if !found {
				t.Fatalf("no %s problem among %v", tc.kind, probs)
			}
			t.Logf("%s", probs[0])
		})
	}
}

// TestCheckAcceptsRescaledViews splits one subtask's handle into two
// handles over the same file (what a metadata-only rescale writes): the
// block-end check must use the other view's offsets, not the file end.
func TestCheckAcceptsRescaledViews(t *testing.T) {
	dir := t.TempDir()
	synthSavepoint(t, dir, 3000, 1)
	sp := openDir(t, dir)
	op := sp.Meta.Operators[0]
	h := op.Subtasks[0].ManagedKeyed.(*KeyGroupsHandle)
	lo := &KeyGroupsHandle{Tag: h.Tag, StartKeyGroup: 0, Offsets: h.Offsets[:64], Delegate: h.Delegate}
	hi := &KeyGroupsHandle{Tag: h.Tag, StartKeyGroup: 64, Offsets: h.Offsets[64:], Delegate: h.Delegate}
	op.Parallelism = 2
	op.Subtasks = []*SubtaskState{{Index: 0, ManagedKeyed: lo}, {Index: 1, ManagedKeyed: hi}}
	rewriteMetadata(t, dir, sp)
	sp = openDir(t, dir)
	probs, stats := Check(context.Background(), sp, CheckOptions{})
	if len(probs) != 0 || stats.Entries != 3000 {
		t.Fatalf("%d problems (first %v), %+v", len(probs), probs[:min(1, len(probs))], stats)
	}
}
