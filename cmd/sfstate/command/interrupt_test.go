//go:build cgo

package command

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/stateexport"
	"github.com/sfstate/sfstate/verify"
)

// Interrupt and crash tests of the writing commands besides rescale
// (gc_test.go has rescale's): verify --temp-dir, migrate, convert, and
// export to a directory and to S3. Each runs the CLI in a child process
// and stops it mid-run:
//
//   - SIGINT or SIGTERM: exit 130; scratch directories and the outputs of
//     the run that were not published are gone; no multipart upload is
//     pending.
//   - SIGKILL: nothing is published; what is left carries the scratch
//     prefix (or is an unpublished data file a rerun overwrites), `sfstate
//     gc` removes the scratch, and a rerun gives the result of an
//     undisturbed run.

// childRun is a CLI child process.
type childRun struct {
	cmd    *exec.Cmd
	done   chan error
	stderr bytes.Buffer
}

func startChild(t *testing.T, args ...string) *childRun {
	t.Helper()
	c := &childRun{cmd: childCLI(t, args...), done: make(chan error, 1)}
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	return c
}

// stopWhen waits until cond holds (failing the test when the child ends
// first), sends sig and returns the exit code (-1: killed by the signal).
func (c *childRun) stopWhen(t *testing.T, sig syscall.Signal, cond func() bool) int {
	t.Helper()
	waitFor(t, c.cmd, c.done, cond)
	start := time.Now()
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		t.Fatalf("still running 30s after %v", sig)
	}
	if sig != syscall.SIGKILL {
		t.Logf("%v: stopped in %v", sig, time.Since(start).Round(time.Millisecond))
	}
	return c.cmd.ProcessState.ExitCode()
}

// interrupted asserts the exit of a run stopped by SIGINT/SIGTERM.
func (c *childRun) interrupted(t *testing.T, code int) {
	t.Helper()
	msg := strings.TrimSpace(c.stderr.String())
	if code != ExitInterrupted || strings.Contains(msg, "\n") || !strings.Contains(msg, "interrupted") {
		t.Fatalf("exit %d, want %d with a one-line message: %q", code, ExitInterrupted, msg)
	}
}

// scratchLeft returns the files below dir, failing the test for any that
// lies outside an entry with the scratch prefix.
func scratchLeft(t *testing.T, dir string) []string {
	t.Helper()
	files := treeFiles(t, dir)
	for _, f := range files {
		scratch := false
		for _, seg := range strings.Split(filepath.ToSlash(f), "/") {
			scratch = scratch || isScratchName(seg)
		}
		if !scratch {
			t.Errorf("%s: %s has no %s prefix", dir, f, s3.ScratchPrefix)
		}
	}
	return files
}

// gcNow runs `sfstate gc --min-age 0` on target.
func gcNow(t *testing.T, extra []string, target string) string {
	t.Helper()
	o, e, code := runKG(t, append(append([]string{}, extra...), "gc", "--min-age", "0", target)...)
	if code != ExitOK {
		t.Fatalf("gc %s: exit %d\n%s%s", target, code, o, e)
	}
	return o
}

func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Fatalf("%s holds %v", dir, names)
	}
}

func hasFiles(t *testing.T, dir string) func() bool {
	return func() bool { return len(treeFiles(t, dir)) > 0 }
}

// genCanonical writes a generated canonical savepoint of n entries.
func genCanonical(t *testing.T, n int64) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := scanbench.Generate(dir, n); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInterruptVerifyTempDir: verify restores into scratch directories
// under --temp-dir; an interrupted run removes them, a killed run's are
// removed by gc, and a rerun reports the clean run's digests.
func TestInterruptVerifyTempDir(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a savepoint and restores it in child processes")
	}
	src := genCanonical(t, 100_000)
	tmp := t.TempDir()
	args := func(digest string) []string {
		return []string{"verify", "--backends", "rocksdb", "--parallelism", "2", "--temp-dir", tmp, "--digest-out", digest, src}
	}
	dir := t.TempDir()
	start := time.Now()
	if o, e, code := runKG(t, args(filepath.Join(dir, "clean.json"))...); code != ExitOK {
		t.Fatalf("clean run: exit %d\n%s%s", code, o, e)
	}
	t.Logf("clean run %v", time.Since(start).Round(time.Millisecond))
	want := readReportFile(t, filepath.Join(dir, "clean.json"))
	emptyDir(t, tmp)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		c := startChild(t, args(filepath.Join(dir, "int.json"))...)
		c.interrupted(t, c.stopWhen(t, sig, hasFiles(t, tmp)))
		emptyDir(t, tmp)
		if _, err := os.Stat(filepath.Join(dir, "int.json")); !os.IsNotExist(err) {
			t.Fatalf("%v: interrupted run wrote its report: %v", sig, err)
		}
	}
	c := startChild(t, args(filepath.Join(dir, "kill.json"))...)
	c.stopWhen(t, syscall.SIGKILL, hasFiles(t, tmp))
	if left := scratchLeft(t, tmp); len(left) == 0 {
		t.Log("killed run left nothing")
	}
	gcNow(t, nil, tmp)
	emptyDir(t, tmp)
	if o, e, code := runKG(t, args(filepath.Join(dir, "rerun.json"))...); code != ExitOK {
		t.Fatalf("rerun: exit %d\n%s%s", code, o, e)
	}
	got := readReportFile(t, filepath.Join(dir, "rerun.json"))
	if err := sameDigest(want, got); err != nil || !got.OK {
		t.Fatalf("rerun (ok %v) differs from the clean run: %v", got.OK, err)
	}
	emptyDir(t, tmp)
}

