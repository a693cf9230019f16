package canonical

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/engine/rowcodec"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// ErrConvert marks an entry that cannot be converted between the engine's
// encoding and Flink's.
var ErrConvert = errclass.New(errclass.ErrCorrupt, "canonical: cannot convert entry")

func convErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConvert, fmt.Sprintf(format, args...))
}

// appendFlinkPart appends Flink's serializer bytes of one key, namespace or
// user-key part given in the engine's encoding (see engine/schema.go).
func appendFlinkPart(dst []byte, t engine.Type, b []byte, what string) ([]byte, error) {
	switch t.Kind {
	case engine.TypeVoid, engine.TypeGlobalWindow:
		if len(b) != 0 {
			return dst, convErr("%s: %s namespace with %d bytes", what, t.Kind, len(b))
		}
		return append(dst, 0), nil
	case engine.TypeLong, engine.TypeInt, engine.TypeTimeWindow:
		if err := checkFixedPart(t.Kind, b, what); err != nil {
			return dst, err
		}
	case engine.TypeString:
		if !utf8.Valid(b) {
			return dst, convErr("%s: string is not valid UTF-8", what)
		}
		return flinkwrite.AppendStringValue(dst, string(b)), nil
	case engine.TypeRow:
		if len(b) > math.MaxInt32 {
			return dst, convErr("%s: row of %d bytes", what, len(b))
		}
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	case engine.TypeRaw:
	default:
		return dst, convErr("%s: type %s", what, t.Kind)
	}
	return append(dst, b...), nil
}

// checkFixedPart checks the length of a fixed-width part, whose engine and
// Flink encodings are the same bytes: long 8, int 4, time window 16 (two
// longs).
func checkFixedPart(k engine.TypeKind, b []byte, what string) error {
	var n int
	var name string
	switch k {
	case engine.TypeLong:
		n, name = 8, "long"
	case engine.TypeInt:
		n, name = 4, "int"
	case engine.TypeTimeWindow:
		n, name = 16, "time window"
	}
	if len(b) != n {
		return convErr("%s: %s of %d bytes", what, name, len(b))
	}
	return nil
}

// parseFlinkPart is the inverse of appendFlinkPart: b must be exactly one
// serialized part.
func parseFlinkPart(dst []byte, t engine.Type, b []byte, what string) ([]byte, error) {
	switch t.Kind {
	case engine.TypeVoid, engine.TypeGlobalWindow:
		if len(b) != 1 || b[0] != 0 {
			return dst, convErr("%s: %s namespace is % x", what, t.Kind, b)
		}
		return dst, nil
	case engine.TypeLong, engine.TypeInt, engine.TypeTimeWindow:
		if err := checkFixedPart(t.Kind, b, what); err != nil {
			return dst, err
		}
	case engine.TypeString:
		return appendStringValueUTF8(dst, b, what)
	case engine.TypeRow:
		if len(b) < 4 || int64(binary.BigEndian.Uint32(b)) != int64(len(b)-4) {
			return dst, convErr("%s: row size prefix does not match its %d bytes", what, len(b))
		}
		b = b[4:]
	case engine.TypeRaw:
	default:
		return dst, convErr("%s: type %s", what, t.Kind)
	}
	return append(dst, b...), nil
}

// stringValueVarint reads one 7-bit varint of Flink's StringValue encoding
// at b[*pos], advancing *pos; false when truncated or longer than 5 bytes.
func stringValueVarint(b []byte, pos *int) (uint32, bool) {
	var v uint32
	for shift := uint(0); shift < 35; shift += 7 {
		if *pos >= len(b) {
			return 0, false
		}
		c := b[*pos]
		*pos++
		v |= uint32(c&0x7f) << shift
		if c < 0x80 {
			return v, true
		}
	}
	return 0, false
}

