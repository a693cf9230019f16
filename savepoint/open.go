package savepoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"sync"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/s3"
)

// MetadataName is the name of the metadata file inside a savepoint directory.
const MetadataName = "_metadata"

// ErrPath marks a handle whose file lies outside the savepoint or whose path
// is hostile; such files are never read.
var ErrPath = errclass.New(errclass.ErrCorrupt, "savepoint: state file outside the savepoint")

// Savepoint is an opened savepoint or checkpoint: its parsed metadata and the
// store holding its files.
type Savepoint struct {
	Store s3.Storage
	// Dir is the key prefix of the exclusive directory ("" = store root).
	Dir string
	// MetadataKey is the key of `_metadata`.
	MetadataKey string
	// MetadataSize is the size of `_metadata` in bytes.
	MetadataSize int64
	Meta         *Metadata
	// Props is the decoded trailer (nil for V3 or when it failed to
	// decode; see PropsErr).
	Props    *Properties
	PropsErr error
	// Located says which checkpoint was picked when the location given to
	// Locate named a job's checkpoint directory or a checkpoint root (nil
	// otherwise). Set by the caller.
	Located *Picked

	// policy holds the read policy of OpenWith (nil: the defaults).
	policy *policy
	// hdrs holds the keyed-stream headers already parsed (see
	// headercache.go); created by OpenWith, or on first use.
	hdrs *headerCache
}

// Name names the savepoint for messages: store and metadata key.
func (sp *Savepoint) Name() string { return joinName(sp.Store.String(), sp.MetadataKey) }

func joinName(store, key string) string {
	if store == "" {
		return key
	}
	if strings.HasSuffix(store, "/") {
		return store + key
	}
	return store + "/" + key
}

// FormatType returns CANONICAL, NATIVE or "" (unknown: V3 files or checkpoints).
func (sp *Savepoint) FormatType() string {
	if sp.Props != nil {
		return sp.Props.FormatType
	}
	return ""
}

// Open reads and parses the metadata at metadataKey with the default read
// policy (OpenWith with zero options).
func Open(ctx context.Context, st s3.Storage, metadataKey string) (*Savepoint, error) {
	return OpenWith(ctx, st, metadataKey, OpenOptions{})
}

// OpenWith reads and parses the metadata at metadataKey; o says which
// absolute paths outside the savepoint directory its handles may name (see
// OpenOptions). When a handle lies outside every root o allows, the
// sources recorded in SourcesName are read too.
func OpenWith(ctx context.Context, st s3.Storage, metadataKey string, o OpenOptions) (*Savepoint, error) {
	if err := s3.ValidateKey(metadataKey); err != nil {
		return nil, err
	}
	name := joinName(st.String(), metadataKey)
	info, err := st.Stat(ctx, metadataKey)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %s: %w", name, err)
	}
	if info.Size > MaxMetadataSize {
		return nil, fmt.Errorf("%w: %s: %d bytes exceeds the %d-byte limit", ErrFormat, name, info.Size, MaxMetadataSize)
	}
	rc, err := st.Get(ctx, metadataKey)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %s: %w", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxMetadataSize+1))
	if err != nil {
		return nil, fmt.Errorf("savepoint: %s: %w", name, err)
	}
	md, err := ParseMetadata(b, name)
	if err != nil {
		return nil, err
	}
	dir := path.Dir(metadataKey)
	if dir == "." {
		dir = ""
	}
	sp := &Savepoint{Store: st, Dir: dir, MetadataKey: metadataKey, MetadataSize: int64(len(b)), Meta: md, hdrs: newHeaderCache(headerCacheBudget)}
	sp.Props, sp.PropsErr = md.properties(name)
	o.Map = append([]PathMap(nil), o.Map...)
	if err := sp.setPolicy(ctx, o); err != nil {
		return nil, err
	}
	return sp, nil
}

// Location is where a stream handle's bytes are.
type Location struct {
	// Inline holds the bytes of an inline handle (tag 1).
	Inline []byte
	// Key is the object key in the savepoint's store (file handles).
	Key string
	// Start is the byte position of the stream inside the object
	// (non-zero only for segment files).
	Start int64
	// Size is the recorded length, -1 when unknown.
	Size int64
	// Segment is set for a section of a shared file (tag 15): Start and
	// Size delimit the stream.
	Segment bool
	// Name names the stream for messages.
	Name string
	// Store holds Key when it is not the savepoint's own store (shared
	// files of a checkpoint whose store is rooted at its chk-N
	// directory); nil means Savepoint.Store.
	Store s3.Storage
}

// IsInline reports whether the stream's bytes are inside `_metadata`.
func (l Location) IsInline() bool { return l.Key == "" }

