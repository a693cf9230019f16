//go:build cgo

package command

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

func migrateSourceDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.GenerateCheckpoint(context.Background(), st, migrate.GenConfig{Keys: 50, Rows: 2000, Payload: 16, OtherEntries: 300, Seed: 1, WorkDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestMigrateCommand(t *testing.T) {
	src := migrateSourceDir(t)
	dst := filepath.Join(t.TempDir(), "dst")
	// dry run: report, nothing written
	out, errOut, code := run(t, "migrate", "--dry-run", src, dst)
	if code != ExitOK || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("dry run created the destination")
	}
	out, errOut, code = run(t, "--json", "migrate", "--work-dir", t.TempDir(), src, dst)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	var rep struct {
		FilesReferenced int
		Operators       []struct {
			Rows       int64 `json:"rows"`
			Mismatches int   `json:"mismatches"`
			Groups     []struct {
				Source   migrate.GroupStats  `json:"source"`
				Migrated *migrate.GroupStats `json:"migrated"`
			} `json:"groups"`
		} `json:"operators"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Operators) != 1 || rep.Operators[0].Rows != 2000 || rep.Operators[0].Mismatches != 0 || rep.FilesReferenced == 0 {
		t.Fatalf("report: %s", out)
	}
	for _, g := range rep.Operators[0].Groups {
		if g.Migrated == nil || *g.Migrated != g.Source {
			t.Fatalf("group differs: %+v", g)
		}
	}
	st, _ := s3.NewLocal(dst)
	if ids, _ := checkpoint.Completed(context.Background(), st); len(ids) != 1 {
		t.Fatalf("destination checkpoints %v", ids)
	}
	// text report of the rerun: already complete
	out, _, code = run(t, "migrate", "--checkpoint", "1", src, dst)
	if code != ExitOK || !strings.Contains(out, "already migrated") || !strings.Contains(out, "equal") {
		t.Fatalf("rerun: exit %d\n%s", code, out)
	}
	// a chk-<id> directory selects the checkpoint; the destination must differ
	if _, _, code = run(t, "migrate", filepath.Join(src, "chk-1"), src); code != ExitUsage {
		t.Fatalf("same source and destination: exit %d", code)
	}
}

func TestMigrateCommandSavepoints(t *testing.T) {
	var canonical, native string
	for _, sp := range fixtures.All(t) {
		switch {
		case strings.Contains(sp.Name, "canonical-join") && canonical == "":
			canonical = sp.Dir
		case strings.Contains(sp.Name, "NATIVE-incremental") && native == "":
			native = sp.Dir
		}
	}
	if canonical == "" || native == "" {
		t.Skip("join and native fixtures not found")
	}
	dst := filepath.Join(t.TempDir(), "dst")
	out, errOut, code := run(t, "migrate", canonical, dst)
	if code != ExitOK || !strings.Contains(out, "needs no migration") {
		t.Fatalf("canonical: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("destination written for a canonical savepoint")
	}
	// --to native-record materializes native checkpoints in the record layout
	out, errOut, code = run(t, "--json", "migrate", "--to", "native-record", "--work-dir", t.TempDir(), canonical, dst)
	if code != ExitOK {
		t.Fatalf("--to native-record: exit %d\n%s%s", code, out, errOut)
	}
	var mrep migrate.MaterializeReport
	if err := json.Unmarshal([]byte(out), &mrep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	joins := 0
	for _, o := range mrep.Operators {
		st, err := s3.NewLocal(filepath.Join(dst, o.Prefix))
		if err != nil {
			t.Fatal(err)
		}
		if ids, _ := checkpoint.Completed(context.Background(), st); len(ids) != 1 || ids[0] != mrep.CheckpointID {
			t.Fatalf("operator %s: checkpoints %v", o.ID, ids)
		}
		if o.Join == nil {
			continue
		}
		joins++
		m, err := checkpoint.ReadManifest(context.Background(), st, mrep.CheckpointID)
		if err != nil {
			t.Fatal(err)
		}
		be, _, err := checkpoint.Restore(context.Background(), st, mrep.CheckpointID, keygroups.Range{Start: 0, End: m.MaxParallelism - 1},
			filepath.Join(t.TempDir(), "r"+o.ID), checkpoint.RestoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := migrate.DigestRecords(be)
		be.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ms := migrate.Compare(o.Join, d); len(ms) > 0 || d.Total().Rows == 0 {
			t.Fatalf("restored join records differ from the imported ones: %v", ms)
		}
	}
	if joins == 0 {
		t.Fatal("no join state materialized")
	}
	dst = filepath.Join(t.TempDir(), "dst2")
	_, errOut, code = run(t, "migrate", native, dst)
	if code != ExitIO || !strings.Contains(errOut, "Flink native") {
		t.Fatalf("native: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("destination written for a Flink native checkpoint")
	}
}

func TestMigrateCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"migrate", "only-one"},
		{"migrate", "--mode", "bogus", "a", "b"},
		{"migrate", "--to", "elsewhere", "a", "b"},
	} {
		if _, _, code := run(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

func TestMigrateCommandNothingToMigrate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "src")
	st, _ := s3.NewLocal(dir)
	be, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), "db"), engine.Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}},
		[]engine.StateDesc{recordstore.StateDesc(recordstore.LayoutRecord, 0)}, engine.RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if _, err := checkpoint.New(st, checkpoint.Options{}).TakeSync(context.Background(), []engine.Backend{be}, 3); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	out, errOut, code := run(t, "--json", "migrate", dir, dst)
	var res struct {
		MigrationNeeded *bool `json:"migrationNeeded"`
	}
	if code != ExitOK || json.Unmarshal([]byte(out), &res) != nil || res.MigrationNeeded == nil || *res.MigrationNeeded {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if objs, _ := os.ReadDir(dst); len(objs) != 0 {
		t.Fatal("something was written")
	}
}

// TestMigrateReportFitsScreen: at max parallelism 32768 the default text
// report (migrate, --dry-run, -q) stays under 40 lines, while --groups
// lists every (side, key group).
func TestMigrateReportFitsScreen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "src")
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	// 300 keys per side over 32768 key groups: about 600 (side, key group)
	// rows, each of which the old report printed.
	if _, err := migrate.GenerateCheckpoint(context.Background(), st, migrate.GenConfig{MaxParallelism: 32768, Keys: 300, Rows: 1200,
		Payload: 8, OtherEntries: 10, Seed: 3, WorkDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	lines := func(s string) int { return strings.Count(s, "\n") }
	for _, args := range [][]string{{"migrate", "--dry-run"}, {"-q", "migrate", "--dry-run"}, {"migrate", "--work-dir", t.TempDir()}} {
		out, errOut, code := run(t, append(args, dir, filepath.Join(t.TempDir(), "dst"))...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		if n := lines(out); n >= 40 {
			t.Fatalf("%v: %d lines:\n%s", args, n, out)
		}
		if !regexp.MustCompile(`(?m)^\s*left\s+all\s+300\s+600\s`).MatchString(out) || !regexp.MustCompile(`(?m)^\s*right\s+all\s+300\s+600\s`).MatchString(out) {
			t.Fatalf("%v: no per-side totals (300 keys, 600 rows):\n%s", args, out)
		}
		if args[len(args)-1] != "--dry-run" && strings.Count(out, " equal") != 2 {
			t.Fatalf("%v: want both sides equal:\n%s", args, out)
		}
	}
	out, errOut, code := run(t, "migrate", "--dry-run", "--groups", dir, filepath.Join(t.TempDir(), "dst"))
	if code != ExitOK {
		t.Fatalf("--groups: exit %d\n%s%s", code, out, errOut)
	}
	if n := lines(out); n < 500 {
		t.Fatalf("--groups lists %d lines, want one per (side, key group):\n%s", n, out)
	}
}

// TestMigrateReportDiffers: with a mismatch the table lists only the
// differing key groups, each with its source and migrated figures.
func TestMigrateReportDiffers(t *testing.T) {
	src := migrate.NewDigest()
	for kg := 0; kg < 1000; kg++ {
		for side := 0; side < 2; side++ {
			*src.Group(migrate.GroupID{Side: recordstore.Side(side), KeyGroup: kg}) = migrate.GroupStats{Keys: 1, Rows: 2, Count: 2, Hash: uint64(kg)}
		}
	}
	bad := migrate.GroupID{Side: recordstore.Side(1), KeyGroup: 777}
	m := migrate.Mismatch{ID: bad, Src: *src.Groups[bad], Dst: migrate.GroupStats{Keys: 1, Rows: 1, Count: 1, Hash: 0xabc}}
	rep := &migrate.Report{CheckpointID: 1, Operators: []migrate.OperatorReport{{ID: "op", Source: src, Mismatches: []migrate.Mismatch{m}}}}
	var b strings.Builder
	if err := printMigrateReport(&b, rep, false, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "\n"); n > 12 {
		t.Fatalf("%d lines:\n%s", n, out)
	}
	if !regexp.MustCompile(`(?m)^\s*right\s+777\s+1\s+2\s+2\s+0\s+0{13}309\s+source`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\s+1\s+1\s+1\s+0\s+0{13}abc\s+migrated DIFFERS`).MatchString(out) ||
		!strings.Contains(out, "1 key group differs") || strings.Contains(out, " 776 ") {
		t.Fatalf("differing group not listed alone:\n%s", out)
	}
}

// TestMigrateProgress: on a terminal migrate draws the compact bar in key
// groups and erases it before the report; --no-progress and a pipe get
// nothing on stderr.
func TestMigrateProgress(t *testing.T) {
	src := migrateSourceDir(t)
	var out bytes.Buffer
	var tty ttyBuffer
	if code := Main([]string{"sfstate", "migrate", "--dry-run", src, filepath.Join(t.TempDir(), "dst")}, &out, &tty); code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out.String(), tty.String())
	}
	e := tty.String()
	if !regexp.MustCompile(`^\rdigesting \d+% \d+/128 key groups`).MatchString(e) || !strings.HasSuffix(e, "\r\x1b[K") {
		t.Fatalf("stderr on a terminal: %q", e)
	}
	if !strings.Contains(e, "100% 128/128 key groups") {
		t.Fatalf("bar never reached the total: %q", e)
	}
	tty.Reset()
	if code := Main([]string{"sfstate", "--no-progress", "migrate", "--dry-run", src, filepath.Join(t.TempDir(), "dst")}, &out, &tty); code != ExitOK || tty.Len() != 0 {
		t.Fatalf("--no-progress: exit %d, stderr %q", code, tty.String())
	}
	if _, errOut, code := run(t, "migrate", "--dry-run", src, filepath.Join(t.TempDir(), "dst")); code != ExitOK || errOut != "" {
		t.Fatalf("piped: exit %d, stderr %q", code, errOut)
	}
}
