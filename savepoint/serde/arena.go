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
	box   slabs
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

// Boxed scalars. Converting an int64, float64, string or Timestamp to a
// Value allocates its data word on the heap one value at a time; the arena
// instead stores the scalar in a typed slab and builds the interface value
// around a pointer to that slot (the same representation the conversion
// produces). Slots are written once, before the interface value exists, and
// never modified, so the values are as immutable as ordinary ones; a slot
// keeps its slab alive like any interior pointer does.
type slabs struct {
	i64  []int64
	i32  []int32
	f64  []float64
	strs []string
	ts   []Timestamp
}

// eface is the runtime representation of an empty interface.
type eface struct {
	typ  unsafe.Pointer
	data unsafe.Pointer
}

// Interface values whose type words boxAt copies.
var (
	tmplInt64     Value = int64(0)
	tmplInt32     Value = int32(0)
	tmplFloat64   Value = float64(0)
	tmplString    Value = ""
	tmplTimestamp Value = Timestamp{}
)

// boxAt returns an interface value with tmpl's dynamic type whose data
// pointer is p, which must point to a value of that type. The type must not
// be pointer-shaped (those are stored in the data word itself).
func boxAt(tmpl Value, p unsafe.Pointer) Value {
	v := tmpl
	(*eface)(unsafe.Pointer(&v)).data = p
	return v
}

func take[T any](s *[]T, v T) *T {
	if len(*s) == 0 {
		*s = make([]T, arenaSlab*4)
	}
	p := &(*s)[0]
	*p = v
	*s = (*s)[1:]
	return p
}

func (a *Arena) int64(v int64) Value {
	if a == nil || uint64(v) < 256 { // the runtime boxes small values without allocating
		return v
	}
	return boxAt(tmplInt64, unsafe.Pointer(take(&a.box.i64, v)))
}

func (a *Arena) int32(v int32) Value {
	if a == nil || uint32(v) < 256 {
		return v
	}
	return boxAt(tmplInt32, unsafe.Pointer(take(&a.box.i32, v)))
}

func (a *Arena) float64(v float64) Value {
	if a == nil {
		return v
	}
	return boxAt(tmplFloat64, unsafe.Pointer(take(&a.box.f64, v)))
}

func (a *Arena) string(b []byte) Value {
	if a == nil {
		return string(b)
	}
	return boxAt(tmplString, unsafe.Pointer(take(&a.box.strs, a.str(b))))
}

func (a *Arena) timestamp(t Timestamp) Value {
	if a == nil {
		return t
	}
	return boxAt(tmplTimestamp, unsafe.Pointer(take(&a.box.ts, t)))
}
