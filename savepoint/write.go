package savepoint

import (
	"bytes"
	"context"
	"fmt"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// EncodeMetadata serializes md in md.Version's layout (see ParseMetadata).
// For V4+ the kept Trailer is appended verbatim; a V4+ model without
// trailer is an error (write V3 instead, which every Flink 1.15+ reads).
// V2 writes the kept unused fields (OperatorState.LegacyChainLength,
// SubtaskState.LegacyDuration) as they are and refuses what V2 cannot
// hold: coordinator and channel state, finished subtasks.
func EncodeMetadata(md *Metadata) ([]byte, error) {
	if md.Version < MinMetadataVersion || md.Version > MaxMetadataVersion {
		return nil, fmt.Errorf("savepoint: cannot write metadata version %d", md.Version)
	}
	if md.Version >= 4 && len(md.Trailer) == 0 {
		return nil, fmt.Errorf("savepoint: metadata version %d needs the CheckpointProperties trailer; write version 3 instead", md.Version)
	}
	if md.Version <= 3 && len(md.Trailer) != 0 {
		return nil, fmt.Errorf("savepoint: metadata version %d has no trailer", md.Version)
	}
	w := &writer{v: md.Version}
	e := &w.e
	e.PutI32(int32(uint32(MetadataMagic)))
	e.PutI32(int32(md.Version))
	e.PutI64(md.CheckpointID)
	e.PutI32(int32(len(md.MasterStates)))
	for _, ms := range md.MasterStates {
		var blk binfmt.Encbuf
		blk.PutI32(ms.Version)
		w.utf(&blk, ms.Name)
		blk.PutI32(int32(len(ms.Payload)))
		blk.PutBytes(ms.Payload)
		e.PutI32(masterStateMagic)
		e.PutI32(int32(blk.Len()))
		e.PutBytes(blk.B)
	}
	e.PutI32(int32(len(md.Operators)))
	for _, op := range md.Operators {
		w.operator(op)
	}
	e.PutBytes(md.Trailer)
	if w.err != nil {
		return nil, w.err
	}
	return e.B, nil
}

type writer struct {
	e   binfmt.Encbuf
	v   int
	err error
}

func (w *writer) utf(e *binfmt.Encbuf, s string) {
	if err := e.PutUTF(s); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *writer) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("savepoint: "+format, args...)
	}
}

func (w *writer) operator(op *OperatorState) {
	e := &w.e
	if w.v >= 5 {
		w.utf(e, op.Name)
		w.utf(e, op.UID)
	} else if op.Name != "" || op.UID != "" {
		w.fail("operator %s: name/uid need metadata version 5+", op.ID)
	}
	e.PutBytes(op.ID[:])
	e.PutI32(op.Parallelism)
	e.PutI32(op.MaxParallelism)
	if w.v == 2 {
		e.PutI32(op.LegacyChainLength)
		if op.Coordinator != nil || op.FullyFinished {
			w.fail("operator %s: coordinator state and finished operators need metadata version 3+", op.ID)
		}
	} else {
		if op.Coordinator != nil && op.Coordinator.Tag != TagByteStream {
			w.fail("operator %s: coordinator state must be inline", op.ID)
		}
		w.stream(op.Coordinator)
	}
	if op.FullyFinished {
		if len(op.Subtasks) > 0 || op.Coordinator != nil {
			w.fail("operator %s: fully finished operator cannot carry state", op.ID)
		}
		e.PutI32(-1)
		return
	}
	e.PutI32(int32(len(op.Subtasks)))
	for _, st := range op.Subtasks {
		if st.Finished {
			if w.v == 2 {
				w.fail("operator %s: finished subtask %d needs metadata version 3+", op.ID, st.Index)
			}
			e.PutI32(int32(-st.Index - 1))
			continue
		}
		e.PutI32(int32(st.Index))
		w.subtask(st)
	}
}