// appendStringValueUTF8 decodes Flink's StringValue encoding (length+1 and
// UTF-16 code units as 7-bit varints) and appends the UTF-8 form. A NULL
// string or an unpaired surrogate cannot be represented and fails.
func appendStringValueUTF8(dst, b []byte, what string) ([]byte, error) {
	pos := 0
	n, ok := stringValueVarint(b, &pos)
	if !ok {
		return dst, convErr("%s: truncated string length", what)
	}
	if n == 0 {
		return dst, convErr("%s: NULL string", what)
	}
	n--
	if int64(n) > int64(len(b)-pos) {
		return dst, convErr("%s: string of %d chars in %d bytes", what, n, len(b)-pos)
	}
	units := make([]uint16, 0, n)
	for i := uint32(0); i < n; i++ {
		c, ok := stringValueVarint(b, &pos)
		if !ok || c > 0xffff {
			return dst, convErr("%s: bad char %d", what, i)
		}
		units = append(units, uint16(c))
	}
	if pos != len(b) {
		return dst, convErr("%s: %d bytes after the string", what, len(b)-pos)
	}
	for i := 0; i < len(units); i++ {
		u := units[i]
		switch {
		case utf16.IsSurrogate(rune(u)):
			if u >= 0xdc00 || i+1 >= len(units) {
				return dst, convErr("%s: unpaired surrogate", what)
			}
			r := utf16.DecodeRune(rune(u), rune(units[i+1]))
			if r == utf8.RuneError {
				return dst, convErr("%s: unpaired surrogate", what)
			}
			dst = utf8.AppendRune(dst, r)
			i++
		default:
			dst = utf8.AppendRune(dst, rune(u))
		}
	}
	return dst, nil
}

// stateCodec converts one state's entries in both directions.
type stateCodec struct {
	s   engine.StateSchema
	key engine.Type
	ttl bool
	// timedList: list payloads come in the per-element encoding of
	// engine.State.ScanKeyGroupsTimed (lists of TTL states, at export).
	timedList bool
	frow      *rowcodec.FlinkRow // value rows (value states, map user values)
	// rawLen is the fixed length of raw list elements, or -1: elements of
	// variable length (no TTL) are not split; the whole Flink list value
	// (elements joined by ',') is kept as one engine element, which
	// exports back unchanged and stays a valid Flink list when the engine
	// appends further elements.
	rawLen int
	tmp    []byte
}

func newStateCodec(key engine.Type, s engine.StateSchema) (*stateCodec, error) {
	c := &stateCodec{s: s, key: key, ttl: s.TTL > 0}
	if s.Kind == engine.KindList && s.Value.Kind == engine.TypeRaw {
		n, err := fixedLen(s.Value)
		switch {
		case err == nil:
			c.rawLen = n
		case c.ttl:
			return nil, fmt.Errorf("state %q: list element: %w", s.Name, err)
		default:
			c.rawLen = -1
		}
	}
	if s.Kind == engine.KindValue || s.Kind == engine.KindMap || s.Kind == engine.KindList {
		if s.Value.Kind == engine.TypeRow {
			as, err := s.Value.ArrowSchema()
			if err != nil {
				return nil, fmt.Errorf("state %q: %w", s.Name, err)
			}
			codec, err := rowcodec.NewCodec(as)
			if err != nil {
				return nil, fmt.Errorf("state %q: %w", s.Name, err)
			}
			if c.frow, err = rowcodec.NewFlinkRow(codec); err != nil {
				return nil, fmt.Errorf("state %q: %w", s.Name, err)
			}
		}
	}
	return c, nil
}

// flinkKey appends the Flink composite key (prefix, key, namespace, user key
// or priority-queue element) of an engine entry.
func (c *stateCodec) flinkKey(dst []byte, kg, prefixLen int, key, ns, rest []byte) ([]byte, error) {
	dst, err := flinkwrite.AppendKeyGroupPrefix(dst, kg, prefixLen)
	if err != nil {
		return dst, err
	}
	if c.s.Kind == engine.KindPriorityQueue {
		if len(key) != 0 || len(ns) != 0 {
			return dst, convErr("priority-queue entry with key or namespace bytes")
		}
		return append(dst, rest...), nil
	}
	if dst, err = appendFlinkPart(dst, c.key, key, "key"); err != nil {
		return dst, err
	}
	if dst, err = appendFlinkPart(dst, c.s.Namespace, ns, "namespace"); err != nil {
		return dst, err
	}
	switch c.s.Kind {
	case engine.KindMap, engine.KindMultiset:
		return appendFlinkPart(dst, c.s.UserKey, rest, "user key")
	}
	if len(rest) != 0 {
		return dst, convErr("%d bytes after the namespace of a %s entry", len(rest), c.s.Kind)
	}
	return dst, nil
}

