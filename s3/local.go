package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Local is a Storage over a directory. Keys map to files below the root;
// "/" in a key is a directory separator.
//
// Durability: Put writes a temporary file in the destination directory,
// fsyncs it, renames it over the key and fsyncs the directory, so a crash
// leaves either the old object or the complete new one. PutIfAbsent
// publishes with link(2), which fails atomically when the name exists, so
// concurrent writers (also in other processes) see exactly one winner.
//
// Keys are checked lexically (ValidateKey) and cannot name a path outside
// the root. Symbolic links that already exist inside the root are followed
// like any directory: the root's contents are trusted; List does not follow
// links.
type Local struct {
	root string
}

var _ Storage = (*Local)(nil)

// NewLocal returns a store rooted at dir, creating it if needed.
func NewLocal(dir string) (*Local, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty directory", ErrBadKey)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("local store %s: %w", abs, err)
	}
	return &Local{root: abs}, nil
}

// Root returns the absolute root directory.
func (l *Local) Root() string { return l.root }

func (l *Local) String() string { return l.root }

// path maps a validated key to a file path under the root.
func (l *Local) path(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	p := filepath.Join(l.root, filepath.FromSlash(key))
	if !strings.HasPrefix(p, l.root+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %q escapes the root", ErrBadKey, key)
	}
	return p, nil
}

func (l *Local) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s: %s %s: %w", l.root, op, key, ErrNotExist)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %s: %s %s: %v", ErrPermanent, l.root, op, key, err)
	}
	return fmt.Errorf("%s: %s %s: %w", l.root, op, key, err)
}

// open opens a regular file for key; directories count as missing.
func (l *Local) open(key string) (*os.File, int64, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, l.wrap("open", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, l.wrap("stat", key, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, l.wrap("open", key, fs.ErrNotExist)
	}
	return f, st.Size(), nil
}

// Get returns the whole object.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return l.GetRange(ctx, key, 0, -1)
}

type sectionCloser struct {
	*io.SectionReader
	f *os.File
}

func (s sectionCloser) Close() error { return s.f.Close() }

// GetRange returns n bytes from off (n < 0: to the end).
func (l *Local) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, size, err := l.open(key)
	if err != nil {
		return nil, err
	}
	if rv := readVersionFrom(ctx); rv != nil {
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, l.wrap("stat", key, err)
		}
		if !rv.checkFile(st.Size(), st.ModTime()) {
			f.Close()
			return nil, fmt.Errorf("%w: %s: %s was replaced", ErrChanged, l.root, key)
		}
	}
	n, err = checkRange(l.root, key, off, n, size)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sectionCloser{io.NewSectionReader(f, off, n), f}, nil
}

// Stat describes key.
func (l *Local) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	p, err := l.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return ObjectInfo{}, l.wrap("stat", key, err)
	}
	if !st.Mode().IsRegular() {
		return ObjectInfo{}, l.wrap("stat", key, fs.ErrNotExist)
	}
	return ObjectInfo{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// List returns the regular files whose key starts with prefix, sorted.
// Temporary files of in-progress writes are skipped; symlinks are not
// followed.
func (l *Local) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	dir := l.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir = filepath.Join(l.root, filepath.FromSlash(prefix[:i]))
	}
	var out []ObjectInfo
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		rel, rerr := filepath.Rel(l.root, p)
		if rerr != nil {
			return rerr
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p != dir && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) || ValidateKey(key) != nil {
			return nil // links, temporary files, names no key can address
		}
		info, ierr := d.Info()
		if ierr != nil {
			if errors.Is(ierr, fs.ErrNotExist) {
				return nil // deleted while listing
			}
			return ierr
		}
		out = append(out, ObjectInfo{Key: key, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, l.wrap("list", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// writeTemp streams r into a fsynced temporary file next to dst and returns
// its path. The caller renames or removes it.
func (l *Local) writeTemp(ctx context.Context, key, dst string, r io.Reader, size int64) (string, error) {
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", l.wrap("mkdir", key, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	for i := 0; i < 3 && errors.Is(err, fs.ErrNotExist); i++ {
		// A concurrent Delete pruned the directory just made empty.
		if err = os.MkdirAll(dir, 0o755); err == nil {
			f, err = os.CreateTemp(dir, tmpPrefix+"*")
		}
	}
	if err != nil {
		return "", l.wrap("create", key, err)
	}
	tmp := f.Name()
	fail := func(err error) (string, error) {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	n, err := io.Copy(f, ctxReader{ctx, r})
	if err != nil {
		return fail(fmt.Errorf("%s: write %s: %w", l.root, key, err))
	}
	if size >= 0 && n != size {
		return fail(fmt.Errorf("%w: %s: write %s: read %d bytes, expected %d", ErrPermanent, l.root, key, n, size))
	}
	if err := f.Sync(); err != nil {
		return fail(l.wrap("fsync", key, err))
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", l.wrap("close", key, err)
	}
	return tmp, nil
}

// Put atomically replaces key with the bytes of r.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	dst, err := l.path(key)
	if err != nil {
		return err
	}
	tmp, err := l.writeTemp(ctx, key, dst, r, size)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return l.wrap("rename", key, err)
	}
	return l.wrap("fsync dir", key, syncDir(filepath.Dir(dst)))
}

// PutIfAbsent writes key only if it does not exist, atomically.
func (l *Local) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	dst, err := l.path(key)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%s: %s: %w", l.root, key, ErrExists)
	}
	tmp, err := l.writeTemp(ctx, key, dst, r, size)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := publishNoReplace(tmp, dst); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %s: %w", l.root, key, ErrExists)
		}
		return l.wrap("publish", key, err)
	}
	return l.wrap("fsync dir", key, syncDir(filepath.Dir(dst)))
}

// publishNoReplace makes tmp visible as dst unless dst exists. link(2) is
// atomic and fails with EEXIST; where hard links are unsupported the
// platform's rename-without-replace is used.
func publishNoReplace(tmp, dst string) error {
	err := os.Link(tmp, dst)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return err
	}
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EXDEV) {
		return renameNoReplace(tmp, dst)
	}
	return err
}

// Delete removes key; a missing key is not an error.
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if st, err := os.Lstat(p); err == nil && st.IsDir() {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return l.wrap("delete", key, err)
	}
	l.pruneDirs(filepath.Dir(p))
	return nil
}

// pruneDirs removes dir and its parents up to (not including) the root
// while they are empty: as in an object store, a directory below the root
// exists only while it holds objects, so deleting what a failed run wrote
// leaves no empty table directories behind. A writer racing to fill one
// again recreates it (writeTemp).
func (l *Local) pruneDirs(dir string) {
	root := filepath.Clean(l.root)
	for i := 0; i < 64 && dir != root && strings.HasPrefix(dir, root+string(filepath.Separator)); i++ {
		if os.Remove(dir) != nil { // not empty, gone, or not ours to remove
			return
		}
		dir = filepath.Dir(dir)
	}
}

// Copy duplicates srcKey to dstKey (a full, durable write).
func (l *Local) Copy(ctx context.Context, srcKey, dstKey string) error {
	f, size, err := l.open(srcKey)
	if err != nil {
		return err
	}
	defer f.Close()
	return l.Put(ctx, dstKey, f, size)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil // some filesystems cannot fsync a directory
	}
	return err
}

// ctxReader stops a copy when ctx is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
