package s3

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// Mem is an in-memory Storage for unit tests. It is safe for concurrent use.
type Mem struct {
	mu   sync.RWMutex
	objs map[string]memObj
}

type memObj struct {
	data []byte
	mod  time.Time
}

var _ Storage = (*Mem)(nil)

// NewMem returns an empty in-memory store.
func NewMem() *Mem { return &Mem{objs: make(map[string]memObj)} }

func (m *Mem) String() string { return "mem:" }

func (m *Mem) lookup(key string) (memObj, error) {
	if err := ValidateKey(key); err != nil {
		return memObj{}, err
	}
	m.mu.RLock()
	o, ok := m.objs[key]
	m.mu.RUnlock()
	if !ok {
		return memObj{}, fmt.Errorf("mem: %s: %w", key, ErrNotExist)
	}
	return o, nil
}

// Get returns the whole object.
func (m *Mem) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return m.GetRange(ctx, key, 0, -1)
}

// GetRange returns n bytes from off (n < 0: to the end).
func (m *Mem) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := m.lookup(key)
	if err != nil {
		return nil, err
	}
	if !readVersionFrom(ctx).checkFile(int64(len(o.data)), o.mod) {
		return nil, fmt.Errorf("%w: mem: %s was replaced", ErrChanged, key)
	}
	n, err = checkRange("mem", key, off, n, int64(len(o.data)))
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(o.data[off : off+n])), nil
}

// Stat describes key.
func (m *Mem) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	o, err := m.lookup(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{Key: key, Size: int64(len(o.data)), ModTime: o.mod}, nil
}

// List returns the objects under prefix, sorted.
func (m *Mem) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	m.mu.RLock()
	var out []ObjectInfo
	for k, o := range m.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, ObjectInfo{Key: k, Size: int64(len(o.data)), ModTime: o.mod})
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m *Mem) read(key string, r io.Reader, size int64) ([]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if size > 0 && size < 1<<30 {
		buf.Grow(int(size))
	}
	if _, err := io.Copy(&buf, r); err != nil {
		return nil, fmt.Errorf("mem: put %s: %w", key, err)
	}
	if size >= 0 && int64(buf.Len()) != size {
		return nil, fmt.Errorf("%w: mem: put %s: read %d bytes, expected %d", ErrPermanent, key, buf.Len(), size)
	}
	return buf.Bytes(), nil
}

// Put stores r under key.
func (m *Mem) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	data, err := m.read(key, r, size)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	m.objs[key] = memObj{data: data, mod: time.Now()}
	m.mu.Unlock()
	return nil
}

// PutIfAbsent stores r under key unless key exists (then ErrExists).
func (m *Mem) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	data, err := m.read(key, r, size)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; ok {
		return fmt.Errorf("mem: %s: %w", key, ErrExists)
	}
	m.objs[key] = memObj{data: data, mod: time.Now()}
	return nil
}

// Delete removes key; a missing key is not an error.
func (m *Mem) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.objs, key)
	m.mu.Unlock()
	return nil
}

// Copy duplicates srcKey to dstKey.
func (m *Mem) Copy(ctx context.Context, srcKey, dstKey string) error {
	o, err := m.lookup(srcKey)
	if err != nil {
		return err
	}
	if err := ValidateKey(dstKey); err != nil {
		return err
	}
	m.mu.Lock()
	m.objs[dstKey] = memObj{data: o.data, mod: time.Now()}
	m.mu.Unlock()
	return nil
}
