// Package native decodes the entries of native RocksDB snapshots: Flink's
// native savepoints and incremental checkpoints, and the engine's native
// checkpoints. Both reference their files through tag-11 incremental
// keyed-state handles (shared/private SST, MANIFEST, OPTIONS, CURRENT
// files) and carry a meta-state stream that is a keyed-state header
// (keyed.ReadHeader): state names, kinds and serializer snapshots.
//
// The package is pure Go. Opening the downloaded files with RocksDB is the
// caller's job (package engine, which needs cgo); this package finds the
// handles, downloads their files into a directory (Handle.Download) and
// decodes every column-family entry RocksDB returns (Decoder.Decode).
//
// # Key layouts
//
// Flink (LayoutFlink): one column family per state, named after it; keys
// are the canonical savepoint keys — key-group prefix, serialized key,
// [length marker], serialized namespace, [length marker], [map user key] —
// and values are serialized as in canonical savepoints (LIST elements
// separated by ',', MAP values prefixed by a null flag). Timers live in
// `_timer_state/...` families: key-group prefix + TimerSerializer bytes.
// Decoding reuses keyed's block reader on a one-entry block, so keys and
// values are split and decoded exactly like canonical entries.
//
// Engine (LayoutEngine, recognised by the `manifest.json` beside
// `_metadata`): kg | uvarint(len key) key | uvarint(len ns) ns [| user
// key]; values start with an 8-byte big-endian last-access timestamp;
// lists are uvarint-length-prefixed elements, multisets an 8-byte count;
// priority queues kg | 8-byte priority | element with an empty value. Key,
// namespace, user key and values are reported as raw bytes with the TTL
// timestamp.
//
// Join-record states of the engine (their meta info carries the join
// description option sfstate.join.version, see engine.JoinSides.Describe;
// without one, the states the manifest lists as join-buckets of kind value
// or join-records of kind map) keep package recordstore's layout instead: kg | side byte (0 left, 1
// right) | uvarint(len key) key [| row]. A bucket key has no row and its
// value is the 8-byte timestamp, a format byte and the bucket's rows; a
// record key ends with the row and its value is the timestamp, the count
// and the association count (8 bytes big-endian each). They are reported
// with the join key as key, the side ("left" or "right") as namespace,
// the row (record layout) as user key, and as value the bucket payload
// (raw) or the pair [count, association count].
package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/sfstate/sfstate/checkpoint/manifest"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// Layout is the key/value layout of a native snapshot's column families.
type Layout string

const (
	// LayoutFlink is Flink's RocksDB state backend layout.
	LayoutFlink Layout = "flink-rocksdb"
	// LayoutEngine is the engine's own layout (sfstate native checkpoint).
	LayoutEngine Layout = "sfstate-engine"
)

// Limits of what is read into memory.
const (
	maxFilesPerHandle = 1 << 20
	maxMetaBytes      = 64 << 20
)

// ErrFormat marks a malformed native snapshot (bad file names, sizes,
// checksums, keys or values).
var ErrFormat = errclass.New(errclass.ErrCorrupt, "native: invalid native snapshot")

// File is one file of a handle: its local name inside the RocksDB
// directory and where its bytes are.
type File struct {
	Name   string
	Loc    savepoint.Location
	Shared bool
	// Size is the recorded size (-1 unknown); CRC the CRC-32C when HasCRC
	// (engine manifests record it).
	Size   int64
	CRC    uint32
	HasCRC bool
}

// Handle is one subtask's native keyed-state handle, resolved.
type Handle struct {
	Operator *savepoint.OperatorState
	Subtask  int
	Incr     *savepoint.IncrementalHandle
	Header   *keyed.Header
	// MetaName names the meta-state stream in messages.
	MetaName string
	Files    []File
	Layout   Layout
	// EngineStates are the manifest's states (LayoutEngine only).
	EngineStates []manifest.StateInfo
	// OutOfRange counts the entries Walk skipped because their key group
	// lies outside the handle's range.
	OutOfRange int64
}

// KeyGroupRange returns the handle's inclusive key-group range.
func (h *Handle) KeyGroupRange() (int, int) { return h.Incr.KeyGroupRange() }

// Snapshot is a savepoint's native handles with the detected layout.
type Snapshot struct {
	Layout Layout
	// LayoutReason says how the layout was detected.
	LayoutReason string
	Handles      []*Handle
}

