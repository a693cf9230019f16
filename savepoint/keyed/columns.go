package keyed

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// planColumns sets the column plans of a key/value state whose entries
// have a fixed, known layout: a planned key serializer (SQL rows of
// scalar and string fields, primitives, strings), VoidNamespace, and a
// VALUE-like state (VALUE, REDUCING, AGGREGATING, ...) whose value
// serializer is planned, optionally TTL-wrapped. Other states are read by
// the generic decoder.
func (m *StateMeta) planColumns(h *Header) {
	m.colKey, m.colVal, m.colTimer = nil, nil, false
	if m.Type == PriorityQueue && m.valDec != nil {
		// Timers (TimerSerializer of a planned key and VoidNamespace): the
		// timestamps and the keys.
		k, ns, ok := serde.TimerParts(m.valDec)
		if ok && serde.IsVoid(ns) && m.valDec.Supported() {
			if kp := serde.PlanColumns(k); kp != nil && !kp.TTL() {
				m.colKey, m.colTimer, m.colTimerNS = kp, true, ns
			}
		}
		return
	}
	if m.Type != KeyValue || m.Kind == "LIST" || m.Kind == "MAP" {
		return
	}
	if m.nsDec == nil || !serde.IsVoid(m.nsDec) || m.valDec == nil || h.keyDec == nil {
		return
	}
	k, v := serde.PlanColumns(h.keyDec), serde.PlanColumns(m.valDec)
	if k == nil || v == nil || k.TTL() {
		return
	}
	m.colKey, m.colVal = k, v
}

// planColumns also plans timer states (see ColumnBatch.Timestamps).

// Columnar reports whether the state's entries decode into columns
// (ReadColumns); entries of other states go to its fallback callback.
func (m *StateMeta) Columnar() bool { return m.colKey != nil }

// ColumnBatch holds decoded entries of one state of one key group in
// typed columns: Keys (the state key: a row's fields or one scalar
// column) and Values (with the TTL last-access timestamps in Values.TTL
// for TTL states). Row i of every column belongs to entry i, in file
// order.
type ColumnBatch struct {
	KeyGroup int
	State    *StateMeta
	Keys     *serde.Columns
	// Values is nil for timer (PRIORITY_QUEUE) states, whose entries are
	// the timers' Timestamps and Keys (the namespace is VoidNamespace).
	Values     *serde.Columns
	Timestamps []int64
	// Bytes is the serialized size of the entries (key and value bytes,
	// without the length fields).
	Bytes int64
}

// NewColumnBatch returns an empty batch for the entries of st, or nil when
// st is not columnar.
func NewColumnBatch(st *StateMeta) *ColumnBatch {
	if !st.Columnar() {
		return nil
	}
	if st.colTimer {
		return &ColumnBatch{State: st, Keys: st.colKey.NewColumns()}
	}
	return &ColumnBatch{State: st, Keys: st.colKey.NewColumns(), Values: st.colVal.NewColumns()}
}

// Len returns the number of entries.
func (b *ColumnBatch) Len() int { return b.Keys.Len() }

// Reset empties the batch (keeping its memory) for key group kg.
func (b *ColumnBatch) Reset(kg int) {
	b.KeyGroup, b.Bytes = kg, 0
	b.Keys.Reset()
	if b.Values != nil {
		b.Values.Reset()
	}
	b.Timestamps = b.Timestamps[:0]
}

// Key returns entry i's key in the generic decoder's form.
func (b *ColumnBatch) Key(i int) serde.Value { return b.Keys.Value(i) }

// Value returns entry i's value in the generic decoder's form (a
// *serde.TTLValue for TTL states, a *serde.Timer for timers).
func (b *ColumnBatch) Value(i int) serde.Value {
	if b.Values == nil {
		return &serde.Timer{Timestamp: b.Timestamps[i], Key: b.Keys.Value(i), Namespace: serde.Void{}}
	}
	return b.Values.Value(i)
}

// TTLTimestamp returns entry i's last-access time and whether the state
// has TTL.
func (b *ColumnBatch) TTLTimestamp(i int) (int64, bool) {
	if b.Values == nil || b.Values.TTL == nil || i >= len(b.Values.TTL) {
		return 0, false
	}
	return b.Values.TTL[i], true
}

// ColumnOptions tunes ReadColumns.
type ColumnOptions struct {
	MaxParallelism int
	// ExpectedEnd and End as in ReadOptions.
	ExpectedEnd, End int64
	// MaxRows is the most entries per batch (0 = DefaultBatchRows): a
	// fuller batch (or one holding 4 MiB of entry bytes) is emitted and a
	// new one started.
	MaxRows int
	// NewBatch, when set, supplies the batches (for st; the reader resets
	// it) and emitted batches belong to the callee; otherwise the reader
	// reuses its own batches after emit returns.
	NewBatch func(st *StateMeta) *ColumnBatch
	// Arena, when set, is where the generic decoder builds the values of
	// fallback entries (never reset by the reader; BlockReader.SetArena
	// switches it from a callback), so they outlive their callback;
	// otherwise they live in recycled memory, valid during the callback.
	Arena *serde.Arena
}