func (w *writer) subtask(st *SubtaskState) {
	e := &w.e
	if w.v == 2 {
		e.PutI64(st.LegacyDuration)
		e.PutI32(0) // legacy task states
	}
	for _, oh := range []*OperatorHandle{st.ManagedOperator, st.RawOperator} {
		if oh == nil {
			e.PutI32(0)
			continue
		}
		e.PutI32(1)
		w.operatorHandle(oh)
	}
	w.keyed(st.ManagedKeyed, 0)
	w.keyed(st.RawKeyed, 0)
	if w.v == 2 && len(st.InputChannels)+len(st.OutputChannels) > 0 {
		w.fail("channel state handles need metadata version 3+")
	}
	for _, hs := range [][]*ChannelHandle{st.InputChannels, st.OutputChannels} {
		if w.v == 2 {
			break // V2 has no channel state collections
		}
		e.PutI32(int32(len(hs)))
		if len(hs) > 0 && w.v >= 6 {
			w.fail("channel state handles cannot be written in metadata version %d", w.v)
		}
		for _, h := range hs {
			e.PutI32(h.Subtask)
			e.PutI32(h.Gate)
			e.PutI32(h.Channel)
			e.PutI32(int32(len(h.Offsets)))
			for _, o := range h.Offsets {
				e.PutI64(o)
			}
			e.PutI64(h.Size)
			w.stream(h.Delegate)
		}
	}
	if w.v >= 7 {
		if st.HasRefCheckpoint {
			e.PutU8(1)
			e.PutI64(st.RefCheckpointID)
		} else {
			e.PutU8(0)
		}
	} else if st.HasRefCheckpoint {
		w.fail("refCheckpointId needs metadata version 7")
	}
}

func (w *writer) keyGroupsBody(h *KeyGroupsHandle) {
	e := &w.e
	e.PutI32(h.StartKeyGroup)
	e.PutI32(int32(len(h.Offsets)))
	for _, o := range h.Offsets {
		e.PutI64(o)
	}
	w.stream(h.Delegate)
}

func (w *writer) keyed(kh KeyedHandle, depth int) {
	e := &w.e
	switch h := kh.(type) {
	case nil:
		e.PutU8(TagNull)
	case *ChangelogHandle:
		if h == nil {
			e.PutU8(TagNull)
			return
		}
		if h.Tag != TagChangelog && h.Tag != TagChangelogV2 {
			w.fail("bad changelog handle tag %d", h.Tag)
		}
		if depth > 0 {
			w.fail("changelog handle nested inside a changelog handle")
			return
		}
		e.PutU8(h.Tag)
		e.PutI32(h.StartKeyGroup)
		e.PutI32(h.NumKeyGroups)
		e.PutI64(h.CheckpointedSize)
		e.PutI32(int32(len(h.Materialized)))
		for _, m := range h.Materialized {
			w.keyed(m, depth+1)
		}
		e.PutI32(int32(len(h.NonMaterialized)))
		for _, c := range h.NonMaterialized {
			if c == nil {
				e.PutU8(TagNull)
				continue
			}
			w.keyed(c, depth+1)
		}
		e.PutI64(h.MaterializationID)
		if h.Tag == TagChangelogV2 {
			e.PutI64(h.CheckpointID)
		}
		w.utf(e, h.StateHandleID)
	case *StateChangelogHandle:
		if h == nil {
			e.PutU8(TagNull)
			return
		}
		e.PutU8(h.Tag)
		e.PutI32(h.StartKeyGroup)
		e.PutI32(h.NumKeyGroups)
		switch h.Tag {
		case TagChangelogByteIncrement:
			e.PutI64(h.From)
			e.PutI64(h.To)
			e.PutI32(int32(len(h.Changes)))
			for _, c := range h.Changes {
				e.PutI32(c.KeyGroup)
				e.PutI32(int32(len(c.Data)))
				e.PutBytes(c.Data)
			}
		case TagChangelogFileIncrement, TagChangelogFileIncrementV2:
			e.PutI32(int32(len(h.Streams)))
			for _, s := range h.Streams {
				e.PutI64(s.Offset)
				w.stream(s.Handle)
			}
			e.PutI64(h.Size)
			e.PutI64(h.CheckpointedSize)
		default:
			w.fail("bad state change log handle tag %d", h.Tag)
		}
		w.utf(e, h.StateHandleID)
		if h.Tag == TagChangelogFileIncrementV2 {
			w.utf(e, h.StorageID)
		}
	case *KeyGroupsHandle:
		if h == nil {
			e.PutU8(TagNull)
			return
		}
		switch h.Tag {
		case TagKeyGroups, TagSavepointKeyGroups, TagKeyGroupsV2:
		default:
			w.fail("bad key-groups handle tag %d", h.Tag)
		}
		e.PutU8(h.Tag)
		w.keyGroupsBody(h)
		if h.Tag == TagKeyGroupsV2 {
			w.utf(e, h.StateHandleID)
		}
	case *IncrementalHandle:
		if h == nil {
			e.PutU8(TagNull)
			return
		}
		if h.Tag != TagIncrementalKeyGroups && h.Tag != TagIncrementalKeyGroupsV2 {
			w.fail("bad incremental handle tag %d", h.Tag)
		}
		e.PutU8(h.Tag)
		e.PutI64(h.CheckpointID)
		w.utf(e, h.BackendID)
		e.PutI32(h.StartKeyGroup)
		e.PutI32(h.NumKeyGroups)
		if h.Tag == TagIncrementalKeyGroupsV2 {
			e.PutI64(h.CheckpointedSize)
		}
		w.stream(h.Meta)
		for _, list := range [][]NamedStream{h.Shared, h.Private} {
			e.PutI32(int32(len(list)))
			for _, ns := range list {
				w.utf(e, ns.Name)
				w.stream(ns.Handle)
			}
		}
		if h.Tag == TagIncrementalKeyGroupsV2 {
			w.utf(e, h.StateHandleID)
		}
	default:
		w.fail("unsupported keyed handle type %T", kh)
	}
}

