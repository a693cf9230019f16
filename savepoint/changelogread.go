package savepoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// State changes of the changelog state backend (AbstractStateChangeLogger,
// ChangelogBackendLogApplier). Each change is one byte string logged for a
// key group:
//
//	key group -1 (metadata): u8 op (8 as Flink 1.17 wrote it; the
//	    StateChangeOperation sources at hand say 9; both are accepted),
//	    i32 meta-info snapshot version, the StateMetaInfoSnapshot (starts
//	    with UTF state name), [key/value states: TTL config and default
//	    value], u16 stateId, u8 backend state type (0 KEY_VALUE,
//	    3 PRIORITY_QUEUE)
//	other key groups (data):  u8 op, u16 stateId, scope (key, namespace),
//	    operation data (value, element, ...)
//
// The metadata change registers the state id used by the data changes that
// follow it in the same log. Listing reads the name and the trailing id and
// type; the serializer snapshots in between are not decoded.

// MetaKeyGroup is the key group of metadata changes.
const MetaKeyGroup = -1

// State change operations (StateChangeOperation codes of data changes).
var stateChangeOps = []string{
	"CLEAR", "SET", "SET_INTERNAL", "ADD", "MERGE_NS", "ADD_ELEMENT",
	"ADD_OR_UPDATE_ELEMENT", "REMOVE_ELEMENT", "REMOVE_FIRST_ELEMENT",
}

// StateChangeOpName names a data change's operation code.
func StateChangeOpName(op byte) string {
	if int(op) < len(stateChangeOps) {
		return stateChangeOps[op]
	}
	return fmt.Sprintf("OP_%d", op)
}

// backendStateTypes names StateMetaInfoSnapshot.BackendStateType codes.
var backendStateTypes = []string{"KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE"}

// StateChangeInfo is the decoded frame of one state change.
type StateChangeInfo struct {
	// Metadata is set for a metadata change (key group -1).
	Metadata bool
	// Op is the operation code.
	Op byte
	// StateID is the state a data change applies to, or the id a metadata
	// change registers.
	StateID uint16
	// Metadata changes only: the state's name, the meta-info snapshot
	// version and the backend state type code.
	StateName   string
	MetaVersion int32
	StateType   byte
	// Payload is a data change's scope and operation data.
	Payload []byte
}

// TypeName names a metadata change's backend state type.
func (c *StateChangeInfo) TypeName() string {
	if int(c.StateType) < len(backendStateTypes) {
		return backendStateTypes[c.StateType]
	}
	return fmt.Sprintf("TYPE_%d", c.StateType)
}

// ParseStateChange decodes the frame of change c. Errors carry the offset
// inside the change's bytes.
func ParseStateChange(c StateChange) (*StateChangeInfo, error) {
	d := binfmt.New(c.Data, 0)
	info := &StateChangeInfo{Op: d.U8()}
	if c.KeyGroup == MetaKeyGroup {
		info.Metadata = true
		if d.Err() == nil && info.Op != 8 && info.Op != 9 {
			return nil, &binfmt.OffsetError{Offset: 0, Err: fmt.Errorf("%w: metadata change with operation code %d (want 8 or 9)", binfmt.ErrCorrupt, info.Op)}
		}
		at := d.Offset()
		info.MetaVersion = d.I32()
		if d.Err() == nil && (info.MetaVersion < 1 || info.MetaVersion > 64) {
			return nil, &binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: state meta info snapshot version %d", binfmt.ErrCorrupt, info.MetaVersion)}
		}
		info.StateName = d.UTF()
		if err := d.Err(); err != nil {
			return nil, err
		}
		if d.Len() < 3 {
			return nil, &binfmt.OffsetError{Offset: int64(len(c.Data)), Err: fmt.Errorf("%w: metadata change of state %q ends before its state id", binfmt.ErrTruncated, info.StateName)}
		}
		n := len(c.Data)
		info.StateID = uint16(c.Data[n-3])<<8 | uint16(c.Data[n-2])
		info.StateType = c.Data[n-1]
		return info, nil
	}
	if d.Err() == nil && int(info.Op) >= len(stateChangeOps) {
		return nil, &binfmt.OffsetError{Offset: 0, Err: fmt.Errorf("%w: unknown state change operation %d", binfmt.ErrCorrupt, info.Op)}
	}
	info.StateID = d.U16()
	if err := d.Err(); err != nil {
		return nil, err
	}
	info.Payload = c.Data[3:]
	return info, nil
}

