// Package keyed reads the data streams of canonical Flink savepoints:
// keyed-state files (KeyedBackendSerializationProxy header followed by
// key-group blocks) and operator-state files (OperatorBackendSerializationProxy
// header followed by list elements and broadcast maps).
//
// # Keyed state
//
//	h, n, err := keyed.ReadHeader(io.NewSectionReader(src, 0, size), name)
//	err = keyed.ReadKeyGroup(src, size, name, h, kg, offset, maxParallelism,
//		func(e *keyed.Entry) error { ... })
//
// ReadHeader parses the header (proxy version, compression flag, key
// serializer snapshot, state meta infos). ReadKeyGroup streams one key
// group's block starting at its handle offset through a read window over an
// io.SectionReader (reads of up to 1 MiB, sized to the expected block end;
// the whole file is never loaded), undoing the per-block Snappy framing
// when the header says so, splitting every key into key-group prefix, key,
// namespace and (MAP) user key, and decoding values per state kind. Entry
// byte slices alias the window and are only valid during the callback.
//
// ReadKeyGroupWith selects a Mode: ModeRaw (framing only: key and value
// bytes), ModeSplit (also split keys, no value model), ModeValidate (every
// byte checked, no values built) or ModeDecode (the default: everything
// decoded). With ReadOptions.ReuseValues decoded values live in recycled
// memory and are valid during their callback only; a BlockReader reused
// across calls then decodes without allocating per entry. Every key and value must be consumed
// exactly; leftovers and any malformed input yield an *Error naming the
// file, key group and offset. Serializers without a data decoder never fail
// a read: their parts are reported as *serde.Raw.
//
// BlockReader.ReadColumns is the typed full decode: entries of states with
// a fixed, known layout (StateMeta.Columnar: SQL rows of scalar, string and
// TIMESTAMP(p ≤ 3) fields, primitives and strings as keys and values, TTL
// wrappers, timers, VoidNamespace) are decoded straight into ColumnBatch
// columns (int64/float64 slices, null bitmaps, string offsets, TTL and
// timer timestamps) with exactly the checks and errors of ModeDecode;
// entries of other states go through the generic decoder to a fallback
// callback.
//
// # Operator state
//
// ReadOperatorHeader parses an operator-state file header; ReadListElement
// and ReadBroadcastState decode the data at the offsets of an operator
// state handle (see opstate.go).
package keyed

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// BackendStateType is StateMetaInfoSnapshot.BackendStateType.
type BackendStateType int

// Backend state types by ordinal (wire format).
const (
	KeyValue BackendStateType = iota
	Operator
	Broadcast
	PriorityQueue
	KeyValueV2
)

func (t BackendStateType) String() string {
	switch t {
	case KeyValue:
		return "KEY_VALUE"
	case Operator:
		return "OPERATOR"
	case Broadcast:
		return "BROADCAST"
	case PriorityQueue:
		return "PRIORITY_QUEUE"
	case KeyValueV2:
		return "KEY_VALUE_V2"
	}
	return fmt.Sprintf("BackendStateType(%d)", int(t))
}

// Option and serializer-map keys used in state meta infos.
const (
	OptKeyedStateType   = "KEYED_STATE_TYPE"
	OptDistributionMode = "OPERATOR_STATE_DISTRIBUTION_MODE"
	SerKey              = "KEY_SERIALIZER"
	SerNamespace        = "NAMESPACE_SERIALIZER"
	SerValue            = "VALUE_SERIALIZER"
	SerUserKey          = "USER_KEY_SERIALIZER"
)

// KeyedProxyVersion is the only KeyedBackendSerializationProxy version
// written by Flink 1.7 and later.
const KeyedProxyVersion = 6

const (
	maxStates       = 32767
	maxOptions      = 1 << 12
	maxSerializers  = 1 << 8
	maxHeaderBytes  = 16 << 20
	headerReadChunk = 64 << 10
)

// NamedSnapshot is one entry of a state's serializer map, in file order.
type NamedSnapshot struct {
	Key      string
	Snapshot *serde.Snapshot
}

