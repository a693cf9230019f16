package keyed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// Operator-state file (OperatorBackendSerializationProxy, §8):
//
//	i32 version            5 (Flink 1.15–1.17) or 6 (1.18+)
//	[v6] bool compressed
//	i16 n × StateMetaInfo  operator list states (type OPERATOR)
//	i16 m × StateMetaInfo  broadcast states (type BROADCAST)
//	data                   list elements back to back (one handle offset per
//	                       element); broadcast: i32 size + size × {key, value}
//	                       at the state's single offset
//
// With compression the whole data section is one Snappy framed stream: its
// identifier follows the header once, and the writer flushed the stream at
// every recorded offset, so each offset is a chunk boundary (see region).

// Distribution modes of operator states (OperatorStateHandle.Mode ordinals).
const (
	ModeSplitDistribute = 0
	ModeUnion           = 1
	ModeBroadcast       = 2
)

// DistributionModeName returns the Flink name of a mode ordinal.
func DistributionModeName(m int) string {
	switch m {
	case ModeSplitDistribute:
		return "SPLIT_DISTRIBUTE"
	case ModeUnion:
		return "UNION"
	case ModeBroadcast:
		return "BROADCAST"
	}
	return fmt.Sprintf("MODE(%d)", m)
}

const maxBroadcastEntries = 1 << 28

// maxOperatorRegion bounds the decompressed size of one operator-state
// element or broadcast map.
const maxOperatorRegion = 1 << 30

// OperatorHeader is a parsed OperatorBackendSerializationProxy.
type OperatorHeader struct {
	Version    int
	Compressed bool
	// States are the operator (list) states, Broadcast the broadcast
	// states, each in file order.
	States    []*StateMeta
	Broadcast []*StateMeta
	// Raw holds the exact header bytes.
	Raw []byte
}