// Open resolves the native keyed handles of sp (tags 5 and 11) of the
// operators o selects, reads their meta-state headers and detects the key
// layout. Nothing is downloaded yet.
func Open(ctx context.Context, sp *savepoint.Savepoint, o savepoint.ScanOptions) (*Snapshot, error) {
	s := &Snapshot{Layout: LayoutFlink, LayoutReason: "no sfstate manifest beside _metadata: Flink RocksDB state backend layout"}
	man, err := readEngineManifest(ctx, sp)
	if err != nil {
		return nil, err
	}
	if man != nil {
		s.Layout = LayoutEngine
		s.LayoutReason = fmt.Sprintf("%s (%s v%d) beside _metadata: sfstate engine layout", manifest.Name, man.Format, man.Version)
	}
	for _, op := range sp.Meta.Operators {
		if o.Operator != "" && op.ID.String() != o.Operator {
			continue
		}
		for _, st := range op.Subtasks {
			for _, kh := range []savepoint.KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
				ih, ok := kh.(*savepoint.IncrementalHandle)
				if !ok || ih == nil {
					continue
				}
				h, err := openHandle(ctx, sp, op, st.Index, ih, s.Layout)
				if err != nil {
					return nil, err
				}
				if man != nil {
					h.EngineStates = man.States
					if err := h.attachCRCs(man); err != nil {
						return nil, fmt.Errorf("%w: %s: %v", ErrFormat, sp.Name(), err)
					}
				}
				s.Handles = append(s.Handles, h)
			}
		}
	}
	return s, nil
}

// readEngineManifest reads the engine's checkpoint manifest beside sp's
// `_metadata` (package checkpoint/manifest, validated against the
// checkpoint id), nil when there is none or it is some other tool's.
func readEngineManifest(ctx context.Context, sp *savepoint.Savepoint) (*manifest.Manifest, error) {
	key := s3.JoinKey(sp.Dir, manifest.Name)
	if sp.Dir == "" {
		key = manifest.Name
	}
	m, err := manifest.ReadKey(ctx, sp.Store, key, sp.Meta.CheckpointID)
	if s3.IsNotExist(err) || errors.Is(err, manifest.ErrForeign) {
		// No manifest, or some other tool's: keep Flink's layout.
		return nil, nil
	}
	return m, err
}

// attachCRCs copies the manifest's CRC-32C of every file of h's subtask.
func (h *Handle) attachCRCs(m *manifest.Manifest) error {
	for _, st := range m.Subtasks {
		if st.Index != h.Subtask {
			continue
		}
		crcs := map[string]manifest.Object{}
		for _, o := range st.Shared {
			crcs[o.Name] = o.Object
		}
		for _, o := range st.Private {
			crcs[o.Name] = o
		}
		for i := range h.Files {
			o, ok := crcs[h.Files[i].Name]
			if !ok {
				return fmt.Errorf("subtask %d file %q is not in the manifest", h.Subtask, h.Files[i].Name)
			}
			h.Files[i].CRC, h.Files[i].HasCRC = o.CRC, true
			if h.Files[i].Size < 0 {
				h.Files[i].Size = o.Size
			} else if h.Files[i].Size != o.Size {
				return fmt.Errorf("subtask %d file %q: metadata says %d bytes, manifest %d", h.Subtask, h.Files[i].Name, h.Files[i].Size, o.Size)
			}
		}
		return nil
	}
	return fmt.Errorf("subtask %d is not in the manifest", h.Subtask)
}

// validLocalName accepts RocksDB file names: no separators, no dot names.
func validLocalName(n string) bool {
	if n == "" || n == "." || n == ".." || len(n) > 255 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c == '/' || c == '\\' || c == 0 || c < 0x20 {
			return false
		}
	}
	return true
}

