package stateexport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/native"
	"github.com/sfstate/sfstate/savepoint/serde"
	"github.com/sfstate/sfstate/verify"
)

// DefaultRowGroupRows is the default number of rows per row group (Parquet)
// or record batch (Arrow IPC), and the rows a table buffers at most.
const DefaultRowGroupRows = 64 << 10

// maxRowGroupRows bounds Options.RowGroupRows.
const maxRowGroupRows = 1 << 24

// Table names of the metadata tables.
const (
	OperatorsTable = "_operators"
	StatesTable    = "_states"
)

// Options configures Export.
type Options struct {
	Format      Format
	Compression Compression
	// PlainEncoding writes the Parquet columns that are not dictionary-
	// encoded in PLAIN pages instead of DELTA_BINARY_PACKED (integers,
	// dates, times, time stamps) and DELTA_BYTE_ARRAY (strings, binaries),
	// for readers without the delta encodings (Spark before 3.3).
	PlainEncoding bool
	// RowGroupRows is the number of rows per row group / record batch
	// (DefaultRowGroupRows when 0). Memory use grows with it: every table
	// open at once buffers up to that many rows.
	RowGroupRows int
	// Shard exports only the key groups of one shard (verify.Shard: the
	// same split for every job of a run); the zero Shard is everything.
	Shard verify.Shard
	// FieldNames name the fields of SQL row and tuple parts (see
	// ParseFieldNames); one that names no exported state fails the export
	// before its manifest is written.
	FieldNames []FieldNames
	// Operator (id, uid or name) and State restrict the export.
	Operator, State string
	// Workers decode the key groups of each file in parallel (see
	// savepoint.ScanOptions.Workers; 0 = savepoint.DefaultWorkers()).
	Workers int
	// NativeReader, when set, reads the keyed state that Flink's RocksDB
	// backend keeps in its native layout (incremental and native
	// checkpoints and savepoints: SST files): each subtask's files are
	// downloaded into a directory under TempDir, read with it (in cgo
	// builds engine.ReadNativeDir; `sfstate export --deep`) and removed.
	// Without it such operators are skipped with a note.
	NativeReader native.DirReader
	// TempDir is where NativeReader's download directories are made ("" =
	// the system's).
	TempDir string
	// Progress, when set, is told about the key groups read.
	Progress savepoint.Progress
	// Allocator for Arrow buffers (nil = Go allocator).
	Allocator memory.Allocator
}

// Manifest describes one export (one shard of it): the files written,
// with sizes and CRC-32C, per table. It is written last, so a dataset
// whose manifest exists is complete.
type Manifest struct {
	Source       string           `json:"source"`
	CheckpointID int64            `json:"checkpointId,string"`
	Format       Format           `json:"format"`
	Compression  Compression      `json:"compression,omitempty"`
	Shard        string           `json:"shard,omitempty"`
	Tables       []*ManifestTable `json:"tables"`
	Notes        []string         `json:"notes,omitempty"`
}

// ManifestTable is one table of a Manifest.
type ManifestTable struct {
	// Name is the table's directory under the output root.
	Name string `json:"name"`
	// Operator (hex id) and State name; empty for the metadata tables.
	Operator string `json:"operator,omitempty"`
	State    string `json:"state,omitempty"`
	Kind     string `json:"kind,omitempty"`
	// Rows written and state entries they came from (LIST states give a
	// row per element).
	Rows    int64 `json:"rows,string"`
	Entries int64 `json:"entries,string"`
	// Columns names the table's columns in order.
	Columns []string     `json:"columns"`
	Files   []s3.Written `json:"files"`
}

// ManifestKey is the key of the manifest of shard s.
func ManifestKey(s verify.Shard) string {
	if s.All() {
		return "_manifest.json"
	}
	return fmt.Sprintf("_manifest-%05d-of-%05d.json", s.Index, s.Count)
}

// PartName is the file name of shard s's part of a table.
func PartName(s verify.Shard, f Format) string {
	i, n := s.Index, s.Count
	if s.All() {
		i, n = 0, 1
	}
	return fmt.Sprintf("part-%05d-of-%05d.%s", i, n, f.Ext())
}

// exporter is one run of Export.
type exporter struct {
	ctx  context.Context
	sp   *savepoint.Savepoint
	out  s3.Storage
	o    Options
	mem  memory.Allocator
	man  *Manifest
	dirs map[string]bool
	// rows of the _states table
	states []*stateRow
	// noColumnar reads every entry through the generic decoder (tests
	// compare both paths).
	noColumnar bool
	// operator-state tables written, per operator id and state name
	opTables map[string]map[string]*opTable
	// names are Options.FieldNames, resolved
	names []*FieldNames
}