// StateMeta is one StateMetaInfoSnapshot.
type StateMeta struct {
	// ID is the state's position in its file (the kvStateId of §4.4).
	ID   int
	Name string
	Type BackendStateType
	// Kind is KEYED_STATE_TYPE for key/value states (VALUE, LIST, MAP,
	// REDUCING, AGGREGATING, FOLDING), "PRIORITY_QUEUE" for timers and the
	// distribution mode for operator states.
	Kind string
	// Options in file order; OptionMap for look-ups.
	Options   [][2]string
	OptionMap map[string]string
	// Serializers in file order.
	Serializers []NamedSnapshot

	// Convenience views of Serializers. Value is the VALUE_SERIALIZER
	// (a ListSerializer for LIST, MapSerializer for MAP, the element
	// serializer for PRIORITY_QUEUE). Element is the list element
	// serializer; UserKey/UserValue the map's key/value serializers; Key
	// the KEY_SERIALIZER of broadcast states.
	Namespace, Value, Element, UserKey, UserValue, Key *serde.Snapshot
	// TTL is set when values (or list elements, or map values) are wrapped
	// by the state-TTL serializer.
	TTL bool
	// Partial says why some of the state's serializers could not be read
	// (they are opaque snapshots; see ParseHeaderWithin), empty when all
	// were. The entries of a partial state are reported as raw bytes.
	Partial string

	nsDec, valDec, elemDec, ukDec, uvDec, keyDec serde.Decoder
	// Column plans of the file's keys and of the values (both set when
	// the state's entries decode into columns; see ReadColumns).
	colKey, colVal *serde.ColumnPlan
	colTimer       bool
	colTimerNS     serde.Decoder
}

// Serializer returns the snapshot registered under key, or nil.
func (m *StateMeta) Serializer(key string) *serde.Snapshot {
	for _, s := range m.Serializers {
		if s.Key == key {
			return s.Snapshot
		}
	}
	return nil
}

// Header is a parsed KeyedBackendSerializationProxy.
type Header struct {
	Version    int
	Compressed bool
	// KeySerializer is the key serializer snapshot of the whole file.
	KeySerializer *serde.Snapshot
	States        []*StateMeta
	// Raw holds the exact header bytes.
	Raw []byte
	// KeyPartial says why the key serializer could not be read (its
	// snapshot is then opaque and every state is partial); empty when it
	// was read.
	KeyPartial string

	keyDec    serde.Decoder
	ambiguous bool
	broadcast []*StateMeta // second state list of operator headers
}