// flinkValue appends the Flink value bytes of an engine value (timestamp
// and payload).
func (c *stateCodec) flinkValue(dst []byte, ts int64, payload []byte) ([]byte, error) {
	switch c.s.Kind {
	case engine.KindPriorityQueue:
		return dst, nil
	case engine.KindList:
		return c.flinkList(dst, ts, payload)
	case engine.KindMap, engine.KindMultiset:
		if c.s.Value.Kind == engine.TypeRaw {
			// Raw user values keep Flink's NULL flag byte.
			if len(payload) < 1 || payload[0] > 1 || payload[0] == 1 && len(payload) != 1 {
				return dst, convErr("raw map value of %d bytes with flag % x", len(payload), payload[:min(len(payload), 1)])
			}
			dst = append(dst, payload[0])
			if payload[0] == 1 {
				return dst, nil // NULL
			}
			payload = payload[1:]
			break
		}
		dst = append(dst, 0) // not null
	}
	if c.ttl {
		dst = flinkwrite.AppendLong(dst, ts)
	}
	if c.s.Kind == engine.KindMultiset {
		if len(payload) != 8 {
			return dst, convErr("multiset count of %d bytes", len(payload))
		}
		n := int64(binary.BigEndian.Uint64(payload))
		if n < 1 || n > math.MaxInt32 {
			return dst, convErr("multiset count %d outside Flink's Integer range 1..2^31-1", n)
		}
		return flinkwrite.AppendInt(dst, int32(n)), nil
	}
	if c.frow != nil {
		c.tmp = binary.BigEndian.AppendUint64(c.tmp[:0], uint64(ts))
		c.tmp = append(c.tmp, payload...)
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		var err error
		dst, _, err = c.frow.ToBinaryRow(dst, c.tmp)
		if err != nil {
			return dst, fmt.Errorf("%w: value row: %v", ErrConvert, err)
		}
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
		return dst, nil
	}
	return appendFlinkPart(dst, c.s.Value, payload, "value")
}

// engineKey appends the engine's stored key of a Flink entry split into
// key, namespace and user-key bytes (for priority queues: the element).
func (c *stateCodec) engineKey(dst []byte, layout engine.Layout, kg int, key, ns, userKey []byte) ([]byte, error) {
	if c.s.Kind == engine.KindPriorityQueue {
		dst = layout.Key(dst, kg, nil, nil)
		return append(dst, key...), nil
	}
	var err error
	c.tmp, err = parseFlinkPart(c.tmp[:0], c.key, key, "key")
	if err != nil {
		return dst, err
	}
	nsAt := len(c.tmp)
	if c.tmp, err = parseFlinkPart(c.tmp, c.s.Namespace, ns, "namespace"); err != nil {
		return dst, err
	}
	dst = layout.Key(dst, kg, c.tmp[:nsAt], c.tmp[nsAt:])
	switch c.s.Kind {
	case engine.KindMap, engine.KindMultiset:
		return parseFlinkPart(dst, c.s.UserKey, userKey, "user key")
	}
	if len(userKey) != 0 {
		return dst, convErr("user key bytes in a %s entry", c.s.Kind)
	}
	return dst, nil
}

