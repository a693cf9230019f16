//go:build cgo

package command

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/demo"
	"github.com/sfstate/sfstate/internal/testutil"
)

const demoTestEvents = 10_000

func runDemoForTest(t *testing.T, cfg demo.Config) (*demo.Result, string) {
	t.Helper()
	var out bytes.Buffer
	cfg.Out = &out
	if cfg.Exec == nil {
		cfg.Exec = func(args []string, o, e io.Writer) int { return Main(args, o, e) }
	}
	if cfg.Events == 0 {
		cfg.Events = demoTestEvents
	}
	// migrate's parallel subtasks write shared trace timings
	// (migrate/checkpoint.go, run.t0/c0), which the race detector reports;
	// one subtask at a time keeps this end-to-end test about the demo.
	cfg.MigrateArgs = []string{"--parallel", "1"}
	res, err := demo.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	return res, out.String()
}

// checkDemoResult asserts every step's invariants.
func checkDemoResult(t *testing.T, res *demo.Result, out string) {
	t.Helper()
	w := res.Workload
	if w == nil || w.Events != demoTestEvents || w.Bids == 0 || w.Auctions == 0 || w.Retractions == 0 {
		t.Fatalf("workload %+v", w)
	}
	// Every bid is on an auction that exists and is younger than the TTL:
	// the inner join emits exactly one row per bid.
	if w.JoinOutput != w.Bids {
		t.Errorf("join output %d rows for %d bids", w.JoinOutput, w.Bids)
	}
	if res.CheckpointFiles == 0 || res.CheckpointBytes == 0 || res.SavepointEntries == 0 {
		t.Errorf("snapshot figures: %d files, %d bytes, %d savepoint entries", res.CheckpointFiles, res.CheckpointBytes, res.SavepointEntries)
	}
	m := res.Migrate
	if m == nil || len(m.Sides) != 2 {
		t.Fatalf("migrate figures %+v", m)
	}
	for _, s := range m.Sides {
		if s.Before != s.After || s.Before.Rows == 0 || s.Before.Hash == 0 {
			t.Errorf("migrate %s: before %+v after %+v", s.Side, s.Before, s.After)
		}
	}
	// Each input row was inserted once: the sums of counts are the inputs.
	if m.Sides[0].Before.Count != w.Auctions || m.Sides[1].Before.Count != w.Bids {
		t.Errorf("join counts left %d right %d, want %d auctions and %d bids", m.Sides[0].Before.Count, m.Sides[1].Before.Count, w.Auctions, w.Bids)
	}
	if m.Rows != m.Sides[0].After.Rows+m.Sides[1].After.Rows || m.Mismatches != 0 {
		t.Errorf("migrate rows %d, mismatches %d", m.Rows, m.Mismatches)
	}
	rs := res.Rescale
	if rs == nil || rs.Written <= 0 || rs.Written >= rs.Whole || rs.Downloaded <= 0 || rs.Downloaded > rs.Whole || rs.CheckpointBytes == 0 {
		t.Errorf("rescale figures %+v", rs)
	}
	if len(res.Verify) < 3 {
		t.Fatalf("%d verify runs", len(res.Verify))
	}
	for _, v := range res.Verify {
		if !v.OK || v.Report == nil || len(v.Report.Targets) == 0 {
			t.Errorf("verify %s: ok=%v failures %v", v.Target, v.OK, v.Failures)
		}
	}
	// The first run restores at 3 and at 2 into both backends, with TTL.
	first := res.Verify[0].Report
	if len(first.Targets) != 4 || first.TTL == nil {
		t.Errorf("verify targets %d, ttl %v", len(first.Targets), first.TTL)
	}
	// Both engine checkpoints convert, join state included, to equal
	// canonical savepoints.
	if len(res.Converted) != 2 || !res.ConvertedEqual {
		t.Fatalf("converted %+v, equal %v", res.Converted, res.ConvertedEqual)
	}
	for _, c := range res.Converted {
		if strings.Join(c.States, ",") != "agg,prices,top1,left-records,right-records" || c.Entries != res.Converted[0].Entries || c.Entries < res.SavepointEntries {
			t.Errorf("convert %s: %d entries (savepoint %d) in %v", c.Source, c.Entries, res.SavepointEntries, c.States)
		}
	}
	if fi, err := os.Stat(res.Report); err != nil || fi.Size() < 1000 {
		t.Errorf("report.html: %v", err)
	} else if b, _ := os.ReadFile(res.Report); !strings.Contains(strings.ToLower(string(b)), "<html") {
		t.Errorf("report.html is not HTML")
	}
	for i, name := range demo.Steps {
		if !strings.Contains(out, "== "+string(rune('1'+i))+"/7") {
			t.Errorf("no header for step %d (%s)", i+1, name)
		}
	}
	if len(res.Steps) != len(demo.Steps) {
		t.Errorf("%d steps timed", len(res.Steps))
	}
}

