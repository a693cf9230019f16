//go:build cgo

// Package restore restores savepoints into the engine's backends for
// package verify: canonical.Import into a heap or RocksDB backend per target
// subtask at the requested parallelism, then canonical.Export of what the
// backends return (expired TTL entries are not returned) into a temporary
// local savepoint that verify digests. It needs cgo (the engine).
package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// Restorer implements verify.Restorer with the engine's backends.
type Restorer struct {
	// WriteBufferSize of the RocksDB instances (default 16 MiB).
	WriteBufferSize int64
	// Mutate, when set, is called with the restored backends of each
	// operator before the export (tests use it to prove that verification
	// fails).
	Mutate func(res *canonical.ImportResult) error
}

var _ verify.Restorer = (*Restorer)(nil)

// Restore implements verify.Restorer.
func (r *Restorer) Restore(ctx context.Context, sp *savepoint.Savepoint, t verify.Target, o verify.RestoreOptions) (*savepoint.Savepoint, func(), error) {
	switch t.Backend {
	case "heap", "rocksdb":
	default:
		return nil, nil, fmt.Errorf("restore: unknown backend %q", t.Backend)
	}
	dir, err := os.MkdirTemp(o.TempDir, s3.ScratchPrefix+"verify-*")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	var clock *engine.Clock
	// State that cannot be restored is skipped (and reported) rather than
	// failing its operator.
	io := canonical.ImportOptions{Parallelism: t.Parallelism, SkipUnsupported: true}
	if o.TTL.TTLMillis > 0 {
		clock = engine.NewManualClock(o.TTL.NowMillis)
		io.DefaultTTL = time.Duration(o.TTL.TTLMillis) * time.Millisecond
	}
	wbs := r.WriteBufferSize
	if wbs == 0 {
		wbs = 16 << 20
	}
	n := 0
	factory := func(op savepoint.OperatorID, subtask int, l engine.Layout, descs []engine.StateDesc) (engine.Backend, error) {
		if t.Backend == "heap" {
			return engine.OpenHeap(l, descs)
		}
		n++
		return engine.OpenRocksDB(filepath.Join(dir, fmt.Sprintf("db-%s-%d-%d", op, subtask, n)), l, descs,
			engine.RocksOptions{Clock: clock, WriteBufferSize: wbs, ErrorIfExists: true})
	}
	src := sp
	if !o.Shard.All() {
		// Only the shard's key groups are read (from the source's handles,
		// whose first offsets also bound their headers).
		io.KeyGroups = o.Shard.Range
	}
	// Operators are imported one by one, so state the import cannot map
	// fails only its own operator (OperatorErrors) and the others are still
	// verified.
	var ops []canonical.Operator
	failed := verify.OperatorErrors{}
	var skipped verify.SkippedStates
	var results []*canonical.ImportResult
	closeAll := func() {
		for _, res := range results {
			res.Close()
		}
		results = nil
	}
	defer closeAll()
	abort := func() {
		closeAll()
		cleanup()
	}
	for _, op := range src.Meta.Operators {
		// An operator whose max parallelism is below the target's (a
		// global operator has 1) is restored at its max parallelism;
		// verify reports it from the restored metadata.
		oio := io
		if maxP := int(op.MaxParallelism); maxP > 0 && oio.Parallelism > maxP {
			oio.Parallelism = maxP
		}
		res, err := canonical.Import(ctx, operatorView(src, op), factory, oio)
		if err != nil {
			if errors.Is(err, canonical.ErrUnsupported) && ctx.Err() == nil {
				failed[op.ID.String()] = err.Error()
				continue
			}
			abort()
			return nil, nil, err
		}
		results = append(results, res)
		for _, x := range res.SkippedStates {
			skipped = append(skipped, verify.SkippedState{Operator: x.Operator.String(), State: x.State, Reason: x.Reason})
		}
		if r.Mutate != nil && len(res.Operators) > 0 {
			if err := r.Mutate(res); err != nil {
				abort()
				return nil, nil, err
			}
		}
		for _, iop := range res.Operators {
			op := canonical.Operator{ID: iop.ID, Parallelism: iop.Parallelism, MaxParallelism: iop.MaxParallelism}
			for _, st := range iop.Subtasks {
				op.Subtasks = append(op.Subtasks, canonical.Subtask{Index: st.Index, Operator: engine.NewOperator(st.Backend, clock), Schema: st.Schema})
			}
			ops = append(ops, op)
		}
	}
	var partial error
	if len(failed) > 0 {
		partial = failed
	}
	if len(skipped) > 0 {
		partial = errors.Join(partial, skipped)
	}
	if len(ops) == 0 {
		abort()
		if partial != nil {
			return nil, nil, partial
		}
		return nil, nil, errors.New("restore: the savepoint has no keyed state")
	}
	store, err := s3.NewLocal(filepath.Join(dir, "export"))
	if err != nil {
		abort()
		return nil, nil, err
	}
	if _, _, err := canonical.Export(ctx, ops, store, canonical.ExportOptions{Dir: "sp", TempDir: dir}); err != nil {
		abort()
		return nil, nil, fmt.Errorf("restore: re-export: %w", err)
	}
	out, err := savepoint.Open(ctx, store, "sp/"+savepoint.MetadataName)
	if err != nil {
		abort()
		return nil, nil, err
	}
	return out, cleanup, partial
}

// operatorView returns a view of sp holding only operator op.
func operatorView(sp *savepoint.Savepoint, op *savepoint.OperatorState) *savepoint.Savepoint {
	v := *sp
	md := *sp.Meta
	md.Operators = []*savepoint.OperatorState{op}
	v.Meta = &md
	return &v
}
