// Package rescalebench measures rescaled restores of native checkpoints
// (checkpoint.RestorePlanned) through a local S3 server behind a latency and
// bandwidth proxy, against restoring every overlapping handle whole as
// Flink does (sfstate bench rescale).
package rescalebench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/bench/fillstate"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// BenchConfig sizes the remote rescale benchmark.
type BenchConfig struct {
	Keys           int `json:"keys"`
	ValueSize      int `json:"valueSize"`
	MaxParallelism int `json:"maxParallelism"`
	// From and To: the first rescale goes From→To, the second To→From.
	From int `json:"from"`
	To   int `json:"to"`
	// Latency and Jitter are added each way by the proxy; BandwidthKBps
	// caps every proxied connection during restores (0 = no cap).
	Latency       time.Duration `json:"latencyNs"`
	Jitter        time.Duration `json:"jitterNs"`
	BandwidthKBps int64         `json:"bandwidthKbps"`
	// Parallel downloads per restoring subtask from the plan;
	// BaselineParallel for the whole-handle baseline (4 = Flink's default
	// state.backend.rocksdb.checkpoint.transfer.thread.num).
	Parallel         int                              `json:"parallel"`
	BaselineParallel int                              `json:"baselineParallel"`
	TempDir          string                           `json:"-"`
	Log              func(format string, args ...any) `json:"-"`
}

// DefaultBenchConfig is 524,288 keys × 8 KiB (4 GiB) at parallelism 2
// scaled by scale; quick uses a small state with the same proxy settings.
func DefaultBenchConfig(quick bool, scale float64) BenchConfig {
	c := BenchConfig{Keys: 524288, ValueSize: 8 << 10, MaxParallelism: 128, From: 2, To: 3,
		Latency: 40 * time.Millisecond, Jitter: 5 * time.Millisecond, BandwidthKBps: 1_000_000_000 / 8 / 1000, Parallel: 16, BaselineParallel: 4}
	if quick {
		c.Keys = 8192
	}
	if scale > 0 {
		c.Keys = max(1024, int(float64(c.Keys)*scale))
	}
	return c
}

// BenchRow is one rescale direction.
type BenchRow struct {
	Direction string `json:"direction"`
	// Bytes through the proxy during the restores.
	BaselineBytes int64 `json:"baselineBytes"`
	SfstateBytes  int64 `json:"sfstateBytes"`
	// Seconds until every new subtask is ready (open and serving). The
	// sfstate figures are the lazy restore's (RestoreLazy: ready at open,
	// files adopted in the background).
	BaselineReadyS float64 `json:"baselineReadyS"`
	SfstateReadyS  float64 `json:"sfstateReadyS"`
	// Seconds until all of the subtasks' state is local (lazy restore:
	// every unit adopted).
	SfstateAllLocalS float64 `json:"sfstateAllLocalS"`
	// The eager restore from the plan (Restore: ready once every needed
	// file is downloaded, imported and clipped): bytes and seconds.
	EagerBytes  int64   `json:"sfstateEagerBytes"`
	EagerReadyS float64 `json:"sfstateEagerReadyS"`
	// FirstReadS: after ready, the slowest subtask's read of one key of
	// its last key group (not yet local: the read waits for that unit,
	// fetched out of turn).
	FirstReadS float64 `json:"sfstateFirstReadS"`
	// Of which (slowest subtask each): the unit's download after the
	// read asked for it, and its adoption once downloaded.
	FirstReadFetchS float64 `json:"sfstateFirstReadFetchS"`
	FirstReadAdoptS float64 `json:"sfstateFirstReadAdoptS"`
	// Units adopted by the lazy restores (all subtasks) and ingestions.
	LazyUnits   int `json:"lazyUnits"`
	LazyBatches int `json:"lazyBatches"`
	// Adoption phases, the slowest subtask's each.
	LazyImportS  float64 `json:"lazyImportS"`
	LazyRewriteS float64 `json:"lazyRewriteS"`
	LazyIngestS  float64 `json:"lazyIngestS"`
	// LazyFetchedS: until the slowest subtask's last file was local
	// (downloaded, not yet adopted).
	LazyFetchedS float64 `json:"lazyFetchedS"`
	// The lazy restore again, each new subtask i also given the local
	// directory of old subtask i (the previous incarnation in the same
	// slot, as Flink's local recovery would keep it): identical files are
	// taken from there. ReuseRemoteBytes is what still crossed the proxy,
	// ReuseLocalBytes what was taken locally. Never part of SfstateBytes.
	ReuseRemoteBytes int64   `json:"sfstateReuseRemoteBytes"`
	ReuseLocalBytes  int64   `json:"sfstateReuseLocalBytes"`
	ReuseReadyS      float64 `json:"sfstateReuseReadyS"`
	ReuseAllLocalS   float64 `json:"sfstateReuseAllLocalS"`
	// LimitS: the largest new subtask's share of the state over the
	// bandwidth cap.
	LimitS float64 `json:"limitS"`
	// Extra detail.
	StateBytes     int64   `json:"stateBytes"`
	PlannedBytes   int64   `json:"plannedBytes"`
	BoundaryBytes  int64   `json:"boundaryBytes"`
	RescaleSeconds float64 `json:"rescaleS"`
	MetadataBytes  int64   `json:"rescaleBytesWritten"`
	ImportedSubset int     `json:"subtasksFromSubset"`
	KeysCopied     int64   `json:"keysCopied"`
	// Phases of the eager restores from the plan, the slowest subtask's each.
	DownloadS float64 `json:"sfstateDownloadS"`
	BuildS    float64 `json:"sfstateBuildS"`
	ClipS     float64 `json:"sfstateClipS"`
	CopyS     float64 `json:"sfstateCopyS"`
}