// Resolve maps a stream handle to a location. Relative paths stay inside
// the savepoint directory; absolute paths are followed under the roots of
// the read policy (see OpenOptions). Paths with ".." and absolute paths
// outside every allowed root are refused with ErrPath; nothing is read.
func (sp *Savepoint) Resolve(h *StreamHandle) (Location, error) {
	if h == nil {
		return Location{}, fmt.Errorf("savepoint: %s: no stream handle", sp.Name())
	}
	switch h.Tag {
	case TagByteStream:
		return Location{Inline: h.Data, Size: int64(len(h.Data)), Name: joinName(sp.Name(), "inline:"+h.Name)}, nil
	case TagRelativeFile:
		key, err := sp.relativeKey(h.Path)
		if err != nil {
			return Location{}, err
		}
		return Location{Key: key, Size: h.Size, Name: joinName(sp.Store.String(), key)}, nil
	case TagFile, TagSegmentFile:
		loc, err := sp.resolveAbsolute(h.Path, h.Size)
		if err != nil {
			return Location{}, err
		}
		if h.Tag == TagSegmentFile {
			loc.Start, loc.Segment = h.StartPos, true
			if h.StartPos < 0 || h.Size < 0 {
				return Location{}, fmt.Errorf("%w: %s: segment %d+%d of %s is invalid", ErrFormat, sp.Name(), h.StartPos, h.Size, h.Path)
			}
		}
		return loc, nil
	case TagEmptySegmentFile:
		return Location{Inline: []byte{}, Size: 0, Name: "empty-segment"}, nil
	}
	return Location{}, fmt.Errorf("savepoint: %s: stream handle tag %d has no readable bytes", sp.Name(), h.Tag)
}

func (sp *Savepoint) relativeKey(rel string) (string, error) {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.Contains(rel, "\\") {
		return "", fmt.Errorf("%w: %s: relative path %q is empty or absolute", ErrPath, sp.Name(), rel)
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == ".." || seg == "." || seg == "" {
			return "", fmt.Errorf("%w: %s: relative path %q has a %q segment", ErrPath, sp.Name(), rel, seg)
		}
	}
	key := s3.JoinKey(sp.Dir, rel)
	if err := s3.ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %s: relative path %q: %v", ErrPath, sp.Name(), rel, err)
	}
	return key, nil
}

// dirURI returns the savepoint directory as a URI-ish prefix comparable with
// absolute handle paths: "/abs/dir" for local stores, "s3://bucket/prefix/dir"
// for S3.
func (sp *Savepoint) dirURI() string {
	base := strings.TrimSuffix(sp.Store.String(), "/")
	if sp.Dir == "" {
		return base
	}
	return base + "/" + sp.Dir
}

// normalizeURI strips file: scheme forms so that "file:/a/b", "file:///a/b"
// and "/a/b" compare equal; other schemes are kept ("s3a:" is folded to "s3:").
func normalizeURI(p string) string {
	switch {
	case strings.HasPrefix(p, "file://"):
		p = strings.TrimPrefix(p, "file://")
	case strings.HasPrefix(p, "file:"):
		p = strings.TrimPrefix(p, "file:")
	case strings.HasPrefix(p, "s3a://"), strings.HasPrefix(p, "s3p://"), strings.HasPrefix(p, "s3n://"):
		p = "s3://" + p[len("s3a://"):]
	}
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	return p
}

// StoreOf returns the store holding a resolved location's Key.
func (sp *Savepoint) StoreOf(loc Location) s3.Storage {
	if loc.Store != nil {
		return loc.Store
	}
	return sp.Store
}

// unwrapStore strips wrappers (counters, limits, retries) off a store.
func unwrapStore(st s3.Storage) s3.Storage {
	for range 16 {
		u, ok := st.(interface{ Unwrap() s3.Storage })
		if !ok {
			break
		}
		st = u.Unwrap()
	}
	return st
}

// ResolveIncremental resolves a stream handle of an incremental keyed
// handle (tag 11: its meta stream, shared or private files). It is Resolve:
// the shared/ and taskowned/ directories of a checkpoint's job are allowed
// roots for every handle (Flink's file-merging checkpoints put segment
// files of operator and full keyed state there too).
func (sp *Savepoint) ResolveIncremental(h *StreamHandle) (Location, error) {
	return sp.Resolve(h)
}

// Object is a readable stream of a savepoint: inline bytes or a (section of
// a) stored object read with range requests.
type Object struct {
	Loc  Location
	size int64
	r    io.ReaderAt
}

// Size returns the stream length in bytes.
func (o *Object) Size() int64 { return o.size }

// ReadAt implements io.ReaderAt over the stream.
func (o *Object) ReadAt(p []byte, off int64) (int, error) { return o.r.ReadAt(p, off) }

