//go:build cgo

package recordstore

import (
	"errors"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
)

// Input is one row arriving at a join input.
type Input struct {
	Side Side
	// Kind is keygroups.Insert (+I) or keygroups.Delete (-D, a
	// retraction): inner joins see and produce only these.
	Kind keygroups.RowKind
	Key  []byte // equality key (BinaryRowData bytes)
	Row  []byte // row payload (compact row encoding, no TTL prefix)
}

// Output is one joined row. Left and Right are valid only during the chunk
// callback.
type Output struct {
	Kind        keygroups.RowKind // the input row's kind
	Left, Right []byte
}

// JoinOptions configure the operator driver.
type JoinOptions struct {
	// ChunkRows bounds the rows of one output chunk; zero means 4096.
	ChunkRows int
	// Pool, when set, is charged for pending output bytes (the same slot
	// pool the state's cache uses).
	Pool *engine.Pool
}

// JoinStats counts the driver's output.
type JoinStats struct {
	OutputRows int64
	Chunks     int64
	MaxChunk   int // most rows in one chunk
}

// Join is a streaming inner-join operator (mini-batching off) over a
// JoinState: for each input row, in order, it joins the row with the
// opposite side's live rows (each repeated by its count) and then applies
// the row to its own side (+I adds one, -D removes one; removing an absent
// row changes nothing but still emits the retractions, as Flink does).
type Join struct {
	st    JoinState
	chunk int
	pool  *engine.Pool

	probes []Probe
	out    []Output
	arena  []byte
	res    *engine.Reservation
	held   int64
	emit   func([]Output) error
	stats  JoinStats
}

// NewJoin returns a driver on st and installs its pressure handler.
func NewJoin(st JoinState, opts JoinOptions) *Join {
	if opts.ChunkRows <= 0 {
		opts.ChunkRows = 4096
	}
	j := &Join{st: st, chunk: opts.ChunkRows, pool: opts.Pool}
	st.SetPressureHandler(j.drain)
	return j
}

// State returns the join's state.
func (j *Join) State() JoinState { return j.st }

// Stats returns cumulative output counters.
func (j *Join) Stats() JoinStats { return j.stats }

// ProcessBundle runs one bundle: hydrate, join and update in input order,
// hand output to emit in chunks of at most ChunkRows rows, commit.
func (j *Join) ProcessBundle(inputs []Input, emit func(chunk []Output) error) error {
	if emit == nil {
		return errors.New("recordstore: nil output callback")
	}
	j.probes = j.probes[:0]
	for i := range inputs {
		j.probes = append(j.probes, Probe{Side: inputs[i].Side, Key: inputs[i].Key, Row: inputs[i].Row})
	}
	if err := j.st.Begin(j.probes); err != nil {
		j.st.Abort()
		return err
	}
	j.emit = emit
	err := j.run(inputs)
	if err == nil {
		err = j.drain()
	}
	j.emit = nil
	j.out, j.arena = j.out[:0], j.arena[:0]
	if j.res != nil {
		j.res.Release()
		j.res, j.held = nil, 0
	}
	if err != nil {
		j.st.Abort()
		return err
	}
	return j.st.Commit()
}

func (j *Join) run(inputs []Input) error {
	for i := range inputs {
		in := &inputs[i]
		if in.Side > Right {
			return errors.New("recordstore: input with an invalid side")
		}
		kind := in.Kind
		err := j.st.Visit(in.Side.Other(), in.Key, func(row []byte, count int64) error {
			l, r := in.Row, row
			if in.Side == Right {
				l, r = row, in.Row
			}
			for c := int64(0); c < count; c++ {
				if err := j.push(kind, l, r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		delta := int64(1)
		if kind == keygroups.Delete {
			delta = -1
		}
		if _, err := j.st.Add(in.Side, in.Key, in.Row, delta); err != nil {
			return err
		}
	}
	return nil
}

// push copies one output row into the pending chunk, charging its bytes
// to the pool; a full chunk, or a refused charge, drains first.
func (j *Join) push(kind keygroups.RowKind, l, r []byte) error {
	if len(j.out) >= j.chunk {
		if err := j.drain(); err != nil {
			return err
		}
	}
	n := int64(len(l) + len(r) + 48)
	if j.pool != nil {
		if j.res == nil {
			j.res, _ = j.pool.Reserve(0)
		}
		if !j.res.Grow(n) {
			if err := j.drain(); err != nil {
				return err
			}
			j.res.Grow(n) // one row always goes through, even unreserved
		}
		j.held = j.res.Size()
	}
	off := len(j.arena)
	j.arena = append(j.arena, l...)
	j.arena = append(j.arena, r...)
	j.out = append(j.out, Output{Kind: kind,
		Left:  j.arena[off : off+len(l) : off+len(l)],
		Right: j.arena[off+len(l) : off+len(l)+len(r) : off+len(l)+len(r)]})
	return nil
}

// drain hands the pending chunk to the consumer and returns its bytes to
// the pool.
func (j *Join) drain() error {
	if len(j.out) == 0 {
		return nil
	}
	if j.emit == nil {
		return errors.New("recordstore: output pending outside a bundle")
	}
	j.stats.Chunks++
	j.stats.OutputRows += int64(len(j.out))
	j.stats.MaxChunk = max(j.stats.MaxChunk, len(j.out))
	err := j.emit(j.out)
	j.out = j.out[:0]
	j.arena = j.arena[:0]
	if j.res != nil {
		j.res.Shrink(j.res.Size())
		j.held = 0
	}
	return err
}