// BenchReport is the benchmark's result.
type BenchReport struct {
	Config BenchConfig `json:"config"`
	Rows   []BenchRow  `json:"rows"`
	Note   string      `json:"note"`
}

// RunBench checkpoints an engine state at cfg.From to versitygw behind
// Toxiproxy, rescales it by reference to cfg.To and restores every new
// subtask three times — Flink's way (every overlapping handle whole, then
// clip), eagerly from the plan (overlapping SST files only, ready once
// local) and lazily from the plan (ready at open, adopted in the
// background) — then checkpoints the lazily restored subtasks and does the
// same back to cfg.From.
func RunBench(ctx context.Context, cfg BenchConfig) (*BenchReport, error) {
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if cfg.Keys < 1 || cfg.ValueSize < 1 || cfg.From < 1 || cfg.To < 1 || keygroups.CheckParallelism(cfg.MaxParallelism, max(cfg.From, cfg.To)) != nil {
		return nil, fmt.Errorf("rescale bench: invalid config %+v", cfg)
	}
	scratch, err := os.MkdirTemp(cfg.TempDir, "sfstate-bench-rescale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	srv, err := testutil.LaunchVersitygw(ctx, filepath.Join(scratch, "s3"))
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	if err := os.MkdirAll(filepath.Join(scratch, "toxiproxy"), 0o755); err != nil {
		return nil, err
	}
	tp, err := testutil.LaunchToxiproxy(ctx, filepath.Join(scratch, "toxiproxy"))
	if err != nil {
		return nil, err
	}
	defer tp.Close()
	px, err := tp.CreateProxy(ctx, "s3", trimScheme(srv.Endpoint))
	if err != nil {
		return nil, err
	}
	for _, t := range []testutil.Toxic{
		testutil.Latency("latency-down", "downstream", cfg.Latency, cfg.Jitter),
		testutil.Latency("latency-up", "upstream", cfg.Latency, cfg.Jitter),
	} {
		if err := px.AddToxic(ctx, t); err != nil {
			return nil, err
		}
	}
	var counters s3.Counters
	open := func(prefix string) (s3.Storage, error) {
		raw, err := s3.NewS3(ctx, srv.Bucket, prefix, srv.Options(px.URL(), s3.S3Options{}))
		if err != nil {
			return nil, err
		}
		return s3.WithRetry(s3.WithCounters(raw, &counters), s3.RetryPolicy{}), nil
	}
	rep := &BenchReport{Config: cfg, Note: "toxiproxy applies the bandwidth cap per connection; the limit assumes one capped link per restoring subtask"}
	cfg.Log = nil

	// The first checkpoint at From.
	src, err := open("from")
	if err != nil {
		return nil, err
	}
	logf("writing %d keys × %d bytes at parallelism %d, checkpointing through the proxy", cfg.Keys, cfg.ValueSize, cfg.From)
	f := fillstate.Config{MaxParallelism: cfg.MaxParallelism, Parallelism: cfg.From, Keys: cfg.Keys, ValueSize: cfg.ValueSize, KeyGroupFiles: true, Parallel: cfg.Parallel}
	if _, err := fillstate.Checkpointed(ctx, f, filepath.Join(scratch, "db-from"), src, nil); err != nil {
		return nil, err
	}
	var prev []string
	for i := 0; i < cfg.From; i++ {
		prev = append(prev, filepath.Join(scratch, "db-from", fmt.Sprint("task-", i)))
	}
	row, restored, err := benchDirection(ctx, cfg, logf, px, &counters, src, "from", cfg.From, cfg.To, filepath.Join(scratch, "to"), true, prev)
	if err != nil {
		return nil, err
	}
	rep.Rows = append(rep.Rows, *row)

	// Checkpoint the restored subtasks at To and go back.
	back, err := open("to")
	if err != nil {
		closeAll(restored)
		return nil, err
	}
	logf("checkpointing the %d restored subtasks", len(restored))
	cp := checkpoint.New(back, checkpoint.Options{Parallel: cfg.Parallel, LocalDir: filepath.Join(scratch, "to")})
	inner := make([]engine.Backend, len(restored))
	for i, b := range restored {
		inner[i] = b
		if l, ok := b.(*checkpoint.Lazy); ok {
			inner[i] = l.Inner() // all local: WaitLocal returned
		}
	}
	p, err := cp.Take(ctx, inner, 1)
	if err == nil {
		_, err = p.Wait(ctx)
	}
	closeAll(restored)
	if err != nil {
		return nil, err
	}
	prev = prev[:0]
	for i := 0; i < cfg.To; i++ {
		prev = append(prev, filepath.Join(scratch, "to", "sfstate", fmt.Sprint(i)))
	}
	row, restored, err = benchDirection(ctx, cfg, logf, px, &counters, back, "to", cfg.To, cfg.From, filepath.Join(scratch, "back"), false, prev)
	closeAll(restored)
	if err != nil {
		return nil, err
	}
	rep.Rows = append(rep.Rows, *row)
	return rep, nil
}

func closeAll(bs []engine.Backend) {
	for _, b := range bs {
		if b != nil {
			b.Close()
		}
	}
}

func trimScheme(u string) string {
	for _, p := range []string{"http://", "https://"} {
		if len(u) > len(p) && u[:len(p)] == p {
			return u[len(p):]
		}
	}
	return u
}

// benchDirection rescales checkpoint 1 of st (at oldP) to newP and restores
// it both ways. With keep, the backends restored from the plan are returned
// open.
//
// prevDirs[i] is old subtask i's local directory, offered to new subtask i
// in the extra lazy restore that reuses identical local files.
func benchDirection(ctx context.Context, cfg BenchConfig, logf func(string, ...any), px *testutil.Proxy, counters *s3.Counters, st s3.Storage, prefix string, oldP, newP int, dir string, keep bool, prevDirs []string) (*BenchRow, []engine.Backend, error) {
	row := &BenchRow{Direction: fmt.Sprintf("%d→%d", oldP, newP)}
	sp, err := savepoint.Open(ctx, st, checkpoint.MetadataKey(1))
	if err != nil {
		return nil, nil, err
	}
	plan, err := rescaleTo(ctx, sp, st, prefix, newP, row)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range plan.Subtasks {
		row.PlannedBytes += s.NeededBytes
		row.BoundaryBytes += s.BoundaryBytes
	}
	m, err := checkpoint.ReadManifest(ctx, st, 1)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range m.Subtasks {
		for _, f := range s.Shared {
			row.StateBytes += f.Size
		}
	}
	share := int64(0)
	for _, r := range keygroups.Ranges(cfg.MaxParallelism, newP) {
		share = max(share, row.StateBytes*int64(r.Len())/int64(cfg.MaxParallelism))
	}
	if cfg.BandwidthKBps > 0 {
		row.LimitS = float64(share) / float64(cfg.BandwidthKBps*1000)
	}
	capOn := func() error {
		if cfg.BandwidthKBps <= 0 {
			return nil
		}
		return px.AddToxic(ctx, testutil.Bandwidth("cap", "downstream", cfg.BandwidthKBps))
	}
	capOff := func() error {
		if cfg.BandwidthKBps <= 0 {
			return nil
		}
		return px.RemoveToxic(ctx, "cap")
	}
	run := func(whole bool, sub string) (time.Duration, int64, []engine.Backend, []*checkpoint.PlannedStats, error) {
		if err := capOn(); err != nil {
			return 0, 0, nil, nil, err
		}
		defer capOff()
		before := counters.BytesRead()
		bs := make([]engine.Backend, newP)
		sts := make([]*checkpoint.PlannedStats, newP)
		var mu sync.Mutex
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		for i := 0; i < newP; i++ {
			g.Go(func() error {
				par := cfg.Parallel
				if whole {
					par = cfg.BaselineParallel
				}
				b, s, err := checkpoint.RestorePlanned(gctx, st, plan, i, filepath.Join(dir, sub, fmt.Sprint(i)), whole, checkpoint.RestoreOptions{Parallel: max(1, par), KeyGroupFiles: true})
				if err != nil {
					return err
				}
				mu.Lock()
				bs[i], sts[i] = b, s
				mu.Unlock()
				return nil
			})
		}
		err := g.Wait()
		d := time.Since(start)
		if err != nil {
			closeAll(bs)
			return 0, 0, nil, nil, err
		}
		return d, counters.BytesRead() - before, bs, sts, nil
	}
	// runLazy restores every new subtask lazily: ready is when all are
	// open, local when all have adopted their files.
	runLazy := func(sub string, reuse bool) (ready, local time.Duration, n int64, ls []*checkpoint.Lazy, err error) {
		if err := capOn(); err != nil {
			return 0, 0, 0, nil, err
		}
		defer capOff()
		before := counters.BytesRead()
		ls = make([]*checkpoint.Lazy, newP)
		closeLazy := func() {
			for _, l := range ls {
				if l != nil {
					l.Close()
				}
			}
		}
		var mu sync.Mutex
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		for i := 0; i < newP; i++ {
			g.Go(func() error {
				// As many downloads as the eager restore: the bulk
				// adoption keeps up with the link (the rewrite writes
				// uncompressed files and runs while later files
				// download), so fewer streams only lengthen the
				// download; a waiting read pauses new bulk downloads.
				o := checkpoint.LazyOptions{Parallel: cfg.Parallel, KeyGroupFiles: true}
				if reuse && i < len(prevDirs) {
					o.ReuseDirs = []string{prevDirs[i]}
				}
				l, err := checkpoint.RestoreLazy(gctx, st, plan, i, filepath.Join(dir, sub, fmt.Sprint(i)), o)
				if err != nil {
					return err
				}
				mu.Lock()
				ls[i] = l
				mu.Unlock()
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			closeLazy()
			return 0, 0, 0, nil, err
		}
		ready = time.Since(start)
		if !reuse {
			// The first read of each subtask: a key of its last key group,
			// the last one the background adoption would reach.
			var first time.Duration
			g, _ := errgroup.WithContext(ctx)
			for i, l := range ls {
				g.Go(func() error {
					key, ok := keyInGroup(cfg, l.Layout(), l.Layout().Range.End)
					if !ok {
						return nil
					}
					t := time.Now()
					found := false
					if err := l.MultiGet(0, [][]byte{key}, func(_ int, _ []byte, ok bool) { found = ok }); err != nil {
						return err
					}
					d := time.Since(t)
					if !found {
						return fmt.Errorf("rescale bench: subtask %d: key %q not found after a lazy restore", i, key)
					}
					mu.Lock()
					first = max(first, d)
					mu.Unlock()
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				closeLazy()
				return 0, 0, 0, nil, err
			}
			row.FirstReadS = first.Seconds()
		}
		for _, l := range ls {
			if err := l.WaitLocal(ctx); err != nil {
				closeLazy()
				return 0, 0, 0, nil, err
			}
		}
		return ready, time.Since(start), counters.BytesRead() - before, ls, nil
	}
	logf("%s: baseline restore (every overlapping handle)", row.Direction)
	d, n, bs, _, err := run(true, "baseline")
	if err != nil {
		return nil, nil, err
	}
	closeAll(bs)
	os.RemoveAll(filepath.Join(dir, "baseline"))
	row.BaselineReadyS, row.BaselineBytes = d.Seconds(), n
	logf("%s: eager restore from the plan (overlapping SST files)", row.Direction)
	d, n, bs, sts, err := run(false, "eager")
	if err != nil {
		return nil, nil, err
	}
	closeAll(bs)
	os.RemoveAll(filepath.Join(dir, "eager"))
	row.EagerReadyS, row.EagerBytes = d.Seconds(), n
	for _, s := range sts {
		row.ImportedSubset += s.Imported
		row.KeysCopied += s.KeysCopied
		row.DownloadS = max(row.DownloadS, s.Download.Seconds())
		row.BuildS = max(row.BuildS, s.Build.Seconds())
		row.ClipS = max(row.ClipS, s.Clip.Seconds())
		row.CopyS = max(row.CopyS, s.Copy.Seconds())
		if s.NotMerged != "" {
			logf("%s: files not imported together: %s", row.Direction, s.NotMerged)
		}
	}
	logf("%s: lazy restore from the plan (ready at open, files adopted in the background)", row.Direction)
	if len(prevDirs) > 0 {
		logf("%s: lazy restore reusing identical files of the previous incarnations' directories", row.Direction)
		ready, local, n, ls, err := runLazy("reuse", true)
		if err != nil {
			return nil, nil, err
		}
		row.ReuseReadyS, row.ReuseAllLocalS, row.ReuseRemoteBytes = ready.Seconds(), local.Seconds(), n
		for _, l := range ls {
			row.ReuseLocalBytes += l.Stats().BytesReused
			l.Close()
		}
		os.RemoveAll(filepath.Join(dir, "reuse"))
	}
	ready, local, n, ls, err := runLazy("sfstate", false)
	if err != nil {
		return nil, nil, err
	}
	row.SfstateReadyS, row.SfstateAllLocalS, row.SfstateBytes = ready.Seconds(), local.Seconds(), n
	out := make([]engine.Backend, len(ls))
	for i, l := range ls {
		s := l.Stats()
		row.LazyUnits += s.Units
		row.LazyBatches += s.Batches
		row.FirstReadFetchS = max(row.FirstReadFetchS, s.PrioFetch.Seconds())
		row.FirstReadAdoptS = max(row.FirstReadAdoptS, s.PrioAdopt.Seconds())
		row.LazyImportS = max(row.LazyImportS, s.Import.Seconds())
		row.LazyRewriteS = max(row.LazyRewriteS, s.Rewrite.Seconds())
		row.LazyIngestS = max(row.LazyIngestS, s.Ingest.Seconds())
		row.LazyFetchedS = max(row.LazyFetchedS, s.Fetched.Seconds())
		out[i] = l
	}
	if !keep {
		closeAll(out)
		return row, nil, nil
	}
	return row, out, nil
}

// keyInGroup returns the stored key of the first benchmark key (fillstate)
// in key group kg.
func keyInGroup(cfg BenchConfig, l engine.Layout, kg int) ([]byte, bool) {
	for k := 0; k < cfg.Keys; k++ {
		if keygroups.KeyGroupFor(keygroups.HashInt(int32(k)), cfg.MaxParallelism) == kg {
			return l.Key(nil, kg, fmt.Appendf(nil, "key-%010d", k), nil), true
		}
	}
	return nil, false
}

// rescaleTo runs the by-reference rescale of sp into <prefix>-rescaled-<n>/
// of the same store and returns its plan.
func rescaleTo(ctx context.Context, sp *savepoint.Savepoint, st s3.Storage, prefix string, newP int, row *BenchRow) (*rescale.NativePlan, error) {
	dst := &prefixed{Storage: st, prefix: fmt.Sprintf("rescaled-%d/", newP)}
	start := time.Now()
	res, err := rescale.Run(ctx, rescale.Request{Src: sp, SrcURI: st.String(), Dst: dst, Options: rescale.Options{Parallelism: newP}})
	if err != nil {
		return nil, err
	}
	row.RescaleSeconds = time.Since(start).Seconds()
	row.MetadataBytes = res.BytesWritten
	if res.Native == nil {
		return nil, fmt.Errorf("rescale bench: no native plan for %s", prefix)
	}
	return res.Native, nil
}

// prefixed is a store whose keys live under prefix of another store.
type prefixed struct {
	s3.Storage
	prefix string
}

func (p *prefixed) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return p.Storage.Get(ctx, p.prefix+key)
}

func (p *prefixed) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return p.Storage.GetRange(ctx, p.prefix+key, off, n)
}

func (p *prefixed) Stat(ctx context.Context, key string) (s3.ObjectInfo, error) {
	info, err := p.Storage.Stat(ctx, p.prefix+key)
	info.Key = strings.TrimPrefix(info.Key, p.prefix)
	return info, err
}

func (p *prefixed) List(ctx context.Context, prefix string) ([]s3.ObjectInfo, error) {
	out, err := p.Storage.List(ctx, p.prefix+prefix)
	for i := range out {
		out[i].Key = strings.TrimPrefix(out[i].Key, p.prefix)
	}
	return out, err
}

func (p *prefixed) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return p.Storage.Put(ctx, p.prefix+key, r, size)
}

func (p *prefixed) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return p.Storage.PutIfAbsent(ctx, p.prefix+key, r, size)
}

func (p *prefixed) Delete(ctx context.Context, key string) error {
	return p.Storage.Delete(ctx, p.prefix+key)
}

func (p *prefixed) Copy(ctx context.Context, src, dst string) error {
	return p.Storage.Copy(ctx, p.prefix+src, p.prefix+dst)
}

func (p *prefixed) String() string {
	return strings.TrimSuffix(p.Storage.String(), "/") + "/" + strings.TrimSuffix(p.prefix, "/")
}
