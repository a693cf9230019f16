package checkpointbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// Row ids of the canonical savepoint measurements.
const (
	BenchCanonicalWrite = "canonical_write"
	BenchCanonicalRead  = "canonical_read"
)

// benchSchema describes the bench state in Flink's terms: Integer keys
// (4 bytes big-endian, whose key group is MurmurHash of the int, as the
// bench assigns them) and one value state of Strings (the values are
// ASCII).
func benchSchema() *engine.Schema {
	return &engine.Schema{
		Key: engine.IntType,
		States: []engine.StateSchema{
			{Name: "values", Kind: engine.KindValue, Namespace: engine.VoidType, Value: engine.StringType},
		},
	}
}

// benchCanonical exports the backends' state as a canonical savepoint into
// st and imports it back into new RocksDB instances at the same
// parallelism, each next to the plain upload or download of the same
// objects. It checks that the import restored every exported entry.
func benchCanonical(ctx context.Context, cfg BenchConfig, logf func(string, ...any), st s3.Storage, scratch, layout string, maxPar int, backends []engine.Backend, rep *BenchReport) error {
	schema := benchSchema()
	op := canonical.Operator{UID: "sfstate-bench", Parallelism: len(backends), MaxParallelism: maxPar}
	for i, b := range backends {
		op.Subtasks = append(op.Subtasks, canonical.Subtask{Index: i, Operator: engine.NewOperator(b, nil), Schema: schema})
	}
	tmp := filepath.Join(scratch, "canonical-staging")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	const dir = "canonical-savepoint"

	logf("canonical savepoint write")
	start := time.Now()
	_, ws, err := canonical.Export(ctx, []canonical.Operator{op}, st, canonical.ExportOptions{Dir: dir, TempDir: tmp})
	if err != nil {
		return err
	}
	d := time.Since(start)
	objs, err := st.List(ctx, dir+"/")
	if err != nil {
		return err
	}
	var sizes []int64
	var keys []string
	var total int64
	for _, o := range objs {
		sizes = append(sizes, o.Size)
		keys = append(keys, o.Key)
		total += o.Size
	}
	row := BenchRow{Layout: layout, ID: BenchCanonicalWrite, Name: "canonical savepoint write", Seconds: d.Seconds(),
		Files: len(objs), Bytes: total, MiBps: mibps(total, d), Entries: ws.Entries, EntriesPerSec: perSec(ws.Entries, d),
		Note: fmt.Sprintf("%d entries, %d keyed streams (%.1f MiB) + _metadata, subtasks exported one after another", ws.Entries, ws.Files+ws.Inline, float64(ws.StreamBytes)/(1<<20))}
	if row.PlainSeconds, err = plainUpload(ctx, st, filepath.Join(scratch, "plain-canonical"), "plain-canonical/", sizes, cfg.Parallel); err != nil {
		return err
	}
	row.PlainMiBps = mibps(total, time.Duration(row.PlainSeconds*float64(time.Second)))
	rep.Rows = append(rep.Rows, row)

	logf("canonical savepoint read")
	idir := filepath.Join(scratch, "canonical-import")
	if err := os.MkdirAll(idir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(idir)
	start = time.Now()
	sp, err := savepoint.Open(ctx, st, path.Join(dir, s3.MetadataName))
	if err != nil {
		return err
	}
	res, err := canonical.Import(ctx, sp, func(_ savepoint.OperatorID, subtask int, l engine.Layout, d []engine.StateDesc) (engine.Backend, error) {
		return engine.OpenRocksDB(filepath.Join(idir, fmt.Sprint(subtask)), l, d, engine.RocksOptions{})
	}, canonical.ImportOptions{Parallelism: len(backends), Workers: len(backends)})
	if err != nil {
		return err
	}
	d = time.Since(start)
	rs := res.Stats
	if err := res.Close(); err != nil {
		return err
	}
	if rs.Entries != ws.Entries {
		return fmt.Errorf("canonical savepoint: imported %d entries, exported %d", rs.Entries, ws.Entries)
	}
	row = BenchRow{Layout: layout, ID: BenchCanonicalRead, Name: "canonical savepoint read", Seconds: d.Seconds(),
		Files: len(objs), Bytes: total, MiBps: mibps(total, d), Entries: rs.Entries, EntriesPerSec: perSec(rs.Entries, d),
		Note: fmt.Sprintf("%d entries imported into %d RocksDB instances, %d subtasks in parallel", rs.Entries, len(backends), len(backends))}
	if row.PlainSeconds, err = plainDownloadKeys(ctx, st, keys, filepath.Join(scratch, "plain-canonical-download"), cfg.Parallel); err != nil {
		return err
	}
	row.PlainMiBps = mibps(total, time.Duration(row.PlainSeconds*float64(time.Second)))
	rep.Rows = append(rep.Rows, row)
	return nil
}

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// plainDownloadKeys times downloading the objects into local files (in
// dir, removed afterwards) with the given parallelism.
func plainDownloadKeys(ctx context.Context, st s3.Storage, keys []string, dir string, parallel int) (float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i, k := range keys {
		g.Go(func() error {
			rc, err := st.Get(gctx, k)
			if err != nil {
				return err
			}
			defer rc.Close()
			f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
			if err != nil {
				return err
			}
			_, err = io.Copy(f, rc)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}