// DefaultBatchRows is the default ColumnOptions.MaxRows.
const DefaultBatchRows = 4096

// batchMaxBytes bounds a batch's entry bytes: a fuller batch is emitted
// (memory stays bounded, and string offsets, at most 1.5x the entry bytes
// plus one entry of at most 1 GiB, fit in uint32).
const batchMaxBytes = 4 << 20

// ReadColumns decodes the block of key group keyGroup (at offset off of
// src, size bytes long) like Read with ModeDecode, but decodes the
// entries of columnar states (StateMeta.Columnar) straight into typed
// column batches handed to emit: per state, in file order, whenever a
// batch is full and at the end of the block. Every byte is checked
// exactly as Read checks it, with the same errors. Entries of other states
// are decoded by the generic decoder into recycled memory (as with
// ReadOptions.ReuseValues) and passed to fallback as they are met (fallback
// may be nil when every state is columnar; such an entry is then an
// error).
func (r *BlockReader) ReadColumns(src io.ReaderAt, size int64, name string, h *Header, keyGroup int, off int64, o ColumnOptions, emit func(*ColumnBatch) error, fallback func(*Entry) error) error {
	ro := ReadOptions{MaxParallelism: o.MaxParallelism, Mode: ModeDecode, ReuseValues: true, ExpectedEnd: o.ExpectedEnd, End: o.End}
	if err := r.begin(src, size, name, h, keyGroup, off, ro); err != nil {
		return err
	}
	defer func() { r.src = nil }()
	prefix := keygroups.PrefixWidth(o.MaxParallelism)
	reuse := o.Arena == nil
	r.useArena(reuse, o.Arena)
	maxRows := o.MaxRows
	if maxRows <= 0 {
		maxRows = DefaultBatchRows
	}
	if cap(r.colBatches) < len(h.States) {
		r.colBatches = make([]*ColumnBatch, len(h.States))
	}
	batches := r.colBatches[:len(h.States)]
	if r.colHeader != h || o.NewBatch != nil {
		clear(batches)
		r.colHeader = h
	}
	get := func(st *StateMeta) *ColumnBatch {
		b := batches[st.ID]
		if b == nil {
			if o.NewBatch != nil {
				b = o.NewBatch(st)
			} else {
				b = NewColumnBatch(st)
			}
			b.Reset(keyGroup)
			batches[st.ID] = b
		}
		return b
	}
	flush := func(b *ColumnBatch) error {
		if o.NewBatch != nil {
			batches[b.State.ID] = nil
		}
		err := emit(b)
		if o.NewBatch == nil {
			b.Reset(keyGroup)
		}
		return err
	}
	// Batches left from an earlier, failed read.
	for _, b := range batches {
		if b != nil {
			b.Reset(keyGroup)
		}
	}
	d := &r.decs[0]
	id, err := r.u16()
	if err != nil {
		return err
	}
	// The entry framing below mirrors Read's on purpose: sharing it through
	// a method call measured ~5% slower on BenchmarkColumns.
	for {
		if int(id) >= len(h.States) {
			return r.errAt(r.pos-2, fmt.Errorf("%w: kvStateId %d but the header lists %d states", binfmt.ErrCorrupt, id, len(h.States)))
		}
		st := h.States[id]
		entryPos := r.pos
		key, val, err := r.entryBytes()
		if err != nil {
			return err
		}
		kl := len(key)
		if len(key) < prefix {
			return r.errAt(entryPos, fmt.Errorf("%w: key of %d bytes is shorter than the key-group prefix", binfmt.ErrCorrupt, len(key)))
		}
		meta := key[0]&metaFollowsFlag != 0
		key[0] &^= metaFollowsFlag
		g := int(key[0])
		if prefix == 2 {
			g = int(binary.BigEndian.Uint16(key))
		}
		if g != keyGroup {
			return r.errAt(entryPos+4, fmt.Errorf("%w: entry key-group prefix %d in the block of key group %d", binfmt.ErrCorrupt, g, keyGroup))
		}
		keyPos, valPos := entryPos+4, entryPos+8+int64(kl)
		if reuse {
			if r.sinceReset == reuseEvery {
				r.resetArena()
			}
			r.sinceReset++
		}
		if st.colKey != nil {
			b := get(st)
			if err := r.appendColumns(d, st, b, key, val, prefix, keyPos, valPos); err != nil {
				return err
			}
			b.Bytes += int64(len(key) + len(val))
			if b.Len() >= maxRows || b.Bytes >= batchMaxBytes {
				if err := flush(b); err != nil {
					return err
				}
			}
		} else {
			if fallback == nil {
				return r.errAt(entryPos, fmt.Errorf("state %q is not columnar and no fallback was given", st.Name))
			}
			e := &r.entry
			*e = Entry{KeyGroup: keyGroup, State: st, BlockPos: entryPos, KeyBytes: key, ValueBytes: val}
			e.Offset = r.off + entryPos
			if r.compress {
				e.Offset = r.off
			}
			if err := r.interpret(h, st, e, prefix, keyPos, valPos, ModeDecode); err != nil {
				return err
			}
			if err := fallback(e); err != nil {
				return err
			}
		}
		if meta {
			next, err := r.u16()
			if err != nil {
				return err
			}
			if next == endOfKeyGroup {
				if o.End > 0 && !r.compress && r.off+r.pos != o.End {
					return r.errAt(r.pos, fmt.Errorf("%w: %d bytes between the end of key group %d and the next block", binfmt.ErrCorrupt, o.End-r.off-r.pos, keyGroup))
				}
				for _, b := range batches {
					if b != nil && b.Len() > 0 {
						if err := flush(b); err != nil {
							return err
						}
					}
				}
				return nil
			}
			id = next
		}
	}
}

