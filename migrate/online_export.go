//go:build cgo

package migrate

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
)

// ErrReadOnlyView is returned by writes to a MergedView.
var ErrReadOnlyView = errors.New("migrate: merged join view is read-only")

// MergedSubtask prepares a subtask whose backend may hold join state in
// both layouts (an online migration in progress) for canonical.Export: the
// returned subtask's backend is a read-only MergedView declaring the
// record state only, and its schema drops the bucket state's entry, so the
// export holds one join state (Flink's left-records/right-records) whose
// content is both layouts merged: a savepoint taken mid-migration is the
// savepoint taken before it. A subtask that does not declare both join
// states is returned unchanged. The view reads the backend lazily; the
// backend must not be written while it is in use.
func MergedSubtask(st canonical.Subtask) (canonical.Subtask, error) {
	be := st.Operator.Backend()
	if _, err := StateID(be, recordstore.BucketStateName); err != nil {
		return st, nil
	}
	if _, err := StateID(be, recordstore.RecordStateName); err != nil {
		return st, nil
	}
	v, err := NewMergedView(be)
	if err != nil {
		return st, err
	}
	out := st
	out.Operator = engine.NewOperator(v, st.Operator.Clock())
	if st.Schema != nil {
		s := *st.Schema
		s.States = nil
		for _, ss := range st.Schema.States {
			if ss.Name != recordstore.BucketStateName {
				s.States = append(s.States, ss)
			}
		}
		if len(s.States) == len(st.Schema.States) {
			return st, fmt.Errorf("migrate: schema does not describe state %q", recordstore.BucketStateName)
		}
		out.Schema = &s
	}
	return out, nil
}

// MergedView is a read-only engine.Backend over a backend declaring both
// join states: it declares every state but the bucket state, and its
// record state holds the stored records plus the records of every
// remaining bucket (converted on the fly, as the online migration would
// write them: same keys, values and timestamps, expired rows included).
type MergedView struct {
	be       engine.Backend
	bst, rst int
	states   []engine.StateDesc
	ids      []int // view state id -> backend state id
	width    int
}

// NewMergedView returns the merged view of be.
func NewMergedView(be engine.Backend) (*MergedView, error) {
	bst, err := StateID(be, recordstore.BucketStateName)
	if err != nil {
		return nil, err
	}
	rst, err := StateID(be, recordstore.RecordStateName)
	if err != nil {
		return nil, err
	}
	v := &MergedView{be: be, bst: bst, rst: rst, width: be.Layout().Width()}
	for i, d := range be.States() {
		if i != bst {
			v.states = append(v.states, d)
			v.ids = append(v.ids, i)
		}
	}
	return v, nil
}

func (v *MergedView) Name() string                          { return v.be.Name() }
func (v *MergedView) Layout() engine.Layout                 { return v.be.Layout() }
func (v *MergedView) States() []engine.StateDesc            { return v.states }
func (v *MergedView) Flush() error                          { return nil }
func (v *MergedView) Close() error                          { return nil }
func (v *MergedView) NewBatch() engine.Batch                { return &roBatch{} }
func (v *MergedView) DeleteRange(int, []byte, []byte) error { return ErrReadOnlyView }

func (v *MergedView) id(st int) (int, error) {
	if st < 0 || st >= len(v.ids) {
		return 0, fmt.Errorf("migrate: merged view: unknown state %d", st)
	}
	return v.ids[st], nil
}

