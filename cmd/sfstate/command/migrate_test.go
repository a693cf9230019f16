//go:build cgo

package command

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/checkpoint"
	"github.com/sfstate/sfstate/internal/fixtures"
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
		be, _, err := checkpoint.Restore(context.Background(), st, mrep.CheckpointID, engine.KeyGroupRange{Start: 0, End: m.MaxParallelism - 1},
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
	be, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), "db"), engine.Layout{MaxParallelism: 128, Range: engine.KeyGroupRange{Start: 0, End: 127}},
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
	if code != ExitOK || !strings.Contains(out, `"migrationNeeded": false`) {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if objs, _ := os.ReadDir(dst); len(objs) != 0 {
		t.Fatal("something was written")
	}
}
