// Package savepoint reads and writes Flink savepoint and checkpoint
// metadata (the `_metadata` file), opens savepoints through the storage
// layer, walks their keyed state and checks their structure.
//
// The `_metadata` model keeps every byte it parses, so WriteMetadata of a
// parsed file reproduces it exactly.
package savepoint

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// MetadataMagic starts every `_metadata` file.
const MetadataMagic = 0x4960672D

// masterStateMagic starts every master state record.
const masterStateMagic = int32(-0x3694E96A) // 0xC96B1696

// Supported `_metadata` versions. Version 2 is Flink 1.3 to 1.10.
const (
	MinMetadataVersion = 2
	MaxMetadataVersion = 7
)

// Handle tags shared by stream, keyed and operator state handles.
const (
	TagNull                      = 0
	TagByteStream                = 1
	TagFile                      = 2
	TagKeyGroups                 = 3
	TagPartitionableOperator     = 4
	TagIncrementalKeyGroups      = 5
	TagRelativeFile              = 6
	TagSavepointKeyGroups        = 7
	TagChangelog                 = 8
	TagChangelogByteIncrement    = 9
	TagChangelogFileIncrement    = 10
	TagIncrementalKeyGroupsV2    = 11
	TagKeyGroupsV2               = 12
	TagChangelogFileIncrementV2  = 13
	TagChangelogV2               = 14
	TagSegmentFile               = 15
	TagEmptySegmentFile          = 16
	TagSegmentPartitionableOpVal = 17
)

// Limits applied while parsing untrusted metadata.
const (
	// MaxMetadataSize bounds the `_metadata` file read into memory.
	MaxMetadataSize = 1 << 30
	maxKeyGroups    = 32768
	maxCount        = 1 << 24
)

// ErrFormat marks metadata that is structurally invalid.
var ErrFormat = errclass.New(errclass.ErrCorrupt, "savepoint: invalid metadata")

// ErrUnsupported marks valid input in a form or version sfstate does not
// read; the message names the feature.
var ErrUnsupported = binfmt.ErrUnsupported

// Metadata is a parsed `_metadata` file.
type Metadata struct {
	Version      int
	CheckpointID int64
	MasterStates []MasterState
	Operators    []*OperatorState
	// Trailer holds the V4+ Java-serialized CheckpointProperties verbatim
	// (nil for V2 and V3).
	Trailer []byte

	trailerOffset int64
}

// MasterState is one master-hook state record.
type MasterState struct {
	Version int32
	Name    string
	Payload []byte
}

// OperatorID is the 16-byte operator identifier.
type OperatorID [16]byte

// String returns the usual 32-digit lower-case hex form.
func (id OperatorID) String() string { return hex.EncodeToString(id[:]) }

// ParseOperatorID parses the 32-digit hex form.
func ParseOperatorID(s string) (OperatorID, error) {
	var id OperatorID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("savepoint: operator id %q is not 32 hex digits", s)
	}
	copy(id[:], b)
	return id, nil
}

// OperatorState is one operator's entry.
type OperatorState struct {
	// Name and UID are present from V5 on ("" = absent).
	Name, UID      string
	ID             OperatorID
	Parallelism    int32
	MaxParallelism int32
	// LegacyChainLength is V2's unused int after the max parallelism (the
	// chain length of Flink before 1.3; Flink writes 1). Kept so that
	// re-encoding is byte-exact.
	LegacyChainLength int32
	// Coordinator is the operator coordinator state (nil or tag 1).
	Coordinator *StreamHandle
	// FullyFinished is the "-1 subtasks" marker: the operator finished on
	// all subtasks and has no state.
	FullyFinished bool
	// Subtasks in file order. Subtasks without state may be missing.
	Subtasks []*SubtaskState
}

// Subtask returns the state of subtask i, or nil.
func (o *OperatorState) Subtask(i int) *SubtaskState {
	for _, s := range o.Subtasks {
		if s.Index == i {
			return s
		}
	}
	return nil
}

