package canonical

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// RewriteOptions tunes Rewrite.
type RewriteOptions struct {
	// Dir is the destination savepoint directory (key prefix) in dst.
	Dir string
	// TempDir holds staged streams (default os.TempDir()).
	TempDir string
	// ReadAhead is the range-read buffer per source stream (0 = default).
	ReadAhead int
}

// Rewrite copies a canonical savepoint into dst/o.Dir through the reader
// and the writer: every canonical keyed stream is written again by
// flinkwrite.KeyedWriter with the header kept as read. Each key-group
// block is decoded entry by entry (Snappy checksums included) and, when it
// decodes to exactly its extent in the source (up to the next key group's
// offset or the stream end), its original bytes are copied verbatim
// (AddRawBlock), compressed frames included; otherwise its entries are
// written again (key and value bytes as framed). Operator-state streams are copied byte for byte; inline streams
// stay inline; files keep their names and are referenced relatively
// (absolute file handles become relative handles to the copy). The
// metadata is re-encoded from the parsed model (same version, trailer
// kept) and written last with PutIfAbsent. For savepoints written by
// Flink the result is byte-identical, compressed or not. Native handles
// fail, and so does any block that does not decode; metadata is then not
// written.
func Rewrite(ctx context.Context, src *savepoint.Savepoint, dst s3.Storage, o RewriteOptions) (*savepoint.Metadata, error) {
	rw := &rewriter{src: src, dst: dst, o: o, copied: map[string]*savepoint.StreamHandle{}, used: map[string]bool{}}
	rw.indexOffsets()
	md := *src.Meta
	md.Operators = nil
	for _, op := range src.Meta.Operators {
		nop := *op
		nop.Subtasks = nil
		for _, st := range op.Subtasks {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			nst := *st
			var err error
			where := fmt.Sprintf("operator %s subtask %d", op.ID, st.Index)
			if nst.ManagedOperator, err = rw.operatorHandle(ctx, st.ManagedOperator); err != nil {
				return nil, fmt.Errorf("canonical: rewrite %s: %w", where, err)
			}
			if nst.RawOperator, err = rw.operatorHandle(ctx, st.RawOperator); err != nil {
				return nil, fmt.Errorf("canonical: rewrite %s: %w", where, err)
			}
			if nst.ManagedKeyed, err = rw.keyedHandle(ctx, op, st.ManagedKeyed); err != nil {
				return nil, fmt.Errorf("canonical: rewrite %s: %w", where, err)
			}
			if nst.RawKeyed, err = rw.keyedHandle(ctx, op, st.RawKeyed); err != nil {
				return nil, fmt.Errorf("canonical: rewrite %s: %w", where, err)
			}
			if len(st.InputChannels) > 0 || len(st.OutputChannels) > 0 {
				return nil, fmt.Errorf("canonical: rewrite %s: channel state is not supported", where)
			}
			nop.Subtasks = append(nop.Subtasks, &nst)
		}
		if op.Coordinator != nil && op.Coordinator.Tag != savepoint.TagByteStream {
			return nil, fmt.Errorf("canonical: rewrite operator %s: coordinator state handle tag %d", op.ID, op.Coordinator.Tag)
		}
		md.Operators = append(md.Operators, &nop)
	}
	b, err := savepoint.EncodeMetadata(&md)
	if err != nil {
		return nil, err
	}
	if err := savepoint.CommitMetadata(ctx, dst, rw.written, path.Join(o.Dir, s3.MetadataName), b); err != nil {
		return nil, err
	}
	return &md, nil
}

type rewriter struct {
	src     *savepoint.Savepoint
	dst     s3.Storage
	o       RewriteOptions
	written []s3.Written
	copied  map[string]*savepoint.StreamHandle
	used    map[string]bool // destination file names taken
	br      keyed.BlockReader
	snappy  *keyed.SnappyReader
	block   []byte
	// offsets lists, per source keyed file (fileKey), every key-group offset any
	// handle of the savepoint gives into it (sorted, distinct): a block
	// runs from its offset to the next one, or to the end of the stream.
	offsets map[string][]int64
}

// fileName names the copy of a file handle's stream: the source file's
// base name, or a fresh name when that is taken (two source files with one
// base name, or one keyed file shared by several handles, as rescaled
// savepoints' view handles do: each handle's key groups are rewritten into
// a file of their own).
func (rw *rewriter) fileName(h *savepoint.StreamHandle) string {
	name := path.Base(h.Path)
	if name == "." || name == "/" || name == ".." || name == s3.MetadataName || rw.used[name] {
		name = savepoint.NewUUID()
	}
	rw.used[name] = true
	return name
}