// migrateJournalRefs returns the journal entries under a migration's
// destination and the objects they reference.
func migrateJournalRefs(t *testing.T, dst string) map[string]bool {
	t.Helper()
	refs := map[string]bool{}
	for _, f := range treeFiles(t, dst) {
		f = filepath.ToSlash(f)
		if !strings.Contains(f, "/_migrate/") || isScratchName(filepath.Base(f)) {
			continue
		}
		refs[f] = true
		b, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Subtask struct {
				Shared, Private []struct{ Key string }
			}
		}
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("journal %s: %v", f, err)
		}
		for _, o := range append(e.Subtask.Shared, e.Subtask.Private...) {
			refs[o.Key] = true
		}
	}
	return refs
}

// migratedDigest is verify's digest of checkpoint 1 in a migration's
// destination.
func migratedDigest(t *testing.T, dst string) *verify.Report {
	t.Helper()
	f := filepath.Join(t.TempDir(), "digest.json")
	if o, e, code := runKG(t, "verify", "--backends", "none", "--digest-out", f, filepath.Join(dst, "chk-1")); code != ExitOK {
		t.Fatalf("verify %s: exit %d\n%s%s", dst, code, o, e)
	}
	return readReportFile(t, f)
}

// TestInterruptMigrate: an interrupted migration removes its work
// directories and leaves at the destination only what its journal
// records (finished subtasks a rerun resumes from); a killed one's scratch
// goes with gc; a rerun resumes and equals an undisturbed migration.
func TestInterruptMigrate(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a checkpoint and migrates it in child processes")
	}
	src := t.TempDir()
	st, err := s3.NewLocal(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.GenerateCheckpoint(context.Background(), st, migrate.GenConfig{Subtasks: 4, Keys: 2000, Rows: 120_000,
		Payload: 32, OtherEntries: 1000, Seed: 1, WorkDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	args := func(dst string) []string {
		return []string{"migrate", "--parallel", "1", "--work-dir", work, src, dst}
	}
	root := t.TempDir()
	clean := filepath.Join(root, "clean")
	start := time.Now()
	if o, e, code := runKG(t, args(clean)...); code != ExitOK {
		t.Fatalf("clean run: exit %d\n%s%s", code, o, e)
	}
	t.Logf("clean run %v", time.Since(start).Round(time.Millisecond))
	emptyDir(t, work)
	want := migratedDigest(t, clean)
	meta := filepath.Join("chk-1", savepoint.MetadataName)
	check := func(name, dst string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(dst, meta)); !os.IsNotExist(err) {
			t.Fatalf("%s: %s published: %v", name, meta, err)
		}
		o, e, code := runKG(t, args(dst)...)
		if code != ExitOK {
			t.Fatalf("%s: rerun: exit %d\n%s%s", name, code, o, e)
		}
		t.Logf("%s: rerun: %q", name, strings.SplitN(o, "\n", 3)[:2])
		// RocksDB's files carry session ids: the runs agree in content.
		if err := sameDigest(want, migratedDigest(t, dst)); err != nil {
			t.Fatalf("%s: rerun differs from a clean run: %v", name, err)
		}
		if got, want := strings.Join(treeFiles(t, dst), ","), strings.Join(treeFiles(t, clean), ","); got != want {
			t.Fatalf("%s: rerun wrote\n%s\na clean run\n%s", name, got, want)
		}
		emptyDir(t, work)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		dst := filepath.Join(root, "int-"+sig.String())
		c := startChild(t, args(dst)...)
		cond := hasFiles(t, work)
		if sig == syscall.SIGTERM {
			// Once a subtask is journaled and the next is under way.
			cond = func() bool { return len(migrateJournalRefs(t, dst)) > 0 && len(treeFiles(t, work)) > 0 }
		}
		c.interrupted(t, c.stopWhen(t, sig, cond))
		emptyDir(t, work)
		refs := migrateJournalRefs(t, dst)
		if sig == syscall.SIGTERM && len(refs) == 0 {
			t.Errorf("%v: the journal of the finished subtask is gone", sig)
		}
		for _, f := range treeFiles(t, dst) {
			if !refs[filepath.ToSlash(f)] {
				t.Errorf("%v: %s is in no journal entry", sig, f)
			}
		}
		if sig == syscall.SIGTERM { // a rerun resumes (the SIGINT run stopped before any journal)
			check(sig.String(), dst)
		}
	}
	// Killed once a subtask is journaled and the next is under way.
	dst := filepath.Join(root, "kill")
	c := startChild(t, args(dst)...)
	c.stopWhen(t, syscall.SIGKILL, func() bool { return len(migrateJournalRefs(t, dst)) > 0 && len(treeFiles(t, work)) > 0 })
	if left := scratchLeft(t, work); len(left) == 0 {
		t.Error("killed run left no scratch in --work-dir (killed between subtasks?)")
	}
	gcNow(t, nil, work)
	emptyDir(t, work)
	gcNow(t, nil, dst)
	check("kill", dst)
}

// TestInterruptConvert: an interrupted convert removes the files it wrote;
// after a kill nothing is published, gc removes the unfinished write and a
// rerun equals an undisturbed run.
func TestInterruptConvert(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a savepoint and converts it in child processes")
	}
	src := t.TempDir()
	if _, err := scanbench.GenerateLayout(src, 100_000, true); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	args := func(dst string) []string { return []string{"convert", "--to", "canonical", "--out", dst, src} }
	clean := filepath.Join(root, "clean")
	start := time.Now()
	if o, e, code := runKG(t, args(clean)...); code != ExitOK {
		t.Fatalf("clean run: exit %d\n%s%s", code, o, e)
	}
	t.Logf("clean run %v", time.Since(start).Round(time.Millisecond))
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		dst := filepath.Join(root, "int-"+sig.String())
		c := startChild(t, args(dst)...)
		c.interrupted(t, c.stopWhen(t, sig, hasFiles(t, dst)))
		if left := treeFiles(t, dst); len(left) > 0 {
			t.Fatalf("%v: interrupted run left %v", sig, left)
		}
	}
	dst := filepath.Join(root, "kill")
	c := startChild(t, args(dst)...)
	c.stopWhen(t, syscall.SIGKILL, hasFiles(t, dst))
	if _, err := os.Stat(filepath.Join(dst, savepoint.MetadataName)); !os.IsNotExist(err) {
		t.Fatalf("killed run published _metadata: %v", err)
	}
	t.Logf("killed run left %v", treeFiles(t, dst))
	gcNow(t, nil, dst)
	for _, f := range treeFiles(t, dst) {
		if isScratchName(filepath.Base(f)) {
			t.Errorf("gc kept %s", f)
		}
	}
	if o, e, code := runKG(t, args(dst)...); code != ExitOK {
		t.Fatalf("rerun: exit %d\n%s%s", code, o, e)
	}
	if got, want := strings.Join(treeFiles(t, dst), ","), strings.Join(treeFiles(t, clean), ","); got != want || treeDigest(t, dst) != treeDigest(t, clean) {
		t.Fatalf("rerun differs from a clean run:\n%s\n%s", got, want)
	}
	if _, e, code := runKG(t, "check", "--read-data", dst); code != ExitOK {
		t.Fatalf("check --read-data: exit %d: %s", code, e)
	}
}

