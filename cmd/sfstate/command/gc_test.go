package command

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// TestGCHelperProcess is not a test: the interrupt tests run the CLI in a
// child process through it.
func TestGCHelperProcess(t *testing.T) {
	if os.Getenv("SFSTATE_GC_TEST_CHILD") != "1" {
		t.Skip("child process entry point")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(Main(append([]string{"sfstate"}, args...), os.Stdout, os.Stderr))
}

func childCLI(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestGCHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "SFSTATE_GC_TEST_CHILD=1")
	return cmd
}

// treeFiles lists the regular files below dir (relative paths), sorted.
func treeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			r, _ := filepath.Rel(dir, p)
			out = append(out, r)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// treeDigest hashes names and contents of the files below dir, skipping
// scratch entries.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	for _, f := range treeFiles(t, dir) {
		if isScratchName(filepath.Base(f)) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(f + "\x00"))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestGCRemovesOnlyOldScratch(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	mk := func(p string, age time.Time) string {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(full, age, age)
		os.Chtimes(filepath.Dir(full), age, age)
		return full
	}
	mk(s3.ScratchPrefix+"verify-1/a/b", old)                   // old scratch dir: goes
	mk("sp/."+s3.ScratchPrefix+"123", old)                     // old unfinished write: goes
	mk("sp/_metadata", old)                                    // not scratch
	mk("sp/keyed-0", old)                                      // not scratch
	mk(s3.ScratchPrefix+"fresh/f", time.Now())                 // too young
	mk(s3.ScratchPrefix+"pub/_metadata", old)                  // holds _metadata
	mk("sfstate-bench-x/f", old)                               // other prefix
	mk("other/"+s3.ScratchPrefix+"migrate-9/scratch/sst", old) // nested: goes
	// Directories changed when their entries were made: age everything
	// but the fresh tree.
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != root && !strings.Contains(p, "fresh") {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	before := treeFiles(t, root)

	out, errOut, code := runKG(t, "gc", "--dry-run", root)
	if code != ExitOK || strings.Count(out, "would remove ") != 4 || !strings.Contains(out, "holds a _metadata") || !strings.Contains(out, "--min-age") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if got := treeFiles(t, root); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Fatalf("dry run removed files: %v", got)
	}
	if out, errOut, code = runKG(t, "gc", root); code != ExitOK {
		t.Fatalf("gc: exit %d: %s", code, errOut)
	}
	got := strings.Join(treeFiles(t, root), ",")
	keep := []string{"sfstate-bench-x/f", "sp/_metadata", "sp/keyed-0", s3.ScratchPrefix + "fresh/f", s3.ScratchPrefix + "pub/_metadata"}
	sort.Strings(keep)
	want := strings.Join(keep, ",")
	if got != want {
		t.Fatalf("after gc:\n%s\nwant\n%s\n%s", got, want, out)
	}
	if _, err := os.Stat(filepath.Join(root, s3.ScratchPrefix+"verify-1")); !os.IsNotExist(err) {
		t.Fatal("scratch directory itself not removed")
	}
	if _, _, code := runKG(t, "gc", "--min-age", "0", root); code != ExitOK {
		t.Fatal(code)
	}
	if got := strings.Join(treeFiles(t, root), ","); strings.Contains(got, "fresh") || !strings.Contains(got, "pub/_metadata") {
		t.Fatalf("--min-age 0: %s", got)
	}
	if _, _, code := runKG(t, "gc", filepath.Join(root, "missing")); code != ExitIO {
		t.Fatalf("missing dir: exit %d", code)
	}
}

// genSavepoint writes a generated canonical savepoint big enough that
// rewriting it takes a noticeable time.
func genSavepoint(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := scanbench.Generate(dir, 1_500_000); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitFor polls until cond holds or the child exits.
func waitFor(t *testing.T, cmd *exec.Cmd, done <-chan error, cond func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("child ended before the signal: %v", err)
		default:
		}
		if cond() {
			return true
		}
	}
	cmd.Process.Kill()
	t.Fatal("timed out")
	return false
}

// TestInterruptedRescaleLeavesNothing: SIGINT during `rescale
// --merge-files` exits 130 and removes every file the run wrote.
func TestInterruptedRescaleLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a large savepoint")
	}
	src := genSavepoint(t)
	dst := filepath.Join(t.TempDir(), "out")
	cmd := childCLI(t, "rescale", "-p", "3", "--merge-files", "--out", dst, src)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, cmd, done, func() bool { return len(treeFiles(t, dst)) > 0 })
	cmd.Process.Signal(syscall.SIGINT)
	err := <-done
	if cmd.ProcessState.ExitCode() != ExitInterrupted {
		t.Fatalf("exit %v, want %d: %s", err, ExitInterrupted, stderr.String())
	}
	if left := treeFiles(t, dst); len(left) != 0 {
		t.Fatalf("interrupted run left %v", left)
	}
}

// TestKilledRescaleRerun: a run killed with SIGKILL never published
// `_metadata`; a second run succeeds and equals an uninterrupted run byte
// for byte; gc then removes leftover scratch without touching the result.
func TestKilledRescaleRerun(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a large savepoint")
	}
	src := genSavepoint(t)
	dst := filepath.Join(t.TempDir(), "out")
	cmd := childCLI(t, "rescale", "-p", "3", "--merge-files", "--out", dst, src)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, cmd, done, func() bool {
		for _, f := range treeFiles(t, dst) {
			if strings.HasPrefix(f, "keyed-") {
				return true
			}
		}
		return false
	})
	cmd.Process.Kill()
	<-done
	if _, err := os.Stat(filepath.Join(dst, savepoint.MetadataName)); !os.IsNotExist(err) {
		t.Fatalf("killed run published _metadata: %v", err)
	}
	t.Logf("killed run left %v", treeFiles(t, dst))
	// A leftover of an unfinished write, as a kill during a Put leaves it.
	leftover := filepath.Join(dst, "."+s3.ScratchPrefix+"killed")
	os.WriteFile(leftover, []byte("partial"), 0o644)

	if _, errOut, code := runKG(t, "rescale", "-p", "3", "--merge-files", "--out", dst, src); code != ExitOK {
		t.Fatalf("rerun: exit %d: %s", code, errOut)
	}
	clean := filepath.Join(t.TempDir(), "clean")
	if _, errOut, code := runKG(t, "rescale", "-p", "3", "--merge-files", "--out", clean, src); code != ExitOK {
		t.Fatalf("clean run: exit %d: %s", code, errOut)
	}
	if treeDigest(t, dst) != treeDigest(t, clean) {
		t.Fatalf("rerun differs from a clean run:\n%v\n%v", treeFiles(t, dst), treeFiles(t, clean))
	}
	if out, errOut, code := runKG(t, "gc", "--min-age", "0", dst); code != ExitOK || !strings.Contains(out, "removed ") {
		t.Fatalf("gc: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatal("gc kept the leftover")
	}
	if got, want := strings.Join(treeFiles(t, dst), ","), strings.Join(treeFiles(t, clean), ","); got != want {
		t.Fatalf("after gc: %s, want %s", got, want)
	}
	if _, errOut, code := runKG(t, "check", "--read-data", dst); code != ExitOK {
		t.Fatalf("check after gc: exit %d: %s", code, errOut)
	}
}
