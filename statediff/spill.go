package statediff

// Sorted runs: the entries of one side of a comparison pass, in (state,
// identity) order, held in memory up to a budget and spilled to sorted run
// files beyond it, then read back through a k-way merge.
//
// A run file is a sequence of records, each nine varints
//
//	uvarint state index (into the operator's plan, see opPlan)
//	uvarint lengths of the identity, value, TTL and JSON bytes
//	uvarint file index (into the side's file table), uvarint key group,
//	zig-zag varint offset, zig-zag varint block position
//
// followed by those bytes back to back:
//
//	identity  composite key bytes without the key-group prefix, or the
//	          canonical encoding for canonical states (see compact.go)
//	value     the value bytes as written, or the canonical encoding
//	          without TTL wrappers for canonical states
//	TTL       timestamps, 8 bytes each (canonical states only)
//	JSON      the entry's rendering (canonical states only)
//
// in ascending (state, identity) order. Runs live in one scratch directory
// per Diff (s3.ScratchPrefix + "diff-*", under Options.TempDir), removed
// when Diff returns, whatever the outcome.

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// heldOverhead approximates the memory of one held entry beyond its bytes
// (its held and heldMeta records, with the slack of growing slices).
const heldOverhead = 112

// mergeFanIn bounds the runs merged at once (open files, read buffers);
// more runs are first merged into longer ones.
const mergeFanIn = 64

// maxRecField bounds one field read back from a run file.
const maxRecField = 1 << 30

// afterSpill, when set, is called after every spilled run with the runs so
// far (tests cancel a diff midway with it).
var afterSpill func(runs int)

// rec is one entry held during a pass.
type rec struct {
	id, val, ttl []byte
	js           Entry
	state        int32 // index into the operator's plan
	file         int32 // index into the side's file table
	kg           int32
	offset, bpos int64
}

func recLess(a, b *rec) int {
	if a.state != b.state {
		if a.state < b.state {
			return -1
		}
		return 1
	}
	return bytes.Compare(a.id, b.id)
}

// scratch is the lazily created spill directory of one Diff.
type scratch struct {
	parent string // "" = os.TempDir()
	dir    string
	n      int
	// Bytes and Runs count what was spilled.
	Bytes int64
	Runs  int
}

func (s *scratch) newFile() (*os.File, error) {
	if s.dir == "" {
		d, err := os.MkdirTemp(s.parent, scratchPattern)
		if err != nil {
			return nil, fmt.Errorf("statediff: spill directory: %w", err)
		}
		s.dir = d
	}
	s.n++
	return os.Create(filepath.Join(s.dir, fmt.Sprintf("run-%06d", s.n)))
}

// remove deletes the spill directory and everything in it.
func (s *scratch) remove() error {
	if s.dir == "" {
		return nil
	}
	err := os.RemoveAll(s.dir)
	s.dir = ""
	return err
}

// sorter collects one side's entries of a pass. Held entries take no
// pointers (the garbage collector does not scan them): a held record per
// entry, sorted, with the first 8 bytes of the identity inline, and the
// entry's bytes (identity, value, TTL, JSON, back to back) in byte chunks.
type sorter struct {
	sc       *scratch
	budget   int64
	held     []held
	meta     []heldMeta
	chunks   [][]byte
	memBytes int64
	// inOrder: the entries were added in (state, identity) order (as a
	// RocksDB savepoint writes one key group), no sort needed.
	inOrder bool
	runs    []string
	side    *side
}

// held is the sort record of one held entry.
type held struct {
	pfx   uint64 // the identity's first 8 bytes, big-endian, zero-padded
	state int32
	chunk uint32
	off   uint32 // identity at chunks[chunk][off:off+idLen], then the rest
	idLen uint32
	meta  uint32 // index into sorter.meta
}

// heldMeta is the rest of a held entry.
type heldMeta struct {
	valLen, ttlLen, jsLen uint32
	file, kg              int32
	offset, bpos          int64
}

// chunkBytes is the largest byte chunk (a quarter of the budget when
// smaller; larger entries get their own).
const chunkBytes = 1 << 20

func newSorter(sc *scratch, budget int64, sd *side) *sorter {
	return &sorter{sc: sc, budget: max(budget, 1), side: sd, inOrder: true}
}