// TestInterruptExportDir: an interrupted export to a directory removes
// the tables it wrote; after a kill there is no manifest, gc removes the
// unfinished write, and a rerun equals an undisturbed export.
func TestInterruptExportDir(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a savepoint and exports it in child processes")
	}
	src := genCanonical(t, 100_000)
	root := t.TempDir()
	args := func(dst string) []string { return []string{"export", "--format", "jsonl", "--out", dst, src} }
	clean := filepath.Join(root, "clean")
	start := time.Now()
	if o, e, code := runKG(t, args(clean)...); code != ExitOK {
		t.Fatalf("clean run: exit %d\n%s%s", code, o, e)
	}
	t.Logf("clean run %v", time.Since(start).Round(time.Millisecond))
	mkey := stateexport.ManifestKey(verify.Shard{})
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		dst := filepath.Join(root, "int-"+sig.String())
		c := startChild(t, args(dst)...)
		c.interrupted(t, c.stopWhen(t, sig, hasFiles(t, dst)))
		if left := treeFiles(t, dst); len(left) > 0 {
			t.Fatalf("%v: interrupted run left %v", sig, left)
		}
	}
	dst := filepath.Join(root, "kill")
	c := startChild(t, args(dst)...)
	c.stopWhen(t, syscall.SIGKILL, hasFiles(t, dst))
	if _, err := os.Stat(filepath.Join(dst, mkey)); !os.IsNotExist(err) {
		t.Fatalf("killed run published %s: %v", mkey, err)
	}
	t.Logf("killed run left %v", treeFiles(t, dst))
	gcNow(t, nil, dst)
	for _, f := range treeFiles(t, dst) {
		if isScratchName(filepath.Base(f)) {
			t.Errorf("gc kept %s", f)
		}
	}
	if o, e, code := runKG(t, args(dst)...); code != ExitOK {
		t.Fatalf("rerun: exit %d\n%s%s", code, o, e)
	}
	if got, want := strings.Join(treeFiles(t, dst), ","), strings.Join(treeFiles(t, clean), ","); got != want || treeDigest(t, dst) != treeDigest(t, clean) {
		t.Fatalf("rerun differs from a clean run:\n%s\n%s", got, want)
	}
}

