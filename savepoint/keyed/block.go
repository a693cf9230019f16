package keyed

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"unsafe"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// Block framing constants (§4.4; wire format).
const (
	metaFollowsFlag  = 0x80
	endOfKeyGroup    = 0xFFFF
	listDelimiter    = ','
	maxEntryBytes    = 1 << 30
	readStep         = 1 << 20
	blockBufferBytes = 64 << 10
)

// Mode selects how much of each entry ReadKeyGroupWith interprets.
type Mode int

const (
	// ModeDecode splits keys and decodes keys, namespaces, user keys and
	// values into serde values.
	ModeDecode Mode = iota
	// ModeSplit splits keys into key / namespace / user-key bytes (which
	// requires walking the key serializer's data) but builds no values and
	// leaves value bytes uninterpreted.
	ModeSplit
	// ModeRaw only frames entries: key and value bytes per state.
	ModeRaw
	// ModeValidate splits keys like ModeSplit and checks every key,
	// namespace, user key and value exactly as ModeDecode does (same
	// errors) without building values: Key, Namespace, UserKey and Value
	// stay nil. For the common serializers it allocates nothing per entry;
	// use it for checks, digests and statistics.
	ModeValidate
)

// ReadOptions tunes ReadKeyGroupWith.
type ReadOptions struct {
	// MaxParallelism of the operator; decides the key-group prefix width
	// (1 byte up to 128, else 2).
	MaxParallelism int
	Mode           Mode
	// ReuseValues lets the reader decode values (ModeDecode) into memory
	// it recycles: Key, Namespace, UserKey and Value of an entry are then
	// valid only during its callback, like the byte slices. Decoding then
	// allocates nothing per entry, which keeps the garbage collector idle;
	// use it whenever the callback does not retain decoded values (or
	// copies what it keeps).
	ReuseValues bool
	// Arena, when set, is where ModeDecode builds values instead of the
	// reader's own arenas; the reader never resets it (ReuseValues is then
	// ignored), so the caller decides how long values live. SetArena
	// switches it during a read.
	Arena *serde.Arena
	// Windows, when set, keeps read windows intact once entries alias
	// them, so entries stay valid after their callback: the reader takes
	// windows from Windows.Get and, where it would slide unread bytes to
	// the front of a used-up window (or start a new block at its front),
	// continues in a fresh window instead (copying only the partial entry
	// at the end) and hands the old one to Windows.Retire. The caller
	// decides when a retired window may be handed out again.
	Windows WindowSource
	// EntrySlot, when set, gives the *Entry the next entry is built in
	// (instead of the reader's own), e.g. a slot of a caller's batch. The
	// callback receives that pointer.
	EntrySlot func() *Entry
	// ExpectedEnd, when > 0 (and End is not set), is where the block is
	// expected to end, e.g. the next block's offset: reads are sized not
	// to go far past it, and nothing is enforced.
	ExpectedEnd int64
	// End, when > 0, is the offset where the block must end (the next key
	// group's offset, or the stream size for the last one). Reads never go
	// past it — with range-read storage this keeps small blocks from
	// fetching read-ahead they do not need — and an uncompressed block that
	// ends before End is reported as corrupt.
	End int64
	// Heap reads the key group in the heap backend's own layout (see
	// heap.go) instead of the canonical one; entries come out in the
	// canonical shape.
	Heap bool
}

// WindowSource supplies the read windows of ReadOptions.Windows.
type WindowSource interface {
	// Get returns a window to read into (its length is the read size; a
	// window shorter than an entry is replaced by a larger allocation).
	Get() []byte
	// Retire tells that the reader no longer writes into w; entries
	// handed out still alias it.
	Retire(w []byte)
}

// sameSource reports whether two window sources are the same (sources
// of non-comparable types never are).
func sameSource(a, b WindowSource) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// Entry is one key/value entry of a key-group block. Byte slices alias
// internal buffers and are only valid during the callback; decoded values
// are independent copies.
type Entry struct {
	KeyGroup int
	State    *StateMeta
	// Offset is the absolute file offset of the entry's key-length field
	// (for compressed blocks: the block's offset; see BlockPos).
	Offset int64
	// BlockPos is the entry's position within the (decompressed) block.
	BlockPos int64

	// KeyBytes is the whole serialized key with the 0x80 flag cleared:
	// key-group prefix, key, [marker], namespace, [marker], [user key].
	KeyBytes   []byte
	ValueBytes []byte

	// Split parts of KeyBytes (ModeSplit and ModeDecode). For priority
	// queue states KeyPart holds the whole element.
	KeyPart, NamespaceBytes, UserKeyBytes []byte

	// Decoded parts (ModeDecode); treat them as immutable, since entries
	// with identical key bytes share one decoded Key. Unless the read uses
	// ReadOptions.ReuseValues they stay valid after the callback; their rows and strings are carved from the reader's
	// serde.Arena slabs, so a retained value keeps its slab (up to 16 KiB)
	// alive. For PRIORITY_QUEUE entries Value is the
	// *serde.Timer (or element) and Key/Namespace are copied from it.
	Key, Namespace, UserKey, Value serde.Value
	// TTLTimestamp is the last-access time of TTL-wrapped VALUE and MAP
	// entries (nil otherwise); Value then holds the unwrapped value.
	TTLTimestamp *int64

	ttl int64
}