type stateRow struct {
	op                *savepoint.OperatorSummary
	sum               savepoint.StateSummary
	table             string
	rows              int64
	kgFrom, kgTo      int
	ttlMin, ttlMax    *int64
	note              string
	operatorStateRows bool
}

// Export writes the keyed state of sp selected by o as tables under the
// root of out, then the manifest (ManifestKey) with PutIfAbsent. It fails
// before reading any state when the manifest already exists.
func Export(ctx context.Context, sp *savepoint.Savepoint, out s3.Storage, o Options) (*Manifest, error) {
	e, err := newExporter(ctx, sp, out, &o)
	if err != nil {
		return nil, err
	}
	return e.run()
}

// newExporter checks and completes o and that no export is at out yet.
func newExporter(ctx context.Context, sp *savepoint.Savepoint, out s3.Storage, op *Options) (*exporter, error) {
	o := *op
	if o.Format == "" {
		o.Format = Parquet
	}
	if _, err := ParseFormat(string(o.Format)); err != nil {
		return nil, err
	}
	if o.Format == Parquet {
		if _, err := o.Compression.codec(); err != nil {
			return nil, err
		}
		if o.Compression == "" {
			o.Compression = Zstd
		}
	}
	if o.RowGroupRows == 0 {
		o.RowGroupRows = DefaultRowGroupRows
	}
	if o.RowGroupRows < 1 || o.RowGroupRows > maxRowGroupRows {
		return nil, fmt.Errorf("stateexport: %d rows per row group, want 1..%d", o.RowGroupRows, maxRowGroupRows)
	}
	if o.Workers == 0 {
		o.Workers = savepoint.DefaultWorkers()
	}
	if o.Operator != "" && sp.FindOperator(o.Operator) == nil {
		return nil, fmt.Errorf("stateexport: %s: operator %q not found", sp.Name(), o.Operator)
	}
	names, err := resolveFieldNames(sp, o.FieldNames)
	if err != nil {
		return nil, err
	}
	mkey := ManifestKey(o.Shard)
	if _, err := out.Stat(ctx, mkey); err == nil {
		return nil, fmt.Errorf("stateexport: %s: %w: an export is already there", joinKey(out, mkey), s3.ErrExists)
	} else if !s3.IsNotExist(err) {
		return nil, fmt.Errorf("stateexport: %s: %w", joinKey(out, mkey), err)
	}
	e := &exporter{ctx: ctx, sp: sp, out: out, o: o, mem: o.Allocator, dirs: map[string]bool{OperatorsTable: true, StatesTable: true},
		opTables: map[string]map[string]*opTable{}, names: names}
	if e.mem == nil {
		e.mem = memory.NewGoAllocator()
	}
	e.man = &Manifest{Source: sp.Name(), CheckpointID: sp.Meta.CheckpointID, Format: o.Format, Shard: o.Shard.String()}
	if o.Format == Parquet || (o.Format == Arrow && o.Compression == Zstd) {
		e.man.Compression = o.Compression
	}
	return e, nil
}