// SubtaskState is one subtask's handles.
type SubtaskState struct {
	Index int
	// Finished subtasks carry no body.
	Finished        bool
	ManagedOperator *OperatorHandle
	RawOperator     *OperatorHandle
	ManagedKeyed    KeyedHandle
	RawKeyed        KeyedHandle
	InputChannels   []*ChannelHandle
	OutputChannels  []*ChannelHandle
	// HasRefCheckpoint / RefCheckpointID: V7 only.
	HasRefCheckpoint bool
	RefCheckpointID  int64
	// LegacyDuration is V2's unused long before the handles (the former
	// "duration"; Flink writes -1). V2 also has a count of legacy task
	// states there, which must be 0 and is not kept.
	LegacyDuration int64
}

// StreamHandle is a stream state handle (tags 1, 2, 3 nested, 6, 15, 16).
type StreamHandle struct {
	Tag byte
	// Name is the handle name of an inline (tag 1) handle.
	Name string
	// Data is the inline payload (tag 1).
	Data []byte
	// Path: absolute URI (tag 2), relative path (tag 6), physical file (tag 15).
	Path string
	// Size is the recorded size (tags 2, 6, 15); -1 when unknown.
	Size int64
	// Segment file fields (tag 15).
	StartPos      int64
	LogicalFileID string
	Scope         int32
	// KeyGroups is the nested tag-3 handle.
	KeyGroups *KeyGroupsHandle
}

// Len returns the length of the stream's bytes as recorded in the handle.
func (h *StreamHandle) Len() int64 {
	switch h.Tag {
	case TagByteStream:
		return int64(len(h.Data))
	case TagFile, TagRelativeFile, TagSegmentFile:
		return h.Size
	}
	return 0
}

// Describe names the handle for messages.
func (h *StreamHandle) Describe() string {
	if h == nil {
		return "<none>"
	}
	switch h.Tag {
	case TagByteStream:
		return fmt.Sprintf("inline:%s", h.Name)
	case TagFile:
		return h.Path
	case TagRelativeFile:
		return h.Path
	case TagSegmentFile:
		return fmt.Sprintf("%s@%d+%d", h.Path, h.StartPos, h.Size)
	case TagEmptySegmentFile:
		return "empty-segment"
	case TagKeyGroups:
		return "key-groups:" + h.KeyGroups.Delegate.Describe()
	}
	return fmt.Sprintf("tag%d", h.Tag)
}

// KeyedHandle is a keyed state handle: *KeyGroupsHandle, *IncrementalHandle,
// *ChangelogHandle or (inside a changelog handle) *StateChangelogHandle.
type KeyedHandle interface {
	HandleTag() byte
	// KeyGroupRange returns the inclusive range [start, end]; end < start
	// for an empty range.
	KeyGroupRange() (start, end int)
}

// KeyGroupsHandle is tags 3, 7 (canonical savepoint) and 12.
type KeyGroupsHandle struct {
	Tag           byte
	StartKeyGroup int32
	// Offsets holds one absolute offset per key group; 0 = empty.
	Offsets       []int64
	Delegate      *StreamHandle
	StateHandleID string // tag 12 only
}

func (h *KeyGroupsHandle) HandleTag() byte { return h.Tag }
func (h *KeyGroupsHandle) KeyGroupRange() (int, int) {
	return int(h.StartKeyGroup), int(h.StartKeyGroup) + len(h.Offsets) - 1
}

// Offset returns the recorded offset of key group kg (0 when outside).
func (h *KeyGroupsHandle) Offset(kg int) int64 {
	i := kg - int(h.StartKeyGroup)
	if i < 0 || i >= len(h.Offsets) {
		return 0
	}
	return h.Offsets[i]
}

// NamedStream is one file of an incremental handle.
type NamedStream struct {
	Name   string
	Handle *StreamHandle
}

// IncrementalHandle is tags 5 and 11 (RocksDB native / incremental).
type IncrementalHandle struct {
	Tag              byte
	CheckpointID     int64
	BackendID        string
	StartKeyGroup    int32
	NumKeyGroups     int32
	CheckpointedSize int64 // tag 11 only
	Meta             *StreamHandle
	Shared           []NamedStream
	Private          []NamedStream
	StateHandleID    string // tag 11 only
}

