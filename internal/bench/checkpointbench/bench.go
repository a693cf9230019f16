// Package checkpointbench measures native checkpoints (checkpoint)
// against a local S3 server: snapshot, incremental upload and restore
// against plain uploads and downloads of the same bytes, and canonical
// savepoint export and import of the same state (sfstate bench checkpoint).
package checkpointbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// BenchConfig sizes the checkpoint benchmark.
type BenchConfig struct {
	// Keys and ValueSize give the state size (Keys × (ValueSize + ~10)).
	Keys      int `json:"keys"`
	ValueSize int `json:"valueSize"`
	// Parallelism is the number of subtasks (RocksDB instances).
	Parallelism int `json:"parallelism"`
	// UpdateFraction of the keys is rewritten before the incremental
	// checkpoint.
	UpdateFraction float64 `json:"updateFraction"`
	// Parallel uploads/downloads in flight.
	Parallel int `json:"parallel"`
	// TempDir holds the RocksDB instances and the gateway's data ("" =
	// system temp).
	TempDir string `json:"tempDir"`
	// Log, when set, reports progress.
	Log func(format string, args ...any) `json:"-"`
}

// DefaultBenchConfig is 10M keys of 100 bytes (about 1 GiB) at parallelism
// 2, or about 64 MiB when quick.
func DefaultBenchConfig(quick bool) BenchConfig {
	c := BenchConfig{Keys: 10_000_000, ValueSize: 100, Parallelism: 2, UpdateFraction: 0.01, Parallel: 8}
	if quick {
		c.Keys = 640_000
	}
	return c
}

// BenchRow is one measurement and, where there is one, the plain transfer
// of the same bytes through the same store (the limit).
type BenchRow struct {
	// Layout is "default files" or "key-group files".
	Layout string `json:"layout"`
	// ID names rows other tools look up (BenchCanonicalWrite,
	// BenchCanonicalRead); empty for the others.
	ID           string  `json:"id,omitempty"`
	Name         string  `json:"name"`
	Seconds      float64 `json:"seconds"`
	SyncMillis   float64 `json:"syncMillis,omitempty"`
	Files        int     `json:"files"`
	Bytes        int64   `json:"bytes"`
	MiBps        float64 `json:"mibps"`
	PlainSeconds float64 `json:"plainSeconds,omitempty"`
	PlainMiBps   float64 `json:"plainMibps,omitempty"`
	// Amplification of a restore: bytes downloaded over the checkpoint's
	// size (1 = every byte fetched once).
	Amplification float64 `json:"amplification,omitempty"`
	// Entries moved and their rate, where counted (canonical savepoints).
	Entries       int64   `json:"entries,omitempty"`
	EntriesPerSec float64 `json:"entriesPerSec,omitempty"`
	Note          string  `json:"note,omitempty"`
}

// BenchReport is the result of RunBench.
type BenchReport struct {
	Config     BenchConfig `json:"config"`
	StateBytes int64       `json:"stateBytes"`
	Rows       []BenchRow  `json:"rows"`
}

func mibps(b int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(b) / (1 << 20) / d.Seconds()
}