// State returns the state with the given name (nil if absent).
func (h *Header) State(name string) *StateMeta {
	for _, s := range h.States {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// KeyDecoder returns the decoder of the file's key serializer.
func (h *Header) KeyDecoder() serde.Decoder { return h.keyDec }

// ReadHeader reads a keyed-state header from r (positioned at the file
// start) and returns it with its length in bytes. name is used in errors.
// It reads r in growing chunks and stops as soon as the header parses, so
// only a little more than the header is consumed from r.
func ReadHeader(r io.Reader, name string) (*Header, int64, error) {
	var h *Header
	var n int
	err := readGrowing(r, name, func(b []byte) error {
		var err error
		h, n, err = ParseHeader(b, name)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	h.Raw = append([]byte(nil), h.Raw...)
	return h, int64(n), nil
}

// readGrowing feeds parse ever larger prefixes of r until it succeeds, r is
// exhausted, or maxHeaderBytes is reached; the last error is returned.
func readGrowing(r io.Reader, name string, parse func([]byte) error) error {
	buf := make([]byte, 0, headerReadChunk)
	eof := false
	for {
		want := cap(buf)
		for empty := 0; len(buf) < want && !eof; {
			n, err := r.Read(buf[len(buf):want])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				eof = true
			} else if err != nil {
				return fmt.Errorf("%s: reading header: %w", name, err)
			}
			if n == 0 {
				if empty++; empty > 100 {
					return fmt.Errorf("%s: reading header: %w", name, io.ErrNoProgress)
				}
			}
		}
		err := parse(buf)
		if err == nil || eof || len(buf) >= maxHeaderBytes {
			return err
		}
		nb := make([]byte, len(buf), min(2*cap(buf), maxHeaderBytes))
		copy(nb, buf)
		buf = nb
	}
}

// ParseHeader parses a keyed-state header at the start of b and returns it
// with the number of bytes it occupies. h.Raw aliases b. A serializer
// snapshot whose body is not known fails the parse (snapshot bodies are
// not length-prefixed); ParseHeaderWithin can step over it when the
// header's end is known.
func ParseHeader(b []byte, name string) (*Header, int, error) {
	return ParseHeaderWithin(b, name, -1)
}

// ParseHeaderWithin parses a keyed-state header that ends exactly at byte
// end of b (the first key-group offset of the file's handle); end < 0
// means unknown, which is ParseHeader.
//
// With the end known, a serializer snapshot that cannot be read (a class
// whose body grammar is unknown, an unsupported legacy form, a body that
// does not parse) does not fail the header: the parser resynchronises on
// the next record — the next serializer-map key, the next state meta info,
// the state count after the key serializer, or the header end — trying
// every candidate position whose bytes look like that record and
// accepting the first from which the rest of the header parses to exactly
// end. The skipped bytes become an opaque snapshot (Snapshot.Opaque, with
// the class name and version read at its start) and the state is marked
// partial (StateMeta.Partial says why); an unreadable key serializer marks
// every state partial (Header.KeyPartial). Partial states decode their
// entries as raw bytes (*serde.Raw). The search is bounded (a budget of
// trial parses), so hostile input cannot make it hang.
func ParseHeaderWithin(b []byte, name string, end int) (*Header, int, error) {
	p := newHeaderParser(b, end)
	d := binfmt.New(p.b, 0)
	h := &Header{}
	h.Version = int(d.I32())
	if d.Err() == nil && h.Version != KeyedProxyVersion {
		return nil, 0, headerErr(name, &binfmt.OffsetError{Offset: 0, Err: fmt.Errorf("%w keyed backend proxy version %d (want %d; a pre-1.7 format)", binfmt.ErrUnsupported, h.Version, KeyedProxyVersion)})
	}
	h.Compressed = d.Bool()
	start := d.Pos
	h.KeySerializer = serde.ReadTop(d)
	if d.Err() != nil && start+4 <= len(p.b) {
		h.KeySerializer, h.KeyPartial = p.recover(d, start, hpos{i: -1}, "key serializer")
	}
	p.tail(d, h, nil, hpos{i: -1})
	if d.Err() != nil {
		return nil, 0, headerErr(name, d.Err())
	}
	h.Raw = b[:d.Pos:d.Pos]
	h.prepare()
	return h, d.Pos, nil
}

// ReadHeaderWithin reads the first end bytes of r and parses them as a
// keyed-state header that ends exactly there (see ParseHeaderWithin).
// end <= 0 (unknown) is ReadHeader.
func ReadHeaderWithin(r io.Reader, name string, end int64) (*Header, int64, error) {
	if end <= 0 || end > maxHeaderBytes {
		return ReadHeader(r, name)
	}
	b := make([]byte, end)
	k, err := io.ReadFull(r, b)
	if err == nil {
		var h *Header
		var n int
		if h, n, err = ParseHeaderWithin(b, name, int(end)); err == nil {
			return h, int64(n), nil
		}
	}
	// The end does not hold a header (an offset inside it, a short file):
	// parse without it, so that errors name what is wrong.
	return ReadHeader(io.MultiReader(bytes.NewReader(b[:k]), r), name)
}

func headerErr(name string, err error) error {
	return &Error{File: name, KeyGroup: -1, Offset: offsetOf(err), BlockPos: -1, Err: err}
}

func offsetOf(err error) int64 {
	var oe *binfmt.OffsetError
	if errors.As(err, &oe) {
		return oe.Offset
	}
	return -1
}

// Bounds of one header's resynchronisation: trial parses, and bytes
// parsed by them.
const (
	maxResyncTrials = 4096
	maxResyncWork   = 64 << 20
)

// headerParser parses the state meta infos of a keyed or operator header,
// resynchronising after unreadable snapshots when the end is known.
type headerParser struct {
	b      []byte // the header bytes (cut at end when it is known)
	end    int    // exact end, -1 when unknown
	trials int    // trial parses left
	work   int    // bytes trial parses may still cover
	// extra is the number of further state lists after the first (the
	// operator header has two: list states, then broadcast states).
	extra int
}

func newHeaderParser(b []byte, end int) *headerParser {
	p := &headerParser{b: b, end: -1, trials: maxResyncTrials, work: maxResyncWork}
	if end >= 0 && end <= len(b) {
		p.b, p.end = b[:end], end
	}
	return p
}

// hpos is a position in the header grammar: the state list pass, state i
// of n (-1: the state count comes next) and serializer j of its ns.
type hpos struct {
	pass  int
	i, n  int
	j, ns int
}

// tail parses what follows position at: the rest of the current state's
// serializers (into cur), the rest of its state list, then the further
// state lists. Key/value and operator states go to h.States, the second
// list's to h.Broadcast (operator headers; see ParseOperatorHeader).
func (p *headerParser) tail(d *binfmt.Decbuf, h *Header, cur *StateMeta, at hpos) {
	if at.i >= 0 {
		p.serializers(d, cur, at)
	}
	for pass := at.pass; pass <= p.extra && d.Err() == nil; pass++ {
		first, n := at.i+1, at.n
		if pass != at.pass || at.i < 0 {
			first = 0
			pos := d.Offset()
			n = int(d.I16())
			if d.Err() == nil && (n < 0 || n > maxStates) {
				d.Fail(&binfmt.OffsetError{Offset: pos, Err: fmt.Errorf("%w: state count %d", binfmt.ErrCorrupt, n)})
				return
			}
		}
		for i := first; i < n && d.Err() == nil; i++ {
			m := p.stateMeta(d, hpos{pass: pass, i: i, n: n})
			if m == nil {
				return
			}
			m.ID = i
			if pass == 0 {
				h.States = append(h.States, m)
			} else {
				h.broadcast = append(h.broadcast, m)
			}
		}
	}
}

// stateMeta reads one StateMetaInfoSnapshot (meta-info version 6/7).
func (p *headerParser) stateMeta(d *binfmt.Decbuf, at hpos) *StateMeta {
	m := &StateMeta{OptionMap: map[string]string{}}
	m.Name = d.UTF()
	pos := d.Offset()
	t := d.I32()
	if d.Err() == nil && (t < 0 || t > int32(KeyValueV2)) {
		d.Fail(&binfmt.OffsetError{Offset: pos, Err: fmt.Errorf("%w: backend state type %d", binfmt.ErrCorrupt, t)})
		return nil
	}
	m.Type = BackendStateType(t)
	no := d.Count("option", maxOptions, 4)
	for i := 0; i < no && d.Err() == nil; i++ {
		k, v := d.UTF(), d.UTF()
		m.Options = append(m.Options, [2]string{k, v})
		m.OptionMap[k] = v
	}
	ns := d.Count("serializer", maxSerializers, 6)
	at.j, at.ns = 0, ns
	p.serializers(d, m, at)
	if d.Err() != nil {
		return nil
	}
	switch m.Type {
	case KeyValue, KeyValueV2:
		m.Kind = m.OptionMap[OptKeyedStateType]
	case PriorityQueue:
		m.Kind = "PRIORITY_QUEUE"
	case Operator, Broadcast:
		m.Kind = m.OptionMap[OptDistributionMode]
	}
	return m
}

// serializers reads serializers at.j.. of the state's serializer map.
func (p *headerParser) serializers(d *binfmt.Decbuf, m *StateMeta, at hpos) {
	for j := at.j; j < at.ns && d.Err() == nil; j++ {
		k := d.UTF()
		if d.Err() != nil {
			return
		}
		start := d.Pos
		s := serde.ReadTop(d)
		if d.Err() != nil {
			next := at
			next.j = j + 1
			var why string
			if s, why = p.recover(d, start, next, k); s == nil {
				return
			}
			if m.Partial == "" {
				m.Partial = why
			} else {
				m.Partial += "; " + why
			}
		}
		m.Serializers = append(m.Serializers, NamedSnapshot{Key: k, Snapshot: s})
	}
}

// recover steps over the unreadable top-level snapshot at start (whose
// read failed in d) when the header end is known: it returns an opaque
// snapshot of the skipped bytes and the reason, with d cleared and
// positioned after them, or nil (d keeps its error).
func (p *headerParser) recover(d *binfmt.Decbuf, start int, next hpos, what string) (*serde.Snapshot, string) {
	if p.end < 0 || p.trials <= 0 {
		return nil, ""
	}
	cause := d.Err()
	cd := binfmt.New(p.b, 0)
	cd.Pos = start
	cd.I32()
	class := cd.UTF()
	version := cd.I32()
	if cd.Err() != nil || !plausibleClass(class) {
		return nil, ""
	}
	for q := cd.Pos; q <= p.end; q++ {
		if !p.candidate(q, next) {
			continue
		}
		if p.trials--; p.trials < 0 {
			return nil, ""
		}
		if p.work -= p.end - q; p.work < 0 {
			return nil, ""
		}
		td := binfmt.New(p.b, 0)
		td.Pos = q
		tm := &StateMeta{OptionMap: map[string]string{}}
		p.tail(td, &Header{}, tm, next)
		if td.Err() != nil || td.Pos != p.end {
			continue
		}
		d.Reset(p.b, 0)
		d.Pos = q
		s := &serde.Snapshot{Class: class, Version: version, Offset: int64(start + 4), OuterVersion: -1,
			Raw: p.b[start+4 : q : q], Opaque: true}
		if ser, _, ok := serde.LegacyAdapter(s.Raw); ok {
			// A legacy config snapshot: the type is its serializer's.
			s.TypeClass = ser
		}
		problem := "is not a known serializer snapshot"
		if !errors.Is(cause, serde.ErrUnknownSnapshot) {
			inner := cause
			var oe *binfmt.OffsetError
			if errors.As(cause, &oe) {
				inner = oe.Err
			}
			problem = "could not be read: " + inner.Error()
		}
		why := fmt.Sprintf("%s %s (version %d) %s; its %d bytes at offset %d were skipped and entries are not decoded",
			what, class, version, problem, q-start-4, start+4)
		return s, why
	}
	return nil, ""
}

// candidate reports whether the bytes at q look like the record that
// follows position next: a serializer-map key (UTF, then the snapshot
// proxy version 2), a state meta info (UTF name, backend state type), a
// state count, or the header end.
func (p *headerParser) candidate(q int, next hpos) bool {
	b := p.b
	utfAt := func(q int) (int, bool) {
		if q+2 > len(b) {
			return 0, false
		}
		n := int(b[q])<<8 | int(b[q+1])
		if q+2+n > len(b) {
			return 0, false
		}
		return q + 2 + n, true
	}
	i32At := func(q int) (int32, bool) {
		if q+4 > len(b) {
			return 0, false
		}
		return int32(uint32(b[q])<<24 | uint32(b[q+1])<<16 | uint32(b[q+2])<<8 | uint32(b[q+3])), true
	}
	stateAt := func(q int) bool {
		e, ok := utfAt(q)
		if !ok {
			return false
		}
		t, ok := i32At(e)
		return ok && t >= 0 && t <= int32(KeyValueV2)
	}
	// countAt: the state count of list pass at q (an empty list is the
	// header's end unless further lists follow).
	countAt := func(q, pass int) bool {
		if q+2 > len(b) {
			return false
		}
		n := int(int16(uint16(b[q])<<8 | uint16(b[q+1])))
		if n < 0 || n > maxStates {
			return false
		}
		if n == 0 {
			return p.extra > pass || q+2 == p.end
		}
		return stateAt(q + 2)
	}
	switch {
	case next.i < 0:
		return countAt(q, next.pass)
	case next.j < next.ns:
		e, ok := utfAt(q)
		if !ok || e == q+2 {
			return false
		}
		for _, c := range b[q+2 : e] {
			if c < 0x20 || c >= 0x7f {
				return false
			}
		}
		v, ok := i32At(e)
		return ok && v == serde.ProxyVersion
	case next.i+1 < next.n:
		return stateAt(q)
	case next.pass < p.extra:
		return countAt(q, next.pass+1)
	}
	return q == p.end
}

// plausibleClass reports whether s looks like a Java class name.
func plausibleClass(s string) bool {
	if s == "" || len(s) > 1024 {
		return false
	}
	for _, c := range s {
		if !(c == '.' || c == '$' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c > 0x7f) {
			return false
		}
	}
	return true
}

// readStateMeta reads one StateMetaInfoSnapshot without resynchronisation.
func readStateMeta(d *binfmt.Decbuf) *StateMeta {
	return newHeaderParser(d.B, -1).stateMeta(d, hpos{})
}

// prepare fills the convenience views and builds decoders.
func (h *Header) prepare() {
	h.keyDec = serde.NewDecoder(h.KeySerializer)
	for _, m := range h.States {
		if h.KeyPartial != "" && m.Partial == "" {
			m.Partial = h.KeyPartial
		}
		m.prepare()
		m.planColumns(h)
	}
}

func (m *StateMeta) prepare() {
	m.Namespace = m.Serializer(SerNamespace)
	m.Value = m.Serializer(SerValue)
	m.Key = m.Serializer(SerKey)
	if m.Namespace != nil {
		m.nsDec = serde.NewDecoder(m.Namespace)
	}
	if m.Key != nil {
		m.keyDec = serde.NewDecoder(m.Key)
	}
	if m.Value == nil {
		return
	}
	m.valDec = serde.NewDecoder(m.Value)
	switch {
	case m.Kind == "LIST" && m.Value.Is(serde.ClassList) && len(m.Value.Nested) == 1:
		m.Element = m.Value.Nested[0]
		m.elemDec = serde.NewDecoder(m.Element)
		m.TTL = m.Element.Class == serde.ClassTTL
	case m.Kind == "MAP" && m.Value.Is(serde.ClassMap) && len(m.Value.Nested) == 2:
		m.UserKey, m.UserValue = m.Value.Nested[0], m.Value.Nested[1]
		if uk := m.Serializer(SerUserKey); uk != nil {
			m.UserKey = uk
		}
		m.ukDec = serde.NewDecoder(m.UserKey)
		m.uvDec = serde.NewDecoder(m.UserValue)
		m.TTL = m.UserValue.Class == serde.ClassTTL
	default:
		m.TTL = m.Value.Class == serde.ClassTTL
	}
}

// StateNames returns the state names sorted (handy for listings).
func (h *Header) StateNames() []string {
	out := make([]string, len(h.States))
	for i, s := range h.States {
		out[i] = s.Name
	}
	sort.Strings(out)
	return out
}

// Error is a failure while reading a state stream. Its class is its
// cause's (errclass.ErrCorrupt for damaged bytes, errclass.ErrUnsupported
// for a form not read, none for a failed read of the stream), and
// errors.As finds it as an *errclass.CorruptionError with File and Offset.
type Error struct {
	File string
	// KeyGroup is -1 for header errors.
	KeyGroup int
	// Offset is the absolute file offset of the failure, or -1. In a
	// compressed block it is the block's offset (see BlockPos).
	Offset int64
	// BlockPos is the position within the (decompressed) key-group block
	// stream, or -1.
	BlockPos int64
	Err      error
}

func (e *Error) Error() string {
	s := e.File
	if e.KeyGroup >= 0 {
		s += fmt.Sprintf(": key group %d", e.KeyGroup)
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf(" at offset %d", e.Offset)
	}
	if e.BlockPos >= 0 && e.KeyGroup >= 0 {
		s += fmt.Sprintf(" (block byte %d)", e.BlockPos)
	}
	inner := e.Err
	var oe *binfmt.OffsetError
	if errors.As(inner, &oe) && oe.Offset == e.Offset && inner == error(oe) {
		inner = oe.Err
	}
	return s + ": " + inner.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// As lets errors.As see e as an *errclass.CorruptionError (file and file
// offset; the key group and block position stay in e).
func (e *Error) As(target any) bool {
	if p, ok := target.(**errclass.CorruptionError); ok {
		*p = &errclass.CorruptionError{File: e.File, Offset: e.Offset, Err: e.Err}
		return true
	}
	return false
}