// TestInterruptExportS3: the export's large table goes up as a multipart
// upload; SIGINT in the middle of it aborts the upload and removes the
// objects already written, SIGKILL leaves the upload pending until gc
// aborts it, and a rerun equals an undisturbed export.
func TestInterruptExportS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway and Toxiproxy, exports in child processes")
	}
	src := genCanonical(t, 100_000)
	r := newCmdFaultRig(t)
	args := func(prefix string) []string {
		return []string{"--s3-endpoint", r.endpoint, "export", "--format", "jsonl", "--out", r.url(prefix), src}
	}
	r.ctr.Arm(nil)
	start := time.Now()
	if o, e, code := runKG(t, args("clean")...); code != ExitOK {
		t.Fatalf("clean run: exit %d\n%s%s", code, o, e)
	}
	n, _ := r.ctr.Disarm()
	t.Logf("clean run %v: %+v", time.Since(start).Round(time.Millisecond), n)
	if n.MultipartStarts == 0 || n.Parts < 2 || n.Completes == 0 {
		t.Fatalf("the export made no multipart upload: %+v", n)
	}
	want := r.hashes(t, "clean")
	inPart := func() bool { return r.ctr.Counts().Parts > 0 }
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		prefix := "int-" + sig.String()
		r.ctr.Arm(nil)
		cond := inPart
		if sig == syscall.SIGTERM {
			// Once the large table is complete: the signal arrives while
			// the _states table is sent, which the counter holds.
			var once sync.Once
			held := make(chan struct{})
			r.ctr.SetHook(func(req *http.Request) {
				if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/"+stateexport.StatesTable+"/") {
					once.Do(func() { close(held) })
					time.Sleep(300 * time.Millisecond)
				}
			})
			cond = func() bool {
				select {
				case <-held:
					return true
				default:
					return false
				}
			}
		}
		c := startChild(t, args(prefix)...)
		c.interrupted(t, c.stopWhen(t, sig, cond))
		r.ctr.SetHook(nil)
		r.ctr.Disarm()
		if ups := r.pendingUploads(t); len(ups) > 0 {
			t.Fatalf("%v: pending multipart uploads %v", sig, ups)
		}
		if left := r.keys(t, prefix); len(left) > 0 {
			t.Fatalf("%v: interrupted run left %v", sig, left)
		}
	}
	prefix := "kill"
	r.ctr.Arm(nil)
	c := startChild(t, args(prefix)...)
	c.stopWhen(t, syscall.SIGKILL, inPart)
	r.ctr.Disarm()
	mkey := prefix + "/" + stateexport.ManifestKey(verify.Shard{})
	if r.exists(t, mkey) {
		t.Fatalf("killed run published %s", mkey)
	}
	ups := r.pendingUploads(t)
	t.Logf("killed run left %v and pending uploads %v", r.keys(t, prefix), ups)
	if len(ups) > 0 {
		// A fresh upload may be another writer's, still running: kept.
		o, e, code := runKG(t, "--s3-endpoint", r.srv.Endpoint, "gc", r.url(prefix))
		if code != ExitOK || !strings.Contains(o, "kept ") || len(r.pendingUploads(t)) != len(ups) {
			t.Fatalf("gc with the default --min-age: exit %d\n%s%s", code, o, e)
		}
	}
	out := gcNow(t, []string{"--s3-endpoint", r.srv.Endpoint}, r.url(prefix))
	if len(ups) > 0 && !strings.Contains(out, "unfinished multipart upload") {
		t.Errorf("gc did not report the pending upload:\n%s", out)
	}
	if ups := r.pendingUploads(t); len(ups) > 0 {
		t.Fatalf("pending uploads after gc: %v", ups)
	}
	if o, e, code := runKG(t, args(prefix)...); code != ExitOK {
		t.Fatalf("rerun: exit %d\n%s%s", code, o, e)
	}
	got := r.hashes(t, prefix)
	if len(got) != len(want) {
		t.Fatalf("rerun wrote %d objects, a clean run %d", len(got), len(want))
	}
	for k, h := range want {
		if got[prefix+strings.TrimPrefix(k, "clean")] != h {
			t.Errorf("rerun: %s differs from a clean run", k)
		}
	}
}