// BlockReader decodes key-group blocks, reusing its buffers between calls.
// It is not safe for concurrent use.
type BlockReader struct {
	br     *bufio.Reader // compressed input of the snappy reader
	snappy *SnappyReader
	// The window: block bytes win[wr:ww] are read but not yet consumed;
	// r.pos is the block position of win[wr]. Entries alias it.
	win    []byte
	wr, ww int
	src    io.Reader
	srcPos int64 // bytes taken from src
	hint   int64 // expected block length (0 = unknown): reads stop there
	wins   WindowSource
	entry  Entry
	decs   [2]binfmt.Decbuf

	lastKeyBytes []byte
	lastKey      serde.Value
	lastKeyOK    bool
	lastHeader   *Header
	// Key bytes last validated (ModeValidate).
	lastValidBytes []byte
	lastValidOK    bool
	// arena batches the allocations of decoded values; rarena is the
	// recycled one of ReuseValues, reset every reuseEvery entries.
	arena, rarena *serde.Arena
	cur           *serde.Arena
	sinceReset    int
	listBuf       serde.List // scratch of LIST values
	// column batches of ReadColumns, by state id
	colBatches []*ColumnBatch
	colHeader  *Header
	// heap layout reads (heap.go)
	heapEnt     heapEntry
	heapSeen    []bool
	heapScratch [2][]byte
	heapSlab    []byte

	// per-call state
	name     string
	kg       int
	off      int64
	pos      int64
	size     int64
	compress bool
}

// ReadKeyGroup decodes (ModeDecode) the block of key group keyGroup that
// starts at file offset off of the stream src (size bytes long), calling fn
// for every entry in file order. name is used in errors.
func ReadKeyGroup(src io.ReaderAt, size int64, name string, h *Header, keyGroup int, off int64, maxParallelism int, fn func(*Entry) error) error {
	var r BlockReader
	return r.Read(src, size, name, h, keyGroup, off, ReadOptions{MaxParallelism: maxParallelism}, fn)
}

// ReadKeyGroupWith is ReadKeyGroup with explicit options.
func ReadKeyGroupWith(src io.ReaderAt, size int64, name string, h *Header, keyGroup int, off int64, o ReadOptions, fn func(*Entry) error) error {
	var r BlockReader
	return r.Read(src, size, name, h, keyGroup, off, o, fn)
}

func (r *BlockReader) errAt(pos int64, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if r.compress {
		return &Error{File: r.name, KeyGroup: r.kg, Offset: r.off, BlockPos: pos, Err: err}
	}
	return &Error{File: r.name, KeyGroup: r.kg, Offset: r.off + pos, BlockPos: pos, Err: err}
}

// errFromDec converts a decoder error (whose offsets are block positions)
// into an *Error.
func (r *BlockReader) errFromDec(ctx string, err error) error {
	var oe *binfmt.OffsetError
	if errors.As(err, &oe) {
		return r.errAt(oe.Offset, fmt.Errorf("%s: %w", ctx, oe.Err))
	}
	return r.errAt(-1, fmt.Errorf("%s: %w", ctx, err))
}

func (r *BlockReader) ioErr(pos int64, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = fmt.Errorf("%w: block ends early", binfmt.ErrTruncated)
	}
	return r.errAt(pos, err)
}

func (r *BlockReader) u16() (uint16, error) {
	if err := r.fill(2); err != nil {
		return 0, r.ioErr(r.pos, err)
	}
	v := binary.BigEndian.Uint16(r.win[r.wr:])
	r.wr += 2
	r.pos += 2
	return v, nil
}

// Window sizing: blocks are read with reads of up to blockWindow bytes
// (fewer where the block is expected to end); the window grows only for an
// entry larger than it, in steps backed by data actually read, and a grown
// window is dropped after the read.
const (
	blockWindow   = 1 << 20
	startWindow   = 64 << 10
	minWindowRead = 4 << 10
	keepWindow    = 4 * blockWindow
)

