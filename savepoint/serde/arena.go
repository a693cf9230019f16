package serde

import (
	"unsafe"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// Arena batches the allocations of decoded values: rows, TTL wrappers and
// string bytes are carved out of slabs instead of being allocated one by
// one. An Arena is not safe for concurrent use: give each reader its own
// (set it as binfmt.Decbuf.Scratch).
//
// An arena from NewArena never reuses memory: values built from it are
// ordinary immutable values that stay valid for as long as they are
// referenced (a slab lives while any value in it does). An arena from
// NewReusableArena keeps its slabs and hands them out again after Reset:
// values built from it are valid only until the next Reset, after which
// their memory holds other values. Decoding into a reused arena allocates
// nothing once the slabs have grown to the working set, so the garbage
// collector has nothing to do.
type Arena struct {
	reuse bool
	views bool
	rows4 slabList[rowWith4]
	rows8 slabList[rowWith8]
	ttls  slabList[TTLValue]
	vals  valueSlabs
	bytes byteSlabs
	box   slabs
}

// NewArena returns an empty arena whose values are never overwritten.
func NewArena() *Arena { return &Arena{} }

// NewReusableArena returns an empty arena whose memory Reset recycles.
func NewReusableArena() *Arena { return &Arena{reuse: true} }

// SetViews makes a reusable arena build string values that alias the
// decoded bytes instead of copying them. Only for values that are not used
// once those bytes change (a reader's window is overwritten after the
// callback, like the values are recycled); an arena from NewArena ignores
// it.
func (a *Arena) SetViews(on bool) {
	if a != nil {
		a.views = on && a.reuse
	}
}

// Reusable reports whether Reset recycles the arena's memory.
func (a *Arena) Reusable() bool { return a != nil && a.reuse }

// Reset makes a reusable arena hand out its slabs again from the start:
// every value built from it since the last Reset becomes invalid. On an
// arena from NewArena it does nothing.
func (a *Arena) Reset() {
	if a == nil || !a.reuse {
		return
	}
	a.rows4.reset()
	a.rows8.reset()
	a.ttls.reset()
	a.vals.i, a.vals.n = 0, 0
	a.bytes.reset()
	a.box.i64.reset()
	a.box.i32.reset()
	a.box.f64.reset()
	a.box.strs.reset()
	a.box.list.reset()
	a.box.ts.reset()
}

const (
	arenaSlab      = 64
	arenaByteSlab  = 16 << 10
	arenaMaxString = 512 // longer strings get their own allocation
)

// slabList hands out slots of fixed-size slabs of T. Without reuse only
// the current slab is referenced (a used-up slab lives on through the
// values in it); with reuse every slab is kept for the next round.
type slabList[T any] struct {
	slabs [][]T
	i, n  int // current slab, next free slot in it
}

func (s *slabList[T]) next(reuse bool, size int) *T {
	if s.i < len(s.slabs) && s.n == len(s.slabs[s.i]) {
		if reuse {
			s.i++
		} else {
			s.slabs[s.i] = nil
		}
		s.n = 0
	}
	if s.i == len(s.slabs) {
		s.slabs = append(s.slabs, make([]T, size))
	} else if s.slabs[s.i] == nil {
		s.slabs[s.i] = make([]T, size)
	}
	p := &s.slabs[s.i][s.n]
	s.n++
	return p
}

func (s *slabList[T]) reset() { s.i, s.n = 0, 0 }

// byteSlabs is slabList for string bytes.
type byteSlabs struct {
	slabs [][]byte
	i     int
}

// alloc returns n (<= arenaByteSlab) bytes of slab space.
func (s *byteSlabs) alloc(reuse bool, n int) []byte {
	if s.i < len(s.slabs) && cap(s.slabs[s.i])-len(s.slabs[s.i]) < n {
		if reuse {
			s.i++
		} else {
			s.slabs[s.i] = nil
		}
	}
	if s.i == len(s.slabs) {
		s.slabs = append(s.slabs, make([]byte, 0, arenaByteSlab))
	} else if s.slabs[s.i] == nil {
		s.slabs[s.i] = make([]byte, 0, arenaByteSlab)
	}
	b := s.slabs[s.i]
	off := len(b)
	s.slabs[s.i] = b[:off+n]
	return b[off : off+n : off+n]
}

func (s *byteSlabs) reset() {
	for i := range s.slabs[:min(s.i+1, len(s.slabs))] {
		s.slabs[i] = s.slabs[i][:0]
	}
	s.i = 0
}

func arenaOf(d *binfmt.Decbuf) *Arena {
	a, _ := d.Scratch.(*Arena)
	return a
}

// rowWith8 is rowWith4 for rows of 5 to 8 fields.
type rowWith8 struct {
	row    Row
	fields [8]Value
}

// row returns a row of arity fields; the caller must set every field (a
// recycled row's fields hold old values).
func (a *Arena) row(kind keygroups.RowKind, arity int) *Row {
	if a == nil || arity > 8 {
		return newRow(kind, arity)
	}
	if arity <= 4 {
		// A recycled row's fields still hold old values: the caller sets
		// every field (nil for nulls).
		x := a.rows4.next(a.reuse, arenaSlab)
		x.row.Kind = kind
		x.row.Fields = x.fields[:arity:arity]
		return &x.row
	}
	x := a.rows8.next(a.reuse, arenaSlab)
	x.row.Kind = kind
	x.row.Fields = x.fields[:arity:arity]
	return &x.row
}

func (a *Arena) ttl() *TTLValue {
	if a == nil {
		return &TTLValue{}
	}
	t := a.ttls.next(a.reuse, arenaSlab)
	*t = TTLValue{}
	return t
}

// valueSlabs carves []Value of up to arenaMaxValues elements out of slabs.
type valueSlabs struct {
	slabs [][]Value
	i, n  int
}

const (
	arenaValueSlab = 1024
	arenaMaxValues = 64
)

// values returns an empty slice with capacity for n values (a list being
// built). Appending beyond n reallocates like any slice.
func (a *Arena) values(n int) []Value {
	if a == nil || n > arenaMaxValues || n <= 0 {
		return make([]Value, 0, max(n, 0))
	}
	s := &a.vals
	if s.i < len(s.slabs) && s.n+n > len(s.slabs[s.i]) {
		if a.reuse {
			s.i++
		} else {
			s.slabs[s.i] = nil
		}
		s.n = 0
	}
	if s.i == len(s.slabs) {
		s.slabs = append(s.slabs, make([]Value, arenaValueSlab))
	} else if s.slabs[s.i] == nil {
		s.slabs[s.i] = make([]Value, arenaValueSlab)
	}
	out := s.slabs[s.i][s.n : s.n : s.n+n]
	s.n += n
	return out
}

// ArenaList returns vals as a List value whose slice header lives in a
// (boxing a slice into an interface would allocate it on its own).
func ArenaList(a *Arena, vals []Value) Value { return a.list(vals) }

// ArenaValues returns an empty slice with capacity for n values carved
// from a (see Arena: with a reusable arena it is valid until the next
// Reset); a nil arena or a long list gets its own allocation.
func ArenaValues(a *Arena, n int) []Value { return a.values(n) }

// str returns b as a string whose bytes live in a slab. Slab bytes are
// written once and, unless the arena is reset, never modified afterwards,
// which keeps the strings immutable.
func (a *Arena) str(b []byte) string {
	if a != nil && a.views && len(b) > 0 {
		return unsafe.String(&b[0], len(b))
	}
	if a == nil || len(b) == 0 || len(b) > arenaMaxString {
		return string(b)
	}
	dst := a.bytes.alloc(a.reuse, len(b))
	copy(dst, b)
	return unsafe.String(&dst[0], len(b))
}

// Boxed scalars. Converting an int64, float64, string or Timestamp to a
// Value allocates its data word on the heap one value at a time; the arena
// instead stores the scalar in a typed slab and builds the interface value
// around a pointer to that slot (the same representation the conversion
// produces). Slots are written once, before the interface value exists, and
// never modified, so the values are as immutable as ordinary ones; a slot
// keeps its slab alive like any interior pointer does.
type slabs struct {
	i64  slabList[int64]
	i32  slabList[int32]
	f64  slabList[float64]
	strs slabList[string]
	list slabList[List]
	ts   slabList[Timestamp]
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
	tmplList      Value = List(nil)
)

// boxAt returns an interface value with tmpl's dynamic type whose data
// pointer is p, which must point to a value of that type. The type must not
// be pointer-shaped (those are stored in the data word itself).
func boxAt(tmpl Value, p unsafe.Pointer) Value {
	v := tmpl
	(*eface)(unsafe.Pointer(&v)).data = p
	return v
}

func take[T any](a *Arena, s *slabList[T], v T) *T {
	p := s.next(a.reuse, arenaSlab*4)
	*p = v
	return p
}

func (a *Arena) int64(v int64) Value {
	if a == nil || uint64(v) < 256 { // the runtime boxes small values without allocating
		return v
	}
	return boxAt(tmplInt64, unsafe.Pointer(take(a, &a.box.i64, v)))
}

func (a *Arena) int32(v int32) Value {
	if a == nil || uint32(v) < 256 {
		return v
	}
	return boxAt(tmplInt32, unsafe.Pointer(take(a, &a.box.i32, v)))
}

func (a *Arena) float64(v float64) Value {
	if a == nil {
		return v
	}
	return boxAt(tmplFloat64, unsafe.Pointer(take(a, &a.box.f64, v)))
}

func (a *Arena) string(b []byte) Value {
	if a == nil {
		return string(b)
	}
	return boxAt(tmplString, unsafe.Pointer(take(a, &a.box.strs, a.str(b))))
}

func (a *Arena) list(v []Value) Value {
	if a == nil {
		return List(v)
	}
	return boxAt(tmplList, unsafe.Pointer(take(a, &a.box.list, List(v))))
}

func (a *Arena) timestamp(t Timestamp) Value {
	if a == nil {
		return t
	}
	return boxAt(tmplTimestamp, unsafe.Pointer(take(a, &a.box.ts, t)))
}
