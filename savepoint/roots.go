package savepoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sfstate/sfstate/s3"
)

// Which files a savepoint may read
//
// File handles (tags 2 and 15) carry absolute URIs: Flink checkpoints write
// "s3://bucket/ck/<job>/chk-7/<uuid>" and "…/<job>/shared/<uuid>", and a
// rescaled savepoint points into the savepoint it was made from. Such a
// path is followed only when it lies under an allowed root:
//
//   - the savepoint's own directory;
//   - when `_metadata` lies in a chk-<id> directory, the shared/ and
//     taskowned/ directories beside it (Flink's CheckpointedStateScope
//     SHARED and the task-owned directory of the same job);
//   - the sources recorded in SourcesName beside `_metadata` (written by
//     sfstate rescale): each is a savepoint or checkpoint directory, which
//     must still hold a `_metadata`, with its own shared/ and taskowned/
//     when it is a chk-<id>;
//   - OpenOptions.AllowRoots and the targets of OpenOptions.Map.
//
// Before the check, OpenOptions.Map rewrites a path prefix (a snapshot
// copied from s3://prod/ck to /data/copy reads with the mapping
// "s3://prod/ck=/data/copy"). Paths with "..", "." or empty segments are
// refused wherever they point. Refusals wrap ErrPath and name the flag that
// would allow the path.

// SourcesName is the file beside `_metadata` in which sfstate rescale
// records the snapshot directories the new `_metadata` references. Flink
// reads only `_metadata` and ignores it.
//
// Layout (JSON): {"format": "sfstate-sources/1", "sources": [URI, ...]}
// where each URI is a snapshot directory, "file:/abs/dir" or
// "s3://bucket/prefix".
const SourcesName = "_sfstate_sources.json"

// sourcesFormat identifies the layout of SourcesName.
const sourcesFormat = "sfstate-sources/1"

// maxSourcesSize bounds SourcesName; maxSources bounds the URIs honored.
const (
	maxSourcesSize = 64 << 10
	maxSources     = 64
)

// Sources is the content of SourcesName.
type Sources struct {
	Format  string   `json:"format"`
	Sources []string `json:"sources"`
}

