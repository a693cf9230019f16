//go:build cgo

package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/internal/progress"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

// Exec runs one sfstate command in-process (args without the program
// name's flags, e.g. {"sfstate", "--json", "inspect", PATH}) and returns its
// exit code. The CLI passes command.Main.
type Exec func(args []string, out, errOut io.Writer) int

// Config configures a demo run.
type Config struct {
	// Dir holds every artifact (default out/demo).
	Dir string
	// Events fed through the workload (default DefaultEvents, QuickEvents
	// with Quick).
	Events int64
	// Quick runs at a small scale.
	Quick bool
	// Keep leaves every intermediate store under Dir.
	Keep bool
	// S3 puts the stores on a loopback versitygw server: Server when set,
	// else one the demo starts (binary from $SFSTATE_BIN or bin/) and stops.
	S3     bool
	Server *testutil.S3Server
	// FixturesDir holds Flink's savepoints for step 7 ("" = located like
	// the tests locate them; step 7 is skipped when there is none).
	FixturesDir string
	// Out receives the step reports; Progress, when non-nil, progress bars
	// (drawn only on a terminal).
	Out, Progress io.Writer
	// Exec runs the sfstate commands; required.
	Exec Exec
	// MigrateArgs are extra flags for `sfstate migrate` (e.g. --parallel).
	MigrateArgs []string
	// Seed of the event generator.
	Seed uint64
}

// Default scales.
const (
	DefaultEvents = 1_000_000
	QuickEvents   = 200_000
)

// StepError names the step that failed.
type StepError struct {
	Step int
	Name string
	Err  error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %d (%s) failed: %v", e.Step, e.Name, e.Err)
}
func (e *StepError) Unwrap() error { return e.Err }

// Step names, in order.
var Steps = []string{
	"workload", "snapshot", "inspect", "migrate", "rescale", "verify", "flink savepoint",
}

// Result gathers what each step produced, for callers and tests.
type Result struct {
	Workload *WorkloadStats `json:"workload"`
	// Checkpoint (step 2).
	CheckpointID     int64  `json:"checkpointId"`
	CheckpointBytes  int64  `json:"checkpointBytes"`
	CheckpointFiles  int    `json:"checkpointFiles"`
	SavepointEntries int64  `json:"savepointEntries"`
	SavepointBytes   int64  `json:"savepointBytes"`
	SavepointFiles   int    `json:"savepointFiles"`
	CheckpointURL    string `json:"checkpointUrl"`
	SavepointURL     string `json:"savepointUrl"`
	// Report is the HTML report's local path (step 3).
	Report string `json:"report"`
	// Migrate (step 4).
	MigratedURL string          `json:"migratedUrl"`
	Migrate     *MigrateFigures `json:"migrate"`
	// Rescale (step 5).
	RescaledURL string          `json:"rescaledUrl"`
	Rescale     *RescaleFigures `json:"rescale"`
	// Verify (step 6): one verdict per run; both engine checkpoints
	// converted to canonical, and whether `sfstate diff` found them equal.
	Verify         []Verdict        `json:"verify"`
	Converted      []ConvertFigures `json:"converted"`
	ConvertedEqual bool             `json:"convertedEqual"`
	// Fixture (step 7): the Flink savepoint inspected ("" when none).
	Fixture        string   `json:"fixture"`
	FixtureVerdict *Verdict `json:"fixtureVerdict"`
	// Paths lists what was left on disk (or on S3).
	Paths []string   `json:"paths"`
	Steps []StepTime `json:"steps"`
}

// StepTime is one step's wall time.
type StepTime struct {
	Name    string        `json:"name"`
	Elapsed time.Duration `json:"-"`
}

type runner struct {
	cfg    Config
	ctx    context.Context
	out    io.Writer
	res    *Result
	store  s3.Storage // the demo root (Dir locally, s3://bucket/demo on S3)
	srv    *testutil.S3Server
	base   string // URL prefix of the root
	job    *Job
	env    []string // restored at the end
	tmp    string
	endpnt string
}

