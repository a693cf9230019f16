//go:build cgo

package migrate

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/recordstore"
)

// BackendOptions configure MigrateBackend.
type BackendOptions struct {
	// Pool, when set, is charged for the bytes buffered for the next batch;
	// when it refuses, the batch is committed (a chunk) and the conversion
	// continues, mid-key if need be.
	Pool *engine.Pool
	// ChunkBytes caps the bytes of one batch; zero means 4 MiB.
	ChunkBytes int64
	// KeepBuckets leaves the bucket entries in place when source and
	// destination are the same backend (by default each bucket is deleted
	// in the batch that writes its last record).
	KeepBuckets bool
}

// BackendResult describes a MigrateBackend run.
type BackendResult struct {
	Buckets, Rows     int64
	BytesIn, BytesOut int64
	Chunks            int
	// Source is the digest of the bucket state as read.
	Source *Digest
}

// StateID returns the id of the state called name in be.
func StateID(be engine.Backend, name string) (int, error) {
	for i, d := range be.States() {
		if d.Name == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("migrate: backend does not declare state %q", name)
}

// MigrateBackend converts every bucket entry of src (state
// recordstore.BucketStateName) into record entries of dst (state
// recordstore.RecordStateName), key group by key group. src and dst may be
// the same backend (both states declared); then each bucket is deleted in
// the batch that writes its last record, unless KeepBuckets. Records
// already in dst are overwritten by the converted ones (converting is
// idempotent, so an interrupted run can simply be repeated).
func MigrateBackend(src, dst engine.Backend, opts BackendOptions) (*BackendResult, error) {
	sst, err := StateID(src, recordstore.BucketStateName)
	if err != nil {
		return nil, err
	}
	dstID, err := StateID(dst, recordstore.RecordStateName)
	if err != nil {
		return nil, err
	}
	if src.Layout().MaxParallelism != dst.Layout().MaxParallelism {
		return nil, fmt.Errorf("migrate: max parallelism %d vs %d", src.Layout().MaxParallelism, dst.Layout().MaxParallelism)
	}
	chunk := opts.ChunkBytes
	if chunk <= 0 {
		chunk = 4 << 20
	}
	same := src == dst && !opts.KeepBuckets
	m := &backendMigration{
		src: src, dst: dst, sst: sst, dstID: dstID, same: same, chunk: chunk, pool: opts.Pool,
		conv: Converter{Width: src.Layout().Width()},
		res:  &BackendResult{Source: NewDigest()},
	}
	defer m.release()
	l := src.Layout()
	for kg := l.Range.Start; kg <= l.Range.End; kg++ {
		if err := m.keyGroup(kg); err != nil {
			return m.res, err
		}
	}
	return m.res, nil
}

type backendMigration struct {
	src, dst   engine.Backend
	sst, dstID int
	same       bool
	chunk      int64
	pool       *engine.Pool
	rsv        *engine.Reservation
	conv       Converter

	// pending batch
	keys, vals [][]byte
	arena      []byte
	dels       [][]byte
	held       int64

	res *BackendResult
}

func (m *backendMigration) release() {
	if m.rsv != nil {
		m.rsv.Release()
		m.rsv = nil
	}
}

// reserve charges n more buffered bytes; false means commit first.
func (m *backendMigration) reserve(n int64) bool {
	if m.held+n > m.chunk && m.held > 0 {
		return false
	}
	if m.pool == nil {
		m.held += n
		return true
	}
	if m.rsv == nil {
		r, ok := m.pool.Reserve(0)
		if !ok {
			return false
		}
		m.rsv = r
	}
	if m.rsv.Grow(n) {
		m.held += n
		return true
	}
	if m.held == 0 {
		// nothing buffered and still refused: make progress with one
		// record (bounded by the row limit) rather than stall
		m.held += n
		return true
	}
	return false
}

func (m *backendMigration) flush() error {
	if len(m.keys) == 0 && len(m.dels) == 0 {
		return nil
	}
	b := m.dst.NewBatch()
	defer b.Close()
	for i, k := range m.keys {
		b.Put(m.dstID, k, m.vals[i])
	}
	for _, k := range m.dels {
		b.Delete(m.sst, k)
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("migrate: commit chunk: %w", err)
	}
	m.res.Chunks++
	m.keys, m.vals, m.dels = m.keys[:0], m.vals[:0], m.dels[:0]
	m.arena = m.arena[:0]
	if m.rsv != nil {
		m.rsv.Shrink(m.rsv.Size())
	}
	m.held = 0
	return nil
}

var errChunkFull = errors.New("chunk full")

// keyGroup converts the buckets of one key group, in chunks.
func (m *backendMigration) keyGroup(kg int) error {
	lo, hi := m.src.Layout().RangeBounds(kg, kg)
	resume := lo
	skip := 0 // rows of the bucket at resume already converted
	for {
		var next []byte
		nextSkip := 0
		var ferr error
		err := m.src.Scan(m.sst, resume, hi, func(k, v []byte) bool {
			first := skip == 0 || !bytes.Equal(k, resume)
			row := 0
			d := m.res.Source
			var g *GroupStats
			var pc uint64
			_, cerr := m.conv.ConvertBucket(k, v, func(b *Bucket, r *recordstore.LogicalRow, rk, rv []byte) error {
				row++
				if !first && row <= skip {
					return nil
				}
				if !m.reserve(int64(len(rk)+len(rv)) + 48) {
					return errChunkFull
				}
				if g == nil {
					g = d.Group(GroupID{b.Side, b.KeyGroup})
					pc = PrefixHash(k)
					if row == 1 {
						g.Keys++
						g.Bytes += int64(len(b.Key))
					}
				}
				d.AddRow(g, pc, b.Key, r)
				m.res.Rows++
				m.res.BytesOut += int64(len(rk) + len(rv))
				s := len(m.arena)
				m.arena = append(m.arena, rk...)
				m.arena = append(m.arena, rv...)
				m.keys = append(m.keys, m.arena[s:s+len(rk):s+len(rk)])
				m.vals = append(m.vals, m.arena[s+len(rk):len(m.arena):len(m.arena)])
				return nil
			})
			if errors.Is(cerr, errChunkFull) {
				next = append([]byte(nil), k...)
				nextSkip = row - 1
				return false
			}
			if cerr != nil {
				ferr = fmt.Errorf("migrate: %s state %q: %w", m.src.Name(), recordstore.BucketStateName, cerr)
				return false
			}
			m.res.Buckets++
			m.res.BytesIn += int64(len(k) + len(v))
			if m.same {
				m.dels = append(m.dels, append([]byte(nil), k...))
			}
			skip = 0
			return true
		})
		if err == nil {
			err = ferr
		}
		if err != nil {
			return err
		}
		// the arena may have moved: key/value slices were re-sliced from
		// older arrays, which stay valid (append copies, never frees)
		if err := m.flush(); err != nil {
			return err
		}
		if next == nil {
			return nil
		}
		resume, skip = next, nextSkip
	}
}

// DigestBuckets digests the bucket state of be (every stored row, expired
// ones included).
func DigestBuckets(be engine.Backend) (*Digest, error) {
	st, err := StateID(be, recordstore.BucketStateName)
	if err != nil {
		return nil, err
	}
	d := NewDigest()
	w := be.Layout().Width()
	var ferr error
	err = be.Scan(st, nil, nil, func(k, v []byte) bool {
		ferr = d.AddBucketEntry(w, k, v)
		return ferr == nil
	})
	if err == nil {
		err = ferr
	}
	return d, err
}

// DigestRecords digests the record state of be (every stored row, expired
// ones included).
func DigestRecords(be engine.Backend) (*Digest, error) {
	st, err := StateID(be, recordstore.RecordStateName)
	if err != nil {
		return nil, err
	}
	rd := &RecordDigester{D: NewDigest(), Width: be.Layout().Width()}
	var ferr error
	err = be.Scan(st, nil, nil, func(k, v []byte) bool {
		ferr = rd.Add(k, v)
		return ferr == nil
	})
	if err == nil {
		err = ferr
	}
	return rd.D, err
}

// DigestJoinState digests a state's logical content (live rows only, as
// recordstore.JoinState.Logical shows them), whatever its layout.
func DigestJoinState(js recordstore.JoinState, width int) (*Digest, error) {
	d := NewDigest()
	err := js.Logical(func(g *recordstore.LogicalGroup) error {
		d.AddGroup(width, g)
		return nil
	})
	return d, err
}
