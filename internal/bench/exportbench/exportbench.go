// Package exportbench measures how fast package stateexport writes the
// keyed state of a large canonical savepoint as tables: on the savepoint
// the inspect benchmark generates (scanbench.Generate: SQL rows with a
// BIGINT+STRING key and a six-field TTL value), one run measures the cold
// raw read of the keyed file and the cold columnar full decode
// (scanbench's phases, the yardsticks), then an export per format —
// Parquet with zstd (delta encodings, and PLAIN pages as the baseline) and
// with snappy, Arrow IPC, CSV and JSON lines — each
// with the keyed file evicted from the page cache first. Per phase it
// reports rows/s, MB/s of the keyed file, the ratio to the cold raw read,
// CPU time and the peak resident set. `sfstate bench export` prints it.
package exportbench

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/sfstate/sfstate/internal/bench/proc"
	"github.com/sfstate/sfstate/internal/bench/scanbench"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/stateexport"
)

// Case is one export measured: a format and its compression.
type Case struct {
	Format      stateexport.Format
	Compression stateexport.Compression
	// Plain exports Parquet with PLAIN pages (stateexport.Options.
	// PlainEncoding), the layout before the delta encodings.
	Plain bool
}

// Name is the phase name of the case ("parquet zstd", "csv", ...).
func (c Case) Name() string {
	if c.Compression == "" || c.Compression == stateexport.Uncompressed && c.Format != stateexport.Parquet {
		return string(c.Format)
	}
	if c.Plain {
		return string(c.Format) + " " + string(c.Compression) + " plain"
	}
	return string(c.Format) + " " + string(c.Compression)
}

// Cases are the exports a run measures, in run order.
var Cases = []Case{
	{Format: stateexport.Parquet, Compression: stateexport.Zstd},
	{Format: stateexport.Parquet, Compression: stateexport.Zstd, Plain: true},
	{Format: stateexport.Parquet, Compression: stateexport.Snappy},
	{Format: stateexport.Arrow, Compression: stateexport.Uncompressed},
	{Format: stateexport.CSV},
	{Format: stateexport.JSONL},
}

// Options tune Run.
type Options struct {
	// Rounds > 1 runs each phase that often and reports the fastest.
	Rounds int
	// Workers is the decode workers (0 = savepoint.DefaultWorkers()).
	Workers int
	// RowGroupRows of the exports (0 = stateexport.DefaultRowGroupRows).
	RowGroupRows int
	// Cases, when set, replaces Cases.
	Cases []Case
	// Progress, when set, is told each phase before it runs.
	Progress func(phase string)
}

// Result is one run.
type Result struct {
	Entries      int64   `json:"entries,string"`
	DataBytes    int64   `json:"dataBytes,string"`
	Workers      int     `json:"workers"`
	RowGroupRows int     `json:"rowGroupRows"`
	Rounds       int     `json:"rounds"`
	Phases       []Phase `json:"phases"`
}

// Phase is one measured pass (the fastest of the rounds).
type Phase struct {
	Name string `json:"name"`
	// Format and Compression of export phases (empty for the yardsticks).
	Format      string `json:"format,omitempty"`
	Compression string `json:"compression,omitempty"`
	// PlainEncoding marks the Parquet export with PLAIN pages.
	PlainEncoding bool `json:"plainEncoding,omitempty"`
	// Cold is set when the keyed file was evicted from the page cache
	// before each round; Cached is the share of it resident at the start
	// of the reported round (mincore).
	Cold       bool    `json:"cold"`
	Cached     float64 `json:"cachedAtStart"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpuSeconds"`
	// Rows written (exports) or entries read.
	Rows           int64   `json:"rows,string"`
	RowsPerSec     float64 `json:"rowsPerSecond"`
	MBPerSec       float64 `json:"mbPerSecond"`
	MBPerCPUSecond float64 `json:"mbPerCpuSecond"`
	// RatioToColdRaw is MBPerSec over the cold raw read's (0 when the page
	// cache could not be dropped and no cold read ran).
	RatioToColdRaw float64 `json:"ratioToColdRaw"`
	// OutputBytes is the size of the files an export wrote.
	OutputBytes int64 `json:"outputBytes,string"`
	// PeakRSS is the peak resident set during the phase (bytes; reset
	// before each round where the kernel allows it).
	PeakRSS int64  `json:"peakRSSBytes,string"`
	Allocs  uint64 `json:"allocs,string"`
}

// Raw and decode phases taken from scanbench.
const (
	PhaseRawCold    = scanbench.PhaseRawCold
	PhaseDecodeCold = scanbench.PhaseColumnsCold
)