// Run runs the whole demo.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if cfg.Exec == nil {
		return nil, errors.New("demo: no command runner")
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join("out", "demo")
	}
	if cfg.Events <= 0 {
		cfg.Events = DefaultEvents
		if cfg.Quick {
			cfg.Events = QuickEvents
		}
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Seed == 0 {
		cfg.Seed = 42
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	r := &runner{cfg: cfg, ctx: ctx, out: cfg.Out, res: &Result{}}
	defer r.cleanup()
	if err := r.setup(); err != nil {
		return r.res, &StepError{0, "setup", err}
	}
	steps := []func() error{r.stepWorkload, r.stepSnapshot, r.stepInspect, r.stepMigrate, r.stepRescale, r.stepVerify, r.stepFixture}
	total := time.Now()
	for i, f := range steps {
		fmt.Fprintf(r.out, "\n== %d/%d  %s\n", i+1, len(steps), stepTitle[i])
		t0 := time.Now()
		if err := f(); err != nil {
			fmt.Fprintf(r.out, "FAILED: %v\n", err)
			return r.res, &StepError{i + 1, Steps[i], err}
		}
		d := time.Since(t0)
		r.res.Steps = append(r.res.Steps, StepTime{Steps[i], d})
		fmt.Fprintf(r.out, "   (%s)\n", d.Round(10*time.Millisecond))
	}
	if err := r.finish(time.Since(total)); err != nil {
		return r.res, &StepError{len(steps) + 1, "finish", err}
	}
	return r.res, nil
}

var stepTitle = []string{
	"workload: Nexmark-shaped job at parallelism 2 (group aggregate with 24 h TTL, MIN/MAX retraction multiset, Top-1, inner join in the bucket layout)",
	"snapshot: native checkpoint and canonical savepoint",
	"inspect: summaries and the HTML report",
	"migrate: join state from the bucket to the record layout",
	"rescale: 2 -> 3 subtasks",
	"verify: restore into rocksdb and heap at 3 and at 2; convert both checkpoints to canonical and diff them",
	"a savepoint written by Flink itself",
}

func (r *runner) setup() error {
	if err := os.MkdirAll(r.cfg.Dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(r.cfg.Dir, ".work-")
	if err != nil {
		return err
	}
	r.tmp = tmp
	// Start from a clean slate: artifacts of an earlier run would make
	// PutIfAbsent refuse to publish.
	for _, n := range artifactNames {
		if err := os.RemoveAll(filepath.Join(r.cfg.Dir, n)); err != nil {
			return err
		}
	}
	if !r.cfg.S3 {
		st, err := s3.NewLocal(r.cfg.Dir)
		if err != nil {
			return err
		}
		r.store, r.base = st, r.cfg.Dir
		fmt.Fprintf(r.out, "store: local directory %s\n", r.cfg.Dir)
		return nil
	}
	r.srv = r.cfg.Server
	if r.srv == nil {
		srv, err := testutil.LaunchVersitygw(r.ctx, filepath.Join(r.cfg.Dir, "s3-versitygw"))
		if err != nil {
			return fmt.Errorf("starting versitygw: %w", err)
		}
		r.srv = srv
	}
	prefix := "demo"
	if r.cfg.Server != nil {
		// A shared server: a prefix of our own.
		prefix = fmt.Sprintf("demo-%d", time.Now().UnixNano())
	}
	st, err := r.srv.NewStore(r.ctx, prefix, s3.S3Options{})
	if err != nil {
		return err
	}
	r.store = st
	r.base = "s3://" + r.srv.Bucket + "/" + prefix
	r.endpnt = r.srv.Endpoint
	// The commands find the server through the standard AWS settings.
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": r.srv.AccessKey, "AWS_SECRET_ACCESS_KEY": r.srv.SecretKey,
		"AWS_REGION": r.srv.Region, "AWS_ENDPOINT_URL_S3": r.srv.Endpoint, "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "",
	} {
		old, ok := os.LookupEnv(k)
		if ok {
			r.env = append(r.env, k+"="+old)
		} else {
			r.env = append(r.env, k)
		}
		if v == "" {
			os.Unsetenv(k)
		} else {
			os.Setenv(k, v)
		}
	}
	fmt.Fprintf(r.out, "store: versitygw S3 server at %s, %s\n", r.srv.Endpoint, r.base)
	return nil
}

// artifactNames are the self-explaining names under Dir.
var artifactNames = []string{"checkpoint-bucket", "checkpoint-record", "savepoint-canonical", "rescaled-p3", "checkpoint-p3",
	"checkpoint-bucket-canonical", "checkpoint-p3-canonical", "flink-savepoints", "report.html", "flink-report.html", "s3-versitygw"}

// intermediate are the stores removed at the end without Keep.
var intermediate = []string{"checkpoint-bucket", "checkpoint-record", "savepoint-canonical", "rescaled-p3", "checkpoint-p3",
	"checkpoint-bucket-canonical", "checkpoint-p3-canonical", "flink-savepoints"}

func (r *runner) cleanup() {
	if r.job != nil {
		r.job.Close()
		r.job = nil
	}
	for _, e := range r.env {
		if k, v, ok := strings.Cut(e, "="); ok {
			os.Setenv(k, v)
		} else {
			os.Unsetenv(k)
		}
	}
	if r.srv != nil && r.cfg.Server == nil {
		r.srv.Close()
	}
	if r.tmp != "" {
		os.RemoveAll(r.tmp)
	}
}

// url names a snapshot path under the demo root, as the CLI takes it.
func (r *runner) url(parts ...string) string {
	if r.cfg.S3 {
		return r.base + "/" + strings.Join(parts, "/")
	}
	return filepath.Join(append([]string{r.base}, parts...)...)
}

// sfstate runs a command, returning its stdout; a non-zero exit is an
// error carrying its stderr.
func (r *runner) sfstate(args ...string) ([]byte, int, error) {
	var out, errOut bytes.Buffer
	full := append([]string{"sfstate", "--no-progress"}, args...)
	code := r.cfg.Exec(full, &out, &errOut)
	if code != 0 {
		return out.Bytes(), code, fmt.Errorf("sfstate %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(errOut.String()))
	}
	return out.Bytes(), 0, nil
}

// sfstateJSON runs a command with --json and decodes its output into v.
func (r *runner) sfstateJSON(v any, args ...string) (int, error) {
	out, code, err := r.sfstate(append([]string{"--json"}, args...)...)
	if jerr := json.Unmarshal(out, v); jerr != nil && err == nil {
		return code, fmt.Errorf("sfstate %s: output is not JSON: %v", strings.Join(args, " "), jerr)
	}
	return code, err
}

// show prints the command line a user would type.
func (r *runner) show(args ...string) {
	var shown []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if (a == "--temp-dir" || a == "--work-dir") && i+1 < len(args) {
			i++ // scratch space: not part of what the step shows
			continue
		}
		a = r.rel(a)
		shown = append(shown, a)
	}
	fmt.Fprintf(r.out, "   $ sfstate %s\n", strings.Join(shown, " "))
}

func mustWd() string {
	wd, _ := os.Getwd()
	return wd
}

func (r *runner) bar(label string, total int64, unit string) *progress.Bar {
	if r.cfg.Progress == nil {
		return nil
	}
	return progress.New(r.cfg.Progress, false, label, total, unit)
}

func human(n int64) string { return progress.Human(float64(n), "B") }

// ---- step 1 ----------------------------------------------------------------

func (r *runner) stepWorkload() error {
	job, err := OpenJob(filepath.Join(r.tmp, "job"))
	if err != nil {
		return err
	}
	r.job = job
	bar := r.bar("events", r.cfg.Events, "")
	var shown int64
	st, err := job.Run(r.ctx, r.cfg.Events, r.cfg.Seed, func(done int64) {
		if done > shown {
			bar.Add(done - shown)
			shown = done
		}
	})
	bar.Done()
	if err != nil {
		return err
	}
	r.res.Workload = st
	fmt.Fprintf(r.out, "   %d events (%d auctions, %d bids, %d retractions) over %d subtasks, key groups 0-%d and %d-%d of %d\n",
		st.Events, st.Auctions, st.Bids, st.Retractions, Parallelism,
		job.Subtasks[0].be.Layout().Range.End, job.Subtasks[1].be.Layout().Range.Start, job.Subtasks[1].be.Layout().Range.End, MaxParallelism)
	fmt.Fprintf(r.out, "   %.0f events/s (%s); the join emitted %d rows; processing time spans %dh ending now\n",
		st.EventsPerSec, st.Elapsed.Round(time.Millisecond), st.JoinOutput, int(Span.Hours()))
	return nil
}

// ---- step 2 ----------------------------------------------------------------

func (r *runner) stepSnapshot() error {
	ctx := r.ctx
	cst, err := r.sub("checkpoint-bucket")
	if err != nil {
		return err
	}
	// With the job's schema, so the checkpoint converts to canonical.
	res, err := checkpoint.New(cst, checkpoint.Options{Schema: Schema(recordstore.LayoutBucket)}).TakeSync(ctx, r.job.Backends(), 1)
	if err != nil {
		return fmt.Errorf("native checkpoint: %w", err)
	}
	r.res.CheckpointID = res.ID
	r.res.CheckpointBytes = res.BytesUploaded
	r.res.CheckpointFiles = res.FilesUploaded
	r.res.CheckpointURL = r.url("checkpoint-bucket", checkpoint.Dir(res.ID))
	fmt.Fprintf(r.out, "   native checkpoint   %s: %d files, %s uploaded (sync %s, upload %s)\n",
		r.rel(r.res.CheckpointURL), res.FilesUploaded, human(res.BytesUploaded), res.Sync.Round(time.Millisecond), res.Upload.Round(time.Millisecond))

	op := canonical.Operator{UID: "nexmark-demo", Parallelism: Parallelism, MaxParallelism: MaxParallelism}
	schema := Schema(recordstore.LayoutBucket)
	for i, o := range r.job.Operators() {
		op.Subtasks = append(op.Subtasks, canonical.Subtask{Index: i, Operator: o, Schema: schema})
	}
	t0 := time.Now()
	_, cs, err := canonical.Export(ctx, []canonical.Operator{op}, r.store, canonical.ExportOptions{Dir: "savepoint-canonical", TempDir: r.tmp, FlinkVersion: "1.20"})
	if err != nil {
		return fmt.Errorf("canonical savepoint: %w", err)
	}
	r.res.SavepointEntries, r.res.SavepointBytes, r.res.SavepointFiles = cs.Entries, cs.StreamBytes, cs.Files
	r.res.SavepointURL = r.url("savepoint-canonical")
	fmt.Fprintf(r.out, "   canonical savepoint %s: %d live entries, %d files, %s of Flink keyed-state streams (%s)\n",
		r.rel(r.res.SavepointURL), cs.Entries, cs.Files, human(cs.StreamBytes), time.Since(t0).Round(time.Millisecond))
	// The job is done with its backends.
	r.job.Close()
	r.job = nil
	return nil
}

// sub returns a store rooted at name under the demo root.
func (r *runner) sub(name string) (s3.Storage, error) {
	if r.cfg.S3 {
		return r.srv.NewStore(r.ctx, strings.TrimPrefix(r.base, "s3://"+r.srv.Bucket+"/")+"/"+name, s3.S3Options{})
	}
	return s3.NewLocal(filepath.Join(r.cfg.Dir, name))
}

// rel shortens local paths relative to the working directory.
func (r *runner) rel(p string) string {
	if filepath.IsAbs(p) {
		if rel, err := filepath.Rel(mustWd(), p); err == nil && !strings.HasPrefix(rel, "../..") {
			return rel
		}
	}
	return p
}

// ---- step 3 ----------------------------------------------------------------

func (r *runner) stepInspect() error {
	report := filepath.Join(r.cfg.Dir, "report.html")
	for _, u := range []string{r.res.CheckpointURL, r.res.SavepointURL} {
		args := []string{"inspect", "--ttl", "24h", "--now", fmt.Sprint(r.res.Workload.End), u}
		if u == r.res.SavepointURL {
			args = append(args[:len(args)-1], "--html", report, u)
		}
		r.show(args...)
		out, _, err := r.sfstate(args...)
		if err != nil {
			return err
		}
		r.indent(out, 14)
	}
	r.res.Report = report
	fmt.Fprintf(r.out, "   HTML report: %s\n", r.rel(report))
	return nil
}

// indent prints command output indented under the step, at most max
// lines (0: all).
func (r *runner) indent(out []byte, max int) {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for i, l := range lines {
		if max > 0 && i == max && len(lines) > max+1 {
			fmt.Fprintf(r.out, "     ... (%d more lines)\n", len(lines)-max)
			break
		}
		fmt.Fprintf(r.out, "     %s\n", l)
	}
}

// MarshalJSON gives the step's wall time in seconds.
func (s StepTime) MarshalJSON() ([]byte, error) {
	type plain StepTime
	return json.Marshal(struct {
		plain
		Seconds float64 `json:"seconds"`
	}{plain(s), s.Elapsed.Seconds()})
}

// MarshalJSON gives the workload's wall time in seconds.
func (w WorkloadStats) MarshalJSON() ([]byte, error) {
	type plain WorkloadStats
	return json.Marshal(struct {
		plain
		Seconds float64 `json:"seconds"`
	}{plain(w), w.Elapsed.Seconds()})
}
