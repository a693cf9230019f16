//go:build cgo

package command

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/verify"
	"github.com/sfstate/sfstate/verify/restore"
	"github.com/urfave/cli/v2"
)

func init() {
	RegisterBench(&cli.Command{
		Name:  "verify",
		Usage: "digest throughput of sfstate verify on a generated savepoint: one process on one core vs 2 shards in 2 processes",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quick", Usage: "small savepoint (seconds, not minutes)"},
			&cli.IntFlag{Name: "keys", Usage: "grouping keys to generate (default ~1 GiB of state, --quick 20000)"},
			&cli.StringFlag{Name: "dir", Usage: "scratch directory (default: system temp)"},
		},
		Action: runBenchVerify,
	})
}

// BenchVerifyResult is what `sfstate bench verify --json` prints.
type BenchVerifyResult struct {
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

func runBenchVerify(c *cli.Context) error {
	g := GlobalsFrom(c)
	keys := c.Int("keys")
	if keys < 0 {
		return Failf(ExitUsage, "bench verify: --keys must not be negative")
	}
	if keys == 0 {
		keys = 1_600_000 // ~1 GiB of canonical streams (~690 bytes per key)
		if c.Bool("quick") {
			keys = 20_000
		}
	}
	self, err := os.Executable()
	if err != nil {
		return Fail(ExitIO, err)
	}
	dir, err := os.MkdirTemp(c.String("dir"), "sfstate-bench-verify-*")
	if err != nil {
		return Fail(ExitIO, err)
	}
	defer os.RemoveAll(dir)
	logf := func(format string, args ...any) {
		if !g.Quiet && !g.JSON {
			fmt.Fprintf(c.App.ErrWriter, "bench verify: "+format+"\n", args...)
		}
	}
	store, err := s3.NewLocal(dir)
	if err != nil {
		return Fail(ExitIO, err)
	}
	logf("generating %d keys", keys)
	ctx := c.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if _, err := restore.Generate(ctx, store, "sp", restore.GenOptions{Keys: keys, Backend: "rocksdb", Parallelism: 4, MaxParallelism: 128, Now: 1_750_000_000_000, TempDir: dir}); err != nil {
		return Fail(ExitIO, fmt.Errorf("bench verify: generate: %w", err))
	}
	res := BenchVerifyResult{Keys: keys}
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
		cmd := exec.CommandContext(ctx, self, args...)
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
		return Fail(ExitIO, fmt.Errorf("bench verify: %w", err))
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
			return Fail(ExitIO, fmt.Errorf("bench verify: %w", err))
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
		return Fail(ExitIO, err)
	}
	var shards []*verify.Report
	for i := 0; i < 2; i++ {
		r, err := read(filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		if err != nil {
			return Fail(ExitIO, err)
		}
		shards = append(shards, r)
	}
	m, err := verify.Merge(shards)
	if err != nil {
		return Fail(ExitIO, err)
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
	w := c.App.Writer
	if g.JSON {
		if err := writeJSON(w, res); err != nil {
			return Fail(ExitIO, err)
		}
	} else {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "savepoint\t%d keys, %d entries, %.1f MB\n", res.Keys, res.Entries, float64(res.Bytes)/1e6)
		fmt.Fprintf(tw, "1 process, 1 core\t%.2f s\t%.0f entries/s\t%.1f MB/s\n", res.OneSeconds, res.EntriesPerSec, res.MBPerSec)
		fmt.Fprintf(tw, "2 shards, 2 processes\t%.2f s\tspeed-up %.2fx\tmerged digest equal: %v\n", res.ShardSeconds, res.Speedup, res.MergeOK)
		fmt.Fprintf(tw, "CPU time\t%.2f s one process (%.0f entries/CPU-s)\t%.2f s slower shard\tspeed-up with a core per shard %.2fx\n", res.OneCPUSeconds, res.EntriesPerCPUSecond, res.ShardCPUSeconds, res.CPUSpeedup)
		if err := tw.Flush(); err != nil {
			return Fail(ExitIO, err)
		}
	}
	if !res.MergeOK {
		return Failf(ExitCheckFailed, "bench verify: merged shard digests differ from the whole")
	}
	return nil
}