// fill makes at least n unread bytes available in the window (n is
// bounded by the caller). It returns the source's error (io.EOF and
// io.ErrUnexpectedEOF when the block ends first).
func (r *BlockReader) fill(n int) error {
	for r.ww-r.wr < n {
		if r.ww == len(r.win) && r.wins != nil {
			// Pinned windows: continue in a fresh one.
			nb := r.wins.Get()
			if len(nb) < n {
				// An entry larger than a window: grow, at most doubling
				// the bytes read so far (the unread tail, shorter than n).
				nb = make([]byte, min(n, max(2*(r.ww-r.wr), blockWindow)))
			}
			k := copy(nb, r.win[r.wr:r.ww])
			if r.win != nil {
				r.wins.Retire(r.win)
			}
			r.win, r.wr, r.ww = nb, 0, k
			continue
		}
		if r.ww == len(r.win) {
			// Bytes move: a cached decoded key may alias them.
			r.lastKeyOK = false
			if len(r.win) < blockWindow {
				// A long block: read it through the full window.
				nb := make([]byte, blockWindow)
				r.ww = copy(nb, r.win[r.wr:r.ww])
				r.win, r.wr = nb, 0
				continue
			}
			if r.wr > 0 {
				// Slide the unread bytes to the front; entries handed out
				// before are no longer in use.
				r.ww = copy(r.win, r.win[r.wr:r.ww])
				r.wr = 0
				continue
			}
			// Full of unread data: grow, at most doubling what was read.
			nc := max(2*len(r.win), blockWindow)
			nb := make([]byte, min(nc, max(n, len(r.win)+blockWindow)))
			r.ww = copy(nb, r.win[r.wr:r.ww])
			r.win, r.wr = nb, 0
		}
		want := len(r.win) - r.ww
		if r.hint > 0 {
			// Do not read far past the expected end of the block.
			left := int(min(max(r.hint-r.srcPos, 0), int64(want)))
			want = min(want, max(left, n-(r.ww-r.wr), minWindowRead))
		}
		k, err := r.src.Read(r.win[r.ww : r.ww+want])
		r.ww += k
		r.srcPos += int64(k)
		if r.ww-r.wr >= n {
			return nil
		}
		if err != nil {
			if err == io.EOF && k > 0 {
				continue
			}
			return err
		}
		if k == 0 {
			return io.ErrNoProgress
		}
	}
	return nil
}

// checkLen bounds an entry length read at block position at.
func (r *BlockReader) checkLen(n int, at int64) error {
	if n < 0 || n > maxEntryBytes {
		return r.errAt(at, fmt.Errorf("%w: length %d out of range", binfmt.ErrCorrupt, n))
	}
	if !r.compress && int64(n) > r.size-r.off-at {
		return r.errAt(at, fmt.Errorf("%w: length %d exceeds the %d bytes left in the file", binfmt.ErrTruncated, n, r.size-r.off-at))
	}
	return nil
}

// entryBytes frames the entry at the window start (key length, key, value
// length, value), returns its key and value (aliasing the window) and
// consumes it. Errors carry the block position where the data failed.
func (r *BlockReader) entryBytes() (key, val []byte, err error) {
	start := r.pos
	if err := r.fill(4); err != nil {
		return nil, nil, r.ioErr(start, err)
	}
	kl := int(int32(binary.BigEndian.Uint32(r.win[r.wr:])))
	if err := r.checkLen(kl, start+4); err != nil {
		return nil, nil, err
	}
	if err := r.fill(8 + kl); err != nil {
		if r.ww-r.wr < 4+kl {
			return nil, nil, r.ioErr(start+int64(r.ww-r.wr), err)
		}
		return nil, nil, r.ioErr(start+4+int64(kl), err)
	}
	vl := int(int32(binary.BigEndian.Uint32(r.win[r.wr+4+kl:])))
	if err := r.checkLen(vl, start+8+int64(kl)); err != nil {
		return nil, nil, err
	}
	n := 8 + kl + vl
	if err := r.fill(n); err != nil {
		return nil, nil, r.ioErr(start+int64(r.ww-r.wr), err)
	}
	b := r.win[r.wr : r.wr+n : r.wr+n]
	r.wr += n
	r.pos += int64(n)
	return b[4 : 4+kl : 4+kl], b[8+kl:], nil
}

// reuseEvery is how many entries' values a recycled arena holds before it
// is reset (values of one entry are valid during its callback only; a
// batch of them keeps the decoded-key cache useful).
const reuseEvery = 256