func (h *IncrementalHandle) HandleTag() byte { return h.Tag }
func (h *IncrementalHandle) KeyGroupRange() (int, int) {
	return int(h.StartKeyGroup), int(h.StartKeyGroup) + int(h.NumKeyGroups) - 1
}

// ChangelogHandle is tags 8 and 14: the keyed state of the changelog state
// backend (Flink 1.15+). Its state is the materialized part (the wrapped
// backend's last snapshot) plus the state changes logged since:
//
//	i32 startKeyGroup, i32 numKeyGroups, i64 checkpointedSize,
//	i32 n, n keyed handles (materialized; any keyed tag but 8/14, 0 = null),
//	i32 m, m keyed handles (non-materialized; tags 9, 10, 13 or 0),
//	i64 materializationId, [tag 14: i64 checkpointId], UTF stateHandleId
//
// A tag-8 handle's checkpoint id is its materialization id.
type ChangelogHandle struct {
	Tag               byte
	StartKeyGroup     int32
	NumKeyGroups      int32
	CheckpointedSize  int64
	Materialized      []KeyedHandle
	NonMaterialized   []*StateChangelogHandle
	MaterializationID int64
	CheckpointID      int64 // tag 14 only
	StateHandleID     string
}

func (h *ChangelogHandle) HandleTag() byte { return h.Tag }
func (h *ChangelogHandle) KeyGroupRange() (int, int) {
	return int(h.StartKeyGroup), int(h.StartKeyGroup) + int(h.NumKeyGroups) - 1
}

// StateChange is one change of an in-memory change log: the key group
// (-1 for a metadata change) and the serialized change.
type StateChange struct {
	KeyGroup int32
	Data     []byte
}

// ChangelogStream is one stream of a file change log and the offset at
// which this handle's changes start in it.
type ChangelogStream struct {
	Offset int64
	Handle *StreamHandle
}

// StateChangelogHandle is a non-materialized part of a changelog handle:
// state changes held inline (tag 9, InMemoryChangelogStateHandle) or in
// files of the changelog storage (tags 10 and 13,
// ChangelogStateHandleStreamImpl).
//
//	tag 9:      i32 startKeyGroup, i32 numKeyGroups, i64 from, i64 to,
//	            i32 n, n × (i32 keyGroup, i32 len, len bytes), UTF stateHandleId
//	tags 10/13: i32 startKeyGroup, i32 numKeyGroups,
//	            i32 n, n × (i64 offset, stream handle),
//	            i64 size, i64 checkpointedSize, UTF stateHandleId,
//	            [tag 13: UTF storageIdentifier]
type StateChangelogHandle struct {
	Tag           byte
	StartKeyGroup int32
	NumKeyGroups  int32
	// From and To are the sequence numbers of the changes (tag 9).
	From, To int64
	Changes  []StateChange // tag 9
	// Streams, Size and CheckpointedSize: tags 10 and 13.
	Streams          []ChangelogStream
	Size             int64
	CheckpointedSize int64
	StateHandleID    string
	// StorageID names the changelog storage (tag 13; tag 10 implies
	// "filesystem").
	StorageID string
}

func (h *StateChangelogHandle) HandleTag() byte { return h.Tag }
func (h *StateChangelogHandle) KeyGroupRange() (int, int) {
	return int(h.StartKeyGroup), int(h.StartKeyGroup) + int(h.NumKeyGroups) - 1
}

// Len returns the bytes of state changes the handle refers to: the inline
// change bytes (tag 9) or the recorded size (tags 10/13).
func (h *StateChangelogHandle) Len() int64 {
	if h.Tag == TagChangelogByteIncrement {
		var n int64
		for _, c := range h.Changes {
			n += int64(len(c.Data))
		}
		return n
	}
	return h.Size
}

// Distribution modes of operator state.
const (
	ModeSplitDistribute = 0
	ModeUnion           = 1
	ModeBroadcast       = 2
)

// ModeName names a distribution mode.
func ModeName(m byte) string {
	switch m {
	case ModeSplitDistribute:
		return "SPLIT_DISTRIBUTE"
	case ModeUnion:
		return "UNION"
	case ModeBroadcast:
		return "BROADCAST"
	}
	return fmt.Sprintf("MODE_%d", m)
}