// reserve makes room for n held entries (as far as the budget takes them).
func (s *sorter) reserve(n int64) {
	n = min(n, s.budget/heldOverhead+1)
	if n > 0 {
		s.held = make([]held, 0, n)
		s.meta = make([]heldMeta, 0, n)
	}
}

// prefix64 is the first 8 bytes of b as a big-endian number, zero-padded:
// ordering by it and then by the whole bytes is ordering by the bytes.
func prefix64(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b)
	}
	var x [8]byte
	copy(x[:], b)
	return binary.BigEndian.Uint64(x[:])
}

func (s *sorter) id(h *held) []byte {
	return s.chunks[h.chunk][h.off : h.off+h.idLen]
}

func (s *sorter) cmp(a, b *held) int {
	if a.state != b.state {
		if a.state < b.state {
			return -1
		}
		return 1
	}
	if a.pfx != b.pfx {
		if a.pfx < b.pfx {
			return -1
		}
		return 1
	}
	return bytes.Compare(s.id(a), s.id(b))
}

// add holds a copy of r.
func (s *sorter) add(r *rec) error {
	n := len(r.id) + len(r.val) + len(r.ttl) + len(r.js)
	last := len(s.chunks) - 1
	if last < 0 || cap(s.chunks[last])-len(s.chunks[last]) < n {
		s.chunks = append(s.chunks, make([]byte, 0, max(min(chunkBytes, s.budget/4), 4<<10, int64(n))))
		last++
	}
	c := s.chunks[last]
	h := held{pfx: prefix64(r.id), state: r.state, chunk: uint32(last), off: uint32(len(c)), idLen: uint32(len(r.id)), meta: uint32(len(s.meta))}
	c = append(c, r.id...)
	c = append(c, r.val...)
	c = append(c, r.ttl...)
	s.chunks[last] = append(c, r.js...)
	s.meta = append(s.meta, heldMeta{valLen: uint32(len(r.val)), ttlLen: uint32(len(r.ttl)), jsLen: uint32(len(r.js)),
		file: r.file, kg: r.kg, offset: r.offset, bpos: r.bpos})
	if s.inOrder && len(s.held) > 0 && s.cmp(&s.held[len(s.held)-1], &h) > 0 {
		s.inOrder = false
	}
	s.held = append(s.held, h)
	s.memBytes += heldOverhead + int64(n)
	if s.memBytes > s.budget {
		return s.spill()
	}
	return nil
}

// view points r at held entry h's bytes.
func (s *sorter) view(h *held, r *rec) {
	m := &s.meta[h.meta]
	c := s.chunks[h.chunk]
	o := h.off
	cut := func(n uint32) []byte {
		b := c[o : o+n : o+n]
		o += n
		if n == 0 {
			return nil
		}
		return b
	}
	r.id, r.val, r.ttl, r.js = cut(h.idLen), cut(m.valLen), cut(m.ttlLen), cut(m.jsLen)
	r.state, r.file, r.kg, r.offset, r.bpos = h.state, m.file, m.kg, m.offset, m.bpos
}

// maxNaturalRuns bounds the ascending runs sort merges instead of
// sorting.
const maxNaturalRuns = 1024

// sort orders the held entries. Entries usually come in a few ascending
// runs (a RocksDB savepoint writes each state of a key group in key
// order): when they came in order nothing is done, when in at most
// maxNaturalRuns runs of 16 entries on average or more these are merged
// (a k-way merge of ascending runs: n log k comparisons, where a sort of
// nearly ordered data may move long stretches), else they are sorted.
func (s *sorter) sort() {
	if s.inOrder || len(s.held) < 2 {
		return
	}
	var starts []int
	starts = append(starts, 0)
	for i := 1; i < len(s.held); i++ {
		if s.cmp(&s.held[i-1], &s.held[i]) > 0 {
			starts = append(starts, i)
			if len(starts) > maxNaturalRuns || len(starts) > len(s.held)/16 {
				slices.SortFunc(s.held, func(a, b held) int { return s.cmp(&a, &b) })
				return
			}
		}
	}
	s.held = s.mergeRuns(starts)
}

