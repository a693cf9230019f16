package command

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

const testJob = "0123456789abcdef0123456789abcdef"

// copyFiles copies the regular files of src into dst (created).
func copyFiles(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
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
}

// checkpointTree builds, at test time, a checkpoint root of one job:
// chk-3 and chk-5 complete (copies of two fixtures), chk-6 in progress
// (no _metadata), shared/ with a file. chk-5 is written last.
func checkpointTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "checkpoints")
	job := filepath.Join(root, testJob)
	copyFiles(t, fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers"), filepath.Join(job, "chk-3"))
	copyFiles(t, fixtureSavepoint(t, "flink1.19-rocksdb-canonical-snappy-compressed"), filepath.Join(job, "chk-5"))
	for _, f := range []string{"chk-6/partial", "shared/some-sst"} {
		p := filepath.Join(job, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x"), 0o644)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(job, "chk-3", savepoint.MetadataName), old, old)
	return root
}

// TestEveryLevelOpens: inspect, check and verify accept a savepoint
// directory, its _metadata, a chk-N directory, a job's checkpoint
// directory and a checkpoint root; for the last two they name the
// checkpoint they picked (stderr note, JSON field), --checkpoint N picks
// another, and a directory without any says so.
func TestEveryLevelOpens(t *testing.T) {
	root := checkpointTree(t)
	job := filepath.Join(root, testJob)
	levels := map[string]string{
		"chk-N":      filepath.Join(job, "chk-5"),
		"_metadata":  filepath.Join(job, "chk-5", savepoint.MetadataName),
		"job":        job,
		"root":       root,
		"root/":      root + "/",
		"file: root": "file://" + root,
	}
	for name, arg := range levels {
		picked := name == "job" || strings.HasPrefix(name, "root") || name == "file: root"
		for _, cmd := range [][]string{{"inspect", "--metadata-only"}, {"check"}, {"verify", "--backends", "none"}} {
			out, errOut, code := run(t, append(cmd, arg)...)
			if code != ExitOK {
				t.Fatalf("%s %v: exit %d: %s%s", name, cmd, code, out, errOut)
			}
			if note := strings.Contains(errOut, "using checkpoint 5: "+filepath.Join(job, "chk-5")); note != picked {
				t.Errorf("%s %v: note %v in %q", name, cmd, note, errOut)
			}
		}
		// --quiet drops the note; --json carries it as a field.
		if _, errOut, _ := run(t, "--quiet", "check", arg); strings.Contains(errOut, "using checkpoint") {
			t.Errorf("%s: note with --quiet: %s", name, errOut)
		}
		out, errOut, code := run(t, "--json", "check", arg)
		var res struct {
			Picked *struct {
				CheckpointID string `json:"checkpointId"`
				Level        string `json:"level"`
			} `json:"picked"`
			OK bool `json:"ok"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || code != ExitOK || !res.OK || strings.Contains(errOut, "using") {
			t.Fatalf("%s --json: %v exit %d %s %s", name, err, code, out, errOut)
		}
		if (res.Picked != nil) != picked || (picked && res.Picked.CheckpointID != "5") {
			t.Errorf("%s --json: picked %+v", name, res.Picked)
		}
		out, _, _ = run(t, "--json", "inspect", "--metadata-only", arg)
		if picked != strings.Contains(out, `"picked"`) {
			t.Errorf("%s: inspect --json picked field: %s", name, out[:min(len(out), 300)])
		}
	}
	// --checkpoint picks another; one that is not complete is refused.
	if _, errOut, code := run(t, "check", "--checkpoint", "3", root); code != ExitOK || !strings.Contains(errOut, "using checkpoint 3") {
		t.Errorf("--checkpoint 3: exit %d %s", code, errOut)
	}
	if _, errOut, code := run(t, "check", "--checkpoint", "6", job); code != ExitIO || !strings.Contains(errOut, "no completed checkpoint 6") {
		t.Errorf("--checkpoint 6: exit %d %s", code, errOut)
	}
	// No savepoint anywhere: a message that is right for local paths.
	for _, arg := range []string{filepath.Join(job, "shared"), t.TempDir()} {
		_, errOut, code := run(t, "inspect", arg)
		if code != ExitIO || !strings.Contains(errOut, "no _metadata (not a savepoint or checkpoint directory)") || strings.Contains(errOut, "object does not exist") {
			t.Errorf("%s: exit %d: %s", arg, code, errOut)
		}
	}
	if _, errOut, code := run(t, "inspect", filepath.Join(root, "missing")); code != ExitIO || !strings.Contains(errOut, "no such file or directory") {
		t.Errorf("missing directory: exit %d: %s", code, errOut)
	}
}

// TestRescaleThenEveryCommand: the output of rescale (absolute URIs into
// the source by default) reads with default flags in inspect, check and
// verify, also when the source was a checkpoint root; the source is
// recorded beside _metadata.
func TestRescaleThenEveryCommand(t *testing.T) {
	root := checkpointTree(t)
	for _, src := range []string{root, fixtureSavepoint(t, "flink1.20-rocksdb-canonical-broadcast-operator-state")} {
		dst := filepath.Join(t.TempDir(), "rescaled")
		out, errOut, code := run(t, "rescale", "-p", "3", "--out", dst, src)
		if code != ExitOK {
			t.Fatalf("rescale %s: exit %d: %s%s", src, code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(dst, savepoint.SourcesName)); err != nil {
			t.Fatalf("no record of the source: %v", err)
		}
		for _, cmd := range [][]string{{"inspect"}, {"check"}, {"verify", "--backends", "none"}, {"inspect", "--dump", "--limit", "3"}} {
			if out, errOut, code := run(t, append(cmd, dst)...); code != ExitOK {
				t.Fatalf("%v of the rescaled %s: exit %d: %s%s", cmd, src, code, out, errOut)
			}
		}
		// Moving the source breaks the references; --map repairs them.
		if src == root {
			moved := filepath.Join(t.TempDir(), "moved")
			if err := os.Rename(root, moved); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := run(t, "check", dst)
			if code != ExitCheckFailed || !strings.Contains(out, "--map") {
				t.Errorf("moved source: exit %d: %s%s", code, out, errOut)
			}
			if out, errOut, code := run(t, "check", "--map", root+"="+moved, dst); code != ExitOK {
				t.Errorf("--map: exit %d: %s%s", code, out, errOut)
			}
			if _, errOut, code := run(t, "check", "--map", "nonsense", dst); code != ExitUsage {
				t.Errorf("bad --map: exit %d: %s", code, errOut)
			}
			os.Rename(moved, root)
		}
	}
}

// TestLsCommand: ls over a directory of links to fixtures and a
// checkpoint tree made at test time: every snapshot, newest first, JSON
// with string ids and RFC 3339 times; shared/ is never entered.
func TestLsCommand(t *testing.T) {
	dir := t.TempDir()
	names := []string{"flink1.20-rocksdb-canonical-valuestate-timers", "flink1.15-rocksdb-canonical-metadata-v3",
		"sql-rocksdb-canonical-join-mapstate", "flink1.20-rocksdb-NATIVE-incremental-for-contrast"}
	for _, n := range names {
		if err := os.Symlink(fixtureSavepoint(t, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	root := checkpointTree(t)
	if err := os.Rename(root, filepath.Join(dir, "checkpoints")); err != nil {
		t.Fatal(err)
	}
	// A savepoint under shared/ would be listed if ls entered it.
	copyFiles(t, fixtureSavepoint(t, names[0]), filepath.Join(dir, "checkpoints", testJob, "shared", "trap"))
	out, errOut, code := run(t, "ls", dir)
	if code != ExitOK {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1+len(names)+2+1 || !strings.Contains(lines[len(lines)-1], "6 snapshots") {
		t.Fatalf("ls output:\n%s", out)
	}
	if !strings.HasSuffix(strings.TrimSpace(lines[1]), "checkpoints/"+testJob+"/chk-5") {
		t.Errorf("newest first: first row %q", lines[1])
	}
	if strings.Contains(out, "trap") || strings.Contains(out, "chk-6") {
		t.Errorf("listed shared/ or an in-progress checkpoint:\n%s", out)
	}
	out, _, code = run(t, "--json", "ls", dir)
	var res struct {
		Snapshots []map[string]any `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != ExitOK || len(res.Snapshots) != 6 {
		t.Fatalf("json: %v exit %d %s", err, code, out)
	}
	var prev time.Time
	for i, s := range res.Snapshots {
		if _, ok := s["checkpointId"].(string); !ok {
			t.Errorf("checkpointId %v is not a string", s["checkpointId"])
		}
		tm, err := time.Parse(time.RFC3339, s["time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && tm.After(prev) {
			t.Errorf("not newest first at %d", i)
		}
		prev = tm
		if s["format"] == "" || s["operators"].(float64) == 0 || s["stateBytes"].(float64) == 0 {
			t.Errorf("row %v", s)
		}
	}
	if res.Snapshots[0]["format"] != "CANONICAL" || res.Snapshots[0]["kind"] != "checkpoint" {
		t.Errorf("first row %v", res.Snapshots[0])
	}
}

// TestLocateOverS3: the same levels, rescale and ls on S3.
func TestLocateOverS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	st, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	local := checkpointTree(t)
	err = filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(local), p)
		return st.Put(ctx, "prod/"+filepath.ToSlash(rel), bytes.NewReader(b), int64(len(b)))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("SFSTATE_S3_ENDPOINT", srv.Endpoint)
	base := "s3://" + srv.Bucket + "/prod/checkpoints"
	for _, arg := range []string{base, base + "/" + testJob, base + "/" + testJob + "/chk-5", base + "/" + testJob + "/chk-5/_metadata"} {
		out, errOut, code := run(t, "check", arg)
		if code != ExitOK || !strings.Contains(out, "chk-5/_metadata: ok") {
			t.Fatalf("check %s: exit %d: %s%s", arg, code, out, errOut)
		}
	}
	if _, errOut, code := run(t, "inspect", base+"/"+testJob+"/shared"); code != ExitIO || !strings.Contains(errOut, "no _metadata (not a savepoint or checkpoint directory)") {
		t.Fatalf("shared/: exit %d: %s", code, errOut)
	}
	// S3 object times have one-second resolution: let the rescaled output
	// be newer than the checkpoints for the listing's order below.
	time.Sleep(1100 * time.Millisecond)
	// Rescale on S3 (views into the source) and into a local directory;
	// both outputs read with default flags.
	for _, dst := range []string{"s3://" + srv.Bucket + "/out/p3", filepath.Join(t.TempDir(), "p3")} {
		if out, errOut, code := run(t, "rescale", "-p", "3", "--out", dst, base); code != ExitOK {
			t.Fatalf("rescale to %s: exit %d: %s%s", dst, code, out, errOut)
		}
		for _, cmd := range [][]string{{"check"}, {"verify", "--backends", "none"}} {
			if out, errOut, code := run(t, append(cmd, dst)...); code != ExitOK {
				t.Fatalf("%v %s: exit %d: %s%s", cmd, dst, code, out, errOut)
			}
		}
	}
	out, errOut, code := run(t, "--json", "ls", "s3://"+srv.Bucket+"/")
	var res struct {
		Snapshots []struct {
			Path string `json:"path"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != ExitOK {
		t.Fatalf("ls: %v exit %d %s%s", err, code, out, errOut)
	}
	var paths []string
	for _, s := range res.Snapshots {
		paths = append(paths, s.Path)
	}
	want := "out/p3 prod/checkpoints/" + testJob + "/chk-5 prod/checkpoints/" + testJob + "/chk-3"
	if strings.Join(paths, " ") != want {
		t.Fatalf("ls s3: %v, want %s", paths, want)
	}
}

// TestRescaleParallelismNoOperatorFits: a parallelism no keyed operator
// allows is a usage error and leaves no output directory.
func TestRescaleParallelismNoOperatorFits(t *testing.T) {
	src := fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	dst := filepath.Join(t.TempDir(), "out")
	_, errOut, code := run(t, "rescale", "-p", "1000", "--out", dst, src)
	if code != ExitUsage || !strings.Contains(errOut, "allows parallelism 1000") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("output directory left behind: %v", err)
	}
	for _, args := range [][]string{
		{"rescale", "-p", "2", "--operator-parallelism", "x", "--out", dst, src},
		{"rescale", "-p", "2", "--operator-parallelism", "no-such-op=2", "--out", dst, src},
	} {
		if _, errOut, code := run(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}