// OperatorStateMeta is one named operator state inside an OperatorHandle.
type OperatorStateMeta struct {
	Name    string
	Mode    byte
	Offsets []int64
}

// OperatorHandle is tags 4 and 17.
type OperatorHandle struct {
	Tag    byte
	States []OperatorStateMeta
	// Tag 17 only.
	Dir     string
	IsEmpty bool
	// Delegate holds the operator state stream.
	Delegate *StreamHandle
}

// ChannelHandle is an unaligned-checkpoint channel state handle.
type ChannelHandle struct {
	Subtask  int32
	Gate     int32 // gate index / partition index
	Channel  int32 // channel index / subpartition index
	Offsets  []int64
	Size     int64
	Delegate *StreamHandle
}

// ParseMetadata parses a whole `_metadata` file. name is used in errors.
// The whole input must be consumed (V2, V3) or the rest is the trailer (V4+).
//
// Layout (big-endian, Java DataOutput; UTF = u16 length + modified UTF-8):
//
//	i32 magic 0x4960672D, i32 version, i64 checkpointId,
//	i32 n, n master states, i32 m, m operator states, [V4+: trailer]
//	operator:  [V5+: UTF name, UTF uid], 16-byte id, i32 parallelism,
//	           i32 maxParallelism, [V2: i32 unused (1)],
//	           [V3+: stream handle coordinator state],
//	           i32 subtasks (V3+: -1 = fully finished), per subtask:
//	           i32 index (V3+: negative = finished, no body), body
//	subtask:   [V2: i64 unused (-1), i32 legacy states (0)],
//	           i32 flag + operator handle (managed), i32 flag + operator
//	           handle (raw), keyed handle (managed), keyed handle (raw),
//	           [V3+: input channel and result subpartition handles],
//	           [V7: u8 marker, i64 refCheckpointId]
//
// V2 is Flink 1.3 to 1.10 (MetadataV2Serializer); V3 Flink 1.11 to 1.15;
// the handle layouts are documented at their types.
func ParseMetadata(b []byte, name string) (*Metadata, error) {
	p := &parser{d: binfmt.New(b, 0)}
	md := p.metadata()
	if err := p.d.Err(); err != nil {
		if errors.Is(err, ErrUnsupported) {
			return nil, errclass.WithFile(err, name)
		}
		return nil, fmt.Errorf("%w: %w", ErrFormat, errclass.WithFile(err, name))
	}
	return md, nil
}

type parser struct {
	d       *binfmt.Decbuf
	version int
}

// failAt records a corrupt-data error at absolute offset off.
func (p *parser) failAt(off int64, format string, args ...any) {
	if p.d.Err() != nil {
		return
	}
	pos := p.d.Pos
	p.d.Pos = int(off - p.d.Base)
	p.d.Failf(format, args...)
	p.d.Pos = pos
}

// unsupportedAt records an ErrUnsupported error at off (the input is valid,
// the feature it uses is not implemented).
func (p *parser) unsupportedAt(off int64, format string, args ...any) {
	if p.d.Err() != nil {
		return
	}
	pos := p.d.Pos
	p.d.Pos = int(off - p.d.Base)
	p.d.Fail(fmt.Errorf("%w "+format, append([]any{ErrUnsupported}, args...)...))
	p.d.Pos = pos
}

