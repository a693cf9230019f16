//go:build cgo

package command

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/stateexport"
	"github.com/sfstate/sfstate/verify"
)

// Command-level fault tests: whole writing commands run against versitygw
// through Toxiproxy (testutil.FaultRig), with a fault injected at the N-th
// read or write request.

// cmdFaultRig is testutil.FaultRig with the process environment set for
// in-process commands.
type cmdFaultRig struct {
	srv      *testutil.S3Server
	ctr      *testutil.RequestCounter
	proxy    *testutil.Proxy
	endpoint string // what the commands use: Toxiproxy's listener
	ctx      context.Context
}

func newCmdFaultRig(t *testing.T) *cmdFaultRig {
	t.Helper()
	rig := testutil.StartFaultRig(t, "s3cmd")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	srv := rig.Srv
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("SFSTATE_S3_ENDPOINT", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return &cmdFaultRig{srv: srv, ctr: rig.Counter, proxy: rig.Proxy, endpoint: rig.Endpoint, ctx: ctx}
}

func (r *cmdFaultRig) url(prefix string) string { return "s3://" + r.srv.Bucket + "/" + prefix }

// upload copies the fixture's files to prefix (directly, not through the
// proxy).
func (r *cmdFaultRig) upload(t *testing.T, dir, prefix string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return r.srv.Store.Put(r.ctx, prefix+"/"+filepath.ToSlash(rel), bytes.NewReader(b), int64(len(b)))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hashes returns the SHA-256 of every object under prefix.
func (r *cmdFaultRig) hashes(t *testing.T, prefix string) map[string][32]byte {
	t.Helper()
	objs, err := r.srv.Store.List(r.ctx, prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][32]byte{}
	for _, o := range objs {
		b := r.get(t, o.Key)
		out[o.Key] = sha256.Sum256(b)
	}
	return out
}

func (r *cmdFaultRig) get(t *testing.T, key string) []byte {
	t.Helper()
	rc, err := r.srv.Store.Get(r.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return b
}

// keys lists the object keys under prefix/ (directly, not through the
// proxy).
func (r *cmdFaultRig) keys(t *testing.T, prefix string) []string {
	t.Helper()
	objs, err := r.srv.Store.List(r.ctx, prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

func (r *cmdFaultRig) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := r.srv.Store.Stat(r.ctx, key)
	if err != nil && !s3.IsNotExist(err) {
		t.Fatalf("stat %s: %v", key, err)
	}
	return err == nil
}

// pendingUploads lists the bucket's multipart uploads in progress.
func (r *cmdFaultRig) pendingUploads(t *testing.T) []string {
	t.Helper()
	out, err := r.srv.Store.Client().ListMultipartUploads(r.ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(r.srv.Bucket)})
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	var keys []string
	for _, u := range out.Uploads {
		keys = append(keys, aws.ToString(u.Key))
	}
	return keys
}

// runVia runs a command in-process against endpoint.
func runVia(t *testing.T, endpoint string, args ...string) (string, string, int) {
	t.Helper()
	return run(t, append([]string{"--s3-endpoint", endpoint, "--no-progress"}, args...)...)
}

// writeCmd is a writing command under test.
type writeCmd struct {
	name string
	src  string // source prefix
	args func(src, dst string) []string
	// marker is the object that says the output is complete.
	marker string
}

// checkOutcome asserts the invariants after one run: the source is
// unchanged, no multipart upload is pending, a failure is one line naming
// what failed, and a published output is complete.
func (r *cmdFaultRig) checkOutcome(t *testing.T, c writeCmd, dst string, srcHashes map[string][32]byte, code int, stderr string) {
	t.Helper()
	published := r.checkState(t, c, dst, srcHashes)
	if code != ExitOK {
		msg := strings.TrimSpace(stderr)
		if msg == "" || strings.Contains(msg, "\n") {
			t.Errorf("exit %d: want a one-line error, got %q", code, stderr)
		}
		if !strings.Contains(msg, "s3://") && !strings.Contains(msg, r.srv.Bucket+"/") {
			t.Errorf("exit %d: error names no object or location: %q", code, msg)
		}
	} else if !published {
		t.Errorf("exit 0 but no %s at %s", c.marker, dst)
	}
}

// checkState asserts what must hold whatever the run's outcome: the source
// is unchanged, no multipart upload is pending, and a published output is
// complete. It reports whether the output was published.
func (r *cmdFaultRig) checkState(t *testing.T, c writeCmd, dst string, srcHashes map[string][32]byte) bool {
	t.Helper()
	if srcHashes == nil {
		// a local source
	} else if got := r.hashes(t, c.src); !equalHashes(got, srcHashes) {
		t.Errorf("source %s changed", c.src)
	}
	if ups := r.pendingUploads(t); len(ups) > 0 {
		t.Errorf("orphaned multipart uploads: %v", ups)
	}
	published := r.exists(t, dst+"/"+c.marker)
	if published {
		if c.marker == savepoint.MetadataName {
			r.checkSnapshot(t, dst)
		} else {
			r.checkExport(t, dst)
		}
	}
	return published
}

// checkSnapshot: `check --read-data` passes and the sums file lists every
// object of the snapshot directory.
func (r *cmdFaultRig) checkSnapshot(t *testing.T, dst string) {
	t.Helper()
	if o, e, code := runVia(t, r.srv.Endpoint, "check", "--read-data", r.url(dst)); code != ExitOK {
		t.Errorf("check --read-data %s: exit %d\n%s%s", dst, code, o, e)
	}
	sums, err := savepoint.ParseSums(r.get(t, dst+"/"+savepoint.SumsName), savepoint.SumsName)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range sums {
		listed[s.Path] = true
	}
	objs, err := r.srv.Store.List(r.ctx, dst+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, dst+"/")
		if rel != savepoint.SumsName && !listed[rel] {
			t.Errorf("%s: %s is not in %s", dst, rel, savepoint.SumsName)
		}
	}
}

// checkExport: every file the manifest lists has its size and CRC-32C, and
// every object under the output is listed.
func (r *cmdFaultRig) checkExport(t *testing.T, dst string) {
	t.Helper()
	key := stateexport.ManifestKey(verify.Shard{})
	var man stateexport.Manifest
	if err := json.Unmarshal(r.get(t, dst+"/"+key), &man); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	listed := map[string]s3.Written{}
	for _, tb := range man.Tables {
		for _, f := range tb.Files {
			listed[f.Key] = f
		}
	}
	if len(listed) == 0 {
		t.Fatalf("%s: manifest lists no files", dst)
	}
	objs, err := r.srv.Store.List(r.ctx, dst+"/")
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, dst+"/")
		present[rel] = true
		if rel == key {
			continue
		}
		w, ok := listed[rel]
		if !ok {
			t.Errorf("%s: %s is not in the manifest", dst, rel)
			continue
		}
		b := r.get(t, o.Key)
		if int64(len(b)) != w.Size || s3.CRC32C(b) != w.CRC {
			t.Errorf("%s: %s has %d bytes crc %08x, manifest says %d, %08x", dst, rel, len(b), s3.CRC32C(b), w.Size, w.CRC)
		}
	}
	for k := range listed {
		if !present[k] {
			t.Errorf("%s: manifest lists missing %s", dst, k)
		}
	}
}

