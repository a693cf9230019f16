package native

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// Engine stored-value constants (see package engine; wire format).
const (
	engineTTLPrefix  = 8
	engineRawClass   = "sfstate-engine-bytes"
	maxEntryBytes    = 1 << 30
	blockPadding     = 1 // keyed's block reader refuses offset 0
	metaFollowsFlag  = 0x80
	endOfKeyGroupHi  = 0xFF
	defaultCFName    = "default"
	engineKindPQ     = "priority-queue"
	engineKindList   = "list"
	engineKindMap    = "map"
	engineKindMulti  = "multiset"
	engineKindValue  = "value"
	maxPrefixedBytes = 1 << 30
	// engineListFlag (bit 63 of a list value's prefix) marks a list
	// stored per element: the prefix's other bits are the newest element's
	// time and each element is an 8-byte big-endian last-access time,
	// uvarint length, bytes (lists of TTL states; see package engine).
	engineListFlag = uint64(1) << 63
	// joinOptVersion is the meta-info option that marks a join-record
	// state (engine.JoinOptVersion); recordValueSize the size of a
	// record-layout value (recordstore.RecordValueSize).
	joinOptVersion  = "sfstate.join.version"
	recordValueSize = engineTTLPrefix + 16
	// The engine states of recordstore's two layouts (recordstore.
	// StateDesc), recognised by name and manifest kind when the meta info
	// has no join description.
	bucketStateName = "join-buckets"
	recordStateName = "join-records"
)

// ErrOutOfRange is returned (wrapped) by Decode for an entry whose key
// group lies outside the handle's range; callers may skip such entries.
var ErrOutOfRange = errclass.New(errclass.ErrCorrupt, "native: entry outside the handle's key-group range")

// Decoder decodes the column-family entries of one handle. It is not safe
// for concurrent use.
type Decoder struct {
	h       *Handle
	hdr     keyed.Header // copy with compression off (native data is not block-framed)
	layout  Layout
	prefix  int
	maxPar  int
	lo, hi  int
	states  map[string]*keyed.StateMeta
	kinds   map[string]string
	br      keyed.BlockReader
	buf     []byte
	rd      bytes.Reader
	entry   keyed.Entry
	ttl     int64
	skipped map[string]bool
}

// NewDecoder returns a decoder for h's entries; maxParallelism decides the
// key-group prefix width.
func (h *Handle) NewDecoder(maxParallelism int) (*Decoder, error) {
	if maxParallelism < 1 || maxParallelism > 32768 {
		return nil, fmt.Errorf("%w: max parallelism %d", ErrFormat, maxParallelism)
	}
	d := &Decoder{h: h, hdr: *h.Header, layout: h.Layout, prefix: keygroups.PrefixWidth(maxParallelism), maxPar: maxParallelism,
		states: map[string]*keyed.StateMeta{}, kinds: map[string]string{}}
	d.hdr.Compressed = false
	d.lo, d.hi = h.KeyGroupRange()
	for _, st := range d.hdr.States {
		d.states[st.Name] = st
	}
	for _, es := range h.EngineStates {
		d.kinds[es.Name] = es.Kind
	}
	return d, nil
}

// State returns the meta info of column family cf (nil when the meta
// state does not describe it).
func (d *Decoder) State(cf string) *keyed.StateMeta { return d.states[cf] }

// Decode decodes one RocksDB entry of column family cf and calls fn with
// it. The entry and its byte slices are valid only during fn. Entries of
// the "default" family are ignored when it is not a declared state.
func (d *Decoder) Decode(cf string, key, value []byte, fn func(*keyed.Entry) error) error {
	st := d.states[cf]
	if st == nil {
		if cf == defaultCFName {
			return nil
		}
		return fmt.Errorf("%w: column family %q is not described by the meta state %s", ErrFormat, cf, d.h.MetaName)
	}
	kg, err := keygroups.ReadPrefix(key, d.prefix)
	if err != nil {
		return d.entryErr(cf, key, fmt.Errorf("key of %d bytes is shorter than the key-group prefix", len(key)))
	}
	if kg >= d.maxPar {
		return d.entryErr(cf, key, fmt.Errorf("key group %d >= max parallelism %d", kg, d.maxPar))
	}
	if kg < d.lo || kg > d.hi {
		return fmt.Errorf("%w: column family %q key group %d, range %d-%d", ErrOutOfRange, cf, kg, d.lo, d.hi)
	}
	if d.layout == LayoutEngine {
		return d.decodeEngine(st, kg, key, value, fn)
	}
	return d.decodeFlink(st, kg, key, value, fn)
}

