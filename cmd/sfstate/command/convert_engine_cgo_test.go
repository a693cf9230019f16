//go:build cgo

package command

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/internal/bench/fillstate"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify/restore"
)

// TestConvertEngineCheckpointCLI converts a native checkpoint of the
// engine taken with a schema, named as chk-N and as its job directory:
// the output checks clean and verifies; a checkpoint without schema is
// refused as unsupported (exit 4); no scratch is left.
func TestConvertEngineCheckpointCLI(t *testing.T) {
	ctx := context.Background()
	bes, schema, _, total, err := restore.GenerateBackends(restore.GenOptions{Keys: 1500, Parallelism: 2, MaxParallelism: 64, Now: 1_750_000_000_000, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	job := t.TempDir()
	st, _ := s3.NewLocal(job)
	_, err = checkpoint.New(st, checkpoint.Options{Schema: schema}).TakeSync(ctx, bes, 3)
	for _, be := range bes {
		be.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	for _, src := range []string{filepath.Join(job, "chk-3"), job} {
		dst := filepath.Join(t.TempDir(), "out")
		out, errOut, code := run(t, "convert", src, "--to", "canonical", "--out", dst, "--temp-dir", tmp)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", src, code, errOut)
		}
		if !strings.Contains(out, "content verified before publishing: "+strconv.FormatInt(total, 10)+" entries") || !strings.Contains(out, "engine checkpoint 3") {
			t.Fatalf("%s: output\n%s", src, out)
		}
		if _, errOut, code := run(t, "check", dst); code != ExitOK {
			t.Fatalf("check: exit %d: %s", code, errOut)
		}
		if info, _, code := run(t, "inspect", dst); code != ExitOK || !strings.Contains(info, "CANONICAL") {
			t.Fatalf("inspect: exit %d:\n%s", code, info)
		}
		if _, errOut, code := run(t, "verify", dst); code != ExitOK {
			t.Fatalf("verify: exit %d: %s", code, errOut)
		}
		if _, _, code := run(t, "diff", dst, dst); code != ExitOK {
			t.Fatalf("diff with itself: exit %d", code)
		}
	}
	js, errOut, code := run(t, "--json", "convert", job, "--to", "canonical", "--out", filepath.Join(t.TempDir(), "out"), "--temp-dir", tmp)
	if code != ExitOK {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	checkSchema(t, "convert-engine", "sfstate convert --json (native checkpoint of the engine)", js)
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("scratch left: %v", ents)
	}

	plain := t.TempDir()
	pst, _ := s3.NewLocal(plain)
	id, err := fillstate.Checkpointed(ctx, fillstate.Config{MaxParallelism: 32, Parallelism: 2, Keys: 300, ValueSize: 8}, t.TempDir(), pst, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code = run(t, "convert", filepath.Join(plain, checkpoint.Dir(id)), "--to", "canonical", "--out", filepath.Join(t.TempDir(), "out"))
	if code != ExitUnsupported || !strings.Contains(errOut, "without a schema") {
		t.Fatalf("checkpoint without schema: exit %d: %s", code, errOut)
	}
}