// Run measures the phases on the savepoint g (scanbench.Generate).
// Exports go to a directory beside g.Dir, removed after each round.
func Run(ctx context.Context, g *scanbench.Generated, o Options) (*Result, error) {
	rounds := max(o.Rounds, 1)
	workers := o.Workers
	if workers <= 0 {
		workers = savepoint.DefaultWorkers()
	}
	res := &Result{Entries: g.Entries, DataBytes: g.DataBytes, Workers: workers, RowGroupRows: o.RowGroupRows, Rounds: rounds}
	if res.RowGroupRows == 0 {
		res.RowGroupRows = stateexport.DefaultRowGroupRows
	}
	if o.Progress != nil {
		o.Progress("raw read and columnar decode")
	}
	ref, err := scanbench.RunWith(ctx, g, scanbench.Options{Rounds: rounds, Workers: workers, Phases: []string{scanbench.PhaseRawCold, scanbench.PhaseColumnsCold}})
	if err != nil {
		return nil, err
	}
	var coldMB float64
	for _, p := range ref {
		if p.Name == scanbench.PhaseRaw {
			continue // the page-cached read scanbench always adds
		}
		if p.Name == scanbench.PhaseRawCold {
			coldMB = p.MBPerSec
		}
		res.Phases = append(res.Phases, Phase{Name: p.Name, Cold: p.Cold, Cached: p.Cached, Seconds: p.Seconds, CPUSeconds: p.CPUSeconds,
			Rows: p.Entries, RowsPerSec: p.EntriesPerSec, MBPerSec: p.MBPerSec, MBPerCPUSecond: p.MBPerCPUSecond,
			PeakRSS: p.PeakRSS, Allocs: p.Allocs})
	}
	cold := coldMB > 0
	st, err := s3.NewLocal(g.Dir)
	if err != nil {
		return nil, err
	}
	sp, err := savepoint.Open(ctx, st, savepoint.MetadataName)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(g.Dir, scanbench.DataFile)
	cases := o.Cases
	if len(cases) == 0 {
		cases = Cases
	}
	for _, c := range cases {
		if o.Progress != nil {
			o.Progress("export " + c.Name())
		}
		best := Phase{Name: "export " + c.Name(), Format: string(c.Format), Compression: string(c.Compression), PlainEncoding: c.Plain, Cold: cold, Seconds: math.Inf(1)}
		for range rounds {
			out, err := os.MkdirTemp(filepath.Dir(g.Dir), "export-*")
			if err != nil {
				return nil, err
			}
			if cold {
				if err := scanbench.EvictFile(data); err != nil {
					return nil, err
				}
			} else if err := scanbench.RawRead(data); err != nil {
				return nil, err
			}
			cached, _ := scanbench.Resident(data)
			runtime.GC()
			debug.FreeOSMemory()
			proc.ResetPeakRSS()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			c0 := proc.CPU().Seconds()
			t0 := time.Now()
			man, err := export(ctx, sp, out, stateexport.Options{Format: c.Format, Compression: c.Compression, PlainEncoding: c.Plain, RowGroupRows: o.RowGroupRows, Workers: workers})
			sec := time.Since(t0).Seconds()
			cpu := proc.CPU().Seconds() - c0
			runtime.ReadMemStats(&ms1)
			peak := proc.PeakRSS()
			size := dirSize(out)
			os.RemoveAll(out)
			if err != nil {
				return nil, fmt.Errorf("exportbench: %s: %w", c.Name(), err)
			}
			var rows int64
			for _, t := range man.Tables {
				if t.State != "" {
					rows += t.Rows
				}
			}
			if rows != g.Entries {
				return nil, fmt.Errorf("exportbench: %s wrote %d rows, want %d", c.Name(), rows, g.Entries)
			}
			if sec < best.Seconds {
				best.Seconds, best.CPUSeconds, best.Cached, best.Rows, best.OutputBytes = sec, cpu, cached, rows, size
				best.Allocs = ms1.Mallocs - ms0.Mallocs
			}
			best.PeakRSS = max(best.PeakRSS, peak)
		}
		best.RowsPerSec = float64(best.Rows) / best.Seconds
		best.MBPerSec = float64(g.DataBytes) / 1e6 / best.Seconds
		if best.CPUSeconds > 0 {
			best.MBPerCPUSecond = float64(g.DataBytes) / 1e6 / best.CPUSeconds
		}
		res.Phases = append(res.Phases, best)
	}
	for i := range res.Phases {
		if coldMB > 0 {
			res.Phases[i].RatioToColdRaw = res.Phases[i].MBPerSec / coldMB
		}
	}
	return res, nil
}

func export(ctx context.Context, sp *savepoint.Savepoint, dir string, o stateexport.Options) (*stateexport.Manifest, error) {
	out, err := s3.NewLocal(dir)
	if err != nil {
		return nil, err
	}
	return stateexport.Export(ctx, sp, out, o)
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