func (p *parser) metadata() *Metadata {
	d := p.d
	magic := d.I32()
	if d.Err() == nil && uint32(magic) != MetadataMagic {
		p.failAt(0, "bad magic 0x%08x (want 0x%08x): not a Flink _metadata file", uint32(magic), MetadataMagic)
		return nil
	}
	v := d.I32()
	if d.Err() != nil {
		return nil
	}
	if v < MinMetadataVersion || v > MaxMetadataVersion {
		p.unsupportedAt(4, "metadata version %d (supported %d..%d)", v, MinMetadataVersion, MaxMetadataVersion)
		return nil
	}
	p.version = int(v)
	md := &Metadata{Version: int(v)}
	at := d.Offset()
	md.CheckpointID = d.I64()
	if d.Err() == nil && md.CheckpointID < 0 {
		p.failAt(at, "negative checkpoint id %d", md.CheckpointID)
	}
	nm := d.Count("master state", maxCount, 8)
	for i := 0; i < nm && d.Err() == nil; i++ {
		md.MasterStates = append(md.MasterStates, p.masterState())
	}
	no := d.Count("operator state", maxCount, 16+8+1+4)
	for i := 0; i < no && d.Err() == nil; i++ {
		md.Operators = append(md.Operators, p.operatorState())
	}
	if d.Err() != nil {
		return nil
	}
	if p.version >= 4 {
		// Flink reads the trailer with an ObjectInputStream: a V4+ file
		// that ends here was cut short.
		if d.Len() == 0 {
			d.Failf("version %d file ends before its CheckpointProperties trailer", p.version)
			return nil
		}
		md.trailerOffset = d.Offset()
		md.Trailer = append([]byte(nil), d.Bytes(d.Len())...)
	} else if d.Len() > 0 {
		d.Failf("%d unexpected trailing bytes after a version %d body", d.Len(), p.version)
	}
	return md
}

func (p *parser) masterState() MasterState {
	d := p.d
	at := d.Offset()
	if m := d.I32(); d.Err() == nil && m != masterStateMagic {
		p.failAt(at, "bad master state magic 0x%08x", uint32(m))
		return MasterState{}
	}
	n := d.Count("master state block length", d.Len(), 1)
	if d.Err() != nil {
		return MasterState{}
	}
	blockStart := d.Offset()
	sub := &parser{d: binfmt.New(d.Bytes(n), blockStart), version: p.version}
	var ms MasterState
	ms.Version = sub.d.I32()
	ms.Name = sub.utf()
	pl := sub.d.Count("master state payload length", sub.d.Len(), 1)
	ms.Payload = append([]byte(nil), sub.d.Bytes(pl)...)
	if sub.d.Err() == nil && sub.d.Len() != 0 {
		sub.d.Failf("%d bytes trail the master state payload", sub.d.Len())
	}
	if err := sub.d.Err(); err != nil {
		d.Fail(err)
	}
	return ms
}

func (p *parser) operatorState() *OperatorState {
	d := p.d
	op := &OperatorState{}
	if p.version >= 5 {
		op.Name = p.utf()
		op.UID = p.utf()
	}
	copy(op.ID[:], d.Bytes(16))
	at := d.Offset()
	op.Parallelism = d.I32()
	op.MaxParallelism = d.I32()
	if d.Err() != nil {
		return op
	}
	if op.Parallelism < 0 || op.MaxParallelism < 0 || op.MaxParallelism > maxKeyGroups {
		p.failAt(at, "operator %s: parallelism %d / max parallelism %d out of range", op.ID, op.Parallelism, op.MaxParallelism)
		return op
	}
	if p.version == 2 {
		op.LegacyChainLength = d.I32()
	} else {
		cat := d.Offset()
		op.Coordinator = p.streamHandle()
		if op.Coordinator != nil && op.Coordinator.Tag != TagByteStream {
			p.failAt(cat, "operator %s: coordinator state must be inline (tag 1), found tag %d", op.ID, op.Coordinator.Tag)
		}
	}
	nat := d.Offset()
	n := d.I32()
	if d.Err() != nil {
		return op
	}
	if n == -1 && p.version >= 3 {
		op.FullyFinished = true
		if op.Coordinator != nil {
			p.failAt(nat, "operator %s: fully finished operator with coordinator state", op.ID)
		}
		return op
	}
	if n < 0 || n > maxKeyGroups || int(n)*4 > d.Len() {
		p.failAt(nat, "operator %s: subtask count %d out of range", op.ID, n)
		return op
	}
	seen := map[int]bool{}
	for i := 0; i < int(n) && d.Err() == nil; i++ {
		iat := d.Offset()
		idx := d.I32()
		st := &SubtaskState{}
		if idx < 0 && p.version == 2 {
			p.failAt(iat, "operator %s: negative subtask index %d in a version 2 file", op.ID, idx)
			break
		}
		if idx < 0 {
			st.Finished = true
			st.Index = int(-(int64(idx) + 1))
		} else {
			st.Index = int(idx)
			p.subtaskState(st)
		}
		if d.Err() != nil {
			break
		}
		if st.Index >= maxKeyGroups || (op.Parallelism > 0 && st.Index >= int(op.Parallelism)) {
			p.failAt(iat, "operator %s: subtask index %d outside parallelism %d", op.ID, st.Index, op.Parallelism)
			break
		}
		if seen[st.Index] {
			p.failAt(iat, "operator %s: subtask %d listed twice", op.ID, st.Index)
			break
		}
		seen[st.Index] = true
		op.Subtasks = append(op.Subtasks, st)
	}
	return op
}

