package rescale

import (
	"fmt"

	"github.com/sfstate/sfstate/savepoint"
)

// NativeViews rescales an operator holding incremental RocksDB handles.
func NativeViews(op *savepoint.OperatorState, newP int) (*savepoint.OperatorState, LayoutStats, error) {
	return nil, LayoutStats{}, fmt.Errorf("%w: operator %s holds native (incremental RocksDB) handles; rescaling them by reference is not supported yet — Flink restores native handles at any parallelism itself", ErrUnsupported, op.ID)
}
