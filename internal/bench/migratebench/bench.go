//go:build cgo

// Package migratebench measures the bucket-to-record migration of native
// checkpoints (package migrate) on local disk and on a local S3 server,
// next to plainly reading and writing the same bytes (sfstate bench
// migrate).
package migratebench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/internal/bench/proc"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/migrate"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

// BenchConfig configures RunBench.
type BenchConfig struct {
	// BucketBytes is the target size of the bucket state (stored key and
	// value bytes) of each generated checkpoint.
	BucketBytes int64 `json:"bucketBytes"`
	// Dir holds scratch data; empty means the system temp directory.
	Dir string `json:"dir"`
	// NoS3 skips the versitygw measurements.
	NoS3 bool `json:"noS3"`
	// Modes to measure; empty means both (SST writer + ingest, and put).
	Modes []migrate.WriteMode `json:"modes"`
	// Log, when set, reports progress.
	Log func(format string, args ...any) `json:"-"`
}

// DefaultBenchConfig is 2 GiB of bucket state, or 24 MiB with quick.
func DefaultBenchConfig(quick bool) BenchConfig {
	if quick {
		return BenchConfig{BucketBytes: 24 << 20}
	}
	return BenchConfig{BucketBytes: 2 << 30}
}

// BenchRow is one measured migration.
type BenchRow struct {
	Store   string            `json:"store"` // local or versitygw
	Shape   string            `json:"shape"` // uniform or skewed
	Payload int               `json:"payload"`
	Mode    migrate.WriteMode `json:"mode"`
	Rows    int64             `json:"rows"`
	Buckets int64             `json:"buckets"`
	// BucketBytes is the logical bucket state read, FileBytesIn the source
	// SST bytes, FileBytesOut the record SST bytes written.
	BucketBytes  int64   `json:"bucketBytes"`
	FileBytesIn  int64   `json:"fileBytesIn"`
	FileBytesOut int64   `json:"fileBytesOut"`
	Seconds      float64 `json:"seconds"`
	CPUSeconds   float64 `json:"cpuSeconds"`
	RowsPerSec   float64 `json:"rowsPerSec"`
	// RowsPerCPUSec is rows per second of process CPU time (per core).
	RowsPerCPUSec float64 `json:"rowsPerCpuSec"`
	MBPerSec      float64 `json:"mbPerSec"` // bucket bytes per second, 10^6
	// LimitSeconds is the time to read FileBytesIn and write FileBytesOut
	// as plain files or objects on the same store.
	LimitSeconds float64 `json:"limitSeconds"`
	PctOfLimit   float64 `json:"pctOfLimit"`
}

// BenchReport is what RunBench measured.
type BenchReport struct {
	Config BenchConfig `json:"config"`
	Cores  int         `json:"cores"`
	Rows   []BenchRow  `json:"rows"`
	// S3Skipped says why versitygw was not measured.
	S3Skipped string `json:"s3Skipped,omitempty"`
}