// utf reads a writeUTF string and insists on the canonical encoding, so that
// writing the parsed value reproduces the input bytes.
func (p *parser) utf() string {
	d := p.d
	start := d.Pos
	s := d.UTF()
	if d.Err() != nil {
		return ""
	}
	if string(binfmt.EncodeModifiedUTF8(s)) != string(d.B[start+2:d.Pos]) {
		p.failAt(d.Base+int64(start), "string %q is not canonically encoded modified UTF-8", s)
		return ""
	}
	return s
}

func (p *parser) singletonFlag(what string) bool {
	d := p.d
	at := d.Offset()
	v := d.I32()
	if d.Err() == nil && v != 0 && v != 1 {
		p.failAt(at, "%s flag %d (want 0 or 1)", what, v)
	}
	return v == 1
}

func (p *parser) subtaskState(st *SubtaskState) {
	d := p.d
	if p.version == 2 {
		st.LegacyDuration = d.I64()
		at := d.Offset()
		if n := d.I32(); d.Err() == nil && n != 0 {
			p.failAt(at, "%d legacy task states (Flink 1.1 Checkpointed interface) are not supported", n)
			return
		}
	}
	if p.singletonFlag("managed operator state") {
		st.ManagedOperator = p.operatorHandle(true)
	}
	if p.singletonFlag("raw operator state") {
		st.RawOperator = p.operatorHandle(true)
	}
	st.ManagedKeyed = p.keyedHandle(0)
	st.RawKeyed = p.keyedHandle(0)
	if p.version >= 3 {
		st.InputChannels = p.channelHandles("input channel state")
		st.OutputChannels = p.channelHandles("result subpartition state")
	}
	if p.version >= 7 && d.Err() == nil {
		at := d.Offset()
		switch m := d.U8(); m {
		case 0:
		case 1:
			st.HasRefCheckpoint = true
			st.RefCheckpointID = d.I64()
		default:
			if d.Err() == nil {
				p.failAt(at, "bad refCheckpointId marker %d", m)
			}
		}
	}
}

func (p *parser) channelHandles(what string) []*ChannelHandle {
	d := p.d
	at := d.Offset()
	n := d.Count(what, maxCount, 4+8+4+8+1)
	if n == 0 || d.Err() != nil {
		return nil
	}
	if p.version >= 6 {
		p.unsupportedAt(at, "channel state (unaligned checkpoints) of metadata V6+: %d %s handles in a version %d file", n, what, p.version)
		return nil
	}
	out := make([]*ChannelHandle, 0, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		h := &ChannelHandle{}
		h.Subtask = d.I32()
		h.Gate = d.I32()
		h.Channel = d.I32()
		no := d.Count("channel state offset", maxCount, 8)
		for j := 0; j < no && d.Err() == nil; j++ {
			h.Offsets = append(h.Offsets, d.I64())
		}
		h.Size = d.I64()
		h.Delegate = p.streamHandle()
		out = append(out, h)
	}
	return out
}

func (p *parser) offsets(n int) []int64 {
	d := p.d
	out := make([]int64, n)
	for i := range out {
		out[i] = d.I64()
	}
	return out
}