func (d *Decoder) entryErr(cf string, key []byte, err error) error {
	k := key
	if len(k) > 32 {
		k = k[:32]
	}
	return fmt.Errorf("%w: operator %s subtask %d column family %q key %s: %v", ErrFormat, d.h.Operator.ID, d.h.Subtask, cf, hex.EncodeToString(k), err)
}

// decodeFlink frames the entry as a one-entry canonical key-group block
// (§4.4: state id, key, value, end-of-key-group mark) and lets keyed's
// block reader split and decode it, so native entries are interpreted
// exactly like canonical ones.
func (d *Decoder) decodeFlink(st *keyed.StateMeta, kg int, key, value []byte, fn func(*keyed.Entry) error) error {
	if len(key) > maxEntryBytes || len(value) > maxEntryBytes {
		return d.entryErr(st.Name, key, fmt.Errorf("entry of %d+%d bytes is too large", len(key), len(value)))
	}
	if st.ID < 0 || st.ID > math.MaxUint16-1 {
		return d.entryErr(st.Name, key, fmt.Errorf("state id %d", st.ID))
	}
	b := d.buf[:0]
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(st.ID))
	b = binary.BigEndian.AppendUint32(b, uint32(len(key)))
	kpos := len(b)
	b = append(b, key...)
	b[kpos] |= metaFollowsFlag
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	b = append(b, value...)
	b = append(b, endOfKeyGroupHi, endOfKeyGroupHi)
	d.buf = b
	d.rd.Reset(b)
	err := d.br.Read(&d.rd, int64(len(b)), d.h.MetaName, &d.hdr, kg, blockPadding, keyed.ReadOptions{MaxParallelism: d.maxPar, End: int64(len(b))}, fn)
	if err != nil {
		var ke *keyed.Error
		if errors.As(err, &ke) {
			// Offsets in the synthetic block mean nothing to the reader.
			return d.entryErr(st.Name, key, ke.Err)
		}
		return err
	}
	return nil
}

// decodeEngine splits an engine stored key/value.
func (d *Decoder) decodeEngine(st *keyed.StateMeta, kg int, key, value []byte, fn func(*keyed.Entry) error) error {
	kind := d.kinds[st.Name]
	if st.OptionMap[joinOptVersion] != "" || st.Name == bucketStateName && kind == engineKindValue || st.Name == recordStateName && kind == engineKindMap {
		return d.decodeJoin(st, kg, key, value, fn)
	}
	if kind == "" {
		kind = engineKindFromMeta(st)
	}
	e := &d.entry
	*e = keyed.Entry{KeyGroup: kg, State: st, Offset: -1, BlockPos: -1, KeyBytes: key, ValueBytes: value}
	rest := key[d.prefix:]
	if kind == engineKindPQ {
		if len(rest) < 8 {
			return d.entryErr(st.Name, key, fmt.Errorf("priority-queue key without an 8-byte priority"))
		}
		if len(value) != 0 {
			return d.entryErr(st.Name, key, fmt.Errorf("priority-queue entry with a %d-byte value", len(value)))
		}
		prio := int64(binary.BigEndian.Uint64(rest) ^ (1 << 63))
		e.KeyPart = rest
		e.Key = prio
		e.Value = raw(rest[8:])
		return fn(e)
	}
	k, rest, ok := uvarintBytes(rest)
	if !ok {
		return d.entryErr(st.Name, key, fmt.Errorf("malformed key length"))
	}
	ns, rest, ok := uvarintBytes(rest)
	if !ok {
		return d.entryErr(st.Name, key, fmt.Errorf("malformed namespace length"))
	}
	e.KeyPart, e.NamespaceBytes = k, ns
	e.Key, e.Namespace = raw(k), raw(ns)
	switch kind {
	case engineKindMap, engineKindMulti:
		e.UserKeyBytes = rest
		e.UserKey = raw(rest)
	default:
		if len(rest) != 0 {
			return d.entryErr(st.Name, key, fmt.Errorf("%d bytes after the namespace", len(rest)))
		}
	}
	if len(value) < engineTTLPrefix {
		return d.entryErr(st.Name, key, fmt.Errorf("value of %d bytes has no %d-byte timestamp", len(value), engineTTLPrefix))
	}
	pre := binary.BigEndian.Uint64(value)
	perElem := kind == engineKindList && pre&engineListFlag != 0
	d.ttl = int64(pre &^ engineListFlag)
	if !perElem {
		d.ttl = int64(pre)
	}
	e.TTLTimestamp = &d.ttl
	payload := value[engineTTLPrefix:]
	switch kind {
	case engineKindList:
		// Per-element lists decode as Flink's TTL list state does: one
		// TtlValue per element; whole-list values as plain elements.
		var out serde.List
		for p := payload; len(p) > 0; {
			var ts int64
			if perElem {
				if len(p) < 8 {
					return d.entryErr(st.Name, key, fmt.Errorf("list element %d: truncated timestamp", len(out)))
				}
				ts = int64(binary.BigEndian.Uint64(p))
				p = p[8:]
			}
			el, r, ok := uvarintBytes(p)
			if !ok {
				return d.entryErr(st.Name, key, fmt.Errorf("malformed list element %d", len(out)))
			}
			if perElem {
				out = append(out, &serde.TTLValue{LastAccess: ts, Value: raw(el)})
			} else {
				out = append(out, raw(el))
			}
			p = r
		}
		e.Value = out
	case engineKindMulti:
		if len(payload) != 8 {
			return d.entryErr(st.Name, key, fmt.Errorf("multiset count of %d bytes", len(payload)))
		}
		e.Value = int64(binary.BigEndian.Uint64(payload))
	default:
		e.Value = raw(payload)
	}
	return fn(e)
}