func equalHashes(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestFaultsWritingCommands drives every writing command through resets
// at the first, middle and last read and write request, timeouts at the
// first and last, and a reset that never heals.
func TestFaultsWritingCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway and Toxiproxy")
	}
	r := newCmdFaultRig(t)
	r.upload(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers"), "src-rocks")
	r.upload(t, fixtureSavepoint(t, "flink1.20-hashmap-NATIVE-for-contrast"), "src-heap")
	cmds := []writeCmd{
		{"rescale-copy", "src-rocks", func(s, d string) []string { return []string{"rescale", "-p", "3", "--copy", "--out", d, s} }, savepoint.MetadataName},
		{"rescale-merge", "src-rocks", func(s, d string) []string { return []string{"rescale", "-p", "2", "--merge-files", "--out", d, s} }, savepoint.MetadataName},
		{"rescale-maxp", "src-rocks", func(s, d string) []string {
			return []string{"rescale", "-p", "2", "--max-parallelism", "256", "--out", d, s}
		}, savepoint.MetadataName},
		{"convert", "src-heap", func(s, d string) []string { return []string{"convert", "--to", "canonical", "--out", d, s} }, savepoint.MetadataName},
		{"export", "src-rocks", func(s, d string) []string { return []string{"export", "--format", "parquet", "--out", d, s} },
			stateexport.ManifestKey(verify.Shard{})},
	}
	faults := []struct {
		name  string
		toxic testutil.Toxic
		hold  time.Duration
	}{
		{"reset", testutil.ResetPeer("fault", "downstream", 0), 300 * time.Millisecond},
		{"timeout", testutil.Timeout("fault", "downstream", 300*time.Millisecond), 600 * time.Millisecond},
	}
	start := time.Now()
	for _, c := range cmds {
		t.Run(c.name, func(t *testing.T) {
			srcHashes := r.hashes(t, c.src)
			if len(srcHashes) == 0 {
				t.Fatalf("no source objects under %s", c.src)
			}
			n := 0
			runCase := func(f *testutil.Fault) (code int, stderr string, reads, writes int, fired bool) {
				n++
				dst := fmt.Sprintf("out-%s-%d", c.name, n)
				r.ctr.Arm(f)
				_, stderr, code = runVia(t, r.endpoint, c.args(r.url(c.src), r.url(dst))...)
				cnt, fired := r.ctr.Disarm()
				r.checkOutcome(t, c, dst, srcHashes, code, stderr)
				return code, stderr, cnt.Reads, cnt.Writes, fired
			}
			code, stderr, reads, writes, _ := runCase(nil)
			if code != ExitOK {
				t.Fatalf("clean run: exit %d: %s", code, stderr)
			}
			t.Logf("clean run: %d object reads, %d writes", reads, writes)
			for _, kind := range []string{"read", "write"} {
				total := reads
				if kind == "write" {
					total = writes
				}
				for _, at := range testutil.FaultPoints(total) {
					for _, fl := range faults {
						if fl.name == "timeout" && at != 1 && at != total {
							continue // each stall costs its hold: first and last only
						}
						f := &testutil.Fault{Kind: kind, At: at, Toxic: fl.toxic, Hold: fl.hold}
						code, stderr, rd, wr, fired := runCase(f)
						t.Logf("%s at %s %d/%d: exit %d (fired %v, %d reads, %d writes) %s", fl.name, kind, at, total, code, fired, rd, wr, strings.TrimSpace(stderr))
						if !fired {
							t.Errorf("%s at %s %d: the fault never fired", fl.name, kind, at)
						}
						if code == ExitOK && rd+wr <= reads+writes {
							t.Errorf("%s at %s %d: succeeded without a retry (%d requests, clean run %d)", fl.name, kind, at, rd+wr, reads+writes)
						}
					}
				}
			}
			// A fault that never heals: the command must fail, in one line.
			for _, kind := range []string{"read", "write"} {
				f := &testutil.Fault{Kind: kind, At: 1, Toxic: testutil.ResetPeer("fault", "downstream", 0), Hold: -1}
				code, stderr, _, _, fired := runCase(f)
				t.Logf("permanent reset from %s 1: exit %d: %s", kind, code, strings.TrimSpace(stderr))
				if !fired || code == ExitOK {
					t.Errorf("permanent reset from %s 1: fired %v, exit %d", kind, fired, code)
				}
			}
		})
	}
	t.Logf("fault matrix: %v", time.Since(start).Round(time.Millisecond))
}