// mergeRuns merges the ascending runs of s.held that start at starts.
func (s *sorter) mergeRuns(starts []int) []held {
	type run struct{ i, end int }
	h := make([]run, len(starts))
	for k, st := range starts {
		end := len(s.held)
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		h[k] = run{st, end}
	}
	less := func(a, b run) bool { return s.cmp(&s.held[a.i], &s.held[b.i]) < 0 }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			if r := l + 1; r < len(h) && less(h[r], h[l]) {
				l = r
			}
			if !less(h[l], h[i]) {
				return
			}
			h[i], h[l] = h[l], h[i]
			i = l
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	out := make([]held, 0, len(s.held))
	for len(h) > 0 {
		out = append(out, s.held[h[0].i])
		h[0].i++
		if h[0].i == h[0].end {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		if len(h) > 0 {
			down(0)
		}
	}
	return out
}

// spill writes the held entries as one sorted run.
func (s *sorter) spill() error {
	if len(s.held) == 0 {
		return nil
	}
	s.sort()
	f, err := s.sc.newFile()
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	var buf []byte
	var r rec
	for i := range s.held {
		s.view(&s.held[i], &r)
		buf = appendRec(buf[:0], &r)
		if _, err := w.Write(buf); err != nil {
			f.Close()
			return fmt.Errorf("statediff: spill: %w", err)
		}
		s.sc.Bytes += int64(len(buf))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("statediff: spill: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("statediff: spill: %w", err)
	}
	s.runs = append(s.runs, f.Name())
	s.sc.Runs++
	if afterSpill != nil {
		afterSpill(s.sc.Runs)
	}
	s.held, s.meta, s.chunks = s.held[:0], s.meta[:0], nil
	s.memBytes, s.inOrder = 0, true
	return nil
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendRec(dst []byte, r *rec) []byte {
	dst = binary.AppendUvarint(dst, uint64(r.state))
	dst = binary.AppendUvarint(dst, uint64(len(r.id)))
	dst = binary.AppendUvarint(dst, uint64(len(r.val)))
	dst = binary.AppendUvarint(dst, uint64(len(r.ttl)))
	dst = binary.AppendUvarint(dst, uint64(len(r.js)))
	dst = binary.AppendUvarint(dst, uint64(r.file))
	dst = binary.AppendUvarint(dst, uint64(r.kg))
	dst = binary.AppendVarint(dst, r.offset)
	dst = binary.AppendVarint(dst, r.bpos)
	dst = append(dst, r.id...)
	dst = append(dst, r.val...)
	dst = append(dst, r.ttl...)
	return append(dst, r.js...)
}

// recHeaderFields is the number of varints that start a record.
const recHeaderFields = 9

// recIter yields entries in (state, identity) order; next returns nil at
// the end. A record returned stays valid until the second next call after
// it (run readers recycle their records).
type recIter interface {
	next() (*rec, error)
	close()
}

// sorted returns the side's entries in order: from memory when nothing was
// spilled, else through a merge of the runs (the held rest spilled too).
func (s *sorter) sorted() (recIter, error) {
	if len(s.runs) == 0 {
		s.sort()
		it := &memIter{s: s}
		return it, nil
	}
	if err := s.spill(); err != nil {
		return nil, err
	}
	// Merge groups of runs into longer runs until one merge can take
	// them all.
	for len(s.runs) > mergeFanIn {
		group := s.runs[:mergeFanIn]
		m, err := s.openMerge(group)
		if err != nil {
			return nil, err
		}
		name, err := s.writeRun(m)
		m.close()
		if err != nil {
			return nil, err
		}
		for _, g := range group {
			os.Remove(g)
		}
		s.runs = append(s.runs[mergeFanIn:], name)
	}
	return s.openMerge(s.runs)
}

func (s *sorter) writeRun(it recIter) (string, error) {
	f, err := s.sc.newFile()
	if err != nil {
		return "", err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	var buf []byte
	for {
		r, err := it.next()
		if err != nil {
			f.Close()
			return "", err
		}
		if r == nil {
			break
		}
		buf = appendRec(buf[:0], r)
		if _, err := w.Write(buf); err != nil {
			f.Close()
			return "", fmt.Errorf("statediff: spill: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", fmt.Errorf("statediff: spill: %w", err)
	}
	return f.Name(), f.Close()
}

// bufSize is the read buffer of each merged run: the budget spread over
// the fan-in, between 4 KiB and 64 KiB.
func (s *sorter) bufSize() int {
	return int(min(max(s.budget/mergeFanIn, 4<<10), 64<<10))
}

// memIter walks the held entries in order, through three recycled
// records.
type memIter struct {
	s    *sorter
	i    int
	ring [3]rec
}

func (m *memIter) next() (*rec, error) {
	if m.i >= len(m.s.held) {
		return nil, nil
	}
	r := &m.ring[m.i%len(m.ring)]
	m.s.view(&m.s.held[m.i], r)
	m.i++
	return r, nil
}

func (m *memIter) close() {}

// runReader reads one run file. It recycles three records (and their
// bytes): the current one and the two returned before it.
type runReader struct {
	f    io.Closer
	r    *bufio.Reader
	cur  *rec
	name string
	size int64 // bytes in the file: bounds every length read
	ring [3]rec
	bufs [3][]byte
	next int
}

func (rr *runReader) bad(what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("statediff: spill file %s: %s: %w", rr.name, what, err)
}

// read loads the next record into rr.cur (nil at the end): its varints
// parsed from the read buffer, its bytes read in one piece.
func (rr *runReader) read() error {
	rr.cur = nil
	hdr, err := rr.r.Peek(recHeaderFields * binary.MaxVarintLen64)
	if len(hdr) == 0 {
		if err == io.EOF {
			return nil
		}
		return rr.bad("record", err)
	}
	var v [recHeaderFields]uint64
	p := 0
	for i := range v {
		x, n := binary.Uvarint(hdr[p:])
		if n == 0 {
			return rr.bad("record header", io.ErrUnexpectedEOF)
		}
		if n < 0 {
			return rr.bad("record header", errors.New("varint overflows 64 bits"))
		}
		v[i], p = x, p+n
	}
	rr.r.Discard(p)
	state, file, kg := v[0], v[5], v[6]
	if state > 1<<31-1 || file > 1<<31-1 || kg > 1<<20 {
		return rr.bad("record header", fmt.Errorf("state %d, file index %d or key group %d out of range", state, file, kg))
	}
	var total uint64
	for _, n := range v[1:5] {
		if n > maxRecField || int64(n) > rr.size {
			return rr.bad("record header", fmt.Errorf("length %d", n))
		}
		total += n
	}
	if int64(total) > rr.size {
		return rr.bad("record header", fmt.Errorf("record of %d bytes in a file of %d", total, rr.size))
	}
	slot := rr.next
	rr.next = (rr.next + 1) % len(rr.ring)
	buf := slices.Grow(rr.bufs[slot][:0], int(total))[:total]
	rr.bufs[slot] = buf
	if _, err := io.ReadFull(rr.r, buf); err != nil {
		return rr.bad("record", err)
	}
	r := &rr.ring[slot]
	cut := func(n uint64) []byte {
		if n == 0 {
			return nil
		}
		b := buf[:n:n]
		buf = buf[n:]
		return b
	}
	r.id, r.val, r.ttl, r.js = cut(v[1]), cut(v[2]), cut(v[3]), cut(v[4])
	r.state, r.file, r.kg = int32(state), int32(file), int32(kg)
	r.offset, r.bpos = unzigzag(v[7]), unzigzag(v[8])
	rr.cur = r
	return nil
}

// unzigzag undoes the zig-zag encoding of binary.AppendVarint.
func unzigzag(u uint64) int64 {
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

// mergeIter is a k-way merge of run files.
type mergeIter struct {
	h   runHeap
	all []*runReader
}

type runHeap []*runReader

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return recLess(h[i].cur, h[j].cur) < 0 }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(*runReader)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (s *sorter) openMerge(names []string) (*mergeIter, error) {
	m := &mergeIter{}
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("statediff: spill: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			m.close()
			return nil, fmt.Errorf("statediff: spill: %w", err)
		}
		rr := &runReader{f: f, r: bufio.NewReaderSize(f, s.bufSize()), name: filepath.Base(n), size: fi.Size()}
		m.all = append(m.all, rr)
		if err := rr.read(); err != nil {
			m.close()
			return nil, err
		}
		if rr.cur != nil {
			m.h = append(m.h, rr)
		}
	}
	heap.Init(&m.h)
	return m, nil
}

func (m *mergeIter) next() (*rec, error) {
	if len(m.h) == 0 {
		return nil, nil
	}
	top := m.h[0]
	r := top.cur
	if err := top.read(); err != nil {
		return nil, err
	}
	if top.cur == nil {
		heap.Pop(&m.h)
	} else {
		heap.Fix(&m.h, 0)
	}
	return r, nil
}

func (m *mergeIter) close() {
	for _, rr := range m.all {
		rr.f.Close()
	}
	m.all, m.h = nil, nil
}
