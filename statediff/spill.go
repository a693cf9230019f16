package statediff

// Sorted runs: the entries of one side of a comparison pass, in (state,
// identity) order, held in memory up to a budget and spilled to sorted run
// files beyond it, then read back through a k-way merge.
//
// A run file is a sequence of records, each
//
//	uvarint state index (into the operator's plan, see opPlan)
//	uvarint len + identity (composite key bytes without the key-group
//	              prefix, or the canonical encoding for canonical states;
//	              see compact.go)
//	uvarint len + value (the value bytes as written, or the canonical
//	              encoding without TTL wrappers for canonical states)
//	uvarint len + TTL timestamps (8 bytes each; canonical states only)
//	uvarint len + the entry's JSON rendering (canonical states only)
//	uvarint file index (into the side's file table), uvarint key group,
//	zig-zag varint offset, zig-zag varint block position
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

// recOverhead approximates the memory of one held entry beyond its bytes
// (the struct, its slice headers, the pointer to it).
const recOverhead = 128

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

func (r *rec) size() int64 {
	return recOverhead + int64(len(r.id)+len(r.val)+len(r.ttl)+len(r.js))
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

// sorter collects one side's entries of a pass. Held records and their
// bytes are carved from slabs (recSlab records, byteSlab bytes), dropped
// together when the records are spilled.
type sorter struct {
	sc       *scratch
	budget   int64
	mem      []*rec
	memBytes int64
	runs     []string
	side     *side
	recs     []rec
	slab     []byte
}

const (
	recSlab  = 1024
	byteSlab = 256 << 10
)

func newSorter(sc *scratch, budget int64, sd *side) *sorter {
	return &sorter{sc: sc, budget: max(budget, 1), side: sd}
}

// hold copies b into the byte slab.
func (s *sorter) hold(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if len(b) > byteSlab/4 {
		return bytes.Clone(b)
	}
	if cap(s.slab)-len(s.slab) < len(b) {
		s.slab = make([]byte, 0, byteSlab)
	}
	n := len(s.slab)
	s.slab = append(s.slab, b...)
	return s.slab[n:len(s.slab):len(s.slab)]
}

// add holds a copy of r (its byte slices copied too).
func (s *sorter) add(r *rec) error {
	if len(s.recs) == cap(s.recs) {
		s.recs = make([]rec, 0, recSlab)
	}
	s.recs = append(s.recs, *r)
	h := &s.recs[len(s.recs)-1]
	h.id, h.val, h.ttl = s.hold(r.id), s.hold(r.val), s.hold(r.ttl)
	s.mem = append(s.mem, h)
	s.memBytes += h.size()
	if s.memBytes > s.budget {
		return s.spill()
	}
	return nil
}

// spill writes the held entries as one sorted run.
func (s *sorter) spill() error {
	if len(s.mem) == 0 {
		return nil
	}
	slices.SortFunc(s.mem, recLess)
	f, err := s.sc.newFile()
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	var buf []byte
	for _, r := range s.mem {
		buf = appendRec(buf[:0], r)
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
	clear(s.mem)
	s.mem = s.mem[:0]
	s.memBytes = 0
	s.recs, s.slab = nil, nil
	return nil
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendRec(dst []byte, r *rec) []byte {
	dst = binary.AppendUvarint(dst, uint64(r.state))
	dst = appendBytes(dst, r.id)
	dst = appendBytes(dst, r.val)
	dst = appendBytes(dst, r.ttl)
	dst = appendBytes(dst, r.js)
	dst = binary.AppendUvarint(dst, uint64(r.file))
	dst = binary.AppendUvarint(dst, uint64(r.kg))
	dst = binary.AppendVarint(dst, r.offset)
	return binary.AppendVarint(dst, r.bpos)
}

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
		slices.SortFunc(s.mem, recLess)
		it := &memIter{recs: s.mem}
		s.mem = nil
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

type memIter struct {
	recs []*rec
	i    int
}

func (m *memIter) next() (*rec, error) {
	if m.i >= len(m.recs) {
		return nil, nil
	}
	r := m.recs[m.i]
	m.recs[m.i] = nil
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
	next int
}

// field reads one length-prefixed field into dst's memory.
func (rr *runReader) field(dst []byte, what string) ([]byte, error) {
	n, err := binary.ReadUvarint(rr.r)
	if err != nil {
		return nil, rr.bad(what, err)
	}
	if n > maxRecField || int64(n) > rr.size {
		return nil, rr.bad(what, fmt.Errorf("length %d", n))
	}
	if n == 0 {
		return dst[:0], nil
	}
	b := slices.Grow(dst[:0], int(n))[:n]
	if _, err := io.ReadFull(rr.r, b); err != nil {
		return nil, rr.bad(what, err)
	}
	return b, nil
}

func (rr *runReader) bad(what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("statediff: spill file %s: %s: %w", rr.name, what, err)
}

// read loads the next record into rr.cur (nil at the end).
func (rr *runReader) read() error {
	rr.cur = nil
	if _, err := rr.r.Peek(1); err == io.EOF {
		return nil
	}
	state, err := binary.ReadUvarint(rr.r)
	if err != nil {
		return rr.bad("state", err)
	}
	if state > 1<<31-1 {
		return rr.bad("state", fmt.Errorf("state index %d out of range", state))
	}
	r := &rr.ring[rr.next]
	rr.next = (rr.next + 1) % len(rr.ring)
	r.state = int32(state)
	if r.id, err = rr.field(r.id, "identity"); err != nil {
		return err
	}
	if r.val, err = rr.field(r.val, "value"); err != nil {
		return err
	}
	if r.ttl, err = rr.field(r.ttl, "ttl"); err != nil {
		return err
	}
	if r.js, err = rr.field(r.js, "json"); err != nil {
		return err
	}
	file, err := binary.ReadUvarint(rr.r)
	if err != nil {
		return rr.bad("file index", err)
	}
	kg, err := binary.ReadUvarint(rr.r)
	if err != nil {
		return rr.bad("key group", err)
	}
	if kg > 1<<20 || file > 1<<31 {
		return rr.bad("key group", fmt.Errorf("key group %d or file index %d out of range", kg, file))
	}
	if r.offset, err = binary.ReadVarint(rr.r); err != nil {
		return rr.bad("offset", err)
	}
	if r.bpos, err = binary.ReadVarint(rr.r); err != nil {
		return rr.bad("block position", err)
	}
	r.file, r.kg = int32(file), int32(kg)
	rr.cur = r
	return nil
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