// childEnv is the environment of a CLI child process reaching the rig.
func (r *cmdFaultRig) childEnv() []string {
	return append(os.Environ(), "AWS_ACCESS_KEY_ID="+r.srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+r.srv.SecretKey,
		"AWS_REGION="+r.srv.Region, "AWS_EC2_METADATA_DISABLED=true", "SFSTATE_S3_ENDPOINT=", "AWS_ENDPOINT_URL=",
		"AWS_ENDPOINT_URL_S3=", "SFSTATE_NO_PROGRESS=true")
}

// readDigest runs `verify --backends none --digest-out` on url (directly)
// and returns the report.
func (r *cmdFaultRig) readDigest(t *testing.T, url string) *verify.Report {
	t.Helper()
	f := filepath.Join(t.TempDir(), "digest.json")
	if o, e, code := runVia(t, r.srv.Endpoint, "verify", "--backends", "none", "--digest-out", f, url); code != ExitOK {
		t.Fatalf("verify %s: exit %d\n%s%s", url, code, o, e)
	}
	return readReportFile(t, f)
}

func readReportFile(t *testing.T, name string) *verify.Report {
	t.Helper()
	fh, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	rep, err := verify.ReadReport(fh, name)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Digest == nil || len(rep.Digest.Groups) == 0 {
		t.Fatalf("%s: report without digest groups", name)
	}
	return rep
}

