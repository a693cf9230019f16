//go:build cgo

// Package verifybench measures the digest throughput of `sfstate verify` on
// a generated savepoint: one verify process on one core against two
// `--shard i/2` processes, whose merged digest must equal the whole one.
// The verify runs are child processes of the sfstate binary (Config.Exe),
// each with GOMAXPROCS=1, so their CPU times are their own.
package verifybench

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify"
	"github.com/sfstate/sfstate/verify/restore"
)

// Config says what to measure.
type Config struct {
	// Keys are the grouping keys generated (~690 bytes of canonical streams
	// per key).
	Keys int
	// Dir is the scratch directory's parent ("" for the system's).
	Dir string
	// Exe is the sfstate binary the verify children run.
	Exe string
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// Result is what `sfstate bench verify --json` prints.
type Result struct {
	Keys          int     `json:"keys"`
	Entries       int64   `json:"entries"`
	Bytes         int64   `json:"bytes"`
	OneSeconds    float64 `json:"oneProcessSeconds"`
	EntriesPerSec float64 `json:"entriesPerSecond"`
	MBPerSec      float64 `json:"mbPerSecond"`
	ShardSeconds  float64 `json:"twoShardsSeconds"`
	Speedup       float64 `json:"speedup"`
	// CPU seconds (user + system) of the one process and of the slower
	// shard, and the speed-up they imply when each shard gets its own core
	// (the wall-clock speed-up also shows contention from other load).
	OneCPUSeconds   float64 `json:"oneProcessCPUSeconds"`
	ShardCPUSeconds float64 `json:"slowerShardCPUSeconds"`
	CPUSpeedup      float64 `json:"cpuSpeedup"`
	// EntriesPerCPUSecond is the one process's rate per CPU second.
	EntriesPerCPUSecond float64 `json:"entriesPerCPUSecond"`
	MergeOK             bool    `json:"mergeOK"`
}

// Run generates the savepoint, runs the verify children and compares the
// digests. A merged digest that differs is reported in Result.MergeOK, not
// as an error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Keys <= 0 {
		return nil, fmt.Errorf("verifybench: %d keys", cfg.Keys)
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	dir, err := os.MkdirTemp(cfg.Dir, "sfstate-bench-verify-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	store, err := s3.NewLocal(dir)
	if err != nil {
		return nil, err
	}
	logf("generating %d keys", cfg.Keys)
	if _, err := restore.Generate(ctx, store, "sp", restore.GenOptions{Keys: cfg.Keys, Backend: "rocksdb", Parallelism: 4, MaxParallelism: 128, Now: 1_750_000_000_000, TempDir: dir}); err != nil {
		return nil, fmt.Errorf("bench verify: generate: %w", err)
	}
	res := &Result{Keys: cfg.Keys}
	_ = filepath.WalkDir(filepath.Join(dir, "sp"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				res.Bytes += fi.Size()
			}
		}
		return nil
	})
	sp := filepath.Join(dir, "sp")
	verifyArgs := func(out string, shard string) []string {
		a := []string{"--no-progress", "--quiet", "verify", "--backends", "none", "--skip-check", "--concurrency", "1", "--digest-out", out}
		if shard != "" {
			a = append(a, "--shard", shard)
		}
		return append(a, sp)
	}
	runChild := func(args []string, cpu *float64) error {
		cmd := exec.CommandContext(ctx, cfg.Exe, args...)
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%v: %s", err, stderr.String())
		}
		*cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		return nil
	}
	logf("one process, one core")
	whole := filepath.Join(dir, "whole.json")
	t0 := time.Now()
	if err := runChild(verifyArgs(whole, ""), &res.OneCPUSeconds); err != nil {
		return nil, fmt.Errorf("bench verify: %w", err)
	}
	res.OneSeconds = time.Since(t0).Seconds()
	logf("two shards in two processes")
	t0 = time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	cpus := make([]float64, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = runChild(verifyArgs(filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)), fmt.Sprintf("%d/2", i)), &cpus[i])
		}(i)
	}
	wg.Wait()
	res.ShardCPUSeconds = max(cpus[0], cpus[1])
	res.ShardSeconds = time.Since(t0).Seconds()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("bench verify: %w", err)
		}
	}
	read := func(name string) (*verify.Report, error) {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return verify.ReadReport(f, name)
	}
	w0, err := read(whole)
	if err != nil {
		return nil, err
	}
	var shards []*verify.Report
	for i := 0; i < 2; i++ {
		r, err := read(filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		if err != nil {
			return nil, err
		}
		shards = append(shards, r)
	}
	m, err := verify.Merge(shards)
	if err != nil {
		return nil, err
	}
	res.MergeOK = m.OK && verify.Compare(w0.Digest, m.Digest) == nil
	res.Entries = w0.Digest.Total("", "").Entries
	res.EntriesPerSec = float64(res.Entries) / res.OneSeconds
	res.MBPerSec = float64(res.Bytes) / 1e6 / res.OneSeconds
	res.Speedup = res.OneSeconds / res.ShardSeconds
	if res.ShardCPUSeconds > 0 && res.OneCPUSeconds > 0 {
		res.CPUSpeedup = res.OneCPUSeconds / res.ShardCPUSeconds
		res.EntriesPerCPUSecond = float64(res.Entries) / res.OneCPUSeconds
	}
	return res, nil
}
