//go:build cgo

package command

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
)

// convertPairs are native snapshots with the canonical savepoint Flink took
// of the same job with the same backend.
var convertPairs = []struct{ native, twin string }{
	{"flink1.20-hashmap-NATIVE-for-contrast", "flink1.20-hashmap-canonical-valuestate-timers"},
	{"flink1.20-rocksdb-NATIVE-incremental-for-contrast", "flink1.20-rocksdb-canonical-valuestate-timers"},
}

func dumpLines(t *testing.T, dir string) []string {
	t.Helper()
	out, errOut, code := run(t, "inspect", "--dump", dir)
	if code != ExitOK {
		t.Fatalf("inspect --dump %s: exit %d: %s", dir, code, errOut)
	}
	return deepLines(t, out)
}

// TestConvertCLI converts the heap and RocksDB native fixtures: the output
// checks clean, says CANONICAL, dumps like Flink's canonical twin (wall-clock
// timer stamps aside), and is never overwritten by a second run; the source
// is untouched.
func TestConvertCLI(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for _, p := range convertPairs {
		t.Run(p.native, func(t *testing.T) {
			src := inspectCopyDir(t, fixtureSavepoint(t, p.native))
			before := inspectHashTree(t, src)
			dst := filepath.Join(t.TempDir(), "out")
			out, errOut, code := run(t, "convert", src, "--to", "canonical", "--out", dst)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(out, "content verified before publishing: 32 entries") {
				t.Fatalf("output lacks the verification line:\n%s", out)
			}
			if _, errOut, code := run(t, "check", dst); code != ExitOK {
				t.Fatalf("check: exit %d: %s", code, errOut)
			}
			info, _, code := run(t, "inspect", dst)
			if code != ExitOK || !strings.Contains(info, "CANONICAL") {
				t.Fatalf("inspect: exit %d:\n%s", code, info)
			}
			got, want := dumpLines(t, dst), dumpLines(t, fixtureSavepoint(t, p.twin))
			if len(got) != 32 || strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("converted dump (%d lines) differs from the canonical twin (%d lines)", len(got), len(want))
			}
			meta, _ := os.ReadFile(filepath.Join(dst, "_metadata"))
			if _, errOut, code := run(t, "convert", src, "--to", "canonical", "--out", dst); code != ExitUsage || !strings.Contains(errOut, "_metadata") {
				t.Fatalf("second run: exit %d: %s", code, errOut)
			}
			if again, _ := os.ReadFile(filepath.Join(dst, "_metadata")); !bytes.Equal(meta, again) {
				t.Fatal("second run replaced _metadata")
			}
			if inspectHashTree(t, src) != before {
				t.Fatal("source changed")
			}
		})
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

func TestConvertCLIUsage(t *testing.T) {
	src := fixtureSavepoint(t, "flink1.20-hashmap-NATIVE-for-contrast")
	for _, args := range [][]string{
		{"convert", src, "--out", t.TempDir() + "/x"},
		{"convert", src, "--to", "native", "--out", t.TempDir() + "/x"},
		{"convert", "--to", "canonical"},
		{"convert", src, "--to", "canonical", "--out", src},
	} {
		if _, errOut, code := run(t, args...); code != ExitUsage {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
}

// TestConvertCLIS3 converts native snapshots stored on S3 (versitygw) into
// another prefix of the bucket and reads the result back from S3.
func TestConvertCLIS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	st, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("SFSTATE_S3_ENDPOINT", srv.Endpoint)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for i, p := range convertPairs {
		src := fixtureSavepoint(t, p.native)
		prefix := "native" + string(rune('a'+i))
		putDir(t, st, src, prefix)
		srcURL := "s3://" + srv.Bucket + "/" + prefix
		dstURL := "s3://" + srv.Bucket + "/converted-" + prefix
		if _, errOut, code := run(t, "convert", srcURL, "--to", "canonical", "--out", dstURL); code != ExitOK {
			t.Fatalf("%s: exit %d: %s", p.native, code, errOut)
		}
		if _, errOut, code := run(t, "check", dstURL); code != ExitOK {
			t.Fatalf("%s: check: exit %d: %s", p.native, code, errOut)
		}
		got, want := dumpLines(t, dstURL), dumpLines(t, fixtureSavepoint(t, p.twin))
		if len(got) != 32 || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s: converted dump over S3 (%d lines) differs from the canonical twin (%d lines)", p.native, len(got), len(want))
		}
		// The output stands alone: nothing in it points back at the source.
		md, err := st.Get(ctx, "converted-"+prefix+"/_metadata")
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(md)
		md.Close()
		if bytes.Contains(buf.Bytes(), []byte(prefix+"/")) {
			t.Fatalf("%s: converted _metadata names the source prefix", p.native)
		}
		if _, errOut, code := run(t, "convert", srcURL, "--to", "canonical", "--out", dstURL); code != ExitUsage {
			t.Fatalf("%s: second run: exit %d: %s", p.native, code, errOut)
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("temporary files left: %v", ents)
	}
}