// SetArena makes the decoders build the values of the following entries
// in a (a callback may call it, e.g. after handing off a batch of entries
// whose values live in the previous arena). Later reads with their own
// ReadOptions.Arena replace it.
func (r *BlockReader) SetArena(a *serde.Arena) {
	if a == nil {
		a = serde.NewArena()
	}
	if r.cur != a {
		r.cur = a
		for i := range r.decs {
			r.decs[i].Scratch = a
		}
	}
	// A cached key lives in the previous arena.
	r.lastKeyOK = false
}

// useArena selects the arena the decoders build values in: ext when set,
// else the recycled one (reuse) or the fresh one.
func (r *BlockReader) useArena(reuse bool, ext *serde.Arena) {
	var a *serde.Arena
	if ext != nil {
		r.SetArena(ext)
		return
	}
	if reuse {
		if r.rarena == nil {
			// Values live during their callback, the window's bytes too:
			// strings alias the window.
			r.rarena = serde.NewReusableArena()
			r.rarena.SetViews(true)
		}
		a = r.rarena
	} else {
		if r.arena == nil {
			r.arena = serde.NewArena()
		}
		a = r.arena
	}
	if r.cur != a {
		r.cur = a
		for i := range r.decs {
			r.decs[i].Scratch = a
		}
		// A cached key may live in the other arena.
		r.lastKeyOK = false
	}
	if reuse {
		r.resetArena()
	}
}

// resetArena recycles the reusable arena; the cached decoded key lived in
// it.
func (r *BlockReader) resetArena() {
	r.rarena.Reset()
	r.sinceReset = 0
	r.lastKeyOK = false
}

// dec returns the reader's reusable decoder positioned over b.
func (r *BlockReader) dec(which int, b []byte, base int64) *binfmt.Decbuf {
	d := &r.decs[which]
	d.Reset(b, base)
	return d
}

// decodeExact decodes b as exactly one value of dec.
func (r *BlockReader) decodeExact(dec serde.Decoder, b []byte, base int64) (serde.Value, error) {
	d := r.dec(1, b, base)
	v := dec.Decode(d)
	if d.Err() != nil {
		return nil, d.Err()
	}
	if d.Len() != 0 {
		return nil, &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after the %s value", binfmt.ErrCorrupt, d.Len(), dec.Snapshot().Name())}
	}
	return v, nil
}

// validateExact checks b is exactly one value of dec.
func (r *BlockReader) validateExact(dec serde.Decoder, b []byte, base int64) error {
	d := r.dec(1, b, base)
	serde.Validate(dec, d)
	if d.Err() != nil {
		return d.Err()
	}
	if d.Len() != 0 {
		return &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after the %s value", binfmt.ErrCorrupt, d.Len(), dec.Snapshot().Name())}
	}
	return nil
}

// Read decodes one key-group block; see ReadKeyGroup.
func (r *BlockReader) Read(src io.ReaderAt, size int64, name string, h *Header, keyGroup int, off int64, o ReadOptions, fn func(*Entry) error) error {
	if o.Heap {
		return r.readHeap(src, size, name, h, keyGroup, off, o, fn)
	}
	if err := r.begin(src, size, name, h, keyGroup, off, o); err != nil {
		return err
	}
	defer func() { r.src = nil }()
	prefix := keygroups.PrefixWidth(o.MaxParallelism)
	reuse := o.ReuseValues && o.Mode == ModeDecode && o.Arena == nil
	r.useArena(reuse, o.Arena)
	id, err := r.u16()
	if err != nil {
		return err
	}
	for n := 0; ; n++ {
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
		e := &r.entry
		if o.EntrySlot != nil {
			e = o.EntrySlot()
		}
		*e = Entry{KeyGroup: keyGroup, State: st, BlockPos: entryPos, KeyBytes: key, ValueBytes: val}
		e.Offset = r.off + entryPos
		if r.compress {
			e.Offset = r.off
		}
		if reuse {
			if r.sinceReset == reuseEvery {
				r.resetArena()
			}
			r.sinceReset++
		}
		if o.Mode != ModeRaw {
			if err := r.interpret(h, st, e, prefix, entryPos+4, entryPos+8+int64(kl), o.Mode); err != nil {
				return err
			}
		}
		if err := fn(e); err != nil {
			return err
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
				return nil
			}
			id = next
		}
	}
}