// sameDigest compares the per-key-group digests of two reports.
func sameDigest(a, b *verify.Report) error {
	if len(a.Digest.Groups) != len(b.Digest.Groups) {
		return fmt.Errorf("%d key-group digests vs %d", len(a.Digest.Groups), len(b.Digest.Groups))
	}
	for k, g := range a.Digest.Groups {
		h, ok := b.Digest.Groups[k]
		if !ok {
			return fmt.Errorf("%+v missing", k)
		}
		if !reflect.DeepEqual(g, h) {
			return fmt.Errorf("%+v: %+v vs %+v", k, g, h)
		}
	}
	return nil
}

// TestFaultsCrashRescaleMergeFiles kills `rescale --merge-files` to S3 with
// SIGKILL at seeded random moments and runs the same command again: it
// succeeds (or finds the killed run's complete output) and the result has
// the digest of an undisturbed run.
func TestFaultsCrashRescaleMergeFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary, starts an S3 gateway and Toxiproxy")
	}
	bin := cliBinary(t)
	r := newCmdFaultRig(t)
	r.upload(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers"), "src")
	srcHashes := r.hashes(t, "src")
	// Latency stretches the run so that the kills land inside it.
	for _, s := range []string{"downstream", "upstream"} {
		if err := r.proxy.AddToxic(r.ctx, testutil.Latency("lat-"+s, s, 5*time.Millisecond, 0)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := func(dst string) *exec.Cmd {
		c := exec.CommandContext(r.ctx, bin, "--s3-endpoint", r.endpoint, "rescale", "-p", "2", "--merge-files",
			"--out", r.url(dst), r.url("src"))
		c.Env = r.childEnv()
		return c
	}
	start := time.Now()
	if out, err := cmd("clean").CombinedOutput(); err != nil {
		t.Fatalf("clean run: %v\n%s", err, out)
	}
	clean := time.Since(start)
	want := r.readDigest(t, r.url("clean"))
	t.Logf("clean run %v", clean.Round(time.Millisecond))
	rng := rand.New(rand.NewSource(20240611))
	mergeCmd := writeCmd{name: "rescale-merge", src: "src", marker: savepoint.MetadataName}
	for i := 0; i < 3; i++ {
		dst := fmt.Sprintf("crash-%d", i)
		// Process start-up is part of the run; kill anywhere in it.
		delay := time.Duration(rng.Int63n(int64(clean)))
		c := cmd(dst)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		_ = c.Process.Signal(syscall.SIGKILL)
		err := c.Wait()
		finished := err == nil
		// Whatever the kill left: no pending upload, and a _metadata only
		// over complete data.
		published := r.checkState(t, mergeCmd, dst, srcHashes)
		again, err := cmd(dst).CombinedOutput()
		code := 0
		if err != nil {
			code = -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
		}
		t.Logf("kill %d after %v (finished first: %v, published: %v); rerun exit %d: %s", i,
			delay.Round(time.Millisecond), finished, published, code, strings.TrimSpace(string(again)))
		switch {
		case code == ExitOK:
		case published && code == ExitUsage && strings.Contains(string(again), "already holds a _metadata"):
			// The killed run had published: the rerun refuses to overwrite.
		default:
			t.Fatalf("rerun after kill %d: exit %d: %s", i, code, again)
		}
		r.checkOutcome(t, mergeCmd, dst, srcHashes, ExitOK, "")
		if err := sameDigest(want, r.readDigest(t, r.url(dst))); err != nil {
			t.Errorf("after kill %d: digest differs from a clean run: %v", i, err)
		}
	}
}

// TestFaultsShardedVerifyLoad runs 16 `verify --shard i/16` processes at
// once against one S3 savepoint through 20ms of latency each way and
// merges their reports: the verdict and digests equal a single run's.
func TestFaultsShardedVerifyLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary, starts an S3 gateway and Toxiproxy")
	}
	bin := cliBinary(t)
	r := newCmdFaultRig(t)
	r.upload(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers"), "src")
	for _, s := range []string{"downstream", "upstream"} {
		if err := r.proxy.AddToxic(r.ctx, testutil.Latency("lat-"+s, s, 20*time.Millisecond, 0)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	verifyCmd := func(digest string, extra ...string) *exec.Cmd {
		args := append([]string{"--s3-endpoint", r.endpoint, "verify", "--backends", "none", "--digest-out", digest}, extra...)
		c := exec.CommandContext(r.ctx, bin, append(args, r.url("src"))...)
		c.Env = r.childEnv()
		return c
	}
	start := time.Now()
	single := filepath.Join(dir, "single.json")
	if out, err := verifyCmd(single).CombinedOutput(); err != nil {
		t.Fatalf("single verify: %v\n%s", err, out)
	}
	singleTime := time.Since(start)
	const n = 16
	start = time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	outs := make([][]byte, n)
	var shards []string
	for i := 0; i < n; i++ {
		shards = append(shards, filepath.Join(dir, fmt.Sprintf("d%d.json", i)))
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			outs[i], errs[i] = verifyCmd(shards[i], "--shard", fmt.Sprintf("%d/%d", i, n)).CombinedOutput()
		}(i)
	}
	wg.Wait()
	shardTime := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d/%d: %v\n%s", i, n, err, outs[i])
		}
	}
	merged := filepath.Join(dir, "merged.json")
	if o, e, code := run(t, append([]string{"verify", "--digest-out", merged, "--merge"}, shards...)...); code != ExitOK {
		t.Fatalf("verify --merge: exit %d\n%s%s", code, o, e)
	}
	a, b := readReportFile(t, single), readReportFile(t, merged)
	if !a.OK || !b.OK {
		t.Fatalf("verdicts: single %v, merged %v", a.OK, b.OK)
	}
	if err := sameDigest(a, b); err != nil {
		t.Fatalf("merged shards differ from the single run: %v", err)
	}
	// The merged report lists the operators by id, a single run in the
	// metadata's order.
	for _, ops := range [][]verify.OperatorInfo{a.Digest.Operators, b.Digest.Operators} {
		sort.Slice(ops, func(i, j int) bool { return ops[i].ID < ops[j].ID })
	}
	if !reflect.DeepEqual(a.Digest.Operators, b.Digest.Operators) {
		t.Fatalf("operators:\n%+v\nvs merged\n%+v", a.Digest.Operators, b.Digest.Operators)
	}
	t.Logf("verify over 20ms latency: single process %v; %d shard processes at once %v (%d key-group digests)",
		singleTime.Round(time.Millisecond), n, shardTime.Round(time.Millisecond), len(a.Digest.Groups))
}