// copyStream copies a stream handle's bytes unchanged.
func (rw *rewriter) copyStream(ctx context.Context, h *savepoint.StreamHandle) (*savepoint.StreamHandle, error) {
	switch {
	case h == nil || h.Tag == savepoint.TagNull || h.Tag == savepoint.TagByteStream:
		return h, nil
	case h.Tag == savepoint.TagRelativeFile || h.Tag == savepoint.TagFile:
	default:
		return nil, fmt.Errorf("stream handle tag %d cannot be copied", h.Tag)
	}
	if c, ok := rw.copied[h.Path]; ok {
		return c, nil
	}
	obj, err := rw.src.OpenStream(ctx, h, rw.o.ReadAhead)
	if err != nil {
		return nil, err
	}
	name := rw.fileName(h)
	w, err := s3.PutHashed(ctx, rw.dst, path.Join(rw.o.Dir, name), io.NewSectionReader(obj, 0, obj.Size()), obj.Size())
	if err != nil {
		return nil, err
	}
	rw.written = append(rw.written, w)
	c := &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: name, Size: h.Size}
	if h.Tag == savepoint.TagFile {
		c.Size = w.Size
	}
	rw.copied[h.Path] = c
	return c, nil
}

func (rw *rewriter) operatorHandle(ctx context.Context, h *savepoint.OperatorHandle) (*savepoint.OperatorHandle, error) {
	if h == nil {
		return nil, nil
	}
	nh := *h
	var err error
	if nh.Delegate, err = rw.copyStream(ctx, h.Delegate); err != nil {
		return nil, err
	}
	return &nh, nil
}

func (rw *rewriter) keyedHandle(ctx context.Context, op *savepoint.OperatorState, kh savepoint.KeyedHandle) (savepoint.KeyedHandle, error) {
	if kh == nil {
		return nil, nil
	}
	layout, err := rw.src.KeyedLayout(ctx, kh, int(op.MaxParallelism))
	if err != nil {
		return nil, err
	}
	h, ok := kh.(*savepoint.KeyGroupsHandle)
	if !ok || layout != savepoint.LayoutCanonical {
		return nil, fmt.Errorf("%w: keyed handle tag %d holds the %s layout", savepoint.ErrNativeLayout, kh.HandleTag(), layout)
	}
	// The header is parsed as the reader does (unknown serializer
	// snapshots stepped over); it is written back as read.
	obj, hdr, err := rw.src.OpenKeyed(ctx, h, rw.o.ReadAhead)
	if err != nil {
		return nil, err
	}
	name := obj.Loc.Name
	f, err := os.CreateTemp(rw.o.TempDir, s3.ScratchPrefix+"rewrite-*")
	if err != nil {
		return nil, err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	start, end := h.KeyGroupRange()
	maxP := int(op.MaxParallelism)
	kw, err := flinkwrite.NewKeyedWriter(bw, flinkwrite.Header{Compressed: hdr.Compressed, Raw: hdr.Raw, RawNumStates: len(hdr.States)},
		keygroups.Range{Start: start, End: end}, maxP)
	if err != nil {
		return nil, err
	}
	ends := rw.blockEnds(h, obj.Size())
	for kg := start; kg <= end; kg++ {
		off := h.Offset(kg)
		if off == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := rw.copyBlock(obj, name, hdr, kg, off, ends, maxP, kw); err != nil {
			return nil, err
		}
	}
	if err := kw.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	size := kw.Size()
	nh := &savepoint.KeyGroupsHandle{Tag: h.Tag, StartKeyGroup: h.StartKeyGroup, Offsets: kw.Offsets(), StateHandleID: h.StateHandleID}
	d := h.Delegate
	if d.Tag == savepoint.TagByteStream {
		data := make([]byte, size)
		if _, err := f.ReadAt(data, 0); err != nil {
			return nil, err
		}
		nh.Delegate = &savepoint.StreamHandle{Tag: savepoint.TagByteStream, Name: d.Name, Data: data}
		return nh, nil
	}
	if d.Tag != savepoint.TagRelativeFile && d.Tag != savepoint.TagFile {
		return nil, fmt.Errorf("keyed stream handle tag %d cannot be rewritten", d.Tag)
	}
	fname := rw.fileName(d)
	w, err := s3.PutHashed(ctx, rw.dst, path.Join(rw.o.Dir, fname), io.NewSectionReader(f, 0, size), size)
	if err != nil {
		return nil, err
	}
	rw.written = append(rw.written, w)
	nh.Delegate = &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: fname, Size: size}
	return nh, nil
}