// DefaultReadAhead is the read-ahead of OpenStream's range reader.
const DefaultReadAhead = 256 << 10

// OpenStream opens a handle's bytes for random access. File-backed streams
// are read with GetRange calls through a read-ahead buffer of readAhead
// bytes (DefaultReadAhead when <= 0); memory use is bounded by that buffer.
// The object's actual size is taken from Stat.
func (sp *Savepoint) OpenStream(ctx context.Context, h *StreamHandle, readAhead int) (*Object, error) {
	loc, err := sp.Resolve(h)
	if err != nil {
		return nil, err
	}
	return sp.OpenLocation(ctx, loc, readAhead)
}

// OpenLocation opens a resolved location (see OpenStream).
func (sp *Savepoint) OpenLocation(ctx context.Context, loc Location, readAhead int) (*Object, error) {
	if loc.IsInline() {
		return &Object{Loc: loc, size: int64(len(loc.Inline)), r: bytes.NewReader(loc.Inline)}, nil
	}
	st := sp.StoreOf(loc)
	info, err := st.Stat(ctx, loc.Key)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %s: %w", loc.Name, err)
	}
	size := info.Size
	if loc.Segment {
		if loc.Start+loc.Size > info.Size {
			return nil, fmt.Errorf("%w: %s: segment %d+%d exceeds object of %d bytes", ErrFormat, loc.Name, loc.Start, loc.Size, info.Size)
		}
		size = loc.Size
	}
	return sp.objectOfSize(ctx, loc, size, readAhead), nil
}

// objectOfSize opens a stored location whose stream size is known (taken
// from an earlier OpenLocation) without asking the store.
func (sp *Savepoint) objectOfSize(ctx context.Context, loc Location, size int64, readAhead int) *Object {
	ra := NewRangeReaderAt(ctx, sp.StoreOf(loc), loc.Key, loc.Start, size, readAhead)
	return &Object{Loc: loc, size: size, r: ra}
}

// RangeReaderAt is an io.ReaderAt over [base, base+size) of a stored object,
// served by GetRange with a read-ahead buffer. It is safe for concurrent use
// (calls are serialized).
type RangeReaderAt struct {
	ctx       context.Context
	st        s3.Storage
	key       string
	base      int64
	size      int64
	readAhead int

	mu     sync.Mutex
	buf    []byte
	bufOff int64
	// Requests counts GetRange calls (for tests and statistics).
	Requests int
}

// NewRangeReaderAt returns a reader over size bytes of key starting at base.
func NewRangeReaderAt(ctx context.Context, st s3.Storage, key string, base, size int64, readAhead int) *RangeReaderAt {
	if readAhead <= 0 {
		readAhead = DefaultReadAhead
	}
	return &RangeReaderAt{ctx: ctx, st: st, key: key, base: base, size: size, readAhead: readAhead, bufOff: -1}
}

// Size returns the readable length.
func (r *RangeReaderAt) Size() int64 { return r.size }

// ReadAt reads len(p) bytes at off; a read past the end returns io.EOF with
// the bytes that exist.
func (r *RangeReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("savepoint: %s: negative offset %d", r.key, off)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= r.size {
			return n, io.EOF
		}
		if r.bufOff >= 0 && pos >= r.bufOff && pos < r.bufOff+int64(len(r.buf)) {
			n += copy(p[n:], r.buf[pos-r.bufOff:])
			continue
		}
		want := len(p) - n
		if want >= r.readAhead {
			// Large reads go straight into p, bypassing the buffer.
			m := int64(want)
			if pos+m > r.size {
				m = r.size - pos
			}
			if err := r.fetch(p[n:n+int(m)], pos); err != nil {
				return n, err
			}
			n += int(m)
			continue
		}
		m := int64(r.readAhead)
		if pos+m > r.size {
			m = r.size - pos
		}
		if cap(r.buf) < int(m) {
			r.buf = make([]byte, m, r.readAhead)
		}
		r.buf = r.buf[:m]
		r.bufOff = -1
		if err := r.fetch(r.buf, pos); err != nil {
			return n, err
		}
		r.bufOff = pos
	}
	return n, nil
}

func (r *RangeReaderAt) fetch(dst []byte, pos int64) error {
	r.Requests++
	rc, err := r.st.GetRange(r.ctx, r.key, r.base+pos, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("savepoint: %s: read %d bytes at offset %d: %w", joinName(r.st.String(), r.key), len(dst), r.base+pos, err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, dst); err != nil {
		return fmt.Errorf("savepoint: %s: read %d bytes at offset %d: %w", joinName(r.st.String(), r.key), len(dst), r.base+pos, err)
	}
	return nil
}