func (w *writer) operatorHandle(h *OperatorHandle) {
	e := &w.e
	if h.Tag != TagPartitionableOperator && h.Tag != TagSegmentPartitionableOpVal {
		w.fail("bad operator handle tag %d", h.Tag)
	}
	e.PutU8(h.Tag)
	e.PutI32(int32(len(h.States)))
	for _, m := range h.States {
		w.utf(e, m.Name)
		e.PutU8(m.Mode)
		e.PutI32(int32(len(m.Offsets)))
		for _, o := range m.Offsets {
			e.PutI64(o)
		}
	}
	if h.Tag == TagSegmentPartitionableOpVal {
		w.utf(e, h.Dir)
		e.PutBool(h.IsEmpty)
	}
	w.stream(h.Delegate)
}

func (w *writer) stream(h *StreamHandle) {
	e := &w.e
	if h == nil {
		e.PutU8(TagNull)
		return
	}
	e.PutU8(h.Tag)
	switch h.Tag {
	case TagByteStream:
		w.utf(e, h.Name)
		e.PutI32(int32(len(h.Data)))
		e.PutBytes(h.Data)
	case TagFile:
		e.PutI64(h.Size)
		w.utf(e, h.Path)
	case TagRelativeFile:
		w.utf(e, h.Path)
		e.PutI64(h.Size)
	case TagKeyGroups:
		if h.KeyGroups == nil {
			w.fail("nested key-groups handle without body")
			return
		}
		w.keyGroupsBody(h.KeyGroups)
	case TagSegmentFile:
		e.PutI64(h.StartPos)
		e.PutI64(h.Size)
		w.utf(e, h.LogicalFileID)
		e.PutI32(h.Scope)
		w.utf(e, h.Path)
	case TagEmptySegmentFile:
	default:
		w.fail("cannot write stream handle tag %d", h.Tag)
	}
}

// WriteMetadata encodes md and stores it under key (normally
// "<dir>/_metadata"). The store publishes the object only once complete;
// with ifAbsent an existing object is never replaced (the error then
// satisfies s3.IsExist). The sums file (SumsName) is written first; it
// lists `_metadata` and the data objects given in written.
func WriteMetadata(ctx context.Context, st s3.Storage, key string, md *Metadata, ifAbsent bool, written ...s3.Written) error {
	b, err := EncodeMetadata(md)
	if err != nil {
		return err
	}
	if ifAbsent {
		if err := sumsBeforeMetadata(ctx, st, key, written, b); err != nil {
			return err
		}
	} else if err := PublishSums(ctx, st, key, written, b); err != nil {
		return err
	}
	if ifAbsent {
		return st.PutIfAbsent(ctx, key, bytes.NewReader(b), int64(len(b)))
	}
	return st.Put(ctx, key, bytes.NewReader(b), int64(len(b)))
}