func (p *parser) keyGroups(tag byte) *KeyGroupsHandle {
	d := p.d
	h := &KeyGroupsHandle{Tag: tag}
	at := d.Offset()
	h.StartKeyGroup = d.I32()
	if d.Err() == nil && (h.StartKeyGroup < 0 || h.StartKeyGroup >= maxKeyGroups) {
		p.failAt(at, "start key group %d out of range", h.StartKeyGroup)
		return h
	}
	n := d.Count("key group", maxKeyGroups, 8)
	if d.Err() == nil && int(h.StartKeyGroup)+n > maxKeyGroups {
		p.failAt(at, "key-group range %d+%d exceeds %d", h.StartKeyGroup, n, maxKeyGroups)
		return h
	}
	h.Offsets = p.offsets(n)
	for i, o := range h.Offsets {
		if o < 0 {
			p.failAt(at+8+int64(8*i), "negative offset %d for key group %d", o, int(h.StartKeyGroup)+i)
			break
		}
	}
	h.Delegate = p.streamHandle()
	return h
}

// keyedGroupRange reads i32 start, i32 count and checks the range.
func (p *parser) keyedGroupRange() (start, n int32) {
	d := p.d
	at := d.Offset()
	start = d.I32()
	n = d.I32()
	if d.Err() == nil && (start < 0 || n < 0 || int64(start)+int64(n) > maxKeyGroups) {
		p.failAt(at, "key-group range %d+%d out of range", start, n)
	}
	return start, n
}

// keyedHandle reads a keyed handle. depth > 0 inside a changelog handle,
// where another changelog handle is refused (this bounds the recursion).
func (p *parser) keyedHandle(depth int) KeyedHandle {
	d := p.d
	at := d.Offset()
	tag := d.U8()
	if d.Err() != nil {
		return nil
	}
	switch tag {
	case TagNull:
		return nil
	case TagKeyGroups, TagSavepointKeyGroups, TagKeyGroupsV2:
		h := p.keyGroups(tag)
		if tag == TagKeyGroupsV2 {
			h.StateHandleID = p.utf()
		}
		return h
	case TagIncrementalKeyGroups, TagIncrementalKeyGroupsV2:
		h := &IncrementalHandle{Tag: tag}
		h.CheckpointID = d.I64()
		h.BackendID = p.utf()
		rat := d.Offset()
		h.StartKeyGroup = d.I32()
		h.NumKeyGroups = d.I32()
		if d.Err() == nil && (h.StartKeyGroup < 0 || h.NumKeyGroups < 0 || int64(h.StartKeyGroup)+int64(h.NumKeyGroups) > maxKeyGroups) {
			p.failAt(rat, "key-group range %d+%d out of range", h.StartKeyGroup, h.NumKeyGroups)
			return h
		}
		if tag == TagIncrementalKeyGroupsV2 {
			h.CheckpointedSize = d.I64()
		}
		h.Meta = p.streamHandle()
		h.Shared = p.namedStreams("shared state")
		h.Private = p.namedStreams("private state")
		if tag == TagIncrementalKeyGroupsV2 {
			h.StateHandleID = p.utf()
		}
		return h
	case TagChangelog, TagChangelogV2:
		if depth > 0 {
			p.failAt(at, "changelog handle (tag %d) nested inside a changelog handle", tag)
			return nil
		}
		return p.changelogHandle(tag)
	case TagChangelogByteIncrement, TagChangelogFileIncrement, TagChangelogFileIncrementV2:
		return p.stateChangelogHandle(tag)
	default:
		p.failAt(at, "unknown keyed state handle tag %d", tag)
		return nil
	}
}

func (p *parser) changelogHandle(tag byte) *ChangelogHandle {
	d := p.d
	h := &ChangelogHandle{Tag: tag}
	h.StartKeyGroup, h.NumKeyGroups = p.keyedGroupRange()
	h.CheckpointedSize = d.I64()
	n := d.Count("materialized keyed handle", maxCount, 1)
	for i := 0; i < n && d.Err() == nil; i++ {
		h.Materialized = append(h.Materialized, p.keyedHandle(1))
	}
	n = d.Count("state change log handle", maxCount, 1)
	for i := 0; i < n && d.Err() == nil; i++ {
		at := d.Offset()
		kh := p.keyedHandle(1)
		switch c := kh.(type) {
		case nil:
			h.NonMaterialized = append(h.NonMaterialized, nil)
		case *StateChangelogHandle:
			h.NonMaterialized = append(h.NonMaterialized, c)
		default:
			p.failAt(at, "keyed handle tag %d among the state change logs of a changelog handle", kh.HandleTag())
		}
	}
	h.MaterializationID = d.I64()
	if tag == TagChangelogV2 {
		h.CheckpointID = d.I64()
	}
	h.StateHandleID = p.utf()
	return h
}