// begin validates the block position and sets up the reader's source and
// window for a block read.
func (r *BlockReader) begin(src io.ReaderAt, size int64, name string, h *Header, keyGroup int, off int64, o ReadOptions) error {
	r.name, r.kg, r.off, r.pos, r.size, r.compress = name, keyGroup, off, 0, size, h.Compressed
	if r.lastHeader != h {
		r.lastKeyOK, r.lastValidOK, r.lastHeader = false, false, h
	}
	if off <= 0 || off >= size {
		return &Error{File: name, KeyGroup: keyGroup, Offset: off, BlockPos: -1, Err: fmt.Errorf("%w: key-group offset %d outside stream of %d bytes", binfmt.ErrCorrupt, off, size)}
	}
	if len(h.States) == 0 {
		return r.errAt(0, fmt.Errorf("%w: block present but header lists no states", binfmt.ErrCorrupt))
	}
	limit := size
	if o.End > 0 {
		if o.End <= off || o.End > size {
			return &Error{File: name, KeyGroup: keyGroup, Offset: off, BlockPos: -1, Err: fmt.Errorf("%w: block end %d outside (%d, %d]", binfmt.ErrCorrupt, o.End, off, size)}
		}
		limit = o.End
	}
	r.size = limit
	sec := io.NewSectionReader(src, off, limit-off)
	r.src, r.srcPos, r.hint = sec, 0, 0
	if o.End > 0 {
		r.hint = o.End - off
	} else if o.ExpectedEnd > off && o.ExpectedEnd <= size {
		r.hint = o.ExpectedEnd - off
	}
	if r.compress {
		if r.br == nil {
			r.br = bufio.NewReaderSize(sec, blockBufferBytes)
		} else {
			r.br.Reset(sec)
		}
		if r.snappy == nil {
			r.snappy = NewSnappyReader(r.br, off)
		} else {
			r.snappy.Reset(r.br, off)
		}
		// The hint is in compressed bytes; the window reads decompressed
		// ones.
		r.src, r.hint = r.snappy, 0
	}
	if !sameSource(r.wins, o.Windows) {
		// Never write into a window of another source (or one that
		// entries of a pinned read still alias), nor retire ours into it.
		r.win, r.wr, r.ww, r.wins = nil, 0, 0, o.Windows
	}
	if r.wins != nil {
		// Continue after the bytes earlier entries alias.
		r.wr = r.ww
	} else if r.win == nil || len(r.win) > keepWindow {
		// Start small (one-off readers of small blocks); fill grows the
		// window to blockWindow for long blocks.
		n := min(int64(startWindow), limit-off)
		if r.hint > 0 {
			n = min(n, r.hint)
		}
		r.win = make([]byte, max(n, 64))
		r.wr, r.ww = 0, 0
	} else {
		r.wr, r.ww = 0, 0
	}
	return nil
}

// CopyTo copies e into dst with its byte slices (KeyBytes, ValueBytes and
// the split parts, which alias KeyBytes) appended to buf, and returns the
// extended buf. Decoded values are shared, not copied. dst stays valid
// while buf's memory is not overwritten; an append that outgrows buf's
// capacity moves only the new bytes.
func (e *Entry) CopyTo(dst *Entry, buf []byte) []byte {
	*dst = *e
	kl, vl := len(e.KeyBytes), len(e.ValueBytes)
	start := len(buf)
	buf = append(buf, e.KeyBytes...)
	buf = append(buf, e.ValueBytes...)
	key := buf[start : start+kl : start+kl]
	dst.KeyBytes = key
	dst.ValueBytes = buf[start+kl : start+kl+vl : start+kl+vl]
	if kl > 0 {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(e.KeyBytes)))
		dst.KeyPart = rebase(e.KeyPart, key, base)
		dst.NamespaceBytes = rebase(e.NamespaceBytes, key, base)
		dst.UserKeyBytes = rebase(e.UserKeyBytes, key, base)
	} else {
		dst.KeyPart, dst.NamespaceBytes, dst.UserKeyBytes = bytes.Clone(e.KeyPart), bytes.Clone(e.NamespaceBytes), bytes.Clone(e.UserKeyBytes)
	}
	if e.TTLTimestamp != nil {
		dst.ttl = *e.TTLTimestamp
		dst.TTLTimestamp = &dst.ttl
	}
	return buf
}

// rebase returns the slice of key at part's position within the original
// key bytes that start at address base (part is a subslice of them; any
// other part is cloned).
func rebase(part, key []byte, base uintptr) []byte {
	if part == nil {
		return nil
	}
	if len(part) == 0 {
		return key[:0:0]
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(part))) - base
	if off > uintptr(len(key)) || uintptr(len(part)) > uintptr(len(key))-off {
		return bytes.Clone(part)
	}
	return key[off : int(off)+len(part) : int(off)+len(part)]
}