// State returns the list or broadcast state with the given name.
func (h *OperatorHeader) State(name string) *StateMeta {
	for _, s := range h.States {
		if s.Name == name {
			return s
		}
	}
	for _, s := range h.Broadcast {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// ReadOperatorHeader reads an operator-state header from r (positioned at
// the file start); it returns the header and its length.
func ReadOperatorHeader(r io.Reader, name string) (*OperatorHeader, int64, error) {
	var h *OperatorHeader
	var n int
	err := readGrowing(r, name, func(b []byte) error {
		var err error
		h, n, err = ParseOperatorHeader(b, name)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	h.Raw = bytes.Clone(h.Raw)
	return h, int64(n), nil
}

// ParseOperatorHeader parses an operator-state header at the start of b.
// h.Raw aliases b.
func ParseOperatorHeader(b []byte, name string) (*OperatorHeader, int, error) {
	return ParseOperatorHeaderWithin(b, name, -1)
}

// ParseOperatorHeaderWithin parses an operator-state header that ends at
// byte end of b (the smallest offset of the file's operator state handle;
// with compression the Snappy stream identifier may sit between the header
// and that offset). end < 0 means unknown. With the end known, unreadable
// serializer snapshots are stepped over as in ParseHeaderWithin and their
// states marked partial; their elements are then reported as raw bytes.
func ParseOperatorHeaderWithin(b []byte, name string, end int) (*OperatorHeader, int, error) {
	d := binfmt.New(b, 0)
	h := &OperatorHeader{Version: int(d.I32())}
	if d.Err() == nil && (h.Version < 5 || h.Version > 6) {
		return nil, 0, headerErr(name, &binfmt.OffsetError{Offset: 0, Err: fmt.Errorf("%w: operator backend proxy version %d (want 5 or 6)", binfmt.ErrCorrupt, h.Version)})
	}
	if h.Version >= 6 {
		h.Compressed = d.Bool()
	}
	if d.Err() != nil {
		return nil, 0, headerErr(name, d.Err())
	}
	parse := func(end int) (*Header, *binfmt.Decbuf) {
		p := newHeaderParser(b, end)
		p.extra = 1
		pd := binfmt.New(p.b, 0)
		pd.Pos = d.Pos
		kh := &Header{}
		p.tail(pd, kh, nil, hpos{i: -1})
		return kh, pd
	}
	var kh *Header
	var pd *binfmt.Decbuf
	if h.Compressed && end >= 10 && end <= len(b) && bytes.Equal(b[end-10:end-6], []byte{0xff, 0x06, 0x00, 0x00}) && bytes.Equal(b[end-6:end], streamID) {
		// The Snappy stream identifier sits between header and data.
		kh, pd = parse(end - 10)
	}
	if pd == nil || pd.Err() != nil {
		kh, pd = parse(end)
	}
	if pd.Err() != nil {
		return nil, 0, headerErr(name, pd.Err())
	}
	for _, m := range kh.States {
		m.prepare()
	}
	for _, m := range kh.broadcast {
		m.prepare()
	}
	h.States, h.Broadcast = kh.States, kh.broadcast
	h.Raw = b[:pd.Pos:pd.Pos]
	return h, pd.Pos, nil
}

// ReadOperatorHeaderWithin reads an operator-state header that ends at
// end (see ParseOperatorHeaderWithin); end <= 0 is ReadOperatorHeader.
func ReadOperatorHeaderWithin(r io.Reader, name string, end int64) (*OperatorHeader, int64, error) {
	if end <= 0 || end > maxHeaderBytes {
		return ReadOperatorHeader(r, name)
	}
	b := make([]byte, end)
	k, err := io.ReadFull(r, b)
	if err == nil {
		var h *OperatorHeader
		var n int
		if h, n, err = ParseOperatorHeaderWithin(b, name, int(end)); err == nil {
			return h, int64(n), nil
		}
	}
	return ReadOperatorHeader(io.MultiReader(bytes.NewReader(b[:k]), r), name)
}

// OperatorStateRef is one state of an operator state handle: its name,
// distribution mode ordinal and offsets in the delegate stream.
type OperatorStateRef struct {
	Name    string
	Mode    int
	Offsets []int64
}

// OperatorEntry is one list element or one broadcast map entry.
type OperatorEntry struct {
	State *StateMeta
	Mode  int
	// Index is the list element index or the map entry index.
	Index int
	// Offset is the handle offset the element (or map) starts at.
	Offset int64
	// Bytes are the element's serialized bytes (list states) or the
	// entry's key and value bytes (broadcast states); valid only during
	// the callback.
	Bytes, KeyBytes, ValueBytes []byte
	// Value is the decoded element / map value, Key the map key
	// (ModeDecode only).
	Key, Value serde.Value
}

// opRegions cuts the data section of an operator-state stream into the
// element regions delimited by the handle offsets.
type opRegions struct {
	src       io.ReaderAt
	size      int64
	name      string
	h         *OperatorHeader
	bounds    []int64
	headerEnd int64
	buf       []byte
	out       bytes.Buffer
	sr        SnappyReader
}

func newOpRegions(src io.ReaderAt, size int64, name string, h *OperatorHeader, refs []OperatorStateRef) *opRegions {
	var bounds []int64
	for _, r := range refs {
		bounds = append(bounds, r.Offsets...)
	}
	bounds = append(bounds, size)
	sort.Slice(bounds, func(i, j int) bool { return bounds[i] < bounds[j] })
	return &opRegions{src: src, size: size, name: name, h: h, bounds: bounds, headerEnd: int64(len(h.Raw))}
}

func (o *opRegions) fail(off int64, err error) error {
	return &Error{File: o.name, KeyGroup: -1, Offset: off, BlockPos: -1, Err: err}
}

// next returns the first bound after off.
func (o *opRegions) next(off int64) int64 {
	i := sort.Search(len(o.bounds), func(i int) bool { return o.bounds[i] > off })
	if i == len(o.bounds) {
		return o.size
	}
	return o.bounds[i]
}

// region returns the (decompressed) bytes of the element starting at off
// and the absolute offset of their first byte for error messages (0 when
// the bytes were decompressed: offsets inside them are not file offsets).
// The bytes are valid until the next call.
func (o *opRegions) region(off int64) ([]byte, int64, error) {
	if off < o.headerEnd || off >= o.size {
		return nil, 0, o.fail(off, fmt.Errorf("%w: offset %d outside the data section [%d,%d)", binfmt.ErrCorrupt, off, o.headerEnd, o.size))
	}
	end := o.next(off)
	n := end - off
	if int64(cap(o.buf)) < n {
		o.buf = make([]byte, n)
	}
	b := o.buf[:n]
	if _, err := o.src.ReadAt(b, off); err != nil && !(err == io.EOF && end == o.size) {
		return nil, 0, o.fail(off, err)
	}
	if !o.h.Compressed {
		return b, off, nil
	}
	// Flink writes the whole data section as ONE Snappy framed stream
	// (CompressibleFSDataOutputStream around the checkpoint stream): the
	// stream identifier sits once, right after the header, and the stream
	// is flushed whenever an offset is taken, so every offset is a chunk
	// boundary. On restore Flink keeps one decompressing reader and seeks
	// the raw stream to each offset. Each region is therefore decoded as a
	// run of chunks without requiring an identifier. The decompressed size
	// is bounded by the chunk sizes (at most 64 KiB per chunk).
	o.sr.Reset(bytes.NewReader(b), off)
	o.sr.seenID = true
	o.out.Reset()
	if _, err := o.out.ReadFrom(io.LimitReader(&o.sr, maxOperatorRegion+1)); err != nil {
		return nil, 0, o.fail(off, err)
	}
	if o.out.Len() > maxOperatorRegion {
		return nil, 0, o.fail(off, fmt.Errorf("%w: element decompresses to more than %d bytes", binfmt.ErrCorrupt, maxOperatorRegion))
	}
	return o.out.Bytes(), 0, nil
}

// ReadOperatorRegion returns the bytes of the element (list states) or map
// (broadcast states) that starts at handle offset off, decompressed when
// the stream is compressed. refs are all states of the handle (their
// offsets delimit the regions). The returned slice is freshly allocated.
func ReadOperatorRegion(src io.ReaderAt, size int64, name string, h *OperatorHeader, refs []OperatorStateRef, off int64) ([]byte, error) {
	b, _, err := newOpRegions(src, size, name, h, refs).region(off)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// ReadOperatorStates decodes the data of the states of one operator state
// handle. Elements are delimited by the handle offsets: each element ends
// where the next recorded offset (of any state) or the stream begins, and
// must be consumed exactly by its serializer. Compressed streams (proxy
// version 6 with the compression flag) are decoded chunk-wise from each
// offset.
func ReadOperatorStates(src io.ReaderAt, size int64, name string, h *OperatorHeader, refs []OperatorStateRef, mode Mode, fn func(*OperatorEntry) error) error {
	rg := newOpRegions(src, size, name, h, refs)
	fail, region := rg.fail, rg.region
	for _, ref := range refs {
		m := h.State(ref.Name)
		if m == nil {
			return fail(-1, fmt.Errorf("%w: handle names state %q that the header does not list", binfmt.ErrCorrupt, ref.Name))
		}
		e := &OperatorEntry{State: m, Mode: ref.Mode}
		if ref.Mode == ModeBroadcast {
			if len(ref.Offsets) != 1 {
				return fail(-1, fmt.Errorf("%w: broadcast state %q has %d offsets, want 1", binfmt.ErrCorrupt, ref.Name, len(ref.Offsets)))
			}
			off := ref.Offsets[0]
			b, base, err := region(off)
			if err != nil {
				return err
			}
			if err := readBroadcast(b, base, m, e, off, mode, fn); err != nil {
				return fail(off, fmt.Errorf("broadcast state %q: %w", ref.Name, err))
			}
			continue
		}
		for i, off := range ref.Offsets {
			b, base, err := region(off)
			if err != nil {
				return err
			}
			*e = OperatorEntry{State: m, Mode: ref.Mode, Index: i, Offset: off, Bytes: b}
			if mode == ModeDecode && m.valDec != nil {
				if !m.valDec.Supported() {
					e.Value = rawOf(m.Value, b)
				} else {
					v, err := serde.DecodeAll(m.valDec, b, base)
					if err != nil {
						return fail(off, fmt.Errorf("list state %q element %d: %w", ref.Name, i, err))
					}
					e.Value = v
				}
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func readBroadcast(b []byte, base int64, m *StateMeta, e *OperatorEntry, off int64, mode Mode, fn func(*OperatorEntry) error) error {
	if m.keyDec == nil || m.valDec == nil {
		return fmt.Errorf("%w: broadcast state lacks key or value serializer", binfmt.ErrCorrupt)
	}
	if !m.keyDec.Supported() || !m.valDec.Supported() {
		*e = OperatorEntry{State: m, Mode: ModeBroadcast, Offset: off, Bytes: b, Value: rawOf(m.Value, b)}
		return fn(e)
	}
	d := binfmt.New(b, base)
	n := d.Count("broadcast map size", maxBroadcastEntries, 1)
	for i := 0; i < n && d.Err() == nil; i++ {
		*e = OperatorEntry{State: m, Mode: ModeBroadcast, Index: i, Offset: off}
		ks := d.Pos
		var k, v serde.Value
		if mode == ModeDecode {
			k = m.keyDec.Decode(d)
		} else {
			m.keyDec.Skip(d)
		}
		vs := d.Pos
		if mode == ModeDecode {
			v = m.valDec.Decode(d)
		} else {
			m.valDec.Skip(d)
		}
		if d.Err() != nil {
			break
		}
		e.KeyBytes, e.ValueBytes = b[ks:vs], b[vs:d.Pos]
		e.Key, e.Value = k, v
		if err := fn(e); err != nil {
			return err
		}
	}
	if d.Err() != nil {
		return d.Err()
	}
	if d.Len() != 0 {
		return &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes after the broadcast map", binfmt.ErrCorrupt, d.Len())}
	}
	return nil
}

// MarshalJSON renders {"state", "mode", "index", "value"} (+ "key" for
// broadcast entries); undecoded elements carry "bytes" (base64).
func (e *OperatorEntry) MarshalJSON() ([]byte, error) {
	rec := map[string]any{"mode": DistributionModeName(e.Mode), "index": e.Index}
	if e.State != nil {
		rec["state"] = e.State.Name
	}
	switch {
	case e.Mode == ModeBroadcast && e.Key != nil:
		rec["key"] = e.Key
		rec["value"] = e.Value
	case e.Value != nil:
		rec["value"] = e.Value
	default:
		if e.Bytes != nil {
			rec["bytes"] = e.Bytes
		} else {
			rec["keyBytes"], rec["valueBytes"] = e.KeyBytes, e.ValueBytes
		}
	}
	return json.Marshal(rec)
}