// engineValue appends the engine's stored value (timestamp, payload) of a
// Flink value.
func (c *stateCodec) engineValue(dst, v []byte) ([]byte, error) {
	switch c.s.Kind {
	case engine.KindPriorityQueue:
		if len(v) != 0 {
			return dst, convErr("priority-queue entry with a %d-byte value", len(v))
		}
		return binary.BigEndian.AppendUint64(dst, 0), nil
	case engine.KindMap, engine.KindMultiset:
		if len(v) < 1 {
			return dst, convErr("empty map entry value")
		}
		if c.s.Kind == engine.KindMap && c.s.Value.Kind == engine.TypeRaw {
			switch {
			case v[0] == 1 && len(v) == 1: // NULL, kept as its flag
				dst = binary.BigEndian.AppendUint64(dst, 0)
				return append(dst, 1), nil
			case v[0] != 0:
				return dst, convErr("map value flag % x followed by %d bytes", v[:1], len(v)-1)
			}
			var ts int64
			v = v[1:]
			if c.ttl {
				if len(v) < 8 {
					return dst, convErr("TTL value of %d bytes", len(v))
				}
				ts = int64(binary.BigEndian.Uint64(v))
				v = v[8:]
			}
			dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
			dst = append(dst, 0)
			return append(dst, v...), nil
		}
		if v[0] != 0 {
			return dst, convErr("NULL map value (representable only for user values carried raw)")
		}
		v = v[1:]
	}
	if c.s.Kind == engine.KindList {
		return c.engineList(dst, v)
	}
	var ts int64
	if c.ttl {
		if len(v) < 8 {
			return dst, convErr("TTL value of %d bytes", len(v))
		}
		ts = int64(binary.BigEndian.Uint64(v))
		v = v[8:]
	}
	if c.s.Kind == engine.KindMultiset {
		if len(v) != 4 {
			return dst, convErr("count of %d bytes", len(v))
		}
		n := int32(binary.BigEndian.Uint32(v))
		if n < 1 {
			return dst, convErr("multiset count %d", n)
		}
		dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
		return binary.BigEndian.AppendUint64(dst, uint64(n)), nil
	}
	if c.frow != nil {
		if len(v) < 4 || int64(binary.BigEndian.Uint32(v)) != int64(len(v)-4) {
			return dst, convErr("value row size prefix does not match its %d bytes", len(v))
		}
		// The row kind (+I, -U, +U, -D) stays in the row's header byte.
		out, _, err := c.frow.FromBinaryRow(dst, ts, v[4:])
		if err != nil {
			return dst, fmt.Errorf("%w: value row: %v", ErrConvert, err)
		}
		return out, nil
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return parseFlinkPart(dst, c.s.Value, v, "value")
}

// flinkList appends Flink's list value (elements separated by ',', each a
// TtlValue when the state has a TTL) of an engine list payload: the
// whole-list encoding (uvarint-length-prefixed elements, each TtlValue
// with the list's timestamp ts) or, when c.timedList, the per-element
// encoding of ScanKeyGroupsTimed (each TtlValue with its element's own
// last-access time, as Flink's TTL list state keeps it).
func (c *stateCodec) flinkList(dst []byte, ts int64, payload []byte) ([]byte, error) {
	first := true
	var ferr error
	err := engine.ListElems(payload, c.timedList, func(ets int64, el []byte) bool {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if c.ttl {
			if c.timedList {
				dst = flinkwrite.AppendLong(dst, ets)
			} else {
				dst = flinkwrite.AppendLong(dst, ts)
			}
		}
		if c.frow != nil {
			c.tmp = append(c.tmp[:0], 0, 0, 0, 0, 0, 0, 0, 0)
			c.tmp = append(c.tmp, el...)
			at := len(dst)
			dst = append(dst, 0, 0, 0, 0)
			var err error
			if dst, _, err = c.frow.ToBinaryRow(dst, c.tmp); err != nil {
				ferr = fmt.Errorf("%w: list element row: %v", ErrConvert, err)
				return false
			}
			binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
			return true
		}
		dst, ferr = appendFlinkPart(dst, c.s.Value, el, "list element")
		return ferr == nil
	})
	if err != nil {
		return dst, convErr("malformed engine list")
	}
	return dst, ferr
}

// fixedLen is the fixed serialized length of a raw type's values, read
// from its kept serializer snapshot.
func fixedLen(t engine.Type) (int, error) {
	rs, ok := t.Snapshot.(flinkwrite.RawSnapshot)
	if !ok {
		return 0, fmt.Errorf("raw type without a kept serializer snapshot")
	}
	snap, _, err := serde.ParseSnapshot(append([]byte{0, 0, 0, serde.ProxyVersion}, rs.Versioned...), 0)
	if err != nil {
		return 0, err
	}
	dec := serde.NewDecoder(snap)
	if !dec.Supported() || dec.Len() < 0 {
		return 0, fmt.Errorf("serializer %s has no fixed length", snap.Class)
	}
	return dec.Len(), nil
}

// elemLen is the length of the serialized element at the start of b.
func (c *stateCodec) elemLen(t engine.Type, b []byte) (int, error) {
	switch t.Kind {
	case engine.TypeRaw:
		if c.rawLen < 0 {
			return len(b), nil // the whole list, see rawLen
		}
		if c.rawLen > len(b) {
			return 0, convErr("element of %d bytes in %d", c.rawLen, len(b))
		}
		return c.rawLen, nil
	case engine.TypeRow:
		if len(b) < 4 {
			return 0, convErr("truncated row size")
		}
		n := int64(binary.BigEndian.Uint32(b))
		if n > int64(len(b)-4) {
			return 0, convErr("row of %d bytes in %d", n, len(b)-4)
		}
		return 4 + int(n), nil
	case engine.TypeLong:
		return 8, nil
	case engine.TypeInt:
		return 4, nil
	case engine.TypeString:
		pos := 0
		n, ok := stringValueVarint(b, &pos)
		if !ok {
			return 0, convErr("truncated string length")
		}
		for i := uint32(1); i < n; i++ {
			if _, ok := stringValueVarint(b, &pos); !ok {
				return 0, convErr("truncated string")
			}
		}
		return pos, nil
	}
	return 0, convErr("list elements of type %s", t.Kind)
}

// engineList converts Flink's list value to the engine's stored value. All
// elements of a TTL list must carry the same timestamp (the engine keeps
// one per list).
func (c *stateCodec) engineList(dst, v []byte) ([]byte, error) {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	var ts int64
	for i := 0; ; i++ {
		if c.ttl {
			if len(v) < 8 {
				return dst, convErr("list element %d: truncated TTL timestamp", i)
			}
			t := int64(binary.BigEndian.Uint64(v))
			if i > 0 && t != ts {
				return dst, convErr("list elements with different TTL timestamps (%d, %d); engine lists carry one", ts, t)
			}
			ts = t
			v = v[8:]
		}
		n, err := c.elemLen(c.s.Value, v)
		if err != nil {
			return dst, fmt.Errorf("list element %d: %w", i, err)
		}
		el := v[:n]
		v = v[n:]
		if c.frow != nil {
			c.tmp, _, err = c.frow.FromBinaryRow(c.tmp[:0], 0, el[4:])
			if err != nil {
				return dst, fmt.Errorf("%w: list element %d row: %v", ErrConvert, i, err)
			}
			dst = binary.AppendUvarint(dst, uint64(len(c.tmp)-8))
			dst = append(dst, c.tmp[8:]...)
		} else {
			if c.tmp, err = parseFlinkPart(c.tmp[:0], c.s.Value, el, "list element"); err != nil {
				return dst, err
			}
			dst = binary.AppendUvarint(dst, uint64(len(c.tmp)))
			dst = append(dst, c.tmp...)
		}
		if len(v) == 0 {
			break
		}
		if v[0] != ',' {
			return dst, convErr("list element %d followed by 0x%02x, not ','", i, v[0])
		}
		v = v[1:]
		if len(v) == 0 {
			return dst, convErr("list ends with ','")
		}
	}
	binary.BigEndian.PutUint64(dst[at:], uint64(ts))
	return dst, nil
}