// RunBench writes a large state into RocksDB backends and measures, on a
// local versitygw: the first checkpoint, an incremental checkpoint after
// rewriting UpdateFraction of the keys, a restore at the same parallelism
// and a rescaled restore, then (once, file layout does not matter) the
// write and read of a canonical savepoint of the same state (rows
// BenchCanonicalWrite and BenchCanonicalRead), each next to a plain upload
// or download of the same bytes with the same parallelism. Keys are
// Integers and values ASCII Strings, so the state is a valid Flink state.
func RunBench(ctx context.Context, cfg BenchConfig) (*BenchReport, error) {
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if cfg.Parallelism < 1 || cfg.Keys < 1 || cfg.ValueSize < 1 {
		return nil, fmt.Errorf("checkpoint bench: invalid config %+v", cfg)
	}
	scratch, err := os.MkdirTemp(cfg.TempDir, "sfstate-bench-checkpoint-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	srv, err := testutil.LaunchVersitygw(ctx, filepath.Join(scratch, "s3"))
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	rep := &BenchReport{Config: cfg}
	cfg.Log = nil
	for _, kg := range []bool{false, true} {
		prefix := "default"
		if kg {
			prefix = "key-group-files"
		}
		raw, err := srv.NewStore(ctx, "bench/"+prefix, s3.S3Options{})
		if err != nil {
			return nil, err
		}
		st := s3.WithRetry(raw, s3.RetryPolicy{})
		vdir := filepath.Join(scratch, prefix)
		if err := benchVariant(ctx, cfg, logf, st, vdir, kg, rep); err != nil {
			return nil, err
		}
		if err := os.RemoveAll(vdir); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// benchVariant runs the measurements with default RocksDB files or with
// key-group partitioned files (kg).
func benchVariant(ctx context.Context, cfg BenchConfig, logf func(string, ...any), st s3.Storage, scratch string, kg bool, rep *BenchReport) error {
	layout := "default files"
	open := engine.OpenRocksDB
	if kg {
		layout = "key-group files"
		open = engine.OpenRocksDBKeyGroupFiles
	}
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	const maxPar = 128
	states := []engine.StateDesc{{Name: "values", Kind: engine.KindValue}}
	var backends []engine.Backend
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	ranges := keygroups.Ranges(maxPar, cfg.Parallelism)
	if ranges == nil {
		return fmt.Errorf("checkpoint bench: parallelism %d invalid for %d key groups", cfg.Parallelism, maxPar)
	}
	for i, r := range ranges {
		b, err := open(filepath.Join(scratch, fmt.Sprintf("task-%d", i)),
			engine.Layout{MaxParallelism: maxPar, Range: r}, states, engine.RocksOptions{})
		if err != nil {
			return err
		}
		backends = append(backends, b)
	}
	write := func(keys func(yield func(int) bool), version uint64) error {
		batches := make([]engine.Batch, len(backends))
		for i, b := range backends {
			batches[i] = b.NewBatch()
			defer batches[i].Close()
		}
		rng := rand.New(rand.NewPCG(version, 7))
		val := make([]byte, cfg.ValueSize)
		var kb []byte
		var werr error
		keys(func(k int) bool {
			kg := int(uint32(keygroups.MurmurHash(int32(k)))) % maxPar
			sub := keygroups.SubtaskForKeyGroup(maxPar, cfg.Parallelism, kg)
			for j := 0; j+8 <= len(val); j += 8 {
				v := rng.Uint64()
				for x := 0; x < 8; x++ {
					val[j+x] = '0' + byte(v>>(8*x))&0x3f
				}
			}
			ik := [4]byte{byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)}
			kb = backends[sub].Layout().Key(kb[:0], kg, ik[:], nil)
			batches[sub].Put(0, kb, val)
			if batches[sub].Len() >= 20000 {
				werr = batches[sub].Commit()
			}
			return werr == nil
		})
		if werr != nil {
			return werr
		}
		for _, bt := range batches {
			if err := bt.Commit(); err != nil {
				return err
			}
		}
		return nil
	}
	logf("%s: writing %d keys of %d bytes into %d RocksDB instances", layout, cfg.Keys, cfg.ValueSize, cfg.Parallelism)
	if err := write(func(yield func(int) bool) {
		for k := 0; k < cfg.Keys && yield(k); k++ {
		}
	}, 1); err != nil {
		return err
	}
	for _, b := range backends {
		if err := b.Flush(); err != nil {
			return err
		}
		if err := engine.CompactNative(b); err != nil {
			return err
		}
	}
	cp := checkpoint.New(st, checkpoint.Options{Parallel: cfg.Parallel, LocalDir: scratch})
	plainDir := filepath.Join(scratch, "plain")

	// First checkpoint.
	logf("first checkpoint")
	start := time.Now()
	p, err := cp.Take(ctx, backends, 1)
	if err != nil {
		return err
	}
	r1, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	d := time.Since(start)
	if !kg {
		rep.StateBytes = r1.BytesUploaded
	}
	var sstFiles int
	var sstBytes int64
	for _, s := range r1.Manifest.Subtasks {
		for _, f := range s.Shared {
			sstFiles++
			sstBytes += f.Size
		}
	}
	row := BenchRow{Layout: layout, Name: "first checkpoint", Seconds: d.Seconds(), SyncMillis: float64(p.Sync.Microseconds()) / 1000,
		Files: r1.FilesUploaded, Bytes: r1.BytesUploaded, MiBps: mibps(r1.BytesUploaded, d),
		Note: fmt.Sprintf("%d SST files, mean %.2f MiB", sstFiles, float64(sstBytes)/float64(max(sstFiles, 1))/(1<<20))}
	if row.PlainSeconds, err = plainUpload(ctx, st, plainDir, "plain1/", uploadedSizes(r1.Manifest), cfg.Parallel); err != nil {
		return err
	}
	row.PlainMiBps = mibps(r1.BytesUploaded, time.Duration(row.PlainSeconds*float64(time.Second)))
	rep.Rows = append(rep.Rows, row)

	// Incremental checkpoint after rewriting a fraction of the keys.
	n := int(float64(cfg.Keys) * cfg.UpdateFraction)
	logf("rewriting %d keys, incremental checkpoint", n)
	rng := rand.New(rand.NewPCG(3, 3))
	if err := write(func(yield func(int) bool) {
		for i := 0; i < n && yield(rng.IntN(cfg.Keys)); i++ {
		}
	}, 2); err != nil {
		return err
	}
	start = time.Now()
	p, err = cp.Take(ctx, backends, 2)
	if err != nil {
		return err
	}
	r2, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	d = time.Since(start)
	var newSST int64
	for _, s := range r2.Manifest.Subtasks {
		for _, f := range s.Shared {
			if f.Uploaded {
				newSST += f.Size
			}
		}
	}
	row = BenchRow{Layout: layout, Name: fmt.Sprintf("incremental checkpoint (%.1f%% keys rewritten)", 100*cfg.UpdateFraction), Seconds: d.Seconds(),
		SyncMillis: float64(p.Sync.Microseconds()) / 1000, Files: r2.FilesUploaded, Bytes: r2.BytesUploaded, MiBps: mibps(r2.BytesUploaded, d),
		Note: fmt.Sprintf("new SST %.1f MiB, reused %d files %.1f MiB", float64(newSST)/(1<<20), r2.FilesReferenced, float64(r2.BytesReferenced)/(1<<20))}
	if row.PlainSeconds, err = plainUpload(ctx, st, plainDir, "plain2/", uploadedSizes(r2.Manifest), cfg.Parallel); err != nil {
		return err
	}
	row.PlainMiBps = mibps(r2.BytesUploaded, time.Duration(row.PlainSeconds*float64(time.Second)))
	rep.Rows = append(rep.Rows, row)

	// Restores.
	for _, rc := range []struct {
		name string
		p    int
	}{{"restore, same parallelism", cfg.Parallelism}, {fmt.Sprintf("restore, rescaled %d→%d", cfg.Parallelism, cfg.Parallelism+1), cfg.Parallelism + 1}} {
		logf("%s", rc.name)
		dir := filepath.Join(scratch, fmt.Sprintf("restore-%d", rc.p))
		var total checkpoint.RestoreStats
		var mu sync.Mutex
		start = time.Now()
		g, gctx := errgroup.WithContext(ctx)
		for i, r := range keygroups.Ranges(maxPar, rc.p) {
			i, r := i, r
			g.Go(func() error {
				b, s, err := checkpoint.Restore(gctx, st, 2, r, filepath.Join(dir, fmt.Sprint(i)), checkpoint.RestoreOptions{Parallel: cfg.Parallel, KeyGroupFiles: kg})
				if err != nil {
					return err
				}
				b.Close()
				mu.Lock()
				total.FilesDownloaded += s.FilesDownloaded
				total.BytesDownloaded += s.BytesDownloaded
				total.KeysCopied += s.KeysCopied
				total.FilesSkipped += s.FilesSkipped
				total.Download += s.Download
				total.Build += s.Build
				total.Clip += s.Clip
				total.Copy += s.Copy
				total.Imported += s.Imported
				mu.Unlock()
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		d = time.Since(start)
		os.RemoveAll(dir)
		row = BenchRow{Layout: layout, Name: rc.name, Amplification: float64(total.BytesDownloaded) / float64(max(r2.Manifest.BytesReferenced+r2.Manifest.BytesUploaded, 1)), Seconds: d.Seconds(), Files: total.FilesDownloaded, Bytes: total.BytesDownloaded, MiBps: mibps(total.BytesDownloaded, d)}
		row.Note = fmt.Sprintf("%d SST files skipped, %d subtasks imported from a subset, %d keys copied between subtasks; "+
			"summed over subtasks: download %.2fs, import/open %.2fs, clip %.2fs, copy %.2fs",
			total.FilesSkipped, total.Imported, total.KeysCopied,
			total.Download.Seconds(), total.Build.Seconds(), total.Clip.Seconds(), total.Copy.Seconds())
		if rc.p == cfg.Parallelism {
			if row.PlainSeconds, err = plainDownload(ctx, st, r2.Manifest, filepath.Join(scratch, "plain-download"), cfg.Parallel*cfg.Parallelism); err != nil {
				return err
			}
			row.PlainMiBps = mibps(total.BytesDownloaded, time.Duration(row.PlainSeconds*float64(time.Second)))
		}
		rep.Rows = append(rep.Rows, row)
	}
	if !kg {
		// The canonical savepoint does not depend on the file layout.
		return benchCanonical(ctx, cfg, logf, st, scratch, layout, maxPar, backends, rep)
	}
	return nil
}

func uploadedSizes(m *checkpoint.Manifest) []int64 {
	var out []int64
	for _, s := range m.Subtasks {
		for _, f := range s.Shared {
			if f.Uploaded {
				out = append(out, f.Size)
			}
		}
		for _, f := range s.Private {
			out = append(out, f.Size)
		}
	}
	return out
}

// plainUpload writes files of the given sizes locally, then times uploading
// them with the same parallelism.
func plainUpload(ctx context.Context, st s3.Storage, dir, prefix string, sizes []int64, parallel int) (float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	rng := rand.New(rand.NewPCG(9, 9))
	buf := make([]byte, 1<<20)
	for i, sz := range sizes {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			return 0, err
		}
		for left := sz; left > 0; {
			n := min(left, int64(len(buf)))
			for j := 0; j+8 <= int(n); j += 8 {
				v := rng.Uint64()
				for x := 0; x < 8; x++ {
					buf[j+x] = byte(v >> (8 * x))
				}
			}
			if _, err := f.Write(buf[:n]); err != nil {
				f.Close()
				return 0, err
			}
			left -= n
		}
		f.Close()
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i := range sizes {
		i := i
		g.Go(func() error {
			f, err := os.Open(filepath.Join(dir, fmt.Sprint(i)))
			if err != nil {
				return err
			}
			defer f.Close()
			return st.Put(gctx, fmt.Sprintf("%s%d", prefix, i), f, sizes[i])
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// plainDownload times downloading every object of m into local files (in
// dir, removed afterwards) with the given parallelism.
func plainDownload(ctx context.Context, st s3.Storage, m *checkpoint.Manifest, dir string, parallel int) (float64, error) {
	var keys []string
	for _, s := range m.Subtasks {
		for _, f := range s.Shared {
			keys = append(keys, f.Key)
		}
		for _, f := range s.Private {
			keys = append(keys, f.Key)
		}
	}
	return plainDownloadKeys(ctx, st, keys, dir, parallel)
}