// TestExportHonoursGlobalS3Flags: the export destination is opened with
// the global S3 flags, not only the endpoint: with --no-sign-request the
// server refuses the unsigned writes (and nothing is published).
func TestExportHonoursGlobalS3Flags(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway and Toxiproxy")
	}
	r := newCmdFaultRig(t)
	src := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	_, e, code := runVia(t, r.srv.Endpoint, "--no-sign-request", "export", "--out", r.url("unsigned"), src)
	if code != ExitIO || !strings.Contains(e, "HTTP 403") || strings.Count(strings.TrimSpace(e), "\n") != 0 {
		t.Fatalf("unsigned export: exit %d: %q", code, e)
	}
	if r.exists(t, "unsigned/"+stateexport.ManifestKey(verify.Shard{})) {
		t.Fatal("unsigned export published a manifest")
	}
	if _, e, code := runVia(t, r.srv.Endpoint, "export", "--out", r.url("signed"), src); code != ExitOK {
		t.Fatalf("signed export: exit %d: %s", code, e)
	}
}

// TestFaultsMultipartExport: an export whose large table goes up as a
// multipart upload (two parts of the default 16 MiB), with resets and
// stalls at its parts and its completion. Every run either publishes a
// complete dataset or fails in one line leaving no object and no pending
// upload; each run really made a multipart upload.
func TestFaultsMultipartExport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway and Toxiproxy")
	}
	src := genCanonical(t, 75_000) // a 21 MB table
	r := newCmdFaultRig(t)
	c := writeCmd{name: "export-multipart", marker: stateexport.ManifestKey(verify.Shard{})}
	n := 0
	runCase := func(f *testutil.Fault) (int, string, testutil.Counts, bool) {
		n++
		dst := fmt.Sprintf("out-mp-%d", n)
		r.ctr.Arm(f)
		_, stderr, code := runVia(t, r.endpoint, "export", "--format", "jsonl", "--out", r.url(dst), src)
		cnt, fired := r.ctr.Disarm()
		r.checkOutcome(t, c, dst, nil, code, stderr)
		if cnt.MultipartStarts == 0 {
			t.Errorf("run %d made no multipart upload: %+v", n, cnt)
		}
		if code != ExitOK {
			if objs, err := r.srv.Store.List(r.ctx, dst+"/"); err != nil || len(objs) > 0 {
				t.Errorf("failed run %d left %d objects (%v)", n, len(objs), err)
			}
		}
		return code, stderr, cnt, fired
	}
	start := time.Now()
	code, stderr, clean, _ := runCase(nil)
	if code != ExitOK || clean.Parts < 2 {
		t.Fatalf("clean run: exit %d, %+v: %s", code, clean, stderr)
	}
	t.Logf("clean run %v: %+v", time.Since(start).Round(time.Millisecond), clean)
	reset := testutil.ResetPeer("fault", "downstream", 0)
	stall := testutil.Timeout("fault", "downstream", 300*time.Millisecond)
	for _, f := range []*testutil.Fault{
		{Kind: "part", At: 1, Toxic: reset, Hold: 300 * time.Millisecond},
		{Kind: "part", At: clean.Parts, Toxic: reset, Hold: 300 * time.Millisecond},
		{Kind: "part", At: 1, Toxic: stall, Hold: 600 * time.Millisecond},
		{Kind: "complete", At: 1, Toxic: reset, Hold: 300 * time.Millisecond},
		{Kind: "complete", At: 1, Toxic: stall, Hold: 600 * time.Millisecond},
	} {
		code, stderr, cnt, fired := runCase(f)
		t.Logf("%s at %s %d: exit %d (fired %v, %+v) %s", f.Toxic.Type, f.Kind, f.At, code, fired, cnt, strings.TrimSpace(stderr))
		if !fired {
			t.Errorf("%s at %s %d: the fault never fired", f.Toxic.Type, f.Kind, f.At)
		}
		if code == ExitOK && cnt.Writes <= clean.Writes {
			t.Errorf("%s at %s %d: succeeded without a retry (%d writes, clean run %d)", f.Toxic.Type, f.Kind, f.At, cnt.Writes, clean.Writes)
		}
	}
	// Parts that never get through: the export fails, the upload is
	// aborted and the tables already written are removed.
	code, stderr, cnt, fired := runCase(&testutil.Fault{Kind: "part", At: 1, Toxic: reset, Hold: -1})
	t.Logf("permanent reset from part 1: exit %d (%+v): %s", code, cnt, strings.TrimSpace(stderr))
	if !fired || code == ExitOK {
		t.Errorf("permanent reset from part 1: fired %v, exit %d", fired, code)
	}
}
