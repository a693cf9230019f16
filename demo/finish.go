//go:build cgo

package demo

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sfstate/sfstate/internal/fixtures"
)

// FlinkFixtures are the savepoints written by Flink that step 7 inspects
// and verifies, when the fixtures directory is present: a SQL regular join
// (MAP states left-records/right-records, RocksDB, canonical) and a join
// with unique keys whose states carry a TTL.
var FlinkFixtures = []string{"sql-rocksdb-canonical-join-mapstate", "sql-rocksdb-canonical-join-ttl-valuestate"}

// ---- step 7 ----------------------------------------------------------------

func (r *runner) stepFixture() error {
	dir := r.cfg.FixturesDir
	if dir == "" {
		dir = fixtures.Dir()
	}
	if dir == "" {
		fmt.Fprintf(r.out, "   skipped: Flink's savepoints (../shared/flink-fixtures beside the repository) are not present\n")
		return nil
	}
	for i, name := range FlinkFixtures {
		local := filepath.Join(dir, name, "savepoint")
		if _, err := os.Stat(filepath.Join(local, "_metadata")); err != nil {
			fmt.Fprintf(r.out, "   skipped %s: %v\n", name, err)
			continue
		}
		target := local
		if r.cfg.S3 {
			// Upload it, so the commands read it from the object store.
			u, err := r.upload(local, "flink-savepoints/"+name)
			if err != nil {
				return err
			}
			target = u
		}
		if i == 0 {
			report := filepath.Join(r.cfg.Dir, "flink-report.html")
			args := []string{"inspect", "--html", report, target}
			r.show(args...)
			out, _, err := r.sfstate(args...)
			if err != nil {
				return err
			}
			r.indent(keyedBlocks(out), 0)
			fmt.Fprintf(r.out, "   HTML report: %s\n", r.rel(report))
			r.res.Fixture = target
		}
		v, err := r.verifyRun(target)
		if v != nil {
			if i == 0 {
				r.res.FixtureVerdict = v
			}
			r.res.Verify = append(r.res.Verify, *v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// keyedBlocks keeps the summary header and the operators that have keyed
// state from inspect's text output.
func keyedBlocks(out []byte) []byte {
	blocks := strings.Split(strings.TrimRight(string(out), "\n"), "\n\n")
	var kept []string
	for i, b := range blocks {
		if i == 0 || strings.Contains(b, "keyed state") {
			kept = append(kept, b)
		}
	}
	if n := len(blocks) - len(kept); n > 0 {
		kept = append(kept, fmt.Sprintf("(%d operators without keyed state not shown)", n))
	}
	return []byte(strings.Join(kept, "\n\n"))
}

// upload copies a local snapshot directory to key prefix under the demo
// root and returns its URL.
func (r *runner) upload(local, prefix string) (string, error) {
	err := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(local, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		return r.store.Put(r.ctx, prefix+"/"+filepath.ToSlash(rel), f, st.Size())
	})
	if err != nil {
		return "", fmt.Errorf("uploading %s: %w", filepath.Base(filepath.Dir(local)), err)
	}
	return r.url(strings.Split(prefix, "/")...), nil
}

// ---- the end -----------------------------------------------------------------

func (r *runner) finish(total time.Duration) error {
	fmt.Fprintf(r.out, "\n== done in %s\n", total.Round(100*time.Millisecond))
	for _, s := range r.res.Steps {
		fmt.Fprintf(r.out, "   %-16s %s\n", s.Name, s.Elapsed.Round(10*time.Millisecond))
	}
	if !r.cfg.Keep {
		if err := r.removeIntermediate(); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\nartifacts in %s:\n", r.rel(r.cfg.Dir))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".work-") {
			continue
		}
		r.res.Paths = append(r.res.Paths, filepath.Join(r.cfg.Dir, e.Name()))
		fmt.Fprintf(r.out, "   %-28s %s\n", e.Name(), describe[e.Name()])
	}
	if r.cfg.S3 && r.cfg.Keep {
		fmt.Fprintf(r.out, "   (the objects of %s are files under s3-versitygw/; the server has stopped)\n", r.base)
	}
	if !r.cfg.Keep {
		fmt.Fprintf(r.out, "   (intermediate stores removed; run with --keep to keep them)\n")
	}
	fmt.Fprintf(r.out, "open %s in a browser for the savepoint report\n", r.rel(r.res.Report))
	return nil
}

var describe = map[string]string{
	"checkpoint-bucket":           "native checkpoint of the job at parallelism 2, join state in the bucket layout",
	"checkpoint-record":           "the same checkpoint after `sfstate migrate` (record layout)",
	"savepoint-canonical":         "canonical savepoint of the job (Flink-restorable)",
	"rescaled-p3":                 "`sfstate rescale -p 3` output: _metadata and rescale-plan.json referencing checkpoint-record",
	"checkpoint-p3":               "checkpoint taken by the job restored at parallelism 3",
	"checkpoint-bucket-canonical": "`sfstate convert` of checkpoint-bucket: canonical savepoint, join state as Flink's two join states",
	"checkpoint-p3-canonical":     "`sfstate convert` of checkpoint-p3 (record layout), equal to checkpoint-bucket-canonical",
	"flink-savepoints":            "Flink's own savepoints, uploaded for the S3 run",
	"report.html":                 "HTML report of the canonical savepoint",
	"flink-report.html":           "HTML report of Flink's SQL join savepoint",
	"s3-versitygw":                "versitygw's posix directory (the S3 buckets)",
}

func (r *runner) removeIntermediate() error {
	if r.cfg.S3 {
		objs, err := r.store.List(r.ctx, "")
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := r.store.Delete(r.ctx, o.Key); err != nil {
				return err
			}
		}
		if r.cfg.Server == nil {
			r.srv.Close()
			r.srv = nil
			r.cfg.Server = nil
		}
		if err := os.RemoveAll(filepath.Join(r.cfg.Dir, "s3-versitygw")); err != nil {
			return err
		}
	}
	for _, n := range intermediate {
		if err := os.RemoveAll(filepath.Join(r.cfg.Dir, n)); err != nil {
			return err
		}
	}
	return nil
}
