package serde

import (
	"unsafe"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// Arena batches the allocations of decoded values: rows, TTL wrappers and
// string bytes are carved out of slabs instead of being allocated one by
// one. Values built from an arena are ordinary immutable values that stay
// valid for as long as they are referenced (a slab lives while any value in
// it does); nothing is ever reused. An Arena is not safe for concurrent use:
// give each reader its own (set it as binfmt.Decbuf.Scratch).
type Arena struct {
	rows4 []rowWith4
	rows8 []rowWith8
	ttls  []TTLValue
	bytes []byte
}

// NewArena returns an empty arena.
func NewArena() *Arena { return &Arena{} }

const (
	arenaSlab      = 64
	arenaByteSlab  = 16 << 10
	arenaMaxString = 512 // longer strings get their own allocation
)

func arenaOf(d *binfmt.Decbuf) *Arena {
	a, _ := d.Scratch.(*Arena)
	return a
}

// rowWith8 is rowWith4 for rows of 5 to 8 fields.
type rowWith8 struct {
	row    Row
	fields [8]Value
}

func (a *Arena) row(kind RowKind, arity int) *Row {
	if a == nil || arity > 8 {
		return newRow(kind, arity)
	}
	if arity <= 4 {
		if len(a.rows4) == 0 {
			a.rows4 = make([]rowWith4, arenaSlab)
		}
		x := &a.rows4[0]
		a.rows4 = a.rows4[1:]
		x.row.Kind = kind
		x.row.Fields = x.fields[:arity:arity]
		return &x.row
	}
	if len(a.rows8) == 0 {
		a.rows8 = make([]rowWith8, arenaSlab)
	}
	x := &a.rows8[0]
	a.rows8 = a.rows8[1:]
	x.row.Kind = kind
	x.row.Fields = x.fields[:arity:arity]
	return &x.row
}

func (a *Arena) ttl() *TTLValue {
	if a == nil {
		return &TTLValue{}
	}
	if len(a.ttls) == 0 {
		a.ttls = make([]TTLValue, arenaSlab)
	}
	t := &a.ttls[0]
	a.ttls = a.ttls[1:]
	return t
}

// str returns b as a string whose bytes live in a slab. Slab bytes are
// written once and never modified afterwards, which keeps the strings
// immutable.
func (a *Arena) str(b []byte) string {
	if a == nil || len(b) == 0 || len(b) > arenaMaxString {
		return string(b)
	}
	if cap(a.bytes)-len(a.bytes) < len(b) {
		a.bytes = make([]byte, 0, arenaByteSlab)
	}
	off := len(a.bytes)
	a.bytes = append(a.bytes, b...)
	return unsafe.String(&a.bytes[off], len(b))
}