func openHandle(ctx context.Context, sp *savepoint.Savepoint, op *savepoint.OperatorState, subtask int, ih *savepoint.IncrementalHandle, layout Layout) (*Handle, error) {
	h := &Handle{Operator: op, Subtask: subtask, Incr: ih, Layout: layout}
	where := fmt.Sprintf("%s: operator %s subtask %d", sp.Name(), op.ID, subtask)
	if n := len(ih.Shared) + len(ih.Private); n > maxFilesPerHandle {
		return nil, fmt.Errorf("%w: %s: %d files", ErrFormat, where, n)
	}
	seen := map[string]bool{}
	add := func(list []savepoint.NamedStream, shared bool) error {
		for _, f := range list {
			if !validLocalName(f.Name) {
				return fmt.Errorf("%w: %s: hostile local file name %q", ErrFormat, where, f.Name)
			}
			if seen[f.Name] {
				return fmt.Errorf("%w: %s: file %q listed twice", ErrFormat, where, f.Name)
			}
			seen[f.Name] = true
			loc, err := sp.ResolveIncremental(f.Handle)
			if err != nil {
				return fmt.Errorf("%s: file %q: %w", where, f.Name, err)
			}
			h.Files = append(h.Files, File{Name: f.Name, Loc: loc, Shared: shared, Size: loc.Size})
		}
		return nil
	}
	if err := add(ih.Shared, true); err != nil {
		return nil, err
	}
	if err := add(ih.Private, false); err != nil {
		return nil, err
	}
	if !seen["CURRENT"] {
		return nil, fmt.Errorf("%w: %s: the handle lists no CURRENT file", ErrFormat, where)
	}
	if ih.Meta == nil {
		return nil, fmt.Errorf("%w: %s: no meta-state handle", ErrFormat, where)
	}
	loc, err := sp.ResolveIncremental(ih.Meta)
	if err != nil {
		return nil, fmt.Errorf("%s: meta state: %w", where, err)
	}
	obj, err := sp.OpenLocation(ctx, loc, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: meta state: %w", where, err)
	}
	if obj.Size() > maxMetaBytes {
		return nil, fmt.Errorf("%w: %s: meta state %s is %d bytes", ErrFormat, where, loc.Name, obj.Size())
	}
	h.MetaName = loc.Name
	hdr, _, err := keyed.ReadHeader(io.NewSectionReader(obj, 0, obj.Size()), loc.Name)
	if err != nil {
		return nil, fmt.Errorf("%s: meta state: %w", where, err)
	}
	h.Header = hdr
	return h, nil
}

// Download copies every file of h into dir (which must exist and be
// empty), checking recorded sizes and, for engine checkpoints, CRC-32C. A
// failure names the object. dir is left for the caller to remove.
func (h *Handle) Download(ctx context.Context, sp *savepoint.Savepoint, dir string) error {
	for _, f := range h.Files {
		if err := downloadFile(ctx, sp, f, filepath.Join(dir, f.Name)); err != nil {
			return err
		}
	}
	return nil
}

func downloadFile(ctx context.Context, sp *savepoint.Savepoint, f File, dst string) error {
	var src io.Reader
	if f.Loc.IsInline() {
		src = bytes.NewReader(f.Loc.Inline)
	} else {
		obj, err := sp.OpenLocation(ctx, f.Loc, 1<<20)
		if err != nil {
			return fmt.Errorf("native: file %q: %w", f.Name, err)
		}
		if f.Size >= 0 && !f.Loc.Segment && obj.Size() != f.Size {
			return fmt.Errorf("%w: %s (%s): %d bytes, the handle records %d", ErrFormat, f.Loc.Name, f.Name, obj.Size(), f.Size)
		}
		src = io.NewSectionReader(obj, 0, obj.Size())
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("native: %s: %w", f.Name, err)
	}
	hw := s3.NewHashingWriter(out)
	n, err := io.Copy(hw, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("native: download %s (%s): %w", f.Loc.Name, f.Name, err)
	}
	if f.HasCRC {
		if got := hw.Sum(); got != f.CRC || n != f.Size {
			return fmt.Errorf("%w: %s (%s): CRC-32C %08x over %d bytes, manifest records %08x over %d bytes", ErrFormat, f.Loc.Name, f.Name, got, n, f.CRC, f.Size)
		}
	}
	return nil
}

// NameOf maps a path inside a download directory back to the object it was
// downloaded from, for error messages ("" when unknown).
func (h *Handle) NameOf(base string) string {
	for _, f := range h.Files {
		if f.Name == base {
			return f.Loc.Name
		}
	}
	return ""
}

// RewriteError replaces the download directory's paths in a RocksDB error
// message by the objects the files came from, so corruption errors name
// the savepoint file.
func (h *Handle) RewriteError(err error, dir string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if !strings.Contains(msg, dir) {
		return fmt.Errorf("%s subtask %d: %w", h.Operator.ID, h.Subtask, err)
	}
	var files []string
	for _, f := range h.Files {
		p := filepath.Join(dir, f.Name)
		if strings.Contains(msg, p) {
			msg = strings.ReplaceAll(msg, p, f.Loc.Name+" ("+f.Name+")")
			files = append(files, f.Loc.Name)
		}
	}
	msg = strings.ReplaceAll(msg, dir, "<download dir>")
	return &FileError{Files: files, Msg: fmt.Sprintf("operator %s subtask %d: %s", h.Operator.ID, h.Subtask, msg), Err: err}
}

// FileError is a RocksDB failure on downloaded files, with the objects
// named. It is of class errclass.ErrCorrupt when RocksDB reports a
// Corruption status (a checksum mismatch, a truncated or unreadable SST),
// and errors.As finds it as an *errclass.CorruptionError naming the first
// of Files (RocksDB's message does not give a file offset).
type FileError struct {
	Files []string
	Msg   string
	Err   error
}