// EncodeSources renders a SourcesName file for the given snapshot
// directory URIs (deduplicated, in the given order).
func EncodeSources(uris []string) ([]byte, error) {
	seen := map[string]bool{}
	s := Sources{Format: sourcesFormat}
	for _, u := range uris {
		if u == "" || seen[u] {
			continue
		}
		seen[u] = true
		s.Sources = append(s.Sources, u)
	}
	if len(s.Sources) > maxSources {
		return nil, fmt.Errorf("savepoint: %d source directories exceed the limit of %d", len(s.Sources), maxSources)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// OpenOptions is the read policy of OpenWith (see the package notes above
// SourcesName). The zero value allows the savepoint's own directory, its
// checkpoint job's shared directories and recorded sources.
type OpenOptions struct {
	// AllowRoots are further directories (URIs "s3://bucket/prefix",
	// "file:/dir" or absolute local paths) under which absolute handles
	// are followed.
	AllowRoots []string
	// Map rewrites the prefix of absolute handle paths; the first matching
	// From (at a segment boundary) wins. Every To is an allowed root.
	Map []PathMap
	// Store configures stores opened for roots the savepoint's own store
	// does not hold (S3 prefixes of a local savepoint; local roots are read
	// directly). S3 roots of a savepoint on S3 reuse its client.
	Store s3.OpenOptions
}

// PathMap is one prefix rewrite: From (as written in `_metadata`) becomes
// To (where the files are now).
type PathMap struct {
	From, To string
}

// ParsePathMap parses "OLD=NEW". Both sides must be URIs or absolute local
// paths without ".." segments.
func ParsePathMap(s string) (PathMap, error) {
	from, to, ok := strings.Cut(s, "=")
	if !ok || from == "" || to == "" {
		return PathMap{}, fmt.Errorf("savepoint: map %q: want OLD=NEW", s)
	}
	f, err := NormalizeRoot(from)
	if err != nil {
		return PathMap{}, fmt.Errorf("savepoint: map %q: %w", s, err)
	}
	t, err := NormalizeRoot(to)
	if err != nil {
		return PathMap{}, fmt.Errorf("savepoint: map %q: %w", s, err)
	}
	return PathMap{From: f, To: t}, nil
}

// NormalizeRoot turns a root given by a user into the form handle paths are
// compared in: "s3://bucket/prefix" (s3a:, s3n: and s3p: folded to s3:) or
// an absolute local path ("file:" forms stripped; relative local paths made
// absolute). Trailing slashes are dropped; "..", "." and empty segments are
// refused.
func NormalizeRoot(r string) (string, error) {
	if strings.ContainsRune(r, 0) {
		return "", fmt.Errorf("root %q contains NUL", r)
	}
	p := normalizeURI(r)
	if !strings.Contains(p, "://") && !strings.HasPrefix(p, "/") && !strings.Contains(p, ":") {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		p = filepath.ToSlash(abs)
	}
	if p != "/" {
		p = strings.TrimRight(p, "/")
	}
	if seg, bad := hostileSegment(p); bad {
		return "", fmt.Errorf("root %q has a %q segment", r, seg)
	}
	return p, nil
}

// hostileSegment reports the first "..", "." or empty segment of a
// normalized path or URI (after its scheme and authority).
func hostileSegment(p string) (string, bool) {
	rest := p
	if i := strings.Index(p, "://"); i >= 0 {
		rest = p[i+3:]
		// The bucket or host is the first segment.
	} else if i := strings.Index(p, ":"); i >= 0 && !strings.HasPrefix(p, "/") {
		rest = p[i+1:]
	}
	rest = strings.TrimPrefix(rest, "/")
	if rest == "" {
		return "", false
	}
	if strings.Contains(rest, "\\") {
		return "\\", true
	}
	for _, seg := range strings.Split(rest, "/") {
		if seg == ".." || seg == "." || seg == "" {
			return seg, true
		}
	}
	return "", false
}

// under reports whether p lies strictly below root, and the rest.
func under(p, root string) (string, bool) {
	if root == "/" {
		rest, ok := strings.CutPrefix(p, "/")
		return rest, ok && rest != ""
	}
	rest, ok := strings.CutPrefix(p, root+"/")
	return rest, ok && rest != ""
}

// root is one allowed directory.
type root struct {
	uri string // normalized, no trailing "/"
	why string // for messages
}

// policy is the read policy of an opened savepoint: options, recorded
// sources and the stores opened for foreign roots.
type policy struct {
	opts OpenOptions
	// extra are the roots from options and recorded sources.
	extra []root
	// sources are the recorded source directories that were honored.
	sources []string
	// notes explain recorded sources that were not honored.
	notes []string

	mu     sync.Mutex
	stores map[string]s3.Storage // "file:<root>" or "s3://bucket" -> store
}

// storeURI is the URI of a store's root in the normalized form.
func storeURI(st s3.Storage) string {
	s := normalizeURI(st.String())
	if s == "/" {
		return "/"
	}
	return strings.TrimSuffix(s, "/")
}

// ownRoots are the roots every savepoint allows: its directory and, for a
// chk-<id> directory, the job's shared directories.
func (sp *Savepoint) ownRoots() []root {
	dir := normalizeURI(sp.dirURI())
	out := []root{{uri: dir, why: "savepoint directory"}}
	if job, ok := jobDirOf(dir); ok {
		for _, d := range checkpointSharedDirs {
			out = append(out, root{uri: job + "/" + d, why: "checkpoint " + d + " directory"})
		}
	}
	return out
}

// jobDirOf returns the parent of a chk-<id> directory URI.
func jobDirOf(dir string) (string, bool) {
	i := strings.LastIndex(dir, "/")
	if i <= 0 || !isChkDir(dir[i+1:]) {
		return "", false
	}
	job := dir[:i]
	if strings.HasSuffix(job, ":/") || strings.HasSuffix(job, ":") {
		return "", false
	}
	return job, true
}

// allowed returns the root p lies under, if any.
func (sp *Savepoint) allowed(p string) (root, string, bool) {
	for _, r := range sp.ownRoots() {
		if rest, ok := under(p, r.uri); ok {
			return r, rest, true
		}
	}
	if sp.policy != nil {
		for _, r := range sp.policy.extra {
			if rest, ok := under(p, r.uri); ok {
				return r, rest, true
			}
		}
	}
	return root{}, "", false
}

// mapPath applies the first matching OpenOptions.Map entry.
func (sp *Savepoint) mapPath(p string) string {
	if sp.policy == nil {
		return p
	}
	for _, m := range sp.policy.opts.Map {
		if p == m.From {
			return m.To
		}
		if rest, ok := under(p, m.From); ok {
			if m.To == "/" {
				return "/" + rest
			}
			return m.To + "/" + rest
		}
	}
	return p
}

// resolveAbsolute maps an absolute handle path to a key and store.
func (sp *Savepoint) resolveAbsolute(abs string, size int64) (Location, error) {
	p := sp.mapPath(normalizeURI(abs))
	if seg, bad := hostileSegment(p); bad {
		return Location{}, fmt.Errorf("%w: %s: absolute path %q has a %q segment; refusing to read it", ErrPath, sp.Name(), abs, seg)
	}
	r, _, ok := sp.allowed(p)
	if !ok {
		return Location{}, sp.refusal(abs, p)
	}
	st, key, err := sp.storeFor(p, r.uri)
	if err != nil {
		return Location{}, err
	}
	if err := s3.ValidateKey(key); err != nil {
		return Location{}, fmt.Errorf("%w: %s: absolute path %q: %v", ErrPath, sp.Name(), abs, err)
	}
	loc := Location{Key: key, Size: size, Name: joinName(st.String(), key)}
	if st != sp.Store {
		loc.Store = st
	}
	return loc, nil
}

// refusal explains why p (abs as written) is not read and which flag
// would allow it; for a moved checkpoint or savepoint it suggests the
// mapping.
func (sp *Savepoint) refusal(abs, p string) error {
	dir := normalizeURI(sp.dirURI())
	hint := "pass --allow-root PREFIX to allow a directory, or --map OLD=NEW when the snapshot was moved"
	base := path.Base(dir)
	if i := strings.Index(p, "/"+base+"/"); base != "" && base != "/" && i > 0 && p[:i+1+len(base)] != dir {
		hint = fmt.Sprintf("it looks moved: pass --map %s=%s (or --allow-root PREFIX)", p[:i+1+len(base)], dir)
	} else if job, ok := jobDirOf(dir); ok {
		for _, d := range checkpointSharedDirs {
			if i := strings.Index(p, "/"+d+"/"); i > 0 && p[:i] != job {
				hint = fmt.Sprintf("it looks moved: pass --map %s=%s (or --allow-root PREFIX)", p[:i], job)
				break
			}
		}
	}
	msg := fmt.Sprintf("%s: absolute path %q lies outside the savepoint directory %s and every allowed root; refusing to read it (%s)", sp.Name(), abs, dir, hint)
	if sp.policy != nil && len(sp.policy.notes) > 0 {
		msg += "; " + strings.Join(sp.policy.notes, "; ")
	}
	return fmt.Errorf("%w: %s", ErrPath, msg)
}

// storeFor returns the store holding the normalized URI p, which lies
// under the allowed root r, and its key.
func (sp *Savepoint) storeFor(p, r string) (s3.Storage, string, error) {
	if rest, ok := under(p, storeURI(sp.Store)); ok {
		return sp.Store, rest, nil
	}
	var scheme, key string
	switch {
	case strings.HasPrefix(p, "s3://"):
		bucket, k, _ := strings.Cut(strings.TrimPrefix(p, "s3://"), "/")
		scheme, key = "s3://"+bucket, k
	case strings.HasPrefix(p, "/"):
		// A local store rooted at the allowed root (never above it).
		rest, ok := under(p, r)
		if !ok {
			return nil, "", fmt.Errorf("%w: %s: %q is not below %s", ErrPath, sp.Name(), p, r)
		}
		scheme, key = "file:"+r, rest
	default:
		return nil, "", fmt.Errorf("%w: %s: %q: no store reads this scheme; copy the files and pass --map OLD=NEW", ErrPath, sp.Name(), p)
	}
	pol := sp.policy
	if pol == nil {
		pol = &policy{}
	}
	pol.mu.Lock()
	defer pol.mu.Unlock()
	if st, ok := pol.stores[scheme]; ok {
		return st, key, nil
	}
	var st s3.Storage
	if dir, ok := strings.CutPrefix(scheme, "file:"); ok {
		l, err := s3.OpenLocation(context.Background(), s3.Location{Scheme: "file", Dir: filepath.FromSlash(dir)}, s3.OpenOptions{NoRetry: true})
		if err != nil {
			return nil, "", fmt.Errorf("savepoint: %s: %w", p, err)
		}
		st = l
	} else {
		bucket := strings.TrimPrefix(scheme, "s3://")
		if s, ok := unwrapStore(sp.Store).(*s3.S3); ok {
			sub, err := s.At(bucket, "")
			if err != nil {
				return nil, "", fmt.Errorf("savepoint: %s: %w", p, err)
			}
			st = s3.WithRetry(sub, pol.opts.Store.Retry)
		} else {
			o := pol.opts.Store
			o.Create = false
			s, err := s3.OpenLocation(context.Background(), s3.Location{Scheme: "s3", Bucket: bucket}, o)
			if err != nil {
				return nil, "", fmt.Errorf("savepoint: %s: %w", p, err)
			}
			st = s
		}
	}
	if sp.policy != nil {
		if pol.stores == nil {
			pol.stores = map[string]s3.Storage{}
		}
		pol.stores[scheme] = st
	}
	return st, key, nil
}

// URI returns the absolute URI of a resolved (non-inline) location, in the
// form file handles carry: "file:/abs/path" for local files,
// "s3://bucket/key" on S3, the store's own name otherwise.
func (sp *Savepoint) URI(loc Location) string {
	st := sp.StoreOf(loc)
	return joinURI(storeBaseURI(st), loc.Key)
}

// DirURI returns the URI of the savepoint directory ("file:/abs/dir",
// "s3://bucket/prefix").
func (sp *Savepoint) DirURI() string {
	base := storeBaseURI(sp.Store)
	if sp.Dir == "" {
		return strings.TrimSuffix(base, "/")
	}
	return joinURI(base, sp.Dir)
}

func storeBaseURI(st s3.Storage) string {
	if l, ok := unwrapStore(st).(*s3.Local); ok {
		return "file:" + filepath.ToSlash(l.Root())
	}
	return st.String()
}

func joinURI(base, key string) string {
	if strings.HasSuffix(base, "/") {
		return base + key
	}
	return base + "/" + key
}

// Sources returns the recorded source directories this savepoint honors.
func (sp *Savepoint) Sources() []string {
	if sp.policy == nil {
		return nil
	}
	return append([]string(nil), sp.policy.sources...)
}

// PolicyNotes explains recorded sources that were not honored.
func (sp *Savepoint) PolicyNotes() []string {
	if sp.policy == nil {
		return nil
	}
	return append([]string(nil), sp.policy.notes...)
}

// setPolicy installs the options and, when some absolute handle lies
// outside every root they allow, reads the recorded sources.
func (sp *Savepoint) setPolicy(ctx context.Context, o OpenOptions) error {
	pol := &policy{opts: o}
	sp.policy = pol
	for _, r := range o.AllowRoots {
		n, err := NormalizeRoot(r)
		if err != nil {
			return fmt.Errorf("savepoint: --allow-root: %w", err)
		}
		pol.extra = append(pol.extra, root{uri: n, why: "allowed root"})
	}
	for i, m := range o.Map {
		f, err := NormalizeRoot(m.From)
		if err != nil {
			return fmt.Errorf("savepoint: --map: %w", err)
		}
		t, err := NormalizeRoot(m.To)
		if err != nil {
			return fmt.Errorf("savepoint: --map: %w", err)
		}
		pol.opts.Map[i] = PathMap{From: f, To: t}
		pol.extra = append(pol.extra, root{uri: t, why: "mapped root"})
	}
	if !sp.hasForeignHandle() {
		return nil
	}
	return sp.loadSources(ctx)
}

// hasForeignHandle reports whether an absolute handle lies outside every
// root allowed so far.
func (sp *Savepoint) hasForeignHandle() bool {
	found := false
	forEachStream(sp.Meta, func(h *StreamHandle) {
		if found || (h.Tag != TagFile && h.Tag != TagSegmentFile) {
			return
		}
		if _, _, ok := sp.allowed(sp.mapPath(normalizeURI(h.Path))); !ok {
			found = true
		}
	})
	return found
}

// loadSources reads SourcesName beside `_metadata` (a missing file is no
// error) and allows each recorded source that still holds a `_metadata`.
func (sp *Savepoint) loadSources(ctx context.Context) error {
	key := SourcesName
	if sp.Dir != "" {
		key = sp.Dir + "/" + SourcesName
	}
	info, err := sp.Store.Stat(ctx, key)
	if s3.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("savepoint: %s: %w", joinName(sp.Store.String(), key), err)
	}
	name := joinName(sp.Store.String(), key)
	if info.Size > maxSourcesSize {
		return fmt.Errorf("%w: %s: %d bytes exceeds the %d-byte limit", ErrFormat, name, info.Size, maxSourcesSize)
	}
	rc, err := sp.Store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("savepoint: %s: %w", name, err)
	}
	b, err := io.ReadAll(io.LimitReader(rc, maxSourcesSize+1))
	rc.Close()
	if err != nil {
		return fmt.Errorf("savepoint: %s: %w", name, err)
	}
	var s Sources
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil || s.Format != sourcesFormat {
		return fmt.Errorf("%w: %s: not a %s file", ErrFormat, name, sourcesFormat)
	}
	if len(s.Sources) > maxSources {
		return fmt.Errorf("%w: %s: %d sources exceed the limit of %d", ErrFormat, name, len(s.Sources), maxSources)
	}
	pol := sp.policy
	for _, u := range s.Sources {
		n, err := NormalizeRoot(u)
		if err != nil || n == "/" || (!strings.HasPrefix(n, "/") && !strings.HasPrefix(n, "s3://")) {
			pol.notes = append(pol.notes, fmt.Sprintf("recorded source %q in %s is not a directory URI", u, name))
			continue
		}
		st, mk, err := sp.storeFor(n+"/"+MetadataName, n)
		if err == nil {
			_, err = st.Stat(ctx, mk)
		}
		if err != nil {
			pol.notes = append(pol.notes, fmt.Sprintf("recorded source %s (from %s) holds no readable %s, so it is not followed: %v", u, SourcesName, MetadataName, err))
			continue
		}
		pol.sources = append(pol.sources, u)
		pol.extra = append(pol.extra, root{uri: n, why: "recorded source"})
		if job, ok := jobDirOf(n); ok {
			for _, d := range checkpointSharedDirs {
				pol.extra = append(pol.extra, root{uri: job + "/" + d, why: "recorded source's " + d + " directory"})
			}
		}
	}
	return nil
}