func (p *parser) stateChangelogHandle(tag byte) *StateChangelogHandle {
	d := p.d
	h := &StateChangelogHandle{Tag: tag}
	h.StartKeyGroup, h.NumKeyGroups = p.keyedGroupRange()
	if tag == TagChangelogByteIncrement {
		h.From = d.I64()
		h.To = d.I64()
		n := d.Count("state change", maxCount, 8)
		for i := 0; i < n && d.Err() == nil; i++ {
			var c StateChange
			c.KeyGroup = d.I32()
			c.Data = d.Bytes(d.Count("state change bytes", d.Len(), 1))
			h.Changes = append(h.Changes, c)
		}
	} else {
		n := d.Count("state change stream", maxCount, 9)
		for i := 0; i < n && d.Err() == nil; i++ {
			var s ChangelogStream
			s.Offset = d.I64()
			s.Handle = p.streamHandle()
			h.Streams = append(h.Streams, s)
		}
		h.Size = d.I64()
		h.CheckpointedSize = d.I64()
	}
	h.StateHandleID = p.utf()
	if tag == TagChangelogFileIncrementV2 {
		h.StorageID = p.utf()
	}
	return h
}

func (p *parser) namedStreams(what string) []NamedStream {
	d := p.d
	n := d.Count(what, maxCount, 3)
	var out []NamedStream
	for i := 0; i < n && d.Err() == nil; i++ {
		var ns NamedStream
		ns.Name = p.utf()
		ns.Handle = p.streamHandle()
		out = append(out, ns)
	}
	return out
}

func (p *parser) operatorHandle(required bool) *OperatorHandle {
	d := p.d
	at := d.Offset()
	tag := d.U8()
	if d.Err() != nil {
		return nil
	}
	switch tag {
	case TagNull:
		// Flink writes flag 1 only with a handle, but accepts a null tag.
		if required {
			p.failAt(at, "operator state flag set but handle is null")
		}
		return nil
	case TagPartitionableOperator, TagSegmentPartitionableOpVal:
	default:
		p.failAt(at, "unknown operator state handle tag %d", tag)
		return nil
	}
	h := &OperatorHandle{Tag: tag}
	n := d.Count("operator state name", maxCount, 2+1+4)
	for i := 0; i < n && d.Err() == nil; i++ {
		var m OperatorStateMeta
		m.Name = p.utf()
		mat := d.Offset()
		m.Mode = d.U8()
		if d.Err() == nil && m.Mode > ModeBroadcast {
			p.failAt(mat, "operator state %q: unknown distribution mode %d", m.Name, m.Mode)
		}
		no := d.Count("operator state offset", maxCount, 8)
		m.Offsets = p.offsets(no)
		h.States = append(h.States, m)
	}
	if tag == TagSegmentPartitionableOpVal {
		h.Dir = p.utf()
		h.IsEmpty = d.Bool()
	}
	h.Delegate = p.streamHandle()
	return h
}

func (p *parser) streamHandle() *StreamHandle {
	d := p.d
	at := d.Offset()
	tag := d.U8()
	if d.Err() != nil {
		return nil
	}
	h := &StreamHandle{Tag: tag}
	switch tag {
	case TagNull:
		return nil
	case TagByteStream:
		h.Name = p.utf()
		n := d.Count("inline state bytes", d.Len(), 1)
		h.Data = d.Bytes(n)
	case TagFile:
		h.Size = d.I64()
		h.Path = p.utf()
	case TagRelativeFile:
		h.Path = p.utf()
		h.Size = d.I64()
	case TagKeyGroups:
		h.KeyGroups = p.keyGroups(tag)
	case TagSegmentFile:
		h.StartPos = d.I64()
		h.Size = d.I64()
		h.LogicalFileID = p.utf()
		h.Scope = d.I32()
		h.Path = p.utf()
	case TagEmptySegmentFile:
	default:
		p.failAt(at, "unknown stream state handle tag %d", tag)
		return nil
	}
	return h
}