// interpret splits the key and decodes the parts of e. keyPos and valPos
// are the block positions of the key and value bytes.
func (r *BlockReader) interpret(h *Header, st *StateMeta, e *Entry, prefix int, keyPos, valPos int64, mode Mode) error {
	decode := mode == ModeDecode
	validate := mode == ModeValidate
	d := r.dec(0, e.KeyBytes, keyPos)
	d.Skip(prefix)
	if st.Type == PriorityQueue {
		e.KeyPart = e.KeyBytes[prefix:]
		if len(e.ValueBytes) != 0 {
			return r.errAt(valPos, fmt.Errorf("%w: priority-queue entry of state %q has a %d-byte value", binfmt.ErrCorrupt, st.Name, len(e.ValueBytes)))
		}
		if validate && st.valDec != nil {
			if err := r.validateExact(st.valDec, e.KeyPart, keyPos+int64(prefix)); err != nil {
				return r.errFromDec(fmt.Sprintf("state %q timer", st.Name), err)
			}
			return nil
		}
		if !decode || st.valDec == nil {
			return nil
		}
		v, err := r.decodeExact(st.valDec, e.KeyPart, keyPos+int64(prefix))
		if err != nil {
			return r.errFromDec(fmt.Sprintf("state %q timer", st.Name), err)
		}
		e.Value = v
		if t, ok := v.(*serde.Timer); ok {
			e.Key, e.Namespace = t.Key, t.Namespace
		}
		return nil
	}
	kd := h.keyDec
	if kd == nil || !kd.Supported() {
		// The key cannot be delimited: report it whole.
		e.KeyPart = e.KeyBytes[prefix:]
		if decode {
			e.Key = &serde.Raw{Serializer: snapClass(h.KeySerializer), Bytes: append([]byte(nil), e.KeyPart...)}
			return r.decodeValue(st, e, valPos)
		}
		if validate {
			return r.validateValue(st, e, valPos)
		}
		return nil
	}
	start := d.Pos
	kd.Skip(d)
	if d.Err() != nil {
		return r.errFromDec(fmt.Sprintf("state %q key", st.Name), d.Err())
	}
	e.KeyPart = e.KeyBytes[start:d.Pos]
	if decode {
		// Consecutive entries often share their key (map entries, several
		// states of one key): reuse the decoded key then.
		if r.lastKeyOK && bytes.Equal(e.KeyPart, r.lastKeyBytes) {
			e.Key = r.lastKey
		} else {
			v, err := r.decodeExact(kd, e.KeyPart, keyPos+int64(start))
			if err != nil {
				return r.errFromDec(fmt.Sprintf("state %q key", st.Name), err)
			}
			e.Key = v
			r.lastKey, r.lastKeyOK = v, true
			r.lastKeyBytes = append(r.lastKeyBytes[:0], e.KeyPart...)
		}
	} else if validate && !(r.lastValidOK && bytes.Equal(e.KeyPart, r.lastValidBytes)) {
		if err := r.validateExact(kd, e.KeyPart, keyPos+int64(start)); err != nil {
			return r.errFromDec(fmt.Sprintf("state %q key", st.Name), err)
		}
		r.lastValidOK = true
		r.lastValidBytes = append(r.lastValidBytes[:0], e.KeyPart...)
	}
	nd := st.nsDec
	ambiguous := nd != nil && kd.Len() < 0 && nd.Len() < 0
	if ambiguous {
		if err := r.skipMarker(d, len(e.KeyPart), st, "key"); err != nil {
			return err
		}
	}
	if nd == nil || !nd.Supported() {
		e.NamespaceBytes = e.KeyBytes[d.Pos:]
		if decode {
			e.Namespace = &serde.Raw{Serializer: snapClass(st.Namespace), Bytes: append([]byte(nil), e.NamespaceBytes...)}
			return r.decodeValue(st, e, valPos)
		}
		if validate {
			return r.validateValue(st, e, valPos)
		}
		return nil
	}
	start = d.Pos
	switch {
	case decode:
		e.Namespace = nd.Decode(d)
	case validate:
		serde.Validate(nd, d)
	default:
		nd.Skip(d)
	}
	if d.Err() != nil {
		return r.errFromDec(fmt.Sprintf("state %q namespace", st.Name), d.Err())
	}
	e.NamespaceBytes = e.KeyBytes[start:d.Pos]
	if ambiguous {
		if err := r.skipMarker(d, len(e.NamespaceBytes), st, "namespace"); err != nil {
			return err
		}
	}
	rest := e.KeyBytes[d.Pos:]
	if st.Kind == "MAP" {
		e.UserKeyBytes = rest
		if decode && st.ukDec != nil {
			if !st.ukDec.Supported() {
				e.UserKey = &serde.Raw{Serializer: snapClass(st.UserKey), Bytes: append([]byte(nil), rest...)}
			} else {
				v, err := r.decodeExact(st.ukDec, rest, d.Offset())
				if err != nil {
					return r.errFromDec(fmt.Sprintf("state %q user key", st.Name), err)
				}
				e.UserKey = v
			}
		}
		if validate && st.ukDec != nil && st.ukDec.Supported() {
			if err := r.validateExact(st.ukDec, rest, d.Offset()); err != nil {
				return r.errFromDec(fmt.Sprintf("state %q user key", st.Name), err)
			}
		}
	} else if len(rest) != 0 {
		return r.errAt(d.Offset(), fmt.Errorf("%w: %d bytes left in the key of state %q after the namespace", binfmt.ErrCorrupt, len(rest), st.Name))
	}
	if validate {
		return r.validateValue(st, e, valPos)
	}
	if !decode {
		return nil
	}
	return r.decodeValue(st, e, valPos)
}