// decodeJoin splits an entry of a join-record state (package doc: bucket
// or record layout, told apart by the row after the join key).
func (d *Decoder) decodeJoin(st *keyed.StateMeta, kg int, key, value []byte, fn func(*keyed.Entry) error) error {
	rest := key[d.prefix:]
	if len(rest) < 1 || rest[0] > 1 {
		return d.entryErr(st.Name, key, fmt.Errorf("join-record key without a side byte (0 or 1)"))
	}
	side := "left"
	if rest[0] == 1 {
		side = "right"
	}
	k, row, ok := uvarintBytes(rest[1:])
	if !ok {
		return d.entryErr(st.Name, key, fmt.Errorf("malformed join key length"))
	}
	if len(value) < engineTTLPrefix {
		return d.entryErr(st.Name, key, fmt.Errorf("value of %d bytes has no %d-byte timestamp", len(value), engineTTLPrefix))
	}
	e := &d.entry
	*e = keyed.Entry{KeyGroup: kg, State: st, Offset: -1, BlockPos: -1, KeyBytes: key, ValueBytes: value,
		KeyPart: k, Key: raw(k), Namespace: side}
	d.ttl = int64(binary.BigEndian.Uint64(value))
	e.TTLTimestamp = &d.ttl
	if len(row) == 0 { // bucket layout
		e.Value = raw(value[engineTTLPrefix:])
		return fn(e)
	}
	if len(value) != recordValueSize {
		return d.entryErr(st.Name, key, fmt.Errorf("record value of %d bytes, want %d", len(value), recordValueSize))
	}
	e.UserKeyBytes, e.UserKey = row, raw(row)
	e.Value = serde.List{int64(binary.BigEndian.Uint64(value[8:])), int64(binary.BigEndian.Uint64(value[16:]))}
	return fn(e)
}

// engineKindFromMeta guesses the engine kind from the meta info when the
// manifest does not list the state.
func engineKindFromMeta(st *keyed.StateMeta) string {
	switch {
	case st.Type == keyed.PriorityQueue:
		return engineKindPQ
	case st.Kind == "LIST":
		return engineKindList
	case st.Kind == "MAP":
		return engineKindMap
	}
	return engineKindValue
}

func raw(b []byte) *serde.Raw {
	return &serde.Raw{Serializer: engineRawClass, Bytes: bytes.Clone(b)}
}

// uvarintBytes reads a minimal uvarint length and that many bytes.
func uvarintBytes(p []byte) (b, rest []byte, ok bool) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) || n > maxPrefixedBytes || w != uvarintLen(n) {
		return nil, nil, false
	}
	return p[w : w+int(n)], p[w+int(n):], true
}

func uvarintLen(n uint64) int {
	w := 1
	for n >= 0x80 {
		n >>= 7
		w++
	}
	return w
}