// forEachStream calls fn for every stream handle of md (nested key-groups
// handles included).
func forEachStream(md *Metadata, fn func(*StreamHandle)) {
	var stream func(h *StreamHandle)
	stream = func(h *StreamHandle) {
		if h == nil {
			return
		}
		fn(h)
		if h.KeyGroups != nil {
			stream(h.KeyGroups.Delegate)
		}
	}
	keyedH := func(kh KeyedHandle) {
		switch h := kh.(type) {
		case *KeyGroupsHandle:
			stream(h.Delegate)
		case *IncrementalHandle:
			stream(h.Meta)
			for _, l := range [][]NamedStream{h.Shared, h.Private} {
				for _, ns := range l {
					stream(ns.Handle)
				}
			}
		}
	}
	for _, op := range md.Operators {
		stream(op.Coordinator)
		for _, st := range op.Subtasks {
			keyedH(st.ManagedKeyed)
			keyedH(st.RawKeyed)
			for _, oh := range []*OperatorHandle{st.ManagedOperator, st.RawOperator} {
				if oh != nil {
					stream(oh.Delegate)
				}
			}
			for _, chs := range [][]*ChannelHandle{st.InputChannels, st.OutputChannels} {
				for _, ch := range chs {
					stream(ch.Delegate)
				}
			}
		}
	}
}