// maxChangeSetGroups bounds the key-group groups of one change set read
// from a file (a change set holds the groups of one subtask's key groups).
const maxChangeSetGroups = maxKeyGroups + 1

// WalkStateChanges calls fn for every change of h's state-change logs in
// log order: the inline changes (tag 9) and those read from the change-log
// files (tags 10/13). With filesOnly, inline logs are skipped. A change-log
// file starts with u8 1 (Snappy-framed rest) or 0 (plain); each
// (stream, offset) of a handle points, in the decompressed rest, at one
// change set:
//
//	i32 groups, groups × {i32 n, i32 keyGroup, n × (i32 len, len bytes)}
//
// Errors name the file and the offset.
func (sp *Savepoint) WalkStateChanges(ctx context.Context, h *ChangelogHandle, filesOnly bool, fn func(StateChange) error) error {
	for _, l := range h.NonMaterialized {
		if l == nil {
			continue
		}
		if l.Tag == TagChangelogByteIncrement {
			if filesOnly {
				continue
			}
			for _, c := range l.Changes {
				if err := fn(c); err != nil {
					return err
				}
			}
			continue
		}
		for _, s := range l.Streams {
			if err := ctx.Err(); err != nil {
				return err
			}
			if s.Handle == nil {
				continue
			}
			if err := sp.readChangeSet(ctx, s, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// ChangeSetError is a malformed change set in a change-log file. Offsets
// count from the byte after the file's compression flag, in decompressed
// bytes for a compressed file (as Flink's offsets do). Its class is its
// cause's (errclass.ErrCorrupt), and errors.As finds it as an
// *errclass.CorruptionError.
type ChangeSetError struct {
	File       string
	Compressed bool
	// SetOffset is the change set's offset from the handle, Offset where
	// the problem is.
	SetOffset, Offset int64
	Err               error
}

func (e *ChangeSetError) Error() string {
	kind := ""
	if e.Compressed {
		kind = "decompressed "
	}
	return fmt.Sprintf("%s: state-change set at %soffset %d: at offset %d: %v", e.File, kind, e.SetOffset, e.Offset, e.Err)
}

func (e *ChangeSetError) Unwrap() error { return e.Err }

// As lets errors.As see e as an *errclass.CorruptionError: the file and
// the file offset of the problem (the byte after the flag is file offset
// 1), unknown (-1) in a compressed file, whose offsets count decompressed
// bytes.
func (e *ChangeSetError) As(target any) bool {
	p, ok := target.(**errclass.CorruptionError)
	if !ok {
		return false
	}
	off := int64(-1)
	if !e.Compressed && e.Offset >= 0 {
		off = e.Offset + 1
	}
	*p = &errclass.CorruptionError{File: e.File, Offset: off, Err: e.Err}
	return true
}

// readChangeSet reads the change set at s.Offset of s's stream.
func (sp *Savepoint) readChangeSet(ctx context.Context, s ChangelogStream, fn func(StateChange) error) error {
	obj, err := sp.OpenStream(ctx, s.Handle, 0)
	if err != nil {
		return err
	}
	size := obj.Size()
	cerr := &ChangeSetError{File: obj.Loc.Name, SetOffset: s.Offset}
	fail := func(at int64, format string, args ...any) error {
		cerr.Offset, cerr.Err = at, fmt.Errorf("%w: "+format, append([]any{binfmt.ErrCorrupt}, args...)...)
		return cerr
	}
	var flag [1]byte
	if _, err := obj.ReadAt(flag[:], 0); err != nil {
		return fail(0, "reading the compression flag: %v", err)
	}
	var r io.Reader
	switch flag[0] {
	case 0:
		r = io.NewSectionReader(obj, 1, size-1)
	case 1:
		cerr.Compressed = true
		r = keyed.NewSnappyReader(io.NewSectionReader(obj, 1, size-1), 1)
	default:
		return fail(0, "compression flag %d (want 0 or 1)", flag[0])
	}
	if s.Offset < 0 || (flag[0] == 0 && s.Offset >= size-1) {
		return fail(s.Offset, "offset outside the %d bytes after the compression flag", size-1)
	}
	if n, err := io.CopyN(io.Discard, r, s.Offset); err != nil {
		return fail(n, "skipping to the change set: %v", noEOF(err))
	}
	// pos counts decompressed bytes after the flag.
	pos := s.Offset
	var b4 [4]byte
	readI32 := func() (int32, error) {
		if _, err := io.ReadFull(r, b4[:]); err != nil {
			return 0, fail(pos, "%v", noEOF(err))
		}
		pos += 4
		return int32(uint32(b4[0])<<24 | uint32(b4[1])<<16 | uint32(b4[2])<<8 | uint32(b4[3])), nil
	}
	groups, err := readI32()
	if err != nil {
		return err
	}
	if groups < 0 || groups > maxChangeSetGroups {
		return fail(pos-4, "key-group group count %d out of range", groups)
	}
	for g := int32(0); g < groups; g++ {
		n, err := readI32()
		if err != nil {
			return err
		}
		if n < 0 || n > maxCount {
			return fail(pos-4, "change count %d out of range", n)
		}
		kg, err := readI32()
		if err != nil {
			return err
		}
		for i := int32(0); i < n; i++ {
			ln, err := readI32()
			if err != nil {
				return err
			}
			if ln < 0 || int64(ln) > MaxMetadataSize {
				return fail(pos-4, "change length %d out of range", ln)
			}
			// ReadAll of a limited reader grows with the bytes present,
			// not with the claimed length.
			data, err := io.ReadAll(io.LimitReader(r, int64(ln)))
			if err != nil {
				return fail(pos, "%v", err)
			}
			if len(data) != int(ln) {
				return fail(pos, "change of %d bytes truncated after %d", ln, len(data))
			}
			pos += int64(ln)
			if err := fn(StateChange{KeyGroup: kg, Data: data}); err != nil {
				return err
			}
		}
	}
	return nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ChangelogStateSummary counts the logged changes of one state.
type ChangelogStateSummary struct {
	Name string `json:"name"`
	// Type is the backend state type of its metadata change (KEY_VALUE,
	// PRIORITY_QUEUE); "" when the log holds no metadata change for it.
	Type string `json:"type,omitempty"`
	// Changes counts the data changes by operation.
	Changes map[string]int64 `json:"changes"`
	// KeyGroups is the number of distinct key groups changed.
	KeyGroups int   `json:"keyGroups"`
	Bytes     int64 `json:"bytes"`

	kgs map[int32]bool
}

// changeLister accumulates state changes into a ChangelogSummary. One
// lister per changelog handle: state ids are scoped to a log.
type changeLister struct {
	c   *ChangelogSummary
	ids map[uint16]string
	// count is false while replaying changes only for their state ids.
	count bool
}

func newChangeLister(c *ChangelogSummary) *changeLister {
	return &changeLister{c: c, ids: map[uint16]string{}, count: true}
}

func (l *changeLister) state(name string) *ChangelogStateSummary {
	for _, s := range l.c.States {
		if s.Name == name {
			return s
		}
	}
	s := &ChangelogStateSummary{Name: name, Changes: map[string]int64{}, kgs: map[int32]bool{}}
	l.c.States = append(l.c.States, s)
	sort.Slice(l.c.States, func(i, j int) bool { return l.c.States[i].Name < l.c.States[j].Name })
	return s
}

func (l *changeLister) add(ch StateChange) error {
	info, err := ParseStateChange(ch)
	if err != nil {
		if l.count {
			l.c.Undecoded++
			if l.c.Problem == "" {
				l.c.Problem = fmt.Sprintf("state change in key group %d: %v", ch.KeyGroup, err)
			}
		}
		return nil
	}
	if info.Metadata {
		l.ids[info.StateID] = info.StateName
		if l.count {
			l.c.MetadataChanges++
			if s := l.state(info.StateName); s.Type == "" {
				s.Type = info.TypeName()
			}
		}
		return nil
	}
	if !l.count {
		return nil
	}
	name, ok := l.ids[info.StateID]
	if !ok {
		name = fmt.Sprintf("state#%d", info.StateID)
	}
	s := l.state(name)
	s.Changes[StateChangeOpName(info.Op)]++
	s.Bytes += int64(len(ch.Data))
	if !s.kgs[ch.KeyGroup] {
		s.kgs[ch.KeyGroup] = true
		s.KeyGroups++
	}
	return nil
}

// listInlineChanges counts the inline changes of h into c.
func listInlineChanges(c *ChangelogSummary, h *ChangelogHandle) {
	l := newChangeLister(c)
	for _, nm := range h.NonMaterialized {
		if nm == nil || nm.Tag != TagChangelogByteIncrement {
			continue
		}
		for _, ch := range nm.Changes {
			_ = l.add(ch)
		}
	}
}

// statesString describes the per-state change counts for notes.
func (c *ChangelogSummary) statesString() string {
	const maxListed = 12
	var parts []string
	for i, s := range c.States {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("%d more states", len(c.States)-maxListed))
			break
		}
		var ops []string
		for op, n := range s.Changes {
			ops = append(ops, fmt.Sprintf("%s %d", op, n))
		}
		sort.Strings(ops)
		t := ""
		if s.Type != "" {
			t = " (" + s.Type + ")"
		}
		parts = append(parts, fmt.Sprintf("%s%s: %s", s.Name, t, strings.Join(ops, ", ")))
	}
	return strings.Join(parts, "; ")
}

// scanChangelogFiles reads the change-log files of every changelog handle
// (tags 10/13) and adds their changes to the operators' changelog
// summaries (inline changes were counted by Summarize). Inline changes of
// the same handle are replayed first for their state ids.
func scanChangelogFiles(ctx context.Context, sp *Savepoint, sum *Summary, o ScanOptions) error {
	for i, op := range sp.Meta.Operators {
		os := sum.Operators[i]
		if os.Changelog == nil || (o.Operator != "" && sp.FindOperator(o.Operator) != op) {
			continue
		}
		for _, st := range op.Subtasks {
			for _, kh := range []KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
				h, ok := kh.(*ChangelogHandle)
				if !ok || !hasFileLogs(h) {
					continue
				}
				l := newChangeLister(os.Changelog)
				l.count = false
				for _, nm := range h.NonMaterialized {
					if nm != nil && nm.Tag == TagChangelogByteIncrement {
						for _, ch := range nm.Changes {
							_ = l.add(ch)
						}
					}
				}
				l.count = true
				if err := sp.WalkStateChanges(ctx, h, true, l.add); err != nil {
					return err
				}
			}
		}
		os.Note = changelogNote(os.Note, os.Changelog)
	}
	return nil
}

func hasFileLogs(h *ChangelogHandle) bool {
	for _, nm := range h.NonMaterialized {
		if nm != nil && nm.Tag != TagChangelogByteIncrement && len(nm.Streams) > 0 {
			return true
		}
	}
	return false
}

// changelogNote replaces the changelog part of an operator note.
func changelogNote(note string, c *ChangelogSummary) string {
	if i := strings.Index(note, "changelog state backend: "); i >= 0 {
		note = strings.TrimSuffix(note[:i], "; ")
	}
	if note != "" {
		note += "; "
	}
	return note + c.String()
}