// RunBench generates bucket-layout checkpoints (uniform and skewed keys,
// payload 0 and 256 bytes) and migrates each on local disk and on a local
// versitygw, with each write mode, next to the time to just read and write
// the same bytes.
func RunBench(ctx context.Context, cfg BenchConfig) (*BenchReport, error) {
	if cfg.BucketBytes <= 0 {
		cfg.BucketBytes = 2 << 30
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = []migrate.WriteMode{migrate.WriteSST, migrate.WritePut}
	}
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	scratch, err := os.MkdirTemp(cfg.Dir, "sfstate-bench-migrate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	rep := &BenchReport{Config: cfg, Cores: runtime.NumCPU()}
	rep.Config.Log = nil
	var srv *testutil.S3Server
	if !cfg.NoS3 {
		srv, err = testutil.LaunchVersitygw(ctx, filepath.Join(scratch, "s3"))
		if err != nil {
			rep.S3Skipped = err.Error()
			srv = nil
		} else {
			defer srv.Close()
		}
	} else {
		rep.S3Skipped = "disabled"
	}
	for _, skewed := range []bool{false, true} {
		for _, payload := range []int{0, 256} {
			shape := "uniform"
			if skewed {
				shape = "skewed"
			}
			perRow := int64(19 + payload + 2)
			rows := max(1000, cfg.BucketBytes/perRow)
			gdir := filepath.Join(scratch, "gen")
			gst, err := s3.NewLocal(gdir)
			if err != nil {
				return nil, err
			}
			logf("generating %s/%d: %d rows", shape, payload, rows)
			_, err = migrate.GenerateCheckpoint(ctx, gst, migrate.GenConfig{Keys: int(max(1, rows/64)), Rows: int(rows), Skewed: skewed,
				Payload: payload, OtherEntries: 10000, Seed: 42, WorkDir: scratch})
			if err != nil {
				return nil, err
			}
			for _, mode := range cfg.Modes {
				row, err := benchLocal(ctx, gst, scratch, mode)
				if err != nil {
					return nil, err
				}
				row.Shape, row.Payload = shape, payload
				logf("local %s/%d %s: %.2fs, %.0f rows/s", shape, payload, mode, row.Seconds, row.RowsPerSec)
				rep.Rows = append(rep.Rows, *row)
			}
			if srv != nil {
				prefix := fmt.Sprintf("bench/%s-%d", shape, payload)
				srcS3, err := srv.NewStore(ctx, prefix+"/src", s3.S3Options{})
				if err != nil {
					return nil, err
				}
				if err := testutil.CopyStore(ctx, gst, srcS3); err != nil {
					return nil, err
				}
				for _, mode := range cfg.Modes {
					row, err := benchS3(ctx, srv, srcS3, prefix, scratch, mode)
					if err != nil {
						return nil, err
					}
					row.Shape, row.Payload = shape, payload
					logf("versitygw %s/%d %s: %.2fs, %.0f rows/s", shape, payload, mode, row.Seconds, row.RowsPerSec)
					rep.Rows = append(rep.Rows, *row)
				}
				if err := deletePrefix(ctx, srv.Store, prefix+"/"); err != nil {
					return nil, err
				}
			}
			if err := os.RemoveAll(gdir); err != nil {
				return nil, err
			}
		}
	}
	return rep, nil
}

func fileBytes(ctx context.Context, st s3.Storage, cf string) (int64, error) {
	m, err := checkpoint.ReadManifest(ctx, st, 1)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range m.Subtasks {
		for _, f := range s.Shared {
			if f.ColumnFamily == cf {
				n += f.Size
			}
		}
	}
	return n, nil
}

func measure(ctx context.Context, src, dst s3.Storage, opts migrate.Options) (*BenchRow, error) {
	runtime.GC()
	c0, t0 := proc.CPU(), time.Now()
	rep, err := migrate.Checkpoint(ctx, src, dst, opts)
	if err != nil {
		return nil, err
	}
	el, cpu := time.Since(t0), proc.CPU()-c0
	op := rep.Operators[0]
	row := &BenchRow{Mode: opts.Mode, Rows: op.Rows, Buckets: op.Buckets, BucketBytes: op.BytesIn,
		Seconds: el.Seconds(), CPUSeconds: cpu.Seconds()}
	row.RowsPerSec = float64(row.Rows) / row.Seconds
	if row.CPUSeconds > 0 {
		row.RowsPerCPUSec = float64(row.Rows) / row.CPUSeconds
	}
	row.MBPerSec = float64(row.BucketBytes) / 1e6 / row.Seconds
	if row.FileBytesIn, err = fileBytes(ctx, src, recordstore.BucketStateName); err != nil {
		return nil, err
	}
	if row.FileBytesOut, err = fileBytes(ctx, dst, recordstore.RecordStateName); err != nil {
		return nil, err
	}
	return row, nil
}

func benchLocal(ctx context.Context, src *s3.Local, scratch string, mode migrate.WriteMode) (*BenchRow, error) {
	ddir := filepath.Join(scratch, "dst-local")
	defer os.RemoveAll(ddir)
	dst, err := s3.NewLocal(ddir)
	if err != nil {
		return nil, err
	}
	row, err := measure(ctx, src, dst, migrate.Options{Mode: mode, WorkDir: scratch, Parallel: runtime.NumCPU()})
	if err != nil {
		return nil, err
	}
	row.Store = "local"
	// the limit: read the bucket files, write as many bytes as the records
	m, err := checkpoint.ReadManifest(ctx, src, 1)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	buf := make([]byte, 1<<20)
	for _, s := range m.Subtasks {
		for _, f := range s.Shared {
			if f.ColumnFamily != recordstore.BucketStateName {
				continue
			}
			fh, err := os.Open(filepath.Join(src.Root(), filepath.FromSlash(f.Key)))
			if err != nil {
				return nil, err
			}
			_, err = io.CopyBuffer(io.Discard, fh, buf)
			fh.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	out := filepath.Join(scratch, "limit.out")
	fh, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	for left := row.FileBytesOut; left > 0; left -= int64(len(buf)) {
		if _, err := fh.Write(buf[:min(int64(len(buf)), left)]); err != nil {
			fh.Close()
			return nil, err
		}
	}
	err = fh.Sync()
	fh.Close()
	os.Remove(out)
	if err != nil {
		return nil, err
	}
	row.LimitSeconds = time.Since(t0).Seconds()
	row.PctOfLimit = 100 * row.LimitSeconds / row.Seconds
	return row, nil
}

func benchS3(ctx context.Context, srv *testutil.S3Server, src s3.Storage, prefix, scratch string, mode migrate.WriteMode) (*BenchRow, error) {
	dprefix := prefix + "/dst-" + string(mode)
	dst, err := srv.NewStore(ctx, dprefix, s3.S3Options{})
	if err != nil {
		return nil, err
	}
	sp, dp := prefix+"/src/", dprefix+"/"
	opts := migrate.Options{Mode: mode, WorkDir: scratch, Parallel: runtime.NumCPU(), CopyReferenced: func(ctx context.Context, key string) (bool, error) {
		return true, srv.Store.Copy(ctx, sp+key, dp+key)
	}}
	row, err := measure(ctx, src, dst, opts)
	if err != nil {
		return nil, err
	}
	row.Store = "versitygw"
	m, err := checkpoint.ReadManifest(ctx, src, 1)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	for _, s := range m.Subtasks {
		for _, f := range s.Shared {
			if f.ColumnFamily != recordstore.BucketStateName {
				continue
			}
			rc, err := src.Get(ctx, f.Key)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if err := dst.Put(ctx, "limit.out", io.LimitReader(zeroReader{}, row.FileBytesOut), row.FileBytesOut); err != nil {
		return nil, err
	}
	row.LimitSeconds = time.Since(t0).Seconds()
	row.PctOfLimit = 100 * row.LimitSeconds / row.Seconds
	return row, nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func deletePrefix(ctx context.Context, st s3.Storage, prefix string) error {
	objs, err := st.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := st.Delete(ctx, o.Key); err != nil {
			return err
		}
	}
	return nil
}