func (e *FileError) Error() string { return e.Msg }
func (e *FileError) Unwrap() error { return e.Err }

// rocksCorruption is how RocksDB's Status::ToString begins a Corruption
// status (kCorruption), the code of damaged files.
const rocksCorruption = "Corruption: "

// Is reports the class errclass.ErrCorrupt for a RocksDB Corruption status.
func (e *FileError) Is(target error) bool {
	return target == errclass.ErrCorrupt && strings.Contains(e.Msg, rocksCorruption)
}

// rocksBlockAt is how RocksDB ends a block checksum mismatch: "... in
// FILE offset N size M" (the bad block's position in the SST).
var rocksBlockAt = regexp.MustCompile(` offset (\d+) size \d+`)

// As lets errors.As see a Corruption status naming a file as an
// *errclass.CorruptionError, at the bad block's offset when RocksDB gives
// it (a block checksum mismatch), else at an unknown offset.
func (e *FileError) As(target any) bool {
	p, ok := target.(**errclass.CorruptionError)
	if !ok || len(e.Files) == 0 || !e.Is(errclass.ErrCorrupt) {
		return false
	}
	off := int64(-1)
	if len(e.Files) == 1 {
		if m := rocksBlockAt.FindStringSubmatch(e.Msg); m != nil {
			if n, err := strconv.ParseInt(m[1], 10, 64); err == nil {
				off = n
			}
		}
	}
	*p = &errclass.CorruptionError{File: e.Files[0], Offset: off, Err: e.Err}
	return true
}

// DirReader reads a RocksDB directory entry by entry (engine.ReadNativeDir;
// it needs cgo, which this package does not use).
type DirReader func(dir string, fn func(cf string, key, value []byte) error) error

// WalkOptions selects what Walk decodes.
type WalkOptions struct {
	// State, when set, keeps only that state's entries.
	State string
	// KeyGroupFrom..KeyGroupTo (inclusive) keep only those key groups;
	// KeyGroupTo < 0 keeps all.
	KeyGroupFrom, KeyGroupTo int
	// TempDir is where download directories are made ("" = os.TempDir()).
	TempDir string
}

// Walk downloads each handle's files into a fresh temporary directory,
// reads them with read and calls fn for every decoded entry, handle by
// handle. Temporary directories are removed before Walk returns, on
// errors too. Entries outside their handle's key-group range are skipped
// and counted in Handle.OutOfRange. An error returned by fn ends the walk and is
// returned as is.
func (s *Snapshot) Walk(ctx context.Context, sp *savepoint.Savepoint, read DirReader, o WalkOptions, fn func(h *Handle, e *keyed.Entry) error) error {
	for _, h := range s.Handles {
		if err := s.walkHandle(ctx, sp, h, read, o, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s *Snapshot) walkHandle(ctx context.Context, sp *savepoint.Savepoint, h *Handle, read DirReader, o WalkOptions, fn func(h *Handle, e *keyed.Entry) error) (err error) {
	lo, hi := h.KeyGroupRange()
	if o.KeyGroupTo >= 0 && (o.KeyGroupTo < lo || o.KeyGroupFrom > hi) {
		return nil
	}
	if o.State != "" && h.Header.State(o.State) == nil {
		return nil
	}
	dec, err := h.NewDecoder(int(h.Operator.MaxParallelism))
	if err != nil {
		return fmt.Errorf("operator %s subtask %d: %w", h.Operator.ID, h.Subtask, err)
	}
	dir, err := os.MkdirTemp(o.TempDir, "sfstate-native-")
	if err != nil {
		return fmt.Errorf("native: temporary directory: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = fmt.Errorf("native: removing %s: %w", dir, rerr)
		}
	}()
	if err := h.Download(ctx, sp, dir); err != nil {
		return err
	}
	var cbErr error
	rerr := read(dir, func(cf string, key, value []byte) error {
		if err := ctx.Err(); err != nil {
			cbErr = err
			return err
		}
		if o.State != "" && cf != o.State {
			return nil
		}
		err := dec.Decode(cf, key, value, func(e *keyed.Entry) error {
			if o.KeyGroupTo >= 0 && (e.KeyGroup < o.KeyGroupFrom || e.KeyGroup > o.KeyGroupTo) {
				return nil
			}
			return fn(h, e)
		})
		if errors.Is(err, ErrOutOfRange) {
			h.OutOfRange++
			return nil
		}
		if err != nil {
			cbErr = err
		}
		return err
	})
	if rerr == nil {
		return nil
	}
	if cbErr != nil && errors.Is(rerr, cbErr) {
		return cbErr
	}
	return h.RewriteError(rerr, dir)
}
