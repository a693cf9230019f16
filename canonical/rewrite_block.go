package canonical

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// maxBufferedBlock: source blocks up to this size are read once into
// memory, then checked and copied from there; larger ones are read from
// the source for each pass.
var maxBufferedBlock int64 = 16 << 20

// reencodeBlocks makes copyBlock write every block's entries again (for
// benchmarks comparing the two paths).
var reencodeBlocks = false

// indexOffsets fills rw.offsets from every key-groups handle with a file
// delegate. Several handles may share one file (view handles of rescaled
// savepoints), so the extent of a block can end at another handle's key
// group.
func (rw *rewriter) indexOffsets() {
	rw.offsets = map[string][]int64{}
	add := func(kh savepoint.KeyedHandle) {
		h, ok := kh.(*savepoint.KeyGroupsHandle)
		if !ok || h.Delegate == nil || (h.Delegate.Tag != savepoint.TagRelativeFile && h.Delegate.Tag != savepoint.TagFile) {
			return
		}
		k := fileKey(h.Delegate)
		for _, o := range h.Offsets {
			if o > 0 {
				rw.offsets[k] = append(rw.offsets[k], o)
			}
		}
	}
	for _, op := range rw.src.Meta.Operators {
		for _, st := range op.Subtasks {
			add(st.ManagedKeyed)
			add(st.RawKeyed)
		}
	}
	for p, offs := range rw.offsets {
		slices.Sort(offs)
		rw.offsets[p] = slices.Compact(offs)
	}
}

// fileKey tells relative and absolute file handles apart.
func fileKey(d *savepoint.StreamHandle) string {
	return fmt.Sprintf("%d:%s", d.Tag, d.Path)
}

// blockEnds returns a function giving the end of the block at off: the
// next larger offset into the same stream, or size.
func (rw *rewriter) blockEnds(h *savepoint.KeyGroupsHandle, size int64) func(off int64) int64 {
	var offs []int64
	if d := h.Delegate; d != nil && (d.Tag == savepoint.TagRelativeFile || d.Tag == savepoint.TagFile) {
		offs = rw.offsets[fileKey(d)]
	} else {
		for _, o := range h.Offsets {
			if o > 0 {
				offs = append(offs, o)
			}
		}
		slices.Sort(offs)
		offs = slices.Compact(offs)
	}
	return func(off int64) int64 {
		i, found := slices.BinarySearch(offs, off)
		if found {
			i++
		}
		if i < len(offs) && offs[i] < size {
			return offs[i]
		}
		return size
	}
}

// copyBlock copies the block of key group kg at off into kw. The block is
// decoded first (framing, key-group prefixes, Snappy checksums); when its
// decoded length accounts for every byte up to its end (for compressed
// blocks: every frame up to its end decodes and the entries use all of the
// decompressed bytes) the source bytes are appended unchanged, else its
// entries are written again.
func (rw *rewriter) copyBlock(obj *savepoint.Object, name string, hdr *keyed.Header, kg int, off int64, ends func(int64) int64, maxP int, kw *flinkwrite.KeyedWriter) error {
	size := obj.Size()
	end := ends(off)
	if off <= 0 || off >= size {
		return &keyed.Error{File: name, KeyGroup: kg, Offset: off, BlockPos: -1, Err: fmt.Errorf("%w: key-group offset %d outside stream of %d bytes", errclass.ErrCorrupt, off, size)}
	}
	var src io.ReaderAt = obj
	buffered := false
	if n := end - off; n <= maxBufferedBlock {
		rw.block = slices.Grow(rw.block[:0], int(n))[:n]
		if m, err := obj.ReadAt(rw.block, off); err != nil && (err != io.EOF || m != len(rw.block)) {
			return &keyed.Error{File: name, KeyGroup: kg, Offset: off, BlockPos: -1, Err: blockCause(fmt.Errorf("read block [%d, %d): %w", off, end, err))}
		}
		// A reader over the block that answers at the stream's offsets.
		src, buffered = offsetReader{bytes.NewReader(rw.block), off}, true
	}
	// The reader is given the block's end as the stream size, so no read
	// goes past it.
	ropts := keyed.ReadOptions{MaxParallelism: maxP, Mode: keyed.ModeRaw}
	var used int64 = 2 + 2 // first state id and end-of-key-group mark
	var prev *keyed.StateMeta
	err := rw.br.Read(src, end, name, hdr, kg, off, ropts, func(e *keyed.Entry) error {
		used += 8 + int64(len(e.KeyBytes)) + int64(len(e.ValueBytes))
		if prev != nil && e.State != prev {
			used += 2 // flagged entry followed by the next state's id
		}
		prev = e.State
		return nil
	})
	if err != nil {
		return err
	}
	extent := end - off
	if hdr.Compressed {
		if extent, err = rw.decompressedSize(src, off, end); err != nil {
			return &keyed.Error{File: name, KeyGroup: kg, Offset: off, BlockPos: -1, Err: blockCause(err)}
		}
	}
	if used == extent && !reencodeBlocks {
		if buffered {
			return kw.AddRawBlock(kg, rw.block)
		}
		return kw.AddRawBlockFrom(kg, io.NewSectionReader(obj, off, end-off), end-off)
	}
	return rw.br.Read(src, end, name, hdr, kg, off, ropts, func(e *keyed.Entry) error {
		return kw.Add(kg, e.State.ID, e.KeyBytes, e.ValueBytes)
	})
}

// blockCause classes the cause of a block failure: a classed cause (a
// Snappy frame's ErrSnappy) stays as it is, a stream that ends inside the
// block (io.EOF, io.ErrUnexpectedEOF: the object is shorter than its
// key-group offsets say) is errclass.ErrCorrupt, and any other failed read
// (network, storage) keeps no class, as the module's read errors do.
func blockCause(err error) error {
	if errors.Is(err, errclass.ErrCorrupt) || errors.Is(err, errclass.ErrUnsupported) {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errclass.Mark(errclass.ErrCorrupt, err)
	}
	return err
}

// decompressedSize decodes every Snappy frame in [off, end) (checking each
// chunk's checksum) and returns the number of decompressed bytes.
func (rw *rewriter) decompressedSize(src io.ReaderAt, off, end int64) (int64, error) {
	r := io.NewSectionReader(src, off, end-off)
	if rw.snappy == nil {
		rw.snappy = keyed.NewSnappyReader(r, off)
	} else {
		rw.snappy.Reset(r, off)
	}
	return io.Copy(io.Discard, rw.snappy)
}

// offsetReader serves ReadAt at offsets shifted by base.
type offsetReader struct {
	r    *bytes.Reader
	base int64
}

func (o offsetReader) ReadAt(p []byte, off int64) (int, error) {
	if off < o.base {
		return 0, fmt.Errorf("read at %d before block start %d", off, o.base)
	}
	return o.r.ReadAt(p, off-o.base)
}
