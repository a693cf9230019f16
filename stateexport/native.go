package stateexport

import (
	"fmt"
	"sort"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/native"
)

// openNative resolves the native RocksDB handles of op. It returns nil
// (after a note) when they are not to be read: no Options.NativeReader,
// or the engine's own layout, whose keys and values are engine-encoded
// rather than Flink's (sfstate convert turns such a checkpoint into a
// canonical savepoint, which exports).
func (e *exporter) openNative(op *savepoint.OperatorState) (*native.Snapshot, error) {
	if e.o.NativeReader == nil {
		e.note(fmt.Sprintf("operator %s: keyed state in the RocksDB native layout is read only with --deep (a build with RocksDB), or convert the snapshot to the canonical format first", op.ID))
		return nil, nil
	}
	snap, err := native.Open(e.ctx, e.sp, savepoint.ScanOptions{Operator: op.ID.String()})
	if err != nil {
		return nil, fmt.Errorf("stateexport: operator %s: %w", op.ID, err)
	}
	if snap.Layout == native.LayoutEngine {
		e.note(fmt.Sprintf("operator %s: keyed state of an sfstate engine checkpoint is engine-encoded and not exported (sfstate convert --to canonical first)", op.ID))
		return nil, nil
	}
	return snap, nil
}

// nativeHeaders returns the states of a native snapshot's handles (from
// their meta-state streams) by name, as operatorHeaders does for
// key-groups handles.
func nativeHeaders(snap *native.Snapshot) ([]*keyed.StateMeta, map[string]*keyed.Header) {
	var metas []*keyed.StateMeta
	hdrs := map[string]*keyed.Header{}
	for _, h := range snap.Handles {
		if h.Header == nil {
			continue
		}
		for _, m := range h.Header.States {
			if _, ok := hdrs[m.Name]; ok {
				continue
			}
			hdrs[m.Name] = h.Header
			metas = append(metas, m)
		}
	}
	sort.SliceStable(metas, func(i, j int) bool { return metas[i].Name < metas[j].Name })
	return metas, hdrs
}

// walkNative hands every entry of key groups from..to of the native
// handles to onEntry, subtask by subtask (each handle's column families
// in RocksDB key order, so by key group within a state). Entries a RocksDB
// instance keeps outside its handle's key-group range (left over from a
// rescale until compaction; the owning subtask has its own copy) are not
// exported; a note counts them.
func (e *exporter) walkNative(snap *native.Snapshot, op *savepoint.OperatorState, from, to int, onEntry func(*savepoint.KeyedEntry) error) error {
	var ke savepoint.KeyedEntry
	err := snap.Walk(e.ctx, e.sp, e.o.NativeReader, native.WalkOptions{State: e.o.State, KeyGroupFrom: from, KeyGroupTo: to, TempDir: e.o.TempDir},
		func(h *native.Handle, ent *keyed.Entry) error {
			ke = savepoint.KeyedEntry{Operator: op, Subtask: h.Subtask, File: h.MetaName, Header: h.Header, Entry: ent}
			return onEntry(&ke)
		})
	if err != nil {
		return err
	}
	var skipped int64
	for _, h := range snap.Handles {
		skipped += h.OutOfRange
	}
	if skipped > 0 {
		e.note(fmt.Sprintf("operator %s: %d entries outside their subtask's key-group range skipped (left over from a rescale; their owner holds them)", op.ID, skipped))
	}
	return nil
}