// validateValue is decodeValue without building the value (ModeValidate).
func (r *BlockReader) validateValue(st *StateMeta, e *Entry, valPos int64) error {
	val := e.ValueBytes
	switch st.Kind {
	case "LIST":
		if st.elemDec == nil || !st.elemDec.Supported() {
			return nil
		}
		d := r.dec(1, val, valPos)
		for i := 0; d.Len() > 0; i++ {
			if i > 0 {
				if c := d.U8(); c != listDelimiter {
					return r.errAt(d.Offset()-1, fmt.Errorf("%w: list state %q: byte 0x%02x where the ',' delimiter was expected", binfmt.ErrCorrupt, st.Name, c))
				}
			}
			serde.Validate(st.elemDec, d)
			if d.Err() != nil {
				return r.errFromDec(fmt.Sprintf("list state %q element %d", st.Name, i), d.Err())
			}
		}
		return nil
	case "MAP":
		if len(val) == 0 {
			return r.errAt(valPos, fmt.Errorf("%w: map state %q value has no null flag", binfmt.ErrCorrupt, st.Name))
		}
		if val[0] > 1 {
			return r.errAt(valPos, fmt.Errorf("%w: map state %q null flag 0x%02x", binfmt.ErrCorrupt, st.Name, val[0]))
		}
		if val[0] == 1 || st.uvDec == nil || !st.uvDec.Supported() {
			return nil
		}
		if err := r.validateExact(st.uvDec, val[1:], valPos+1); err != nil {
			return r.errFromDec(fmt.Sprintf("map state %q value", st.Name), err)
		}
		r.validatedTTL(e, st.uvDec, val[1:])
		return nil
	default:
		if st.valDec == nil || !st.valDec.Supported() {
			return nil
		}
		if err := r.validateExact(st.valDec, val, valPos); err != nil {
			return r.errFromDec(fmt.Sprintf("state %q value", st.Name), err)
		}
		r.validatedTTL(e, st.valDec, val)
		return nil
	}
}

// validatedTTL sets e.TTLTimestamp from a validated TTL value (its first 8
// bytes), as unwrapTTL does for decoded ones.
func (r *BlockReader) validatedTTL(e *Entry, dec serde.Decoder, b []byte) {
	if len(b) >= 8 && serde.IsTTL(dec) {
		e.ttl = int64(binary.BigEndian.Uint64(b))
		e.TTLTimestamp = &e.ttl
	}
}

func snapClass(s *serde.Snapshot) string {
	if s == nil {
		return "<none>"
	}
	return s.Class
}

// skipMarker consumes and checks the "variable int bytes" length marker.
func (r *BlockReader) skipMarker(d *binfmt.Decbuf, l int, st *StateMeta, what string) error {
	at := d.Offset()
	v := l
	for i := 0; ; i++ {
		b := d.U8()
		if d.Err() != nil {
			return r.errFromDec(fmt.Sprintf("state %q %s length marker", st.Name, what), d.Err())
		}
		if int(b) != v&0xFF {
			return r.errAt(at, fmt.Errorf("%w: state %q %s length marker byte %d is 0x%02x, want 0x%02x", binfmt.ErrCorrupt, st.Name, what, i, b, v&0xFF))
		}
		v >>= 8
		if v == 0 {
			return nil
		}
	}
}

