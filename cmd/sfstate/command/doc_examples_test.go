//go:build cgo

package command

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify/restore"
)

// docNotRunnable lists the documented command lines this test does not run,
// each with the reason. Everything else in a fenced sh block of README.md
// or docs/**/*.md is run.
var docNotRunnable = map[string]string{
	"make demo": "the demo end to end takes minutes; make demo is its own check",
	"make test": "would run this test suite from inside itself",
}

// docExample is one command line of a fenced sh block.
type docExample struct {
	file string
	line int
	text string // without the trailing comment
	code int    // documented exit code ("# exits N" in the comment), else 0
}

var exitCommentRE = regexp.MustCompile(`\bexits? (\d+)\b`)

// docExamples extracts the command lines of every ```sh block.
func docExamples(t *testing.T, root string) []docExample {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.Walk(filepath.Join(root, "docs"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []docExample
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		in := false
		for i, l := range strings.Split(string(b), "\n") {
			trim := strings.TrimSpace(l)
			switch {
			case !in && (trim == "```sh" || trim == "```shell" || trim == "```bash"):
				in = true
				continue
			case in && strings.HasPrefix(trim, "```"):
				in = false
				continue
			case !in || trim == "" || strings.HasPrefix(trim, "#"):
				continue
			}
			cmd, comment := splitComment(trim)
			ex := docExample{file: rel, line: i + 1, text: cmd}
			if m := exitCommentRE.FindStringSubmatch(comment); m != nil {
				ex.code, _ = strconv.Atoi(m[1])
			}
			out = append(out, ex)
		}
	}
	return out
}

// splitComment cuts a shell comment ('#' starting a word outside quotes).
func splitComment(l string) (string, string) {
	var q byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return strings.TrimSpace(l[:i]), l[i+1:]
		}
	}
	return l, ""
}

// TestDocExamples runs every documented command line with the built binary
// against fixtures (placeholders substituted, s3://bucket/ served by a
// local versitygw) and fails on an exit code other than the documented one.
func TestDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs every documented example")
	}
	root, err := fixtures.Root()
	if err != nil {
		t.Fatal(err)
	}
	fx := fixtures.Require(t)
	examples := docExamples(t, root)
	if len(examples) < 10 {
		t.Fatalf("only %d documented command lines found", len(examples))
	}
	bin := cliBinary(t)
	work := t.TempDir()
	// Placeholders: a copy of a canonical savepoint (commands may write
	// beside it), a native checkpoint store, a bucket-layout source.
	sp := copyFixture(t, filepath.Join("sql-rocksdb-canonical-join-mapstate", "savepoint"))
	chkStore := filepath.Join(work, "checkpoints")
	if err := os.MkdirAll(chkStore, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(copyFixture(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"), filepath.Join(chkStore, "chk-7")); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(work, "src")
	st, err := s3.NewLocal(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.GenerateCheckpoint(context.Background(), st, migrate.GenConfig{Keys: 50, Rows: 2000, Payload: 16, OtherEntries: 300, Seed: 1, WorkDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	// JOB: a job directory holding an engine checkpoint (chk-7, taken with
	// a schema, as `sfstate convert` needs).
	job := filepath.Join(work, "job")
	bes, schema, _, _, err := restore.GenerateBackends(restore.GenOptions{Keys: 200, Parallelism: 2, MaxParallelism: 64, Now: 1_750_000_000_000, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	jst, err := s3.NewLocal(job)
	if err != nil {
		t.Fatal(err)
	}
	_, err = checkpoint.New(jst, checkpoint.Options{Schema: schema}).TakeSync(context.Background(), bes, 7)
	for _, be := range bes {
		be.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	subst := []struct{ re, with string }{
		{`\.\./shared/flink-fixtures`, fx},
		{`\bSAVEPOINT\b`, sp},
		{`\bSP\b`, sp},
		{`\bCHECKPOINT\b`, chkStore},
		{`\bSRC\b`, src},
		{`\bDST\b`, filepath.Join(work, "dst")},
		{`\bJOB\b`, job},
	}
	env := os.Environ()
	needS3 := false
	for _, ex := range examples {
		needS3 = needS3 || strings.Contains(ex.text, "s3://bucket/")
	}
	s3Skip := ""
	if _, err := testutil.FindBinary("versitygw"); needS3 && err != nil && os.Getenv("CI") != "true" {
		s3Skip = err.Error()
		needS3 = false
	}
	if needS3 {
		srv := testutil.StartVersitygw(t)
		ctx := context.Background()
		if err := srv.CreateBucket(ctx, "bucket"); err != nil {
			t.Fatal(err)
		}
		up, err := s3.NewS3(ctx, "bucket", "savepoints/savepoint-1a2b3c", srv.Options("", s3.S3Options{}))
		if err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(sp)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(sp, e.Name()))
			if err != nil || e.IsDir() {
				continue
			}
			if err := up.Put(ctx, e.Name(), bytes.NewReader(b), int64(len(b))); err != nil {
				t.Fatal(err)
			}
		}
		env = append(env, "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey,
			"AWS_REGION="+srv.Region, "SFSTATE_S3_ENDPOINT="+srv.Endpoint)
	}
	env = append(env, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"), "SFSTATE_NO_PROGRESS=1")
	if filepath.Base(bin) != "sfstate" {
		t.Fatalf("SFSTATE_CLI must name a binary called sfstate, got %s", bin)
	}
	ran := 0
	for _, ex := range examples {
		name := fmt.Sprintf("%s:%d", ex.file, ex.line)
		if why, ok := docNotRunnable[ex.text]; ok {
			t.Logf("%s: not run (%s): %s", name, why, ex.text)
			continue
		}
		if s3Skip != "" && strings.Contains(ex.text, "s3://bucket/") {
			t.Logf("%s: not run (no S3 gateway: %s): %s", name, s3Skip, ex.text)
			continue
		}
		if !strings.HasPrefix(ex.text, "sfstate ") {
			t.Errorf("%s: %q is neither an sfstate command nor in docNotRunnable", name, ex.text)
			continue
		}
		line := ex.text
		for _, s := range subst {
			line = regexp.MustCompile(s.re).ReplaceAllLiteralString(line, s.with)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir = work
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ran++
		if code != ex.code {
			t.Errorf("%s: %s\nexit %d, documented %d\nstdout: %.2000s\nstderr: %.2000s", name, ex.text, code, ex.code, stdout.String(), stderr.String())
		}
	}
	if ran == 0 {
		t.Fatal("no documented example ran")
	}
	t.Logf("%d documented command lines ran", ran)
}
