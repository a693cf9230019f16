//go:build cgo

package migrate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// MaterializeReport describes a canonical savepoint materialized as native
// checkpoints.
type MaterializeReport struct {
	CheckpointID int64                  `json:"checkpointId"`
	Operators    []MaterializedOperator `json:"operators"`
	Skipped      []string               `json:"skipped"`
}

// MaterializedOperator is one keyed operator written as a native checkpoint.
type MaterializedOperator struct {
	ID          string   `json:"id"`
	Prefix      string   `json:"prefix"` // key prefix of its checkpoint store inside dst
	Parallelism int      `json:"parallelism"`
	States      []string `json:"states"`
	Entries     int64    `json:"entries"`
	// Join is the digest of the operator's join state in the record layout
	// (nil when it has none), as imported.
	Join          *Digest `json:"join"`
	BytesUploaded int64   `json:"bytesUploaded"`
}

// MaterializeCanonical imports a canonical savepoint (its join records into
// the record layout) and writes every keyed operator as a native
// checkpoint with the savepoint's checkpoint id: into dst itself when
// there is one keyed operator, else into dst/<operator id>/. workDir holds
// the RocksDB directories. `_metadata` is written last per operator.
func MaterializeCanonical(ctx context.Context, sp *savepoint.Savepoint, dst s3.Storage, prefixed func(prefix string) (s3.Storage, error), workDir string) (*MaterializeReport, error) {
	work, err := os.MkdirTemp(workDir, s3.ScratchPrefix+"materialize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	n := 0
	factory := func(op savepoint.OperatorID, subtask int, layout engine.Layout, states []engine.StateDesc) (engine.Backend, error) {
		n++
		return engine.OpenRocksDB(filepath.Join(work, fmt.Sprintf("%s-%d-%d", op, subtask, n)), layout, states, engine.RocksOptions{})
	}
	res, err := canonical.Import(ctx, sp, factory, canonical.ImportOptions{JoinRecords: recordstore.LayoutRecord})
	if err != nil {
		return nil, fmt.Errorf("migrate: import %s: %w", sp.Name(), err)
	}
	defer res.Close()
	rep := &MaterializeReport{CheckpointID: sp.Meta.CheckpointID, Skipped: res.Skipped}
	if rep.CheckpointID <= 0 {
		rep.CheckpointID = 1
	}
	for _, op := range res.Operators {
		mo := MaterializedOperator{ID: op.ID.String(), Parallelism: op.Parallelism}
		target := dst
		if len(res.Operators) > 1 {
			mo.Prefix = op.ID.String()
			if target, err = prefixed(mo.Prefix); err != nil {
				return nil, err
			}
		}
		var backends []engine.Backend
		for _, st := range op.Subtasks {
			backends = append(backends, st.Backend)
			mo.Entries += st.Entries
			if _, err := StateID(st.Backend, recordstore.RecordStateName); err == nil {
				js, err := recordstore.Open(recordstore.LayoutRecord, st.Backend, recordstore.Options{})
				if err != nil {
					return nil, err
				}
				d, err := DigestRecords(st.Backend)
				if err != nil {
					return nil, fmt.Errorf("migrate: operator %s subtask %d: %w", op.ID, st.Index, err)
				}
				if probs, err := js.Check(); err != nil || len(probs) > 0 {
					return nil, fmt.Errorf("migrate: operator %s subtask %d: imported join state fails its check: %v %v", op.ID, st.Index, err, probs)
				}
				if mo.Join == nil {
					mo.Join = NewDigest()
				}
				mo.Join.Merge(d)
			}
		}
		if len(backends) > 0 {
			for _, s := range backends[0].States() {
				mo.States = append(mo.States, s.Name)
			}
		}
		r, err := checkpoint.New(target, checkpoint.Options{OperatorID: op.ID}).TakeSync(ctx, backends, rep.CheckpointID)
		if err != nil {
			return nil, fmt.Errorf("migrate: native checkpoint of operator %s: %w", op.ID, err)
		}
		mo.BytesUploaded = r.BytesUploaded
		rep.Operators = append(rep.Operators, mo)
	}
	return rep, nil
}
