package checkpoint

import (
	"bytes"
	"crypto/md5"
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// DefaultOperatorID is the operator id written when Options.OperatorID is
// zero: the MD5 of "sfstate-engine", as Flink derives ids from uids.
var DefaultOperatorID = savepoint.OperatorID(md5.Sum([]byte("sfstate-engine")))

// ByteArrayStateMeta describes a state with byte-array serializers: the
// key, namespace, value (list element, map user key and user value) are
// the engine's opaque stored bytes. It is the default for the meta-state
// stream; pass Options.StateMeta to describe real types.
func ByteArrayStateMeta(s engine.StateDesc) (flinkwrite.StateMetaInfo, error) {
	b := flinkwrite.BytesSnapshot
	switch s.Kind {
	case engine.KindValue:
		return flinkwrite.KeyedStateMeta(s.Name, flinkwrite.KindValue, b, b), nil
	case engine.KindList:
		return flinkwrite.KeyedStateMeta(s.Name, flinkwrite.KindList, b, flinkwrite.ListSnapshot(b)), nil
	case engine.KindMap, engine.KindMultiset:
		return flinkwrite.KeyedStateMeta(s.Name, flinkwrite.KindMap, b, flinkwrite.MapSnapshot(b, b)), nil
	case engine.KindPriorityQueue:
		return flinkwrite.TimerStateMeta(s.Name, flinkwrite.TimerSnapshot(b, b)), nil
	}
	return flinkwrite.StateMetaInfo{}, fmt.Errorf("checkpoint: state %q has unknown kind %v", s.Name, s.Kind)
}

// MetaStream is the KeyedBackendSerializationProxy header of a native
// checkpoint: the states in state-id order (column family order), each
// described by o.StateMeta under o.KeySerializer, which default to what
// o.Schema says and, without a Schema, to byte arrays.
func MetaStream(states []engine.StateDesc, o *Options) ([]byte, error) {
	h := flinkwrite.Header{KeySerializer: o.KeySerializer}
	describe := o.StateMeta
	if o.Schema != nil {
		if err := o.Schema.Validate(); err != nil {
			return nil, fmt.Errorf("checkpoint: Options.Schema: %w", err)
		}
		if err := o.Schema.Matches(states); err != nil {
			return nil, fmt.Errorf("checkpoint: Options.Schema: %w", err)
		}
		if h.KeySerializer == nil {
			ks, err := o.Schema.Key.FlinkSnapshot()
			if err != nil {
				return nil, fmt.Errorf("checkpoint: Options.Schema key: %w", err)
			}
			h.KeySerializer = ks
		}
		if describe == nil {
			describe = SchemaStateMeta(o.Schema)
		}
	}
	if h.KeySerializer == nil {
		h.KeySerializer = flinkwrite.BytesSnapshot
	}
	if describe == nil {
		describe = ByteArrayStateMeta
	}
	for _, s := range states {
		m, err := describe(s)
		if err != nil {
			return nil, err
		}
		h.States = append(h.States, m)
	}
	return flinkwrite.AppendHeader(nil, h)
}

// SchemaStateMeta returns a StateMeta function that describes each state
// by its StateSchema in sch (looked up by name): Flink's serializer
// snapshots for the declared key, namespace, value and user-key types,
// TTL-wrapped for states with a TTL (StateSchema.FlinkMeta). A state sch
// does not describe is an error. The serializers name the logical types;
// the SST files still hold the engine's byte layout (see the package doc).
//
// A join-record state (StateSchema.Join: recordstore's record layout, a
// map state, or its bucket layout, a value state, under the layout's state
// name) is one column family but two Flink states: its meta info describes
// the stored bytes with byte arrays (ByteArrayStateMeta, the family holds
// recordstore's own layout) and carries the join description — the Flink
// names, input row types and outer flags of both sides — as the option
// entries and named serializer snapshots documented at
// engine.JoinSides.Describe, from which canonical.SchemaOfHeader rebuilds
// the join state on conversion.
func SchemaStateMeta(sch *engine.Schema) func(engine.StateDesc) (flinkwrite.StateMetaInfo, error) {
	return func(d engine.StateDesc) (flinkwrite.StateMetaInfo, error) {
		for _, st := range sch.States {
			if st.Name != d.Name {
				continue
			}
			if st.Desc() != d {
				return flinkwrite.StateMetaInfo{}, fmt.Errorf("checkpoint: state %q: schema says %s ttl %s, backend declares %s ttl %s", d.Name, st.Kind, st.TTL, d.Kind, d.TTL)
			}
			if st.Join != nil {
				return joinStateMeta(st, d)
			}
			return st.FlinkMeta()
		}
		return flinkwrite.StateMetaInfo{}, fmt.Errorf("checkpoint: state %q is not in the schema", d.Name)
	}
}

// joinStateMeta is the meta info of join-record state st (declared as d):
// byte arrays for the stored bytes plus the join description.
func joinStateMeta(st engine.StateSchema, d engine.StateDesc) (flinkwrite.StateMetaInfo, error) {
	if d != recordstore.StateDesc(recordstore.LayoutRecord, d.TTL) && d != recordstore.StateDesc(recordstore.LayoutBucket, d.TTL) {
		return flinkwrite.StateMetaInfo{}, fmt.Errorf("checkpoint: state %q (%s) holds join records but is neither recordstore's %q (map) nor %q (value)",
			d.Name, d.Kind, recordstore.RecordStateName, recordstore.BucketStateName)
	}
	if err := st.Validate(); err != nil {
		return flinkwrite.StateMetaInfo{}, fmt.Errorf("checkpoint: %w", err)
	}
	m, err := ByteArrayStateMeta(d)
	if err != nil {
		return m, err
	}
	if m, err = st.Join.Describe(m); err != nil {
		return m, fmt.Errorf("checkpoint: state %q: %w", d.Name, err)
	}
	return m, nil
}

// MetaHeader parses the meta-state stream of a native checkpoint's
// operator op (inline in `_metadata`, the same for every subtask; the
// first subtask's is read). name is the checkpoint's name in messages.
func MetaHeader(op *savepoint.OperatorState, name string) (*keyed.Header, error) {
	for _, sub := range op.Subtasks {
		h, ok := sub.ManagedKeyed.(*savepoint.IncrementalHandle)
		if !ok || h.Meta == nil {
			continue
		}
		if h.Meta.Data == nil {
			return nil, fmt.Errorf("%s: subtask %d: the meta-state stream is not inline", name, sub.Index)
		}
		hdr, _, err := keyed.ReadHeader(bytes.NewReader(h.Meta.Data), fmt.Sprintf("%s (meta-state stream of subtask %d)", name, sub.Index))
		return hdr, err
	}
	return nil, fmt.Errorf("%s: no subtask with an incremental keyed handle", name)
}

// StoreURI is a store root (a local directory or a URI) as the URI prefix
// of absolute handles: URIs and mem: stores as they are, directories as
// file: URIs.
func StoreURI(s string) string {
	s = strings.TrimSuffix(s, "/")
	if strings.Contains(s, "://") || strings.HasPrefix(s, "mem:") {
		return s
	}
	return "file:" + s
}

// buildMetadata is the `_metadata` of a checkpoint: one operator, one tag 11
// IncrementalRemoteKeyedStateHandle per subtask. Shared SST files are
// absolute file handles (as Flink writes shared-scope files), private files
// relative to chk-<id>/, the meta-state stream inline.
func buildMetadata(m *Manifest, o *Options, storeName string, meta []byte, uploaded []int64) ([]byte, error) {
	opID := o.OperatorID
	if opID == (savepoint.OperatorID{}) {
		opID = DefaultOperatorID
	}
	parallelism := 0
	for _, s := range m.Subtasks {
		if s.Index+1 > parallelism {
			parallelism = s.Index + 1
		}
	}
	op := &savepoint.OperatorState{ID: opID, Parallelism: int32(parallelism), MaxParallelism: int32(m.MaxParallelism)}
	for i, s := range m.Subtasks {
		h := &savepoint.IncrementalHandle{
			Tag:              savepoint.TagIncrementalKeyGroupsV2,
			CheckpointID:     m.CheckpointID,
			BackendID:        s.BackendID,
			StartKeyGroup:    int32(s.StartKeyGroup),
			NumKeyGroups:     int32(s.EndKeyGroup - s.StartKeyGroup + 1),
			CheckpointedSize: uploaded[i],
			StateHandleID:    savepoint.NewUUID(),
		}
		SetHandleStreams(h, storeName, m.CheckpointID, &s, meta)
		op.Subtasks = append(op.Subtasks, &savepoint.SubtaskState{Index: s.Index, ManagedKeyed: h})
	}
	md := &savepoint.Metadata{Version: 3, CheckpointID: m.CheckpointID, Operators: []*savepoint.OperatorState{op}}
	return savepoint.EncodeMetadata(md)
}

// SetHandleStreams points h at subtask s's objects of checkpoint id in the
// store named storeName: the meta-state stream inline, shared files as
// absolute file handles (as Flink writes shared-scope files), private files
// relative to chk-<id>/.
func SetHandleStreams(h *savepoint.IncrementalHandle, storeName string, id int64, s *Subtask, meta []byte) {
	root := StoreURI(storeName)
	dir := Dir(id) + "/"
	h.Meta = &savepoint.StreamHandle{Tag: savepoint.TagByteStream, Name: root + "/" + dir + fmt.Sprintf("task-%d/_meta", s.Index), Data: meta}
	h.Shared, h.Private = nil, nil
	for _, f := range s.Shared {
		h.Shared = append(h.Shared, savepoint.NamedStream{Name: f.Name,
			Handle: &savepoint.StreamHandle{Tag: savepoint.TagFile, Path: root + "/" + f.Key, Size: f.Size}})
	}
	for _, f := range s.Private {
		h.Private = append(h.Private, savepoint.NamedStream{Name: f.Name,
			Handle: &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: strings.TrimPrefix(f.Key, dir), Size: f.Size}})
	}
}