// TestInterruptConvertS3: a conversion whose output goes to S3, stopped
// by SIGINT or SIGTERM once its data file is stored, leaves no object and no pending
// multipart upload under its prefix; a killed one publishes no
// `_metadata`, and after gc a rerun writes what an undisturbed run writes.
func TestInterruptConvertS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway and Toxiproxy, converts in child processes")
	}
	src := t.TempDir()
	if _, err := scanbench.GenerateLayout(src, 100_000, true); err != nil {
		t.Fatal(err)
	}
	r := newCmdFaultRig(t)
	args := func(prefix string) []string {
		return []string{"--s3-endpoint", r.endpoint, "convert", "--to", "canonical", "--out", r.url(prefix), src}
	}
	r.ctr.Arm(nil)
	if o, e, code := runKG(t, args("clean")...); code != ExitOK {
		t.Fatalf("clean run: exit %d\n%s%s", code, o, e)
	}
	n, _ := r.ctr.Disarm()
	t.Logf("clean run: %+v", n)
	if n.Writes == 0 {
		t.Fatalf("the conversion wrote nothing: %+v", n)
	}
	want := r.hashes(t, "clean")
	// Stopped once the data file is stored (the sums file and `_metadata`
	// come after it).
	stored := func(prefix string) func() bool { return func() bool { return len(r.keys(t, prefix)) > 0 } }
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		prefix := "int-" + sig.String()
		r.ctr.Arm(nil)
		c := startChild(t, args(prefix)...)
		c.interrupted(t, c.stopWhen(t, sig, stored(prefix)))
		r.ctr.Disarm()
		if ups := r.pendingUploads(t); len(ups) > 0 {
			t.Fatalf("%v: pending multipart uploads %v", sig, ups)
		}
		if left := r.keys(t, prefix); len(left) > 0 {
			t.Fatalf("%v: interrupted run left %v", sig, left)
		}
	}
	prefix := "kill"
	r.ctr.Arm(nil)
	c := startChild(t, args(prefix)...)
	c.stopWhen(t, syscall.SIGKILL, stored(prefix))
	r.ctr.Disarm()
	if r.exists(t, prefix+"/"+savepoint.MetadataName) {
		t.Fatalf("killed run published %s/_metadata", prefix)
	}
	t.Logf("killed run left %v, pending uploads %v", r.keys(t, prefix), r.pendingUploads(t))
	gcNow(t, []string{"--s3-endpoint", r.srv.Endpoint}, r.url(prefix))
	if ups := r.pendingUploads(t); len(ups) > 0 {
		t.Fatalf("pending uploads after gc: %v", ups)
	}
	if o, e, code := runKG(t, args(prefix)...); code != ExitOK {
		t.Fatalf("rerun: exit %d\n%s%s", code, o, e)
	}
	got := r.hashes(t, prefix)
	if len(got) != len(want) {
		t.Fatalf("rerun wrote %d objects, a clean run %d", len(got), len(want))
	}
	for k, h := range want {
		if got[prefix+strings.TrimPrefix(k, "clean")] != h {
			t.Errorf("rerun: %s differs from a clean run", k)
		}
	}
}
