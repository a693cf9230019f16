package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint"
)

// flipEachFile flips the last byte of every regular file in dir except the
// sums file, one at a time, and asserts that `check --read-data` fails
// naming that file while a plain check does not compare hashes.
func flipEachFile(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	flipped := 0
	for _, e := range ents {
		if e.IsDir() || e.Name() == savepoint.SumsName {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		orig := append([]byte(nil), b...)
		b[len(b)/2] ^= 0x10
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := runKG(t, "check", "--metadata-only", "--read-data", dir)
		if code != ExitCheckFailed || !strings.Contains(out, e.Name()+": content changed") {
			t.Errorf("flipped byte in %s: exit %d\n%s%s", e.Name(), code, out, errOut)
		}
		flipped++
		if err := os.WriteFile(p, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if flipped < 2 {
		t.Fatalf("only %d files to flip in %s", flipped, dir)
	}
	if out, errOut, code := runKG(t, "check", "--read-data", dir); code != ExitOK || !strings.Contains(out, savepoint.SumsName) {
		t.Fatalf("restored copy: exit %d\n%s%s", code, out, errOut)
	}
}

// TestSumsRescaleOutput: every file of a savepoint written by rescale
// (--copy, and --merge-files which rewrites the keyed files) is covered by
// the sums file; a grown file is found without --read-data.
func TestSumsRescaleOutput(t *testing.T) {
	src := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	for _, mode := range [][]string{{"--copy"}, {"--merge-files"}} {
		t.Run(mode[0], func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			args := append(append([]string{"rescale", "-p", "2"}, mode...), "--out", dst, src)
			if _, errOut, code := runKG(t, args...); code != ExitOK {
				t.Fatalf("rescale: exit %d: %s", code, errOut)
			}
			if _, err := os.Stat(filepath.Join(dst, savepoint.SumsName)); err != nil {
				t.Fatalf("no sums file: %v", err)
			}
			flipEachFile(t, dst)
			f := filepath.Join(dst, "_metadata")
			b, _ := os.ReadFile(f)
			os.WriteFile(f, append(b, 0), 0o644)
			out, _, code := runKG(t, "check", "--metadata-only", dst)
			if code != ExitCheckFailed || !strings.Contains(out, "_sfstate_sums records") {
				t.Fatalf("grown _metadata, sizes only: exit %d\n%s", code, out)
			}
		})
	}
}

// TestSumsRecordFlinkFixture: --record on a copy of a Flink savepoint, then
// a flipped byte in any file is found with --read-data; --record does not
// replace the file unless asked and changes nothing else.
func TestSumsRecordFlinkFixture(t *testing.T) {
	dir := inspectCopyDir(t, fixtureSavepoint(t, "flink1.20-hashmap-canonical-valuestate-timers"))
	before := inspectHashTree(t, dir)
	if _, errOut, code := runKG(t, "check", "--record", dir); code != ExitOK || !strings.Contains(errOut, "recorded sums") {
		t.Fatalf("record: exit %d: %s", code, errOut)
	}
	sums := filepath.Join(dir, savepoint.SumsName)
	rec, err := os.ReadFile(sums)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(sums)
	if inspectHashTree(t, dir) != before {
		t.Fatal("--record changed files other than the sums file")
	}
	if err := os.WriteFile(sums, rec, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runKG(t, "check", "--record", dir); code != ExitIO || !strings.Contains(errOut, "already has a sums file") {
		t.Fatalf("second record: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runKG(t, "check", "--record", "--record-overwrite", dir); code != ExitOK {
		t.Fatalf("record-overwrite: exit %d: %s", code, errOut)
	}
	if again, _ := os.ReadFile(sums); string(again) != string(rec) {
		t.Fatal("re-recorded sums differ for unchanged content")
	}
	flipEachFile(t, dir)
	if _, _, code := runKG(t, "check", "--read-data-subset", "0/3", dir); code != ExitUsage {
		t.Fatalf("bad subset: exit %d", code)
	}
	for k := 1; k <= 3; k++ {
		if _, errOut, code := runKG(t, "check", "--read-data-subset", string(rune('0'+k))+"/3", dir); code != ExitOK {
			t.Fatalf("subset %d/3: exit %d: %s", k, code, errOut)
		}
	}
}