// MultiGet reads records from the store, else from their bucket.
func (v *MergedView) MultiGet(st int, keys [][]byte, fn func(i int, val []byte, ok bool)) error {
	id, err := v.id(st)
	if err != nil {
		return err
	}
	if id != v.rst {
		return v.be.MultiGet(id, keys, fn)
	}
	var miss []int
	err = v.be.MultiGet(id, keys, func(i int, val []byte, ok bool) {
		if ok {
			fn(i, val, true)
		} else {
			miss = append(miss, i)
		}
	})
	if err != nil {
		return err
	}
	conv := Converter{Width: v.width}
	for _, i := range miss {
		_, _, _, row, off, err := recordstore.DecodeGroupKey(keys[i], v.width)
		if err != nil {
			return fmt.Errorf("migrate: merged view: record key %x offset %d: %w", keys[i], off, err)
		}
		prefix := keys[i][:len(keys[i])-len(row)]
		var found []byte
		var cerr error
		err = v.be.MultiGet(v.bst, [][]byte{prefix}, func(_ int, bv []byte, ok bool) {
			if !ok {
				return
			}
			_, cerr = conv.ConvertBucket(prefix, bv, func(_ *Bucket, _ *recordstore.LogicalRow, rk, rv []byte) error {
				if bytes.Equal(rk, keys[i]) {
					found = append([]byte(nil), rv...)
				}
				return nil
			})
		})
		if err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fn(i, found, found != nil)
	}
	return nil
}

type convRec struct{ k, v []byte }

// Scan visits the record state's stored records merged with the records
// of the buckets in [lower, upper); other states pass through.
func (v *MergedView) Scan(st int, lower, upper []byte, fn func(key, val []byte) bool) error {
	id, err := v.id(st)
	if err != nil {
		return err
	}
	if id != v.rst {
		return v.be.Scan(id, lower, upper, fn)
	}
	// a bucket's records lie in [its key, end of its key): buckets of an
	// earlier key group cannot reach lower, none at or past upper can
	// produce a record below it
	blower := lower
	if len(blower) > v.width {
		blower = blower[:v.width]
	}
	ch := make(chan []convRec, 4)
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		conv := Converter{Width: v.width}
		var cerr error
		err := v.be.Scan(v.bst, blower, upper, func(k, bv []byte) bool {
			var recs []convRec
			_, cerr = conv.ConvertBucket(k, bv, func(_ *Bucket, _ *recordstore.LogicalRow, rk, rv []byte) error {
				if bytes.Compare(rk, lower) >= 0 && (upper == nil || bytes.Compare(rk, upper) < 0) {
					recs = append(recs, convRec{append([]byte(nil), rk...), append([]byte(nil), rv...)})
				}
				return nil
			})
			if cerr != nil {
				cerr = fmt.Errorf("migrate: merged view: %w", cerr)
				return false
			}
			if len(recs) == 0 {
				return true
			}
			select {
			case ch <- recs:
				return true
			case <-stop:
				return false
			}
		})
		if err == nil {
			err = cerr
		}
		errc <- err
	}()
	var pend []convRec
	more := true
	// next returns the smallest pending converted record, refilling
	nextConv := func() (convRec, bool) {
		for len(pend) == 0 && more {
			pend, more = <-ch
		}
		if len(pend) == 0 {
			return convRec{}, false
		}
		return pend[0], true
	}
	stopped := false
	err = v.be.Scan(id, lower, upper, func(k, val []byte) bool {
		for {
			c, ok := nextConv()
			if !ok {
				break
			}
			if d := bytes.Compare(c.k, k); d > 0 {
				break
			} else if d == 0 {
				// a stored record wins over its bucket's copy
				pend = pend[1:]
				continue
			}
			pend = pend[1:]
			if !fn(c.k, c.v) {
				stopped = true
				return false
			}
		}
		if !fn(k, val) {
			stopped = true
			return false
		}
		return true
	})
	for err == nil && !stopped {
		c, ok := nextConv()
		if !ok {
			break
		}
		pend = pend[1:]
		stopped = !fn(c.k, c.v)
	}
	close(stop)
	for range ch {
	}
	if berr := <-errc; err == nil {
		err = berr
	}
	return err
}

type roBatch struct{ n int }

func (b *roBatch) Put(int, []byte, []byte) { b.n++ }
func (b *roBatch) Delete(int, []byte)      { b.n++ }
func (b *roBatch) Len() int                { return b.n }
func (b *roBatch) Commit() error           { return ErrReadOnlyView }
func (b *roBatch) Close()                  {}