// run exports and writes the manifest.
func (e *exporter) run() (*Manifest, error) {
	ctx, sp, out, o := e.ctx, e.sp, e.out, e.o
	mkey := ManifestKey(o.Shard)
	sum := savepoint.Summarize(sp)
	for i, op := range sp.Meta.Operators {
		if o.Operator != "" && sp.FindOperator(o.Operator) != op {
			continue
		}
		if err := e.exportOperator(op, sum.Operators[i]); err != nil {
			return nil, err
		}
		if o.Shard.All() || o.Shard.Index == 0 {
			ts, err := e.exportOperatorState(op)
			if err != nil {
				return nil, err
			}
			e.opTables[op.ID.String()] = ts
		}
	}
	if err := e.unusedFieldNames(); err != nil {
		return nil, err
	}
	if err := e.writeMetaTables(sum); err != nil {
		return nil, err
	}
	var written []s3.Written
	for _, t := range e.man.Tables {
		written = append(written, t.Files...)
	}
	b, err := json.MarshalIndent(e.man, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := s3.CommitMetadata(ctx, out, written, mkey, append(b, '\n')); err != nil {
		return nil, fmt.Errorf("stateexport: %w", err)
	}
	return e.man, nil
}

func joinKey(st s3.Storage, key string) string {
	return strings.TrimSuffix(st.String(), "/") + "/" + key
}

// tableName picks a unique directory name for a state table:
// <operator uid or id>.<state>, characters outside [A-Za-z0-9_.-]
// replaced by '_'.
func (e *exporter) tableName(op *savepoint.OperatorState, state string) string {
	label := op.ID.String()
	if op.UID != "" {
		label = sanitize(op.UID)
	}
	base := label + "." + sanitize(state)
	name := base
	for i := 2; e.dirs[name]; i++ {
		name = fmt.Sprintf("%s~%d", base, i)
	}
	e.dirs[name] = true
	return name
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := strings.Trim(b.String(), ".")
	if out == "" {
		out = "_"
	}
	if len(out) > 120 {
		out = out[:120]
	}
	return out
}

// table is one state table being written. Rows reach it on the decoding
// goroutine, either as columnar batches (copied into a colSet) or entry by
// entry (appended to rb); each full row group is handed to the table's
// encoder goroutine, so decoding and encoding overlap.
type table struct {
	man    *ManifestTable
	layout *stateLayout
	schema *arrow.Schema
	rb     *array.RecordBuilder
	enc    *encoder
	// pending rows in rb
	pending int
	rows    int64
	row     *stateRow
	// Columnar path: cplan is nil when the layout has a column it does not
	// fill; cur is the row group being filled.
	cplan *columnarPlan
	cur   *colSet
}

func (e *exporter) openTable(name string, schema *arrow.Schema) *encoder {
	key := name + "/" + PartName(e.o.Shard, e.o.Format)
	obj := openObject(e.ctx, e.out, key)
	return startEncoder(key, obj, schema, e.o)
}

// flush hands the buffered rows to the encoder as one row group.
func (t *table) flush() error {
	var err error
	switch {
	case t.cur != nil && t.cur.n > 0:
		rec := t.cur.record(t.schema)
		err = t.enc.write(rec, t.cur)
		t.cur = nil
	case t.pending > 0:
		rec := t.rb.NewRecordBatch()
		t.pending = 0
		err = t.enc.write(rec, nil)
	}
	if err != nil {
		return fmt.Errorf("stateexport: table %s: %w", t.man.Name, err)
	}
	return nil
}

// appendBatch appends a columnar batch, cutting row groups at
// RowGroupRows.
func (t *table) appendBatch(op string, b *savepoint.ColumnBatch, maxRows int) error {
	if t.pending > 0 {
		if err := t.flush(); err != nil {
			return err
		}
	}
	if t.cur != nil && t.cur.n > 0 && int64(t.cur.stringBytes())+b.Bytes > 1<<31-1 {
		if err := t.flush(); err != nil {
			return err
		}
	}
	n := b.Len()
	for lo := 0; lo < n; {
		if t.cur == nil {
			t.cur = t.enc.set()
		}
		hi := min(n, lo+maxRows-t.cur.n)
		t.cplan.appendBatch(t.cur, op, b, lo, hi)
		t.rows += int64(hi - lo)
		lo = hi
		if t.cur.n >= maxRows || t.cur.bigStrings() {
			if err := t.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *table) close() error {
	if err := t.flush(); err != nil {
		t.abort(err)
		return err
	}
	t.rb.Release()
	w, err := t.enc.close()
	if err != nil {
		return fmt.Errorf("stateexport: table %s: %w", t.man.Name, err)
	}
	t.man.Files = append(t.man.Files, w)
	return nil
}

func (t *table) abort(err error) {
	t.rb.Release()
	t.enc.abort(err)
}

// operatorHeaders reads the keyed-state header of every subtask file of
// op and returns the states by name (first header wins) with the key
// serializer of the header each came from.
func (e *exporter) operatorHeaders(op *savepoint.OperatorState) ([]*keyed.StateMeta, map[string]*keyed.Header, error) {
	var metas []*keyed.StateMeta
	hdrs := map[string]*keyed.Header{}
	for _, st := range op.Subtasks {
		h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
		if !ok || h.Delegate == nil {
			continue
		}
		hdr, err := e.sp.KeyedHeader(e.ctx, h)
		if err != nil {
			return nil, nil, err
		}
		if hdr == nil {
			continue
		}
		for _, m := range hdr.States {
			if _, ok := hdrs[m.Name]; ok {
				continue
			}
			hdrs[m.Name] = hdr
			metas = append(metas, m)
		}
	}
	sort.SliceStable(metas, func(i, j int) bool { return metas[i].Name < metas[j].Name })
	return metas, hdrs, nil
}

func (e *exporter) exportOperator(op *savepoint.OperatorState, os *savepoint.OperatorSummary) error {
	hasKeyed := false
	for _, st := range op.Subtasks {
		if st.ManagedKeyed != nil {
			hasKeyed = true
		}
	}
	if !hasKeyed {
		return nil
	}
	var snap *native.Snapshot
	if os.KeyedLayout == savepoint.LayoutNativeRocksDB {
		var err error
		if snap, err = e.openNative(op); snap == nil || err != nil {
			return err
		}
	}
	var metas []*keyed.StateMeta
	var hdrs map[string]*keyed.Header
	var err error
	if snap != nil {
		metas, hdrs = nativeHeaders(snap)
	} else if metas, hdrs, err = e.operatorHeaders(op); err != nil {
		return err
	}
	from, to := e.o.Shard.Range(int(op.MaxParallelism))
	tables := map[string]*table{}
	var order []*table
	abortAll := func(err error) {
		for _, t := range order {
			t.abort(err)
		}
	}
	for _, m := range metas {
		if e.o.State != "" && m.Name != e.o.State {
			continue
		}
		t, err := e.newStateTable(op, os, hdrs[m.Name], m, from, to)
		if err != nil {
			abortAll(err)
			return err
		}
		tables[m.Name] = t
		order = append(order, t)
	}
	if from <= to && len(order) > 0 {
		so := savepoint.ScanOptions{
			Operator: op.ID.String(), State: e.o.State, KeyGroupFrom: from, KeyGroupTo: to,
			Mode: keyed.ModeDecode, ReuseValues: true, Workers: e.o.Workers, Progress: e.o.Progress,
		}
		opID := op.ID.String()
		tableFor := func(hdr *keyed.Header, m *keyed.StateMeta) (*table, error) {
			t := tables[m.Name]
			if t == nil {
				var err error
				if t, err = e.newStateTable(op, os, hdr, m, from, to); err != nil {
					return nil, err
				}
				tables[m.Name] = t
				order = append(order, t)
			}
			return t, nil
		}
		onEntry := func(ke *savepoint.KeyedEntry) error {
			t, err := tableFor(ke.Header, ke.State)
			if err != nil {
				return err
			}
			if t.cur != nil && t.cur.n > 0 {
				if err := t.flush(); err != nil {
					return err
				}
			}
			_, err = t.layout.appendEntry(t.rb, opID, ke, func() error {
				t.pending++
				t.rows++
				if t.pending >= e.o.RowGroupRows {
					return t.flush()
				}
				return nil
			})
			if err != nil {
				return &keyed.Error{File: ke.File, KeyGroup: ke.KeyGroup, Offset: ke.Offset, BlockPos: ke.BlockPos,
					Err: fmt.Errorf("state %q: cannot export entry: %w", ke.State.Name, err)}
			}
			r := t.row
			r.sum.Entries++
			r.sum.Bytes += int64(len(ke.KeyBytes) + len(ke.ValueBytes))
			noteTTL(r, ke)
			return nil
		}
		var err error
		if snap != nil {
			err = e.walkNative(snap, op, from, to, onEntry)
		} else if columnarReadable(op) && !e.noColumnar {
			var one savepoint.KeyedEntry
			var ent keyed.Entry
			err = e.sp.ScanColumns(e.ctx, so, func(b *savepoint.ColumnBatch) error {
				t, err := tableFor(b.Header, b.State)
				if err != nil {
					return err
				}
				if t.cplan == nil || !t.cplan.fits(t.schema, b) {
					// Row by row through the generic path.
					for i := 0; i < b.Len(); i++ {
						batchEntry(&one, &ent, b, i)
						if err := onEntry(&one); err != nil {
							return err
						}
					}
					return nil
				}
				if err := t.appendBatch(opID, b, e.o.RowGroupRows); err != nil {
					return err
				}
				r := t.row
				r.sum.Entries += int64(b.Len())
				r.sum.Bytes += b.Bytes
				if b.Values != nil && b.Values.TTL != nil {
					noteTTLs(r, b.Values.TTL)
				}
				return nil
			}, onEntry)
		} else {
			err = e.sp.WalkKeyed(e.ctx, so, onEntry)
		}
		if errors.Is(err, savepoint.ErrNativeLayout) {
			abortAll(err)
			for _, t := range order {
				t.row.note = "native layout: not exported"
				t.row.table = ""
			}
			e.note(fmt.Sprintf("operator %s: keyed state in a native layout is not exported: %v", op.ID, err))
			return nil
		}
		if err != nil {
			abortAll(err)
			return err
		}
	}
	for i, t := range order {
		if err := t.close(); err != nil {
			for _, u := range order[i+1:] {
				u.abort(err)
			}
			return err
		}
		t.man.Rows = t.rows
		t.man.Entries = t.row.sum.Entries
		t.row.rows = t.rows
		e.man.Tables = append(e.man.Tables, t.man)
	}
	return nil
}

// columnarReadable reports whether every subtask of op holds its keyed
// state in a key-groups handle (or none), which ScanColumns reads;
// changelog handles are read by WalkKeyed.
func columnarReadable(op *savepoint.OperatorState) bool {
	for _, st := range op.Subtasks {
		switch st.ManagedKeyed.(type) {
		case nil, *savepoint.KeyGroupsHandle:
		default:
			return false
		}
	}
	return true
}

// batchEntry fills ke (backed by ent) with entry i of a columnar batch in
// the generic decoder's form.
func batchEntry(ke *savepoint.KeyedEntry, ent *keyed.Entry, b *savepoint.ColumnBatch, i int) {
	*ent = keyed.Entry{KeyGroup: b.KeyGroup, State: b.State, Offset: -1, BlockPos: -1, Key: b.Key(i), Namespace: serde.Void{}, Value: b.Value(i)}
	if tv, ok := ent.Value.(*serde.TTLValue); ok {
		ent.Value = tv.Value
		ts := tv.LastAccess
		ent.TTLTimestamp = &ts
	}
	if tm, ok := ent.Value.(*serde.Timer); ok {
		ent.Key, ent.Namespace = tm.Key, tm.Namespace
	}
	*ke = savepoint.KeyedEntry{Operator: b.Operator, Subtask: b.Subtask, File: b.File, Header: b.Header, Entry: ent}
}

// noteTTLs widens the TTL range of r by the timestamps ts.
func noteTTLs(r *stateRow, ts []int64) {
	if len(ts) == 0 {
		return
	}
	lo, hi := ts[0], ts[0]
	for _, t := range ts[1:] {
		lo, hi = min(lo, t), max(hi, t)
	}
	if r.ttlMin == nil || lo < *r.ttlMin {
		r.ttlMin = &lo
	}
	if r.ttlMax == nil || hi > *r.ttlMax {
		r.ttlMax = &hi
	}
}

func noteTTL(r *stateRow, ke *savepoint.KeyedEntry) {
	add := func(ts int64) {
		if r.ttlMin == nil || ts < *r.ttlMin {
			v := ts
			r.ttlMin = &v
		}
		if r.ttlMax == nil || ts > *r.ttlMax {
			v := ts
			r.ttlMax = &v
		}
	}
	if ke.TTLTimestamp != nil {
		add(*ke.TTLTimestamp)
		return
	}
	// TTL list states: every element has its own last-access time.
	if l, ok := ke.Value.(serde.List); ok && ke.State.TTL {
		for _, el := range l {
			if t, ok := el.(*serde.TTLValue); ok {
				add(t.LastAccess)
			}
		}
	}
}

func (e *exporter) newStateTable(op *savepoint.OperatorState, os *savepoint.OperatorSummary, hdr *keyed.Header, m *keyed.StateMeta, from, to int) (*table, error) {
	layout, err := newStateLayout(hdr.KeySerializer, m, e.fieldNames(op, m.Name))
	if err != nil {
		return nil, fmt.Errorf("stateexport: operator %s: %w", op.ID, err)
	}
	name := e.tableName(op, m.Name)
	enc := e.openTable(name, layout.schema)
	cols := make([]string, layout.schema.NumFields())
	for i, f := range layout.schema.Fields() {
		cols[i] = f.Name
	}
	row := &stateRow{op: os, table: name, kgFrom: from, kgTo: to}
	row.sum = savepoint.StateSummary{Name: m.Name, Kind: savepoint.StateKind(m), TTL: m.TTL}
	savepoint.SetStateTypes(&row.sum, hdr.KeySerializer, m)
	e.states = append(e.states, row)
	t := &table{
		man:    &ManifestTable{Name: name, Operator: op.ID.String(), State: m.Name, Kind: row.sum.Kind, Columns: cols},
		layout: layout,
		schema: layout.schema,
		rb:     array.NewRecordBuilder(e.mem, layout.schema),
		enc:    enc,
		row:    row,
		cplan:  columnarPlanFor(layout),
	}
	return t, nil
}

func (e *exporter) note(s string) { e.man.Notes = append(e.man.Notes, s) }