func TestDemoLocalKeep(t *testing.T) {
	dir := t.TempDir()
	res, out := runDemoForTest(t, demo.Config{Dir: dir, Keep: true})
	checkDemoResult(t, res, out)
	for _, p := range []string{
		"checkpoint-bucket/chk-1/_metadata", "checkpoint-bucket/chk-1/manifest.json",
		"checkpoint-record/chk-1/_metadata", "savepoint-canonical/_metadata",
		"rescaled-p3/_metadata", "rescaled-p3/rescale-plan.json", "checkpoint-p3/chk-1/_metadata", "report.html",
		"checkpoint-bucket-canonical/_metadata", "checkpoint-p3-canonical/_metadata",
	} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("missing %s: %v", p, err)
		}
	}
	if ms, _ := filepath.Glob(filepath.Join(dir, ".work-*")); len(ms) != 0 {
		t.Errorf("scratch left behind: %v", ms)
	}
}

func TestDemoS3(t *testing.T) {
	srv := testutil.StartVersitygw(t)
	dir := t.TempDir()
	res, out := runDemoForTest(t, demo.Config{Dir: dir, S3: true, Server: srv})
	checkDemoResult(t, res, out)
	if !strings.HasPrefix(res.CheckpointURL, "s3://"+srv.Bucket+"/") {
		t.Fatalf("checkpoint at %s", res.CheckpointURL)
	}
	// Without --keep: report.html stays, the stores are gone (locally and
	// on the server).
	if _, err := os.Stat(filepath.Join(dir, "report.html")); err != nil {
		t.Error(err)
	}
	for _, n := range []string{"checkpoint-bucket", "savepoint-canonical", "s3-versitygw"} {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", n, err)
		}
	}
	prefix := strings.TrimPrefix(res.CheckpointURL, "s3://"+srv.Bucket+"/")
	prefix = prefix[:strings.Index(prefix, "/")+1]
	objs, err := srv.Store.List(context.Background(), prefix)
	if err != nil || len(objs) != 0 {
		t.Errorf("objects left under %s: %d (%v)", prefix, len(objs), err)
	}
	if v := os.Getenv("AWS_ENDPOINT_URL_S3"); v == srv.Endpoint {
		t.Errorf("demo left AWS_ENDPOINT_URL_S3 set")
	}
}

// A failing command stops the demo with an error naming its step, and the
// CLI maps it to a non-zero exit.
func TestDemoFailureNamesStep(t *testing.T) {
	var out bytes.Buffer
	failing := func(args []string, o, e io.Writer) int {
		for _, a := range args {
			if a == "rescale" {
				io.WriteString(e, "sfstate: injected failure\n")
				return ExitIO
			}
		}
		return Main(args, o, e)
	}
	_, err := demo.Run(context.Background(), demo.Config{Dir: t.TempDir(), Events: 2000, Out: &out, Exec: failing,
		MigrateArgs: []string{"--parallel", "1"}})
	var se *demo.StepError
	if !errors.As(err, &se) || se.Step != 5 || se.Name != "rescale" || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(out.String(), "FAILED") {
		t.Errorf("output does not say FAILED:\n%s", out.String())
	}
}

func TestDemoUsage(t *testing.T) {
	for _, args := range [][]string{{"demo", "extra"}, {"demo", "--events", "5"}} {
		var o, e bytes.Buffer
		if code := Main(append([]string{"sfstate"}, args...), &o, &e); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, ExitUsage, e.String())
		}
	}
}