func (r *BlockReader) decodeValue(st *StateMeta, e *Entry, valPos int64) error {
	val := e.ValueBytes
	switch st.Kind {
	case "LIST":
		if st.elemDec == nil || !st.elemDec.Supported() {
			e.Value = rawOf(st.Value, val)
			return nil
		}
		d := r.dec(1, val, valPos)
		// Collect the elements in scratch space, then keep them in the
		// arena (or, for long lists, in their own allocation).
		out := r.listBuf[:0]
		defer func() { clear(out); r.listBuf = out[:0] }()
		for d.Len() > 0 {
			if len(out) > 0 {
				if c := d.U8(); c != listDelimiter {
					return r.errAt(d.Offset()-1, fmt.Errorf("%w: list state %q: byte 0x%02x where the ',' delimiter was expected", binfmt.ErrCorrupt, st.Name, c))
				}
			}
			v := st.elemDec.Decode(d)
			if d.Err() != nil {
				return r.errFromDec(fmt.Sprintf("list state %q element %d", st.Name, len(out)), d.Err())
			}
			out = append(out, v)
		}
		e.Value = serde.ArenaList(r.cur, append(serde.ArenaValues(r.cur, len(out)), out...))
		return nil
	case "MAP":
		if len(val) == 0 {
			return r.errAt(valPos, fmt.Errorf("%w: map state %q value has no null flag", binfmt.ErrCorrupt, st.Name))
		}
		if val[0] > 1 {
			return r.errAt(valPos, fmt.Errorf("%w: map state %q null flag 0x%02x", binfmt.ErrCorrupt, st.Name, val[0]))
		}
		if val[0] == 1 {
			e.Value = nil // null user value; trailing bytes are ignored like Flink does
			return nil
		}
		if st.uvDec == nil || !st.uvDec.Supported() {
			e.Value = rawOf(st.UserValue, val[1:])
			return nil
		}
		v, err := r.decodeExact(st.uvDec, val[1:], valPos+1)
		if err != nil {
			return r.errFromDec(fmt.Sprintf("map state %q value", st.Name), err)
		}
		e.Value = r.unwrapTTL(e, v)
		return nil
	default:
		if st.valDec == nil || !st.valDec.Supported() {
			e.Value = rawOf(st.Value, val)
			return nil
		}
		v, err := r.decodeExact(st.valDec, val, valPos)
		if err != nil {
			return r.errFromDec(fmt.Sprintf("state %q value", st.Name), err)
		}
		e.Value = r.unwrapTTL(e, v)
		return nil
	}
}

// unwrapTTL keeps TTL values whole in Value (their JSON form carries the
// timestamp) and exposes the last-access time.
func (r *BlockReader) unwrapTTL(e *Entry, v serde.Value) serde.Value {
	if t, ok := v.(*serde.TTLValue); ok {
		e.ttl = t.LastAccess
		e.TTLTimestamp = &e.ttl
	}
	return v
}

func rawOf(s *serde.Snapshot, b []byte) *serde.Raw {
	return &serde.Raw{Serializer: snapClass(s), Bytes: bytes.Clone(b)}
}

// MarshalJSON renders the entry in the shape of the project's reference
// decodings (one JSON object per entry):
//
//	{"kg": 93, "state": "accState", "type": "VALUE", "key": ..., "ns": ..., "value": ...}
//	{"kg": 93, "state": "left-records", "type": "MAP", "key": ..., "ns": ..., "userKey": ..., "value": ...}
//	{"kg": 11, "state": "_timer_state/event_window-timers", "timer": ["Timer", {...}]}
//
// Entries read without decoding (ModeRaw/ModeSplit) carry "keyBytes" and
// "valueBytes" (base64) instead of the decoded parts.
func (e *Entry) MarshalJSON() ([]byte, error) {
	rec := map[string]any{"kg": e.KeyGroup}
	if e.State != nil {
		rec["state"] = e.State.Name
	}
	decoded := e.Key != nil || e.Value != nil || e.Namespace != nil
	switch {
	case !decoded:
		rec["keyBytes"] = e.KeyBytes
		rec["valueBytes"] = e.ValueBytes
		if e.State != nil && e.State.Type != PriorityQueue {
			rec["type"] = e.State.Kind
		}
	case e.State != nil && e.State.Type == PriorityQueue:
		rec["timer"] = e.Value
	default:
		if e.State != nil {
			rec["type"] = e.State.Kind
			if e.State.Kind == "MAP" {
				rec["userKey"] = e.UserKey
			}
		}
		rec["key"] = e.Key
		rec["ns"] = e.Namespace
		rec["value"] = e.Value
	}
	return json.Marshal(rec)
}
