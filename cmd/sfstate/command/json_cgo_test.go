//go:build cgo

package command

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/demo"
	"github.com/sfstate/sfstate/internal/bench/checkpointbench"
	"github.com/sfstate/sfstate/internal/bench/joinbench"
	"github.com/sfstate/sfstate/internal/bench/migratebench"
	"github.com/sfstate/sfstate/internal/bench/rescalebench"
	"github.com/sfstate/sfstate/internal/bench/s3bench"
	"github.com/sfstate/sfstate/internal/bench/statebench"
	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/recordstore"
)

// TestMigrateReportJSON: the migration report's keys are camelCase and its
// 64-bit hashes strings (they used to be PascalCase and JSON numbers).
func TestMigrateReportJSON(t *testing.T) {
	src := migrate.NewDigest()
	src.Groups[migrate.GroupID{Side: recordstore.Left, KeyGroup: 3}] = &migrate.GroupStats{Keys: 1, Rows: 2, Count: 2, Hash: 0xfedcba9876543210}
	rep := &migrate.Report{Source: "a", Destination: "b", CheckpointID: 9, Duration: 1500 * time.Millisecond, Mode: migrate.WriteSST,
		Operators: []migrate.OperatorReport{{ID: "op", Source: src, Migrated: src}}}
	var b bytes.Buffer
	if err := printMigrateReport(&b, rep, true, false); err != nil {
		t.Fatal(err)
	}
	checkJSONConventions(t, "migrate", b.String())
	for _, want := range []string{`"checkpointId": 9`, `"hash": "18364758544493064720"`, `"seconds": 1.5`, `"source": "a"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("migrate JSON lacks %s:\n%s", want, b.String())
		}
	}
}

// TestBenchReportsJSON encodes each benchmark's report shape (one row of
// each list) the way `sfstate --json bench X` does.
func TestBenchReportsJSON(t *testing.T) {
	reports := map[string]any{
		"checkpoint": &checkpointbench.BenchReport{Config: checkpointbench.DefaultBenchConfig(true), Rows: []checkpointbench.BenchRow{{}}},
		"storage":    &s3bench.Report{Rows: []s3bench.Row{{}}},
		"rescale":    &rescalebench.BenchReport{Config: rescalebench.DefaultBenchConfig(true, 0), Rows: []rescalebench.BenchRow{{}}},
		"migrate":    &migratebench.BenchReport{Config: migratebench.DefaultBenchConfig(true), Rows: []migratebench.BenchRow{{}}},
		"state": &statebench.StateBenchResult{Workloads: []statebench.WorkloadResult{{}}, Micro: []statebench.MicroResult{{}},
			Memory: []statebench.MemoryResult{{}}},
		"join": &joinbench.JoinBenchResult{Rows: []joinbench.JoinBenchRow{{}}},
		// sfstate --json demo
		"demo": &demo.Result{Workload: &demo.WorkloadStats{Elapsed: time.Second}, Migrate: &demo.MigrateFigures{Sides: []demo.SideCounts{{}}},
			Rescale: &demo.RescaleFigures{}, Verify: []demo.Verdict{{}}, FixtureVerdict: &demo.Verdict{}, Steps: []demo.StepTime{{Name: "x", Elapsed: time.Second}}},
	}
	for name, r := range reports {
		var b bytes.Buffer
		if err := writeJSON(&b, r); err != nil {
			t.Fatalf("bench %s: %v", name, err)
		}
		checkJSONConventions(t, "bench "+name, b.String(), ".counters.requests")
		if name == "demo" && strings.Count(b.String(), `"seconds": 1`) != 2 {
			t.Errorf("demo JSON gives durations in seconds twice (workload, step):\n%s", b.String())
		}
	}
}

// TestJSONOutputsCgo: the engine-backed commands' --json.
func TestJSONOutputsCgo(t *testing.T) {
	native := copyFixture(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast")
	sp := copyFixture(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	bucket := migrateSourceDir(t)
	cases := [][]string{
		{"inspect", "--deep", native},
		{"inspect", "--deep", "--ttl", "24h", native},
		{"inspect", "--deep", "--dump", "--limit", "20", native},
		{"verify", "--backends", "heap", "--parallelism", "0", sp},
		{"verify", "--backends", "rocksdb,heap", "--ttl", "24h", "--now", "2024-02-01T00:00:00Z", "--parallelism", "0,2", sp},
		{"migrate", sp, t.TempDir() + "/dst"},
		{"migrate", "--work-dir", t.TempDir(), bucket, t.TempDir() + "/dst"},
		{"migrate", "--dry-run", bucket, t.TempDir() + "/dst"},
	}
	outs := map[string][]string{}
	for _, args := range cases {
		o, e, code := run(t, append([]string{"--json"}, args...)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		if strings.Contains(o, "nowMillis") && !strings.Contains(strings.Join(args, " "), "--now") {
			t.Errorf("%v: volatile nowMillis without --now", args)
		}
		// Decoded entries are data: Java longs keep their full range.
		checkJSONConventions(t, strings.Join(args[:2], " "), o, ".key", ".namespace", ".userKey", ".value")
		name := args[0]
		switch {
		case args[1] == "--deep" && args[2] == "--dump":
			name = "inspect-deep-dump"
		case args[1] == "--deep":
			name = "inspect-deep"
		case name == "migrate" && args[1] == sp:
			name = "migrate-canonical"
		}
		outs[name] = append(outs[name], o)
	}
	checkSchema(t, "inspect-deep", "sfstate inspect --deep --json", outs["inspect-deep"]...)
	checkSchema(t, "inspect-deep-dump", "sfstate inspect --deep --dump --json (one JSON object per line)", outs["inspect-deep-dump"]...)
	checkSchema(t, "verify", "sfstate verify --json", outs["verify"]...)
	checkSchema(t, "migrate", "sfstate migrate --json (native checkpoint)", outs["migrate"]...)
	checkSchema(t, "migrate-canonical", "sfstate migrate --json (canonical savepoint: nothing to migrate)", outs["migrate-canonical"]...)
	// The global --json reaches bench subcommands that once had their own.
	_, e, code := run(t, "bench", "rescale", "--json", "--scale", "9")
	if code != ExitUsage || !strings.Contains(e, "--scale") {
		t.Fatalf("bench rescale --json --scale 9: exit %d: %s", code, e)
	}
}