// appendColumns decodes one entry of a columnar state into b with the
// checks (and errors) of interpret and decodeValue.
func (r *BlockReader) appendColumns(d *binfmt.Decbuf, st *StateMeta, b *ColumnBatch, key, val []byte, prefix int, keyPos, valPos int64) error {
	if st.colTimer {
		return r.appendTimer(d, st, b, key, val, prefix, keyPos, valPos)
	}
	// Well-formed entries take the fast path; anything it does not accept
	// is decoded again below with the checks that report the error.
	n0 := b.Keys.Len()
	if st.colKey.DecodeKeyVoid(key[prefix:], keyPos+int64(prefix), b.Keys) {
		if st.colVal.DecodeFast(val, valPos, b.Values) {
			return nil
		}
		b.Keys.Truncate(n0)
	}
	// The key: delimited as interpret does (the row size or the fixed
	// width), then decoded exactly.
	d.Reset(key, keyPos)
	d.Skip(prefix)
	start := d.Pos
	st.colKey.Skip(d)
	if d.Err() != nil {
		return r.errFromDec(fmt.Sprintf("state %q key", st.Name), d.Err())
	}
	end := d.Pos
	n := b.Keys.Len()
	if err := st.colKey.DecodeExact(&r.decs[1], key[start:end], keyPos+int64(start), b.Keys); err != nil {
		return r.errFromDec(fmt.Sprintf("state %q key", st.Name), err)
	}
	// VoidNamespace: one zero byte (decoded as interpret does, for the
	// same errors), then nothing.
	d.Pos = end
	st.nsDec.Decode(d)
	if d.Err() != nil {
		b.Keys.Truncate(n)
		return r.errFromDec(fmt.Sprintf("state %q namespace", st.Name), d.Err())
	}
	if rest := d.Len(); rest != 0 {
		b.Keys.Truncate(n)
		return r.errAt(d.Offset(), fmt.Errorf("%w: %d bytes left in the key of state %q after the namespace", binfmt.ErrCorrupt, rest, st.Name))
	}
	if err := st.colVal.DecodeExact(&r.decs[1], val, valPos, b.Values); err != nil {
		b.Keys.Truncate(n)
		return r.errFromDec(fmt.Sprintf("state %q value", st.Name), err)
	}
	return nil
}

// appendTimer decodes one timer entry (the element is the key after the
// key-group prefix; the value is empty) with interpret's checks.
func (r *BlockReader) appendTimer(d *binfmt.Decbuf, st *StateMeta, b *ColumnBatch, key, val []byte, prefix int, keyPos, valPos int64) error {
	if len(val) != 0 {
		return r.errAt(valPos, fmt.Errorf("%w: priority-queue entry of state %q has a %d-byte value", binfmt.ErrCorrupt, st.Name, len(val)))
	}
	el := key[prefix:]
	base := keyPos + int64(prefix)
	if len(el) >= 8 && st.colKey.DecodeKeyVoid(el[8:], base+8, b.Keys) {
		b.Timestamps = append(b.Timestamps, serde.TimerTimestamp(el))
		return nil
	}
	// The checked path: timestamp, key, namespace, nothing left (as the
	// generic timer decoder and decodeExact report it).
	n := b.Keys.Len()
	d.Reset(el, base)
	d.I64()
	st.colKey.Decode(d, b.Keys)
	if d.Err() == nil {
		st.colTimerNS.Decode(d)
	}
	if d.Err() == nil && d.Len() != 0 {
		b.Keys.Truncate(n)
		return r.errFromDec(fmt.Sprintf("state %q timer", st.Name), &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after the %s value", binfmt.ErrCorrupt, d.Len(), st.valDec.Snapshot().Name())})
	}
	if d.Err() != nil {
		b.Keys.Truncate(n)
		return r.errFromDec(fmt.Sprintf("state %q timer", st.Name), d.Err())
	}
	b.Timestamps = append(b.Timestamps, serde.TimerTimestamp(el))
	return nil
}
