package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/sfstate/sfstate/convert"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// NoteNativeSource is the report note of a source in Flink's native
// RocksDB layout.
const NoteNativeSource = "native RocksDB source: converted to canonical for the restore"

// Native RocksDB sources (Flink's incremental and full native snapshots,
// keyed handles of tag 5/11) hold no canonical streams the digest could
// read. Run converts them with package convert (one read of every handle:
// its files are downloaded, opened with RocksDB and decoded) into a
// canonical savepoint in a scratch directory, and digests the native
// entries as that conversion reads them, before they are rewritten. The
// restores then start from the conversion, so each target checks the
// conversion as well as the backend against the native bytes. Reading
// RocksDB needs cgo (convert.ErrNoRocksDB otherwise).

// hasNativeRocksDB reports whether some operator of sp holds native
// RocksDB keyed handles.
func hasNativeRocksDB(sp *savepoint.Savepoint) bool {
	for _, op := range sp.Meta.Operators {
		if k, err := rescale.Classify(op); err == nil && k == rescale.KindNative {
			return true
		}
	}
	return false
}

// nativeSource is a native source converted for the restore.
type nativeSource struct {
	// conv is the canonical conversion, in dir.
	conv *savepoint.Savepoint
	// digest is the source digest, of the native entries.
	digest *Digest
	dir    string
}

// remove deletes the scratch directory.
func (n *nativeSource) remove() {
	if n != nil && n.dir != "" {
		os.RemoveAll(n.dir)
	}
}

// errNativeSource marks a failed conversion of a native source whose
// message goes into the report (corrupt input) rather than failing Run.
type errNativeSource struct{ err error }

func (e errNativeSource) Error() string { return e.err.Error() }
func (e errNativeSource) Unwrap() error { return e.err }

// convertNative converts src (which holds native RocksDB handles) into a
// canonical savepoint under a scratch directory in tempDir and digests the
// native entries in o's shard. The caller removes the result (also when
// err != nil). A source this build or the converter cannot read fails with
// ErrUnreadable (and savepoint.ErrNativeLayout, and why); a conversion that
// fails on the data returns errNativeSource.
func convertNative(ctx context.Context, src *savepoint.Savepoint, tempDir string, o DigestOptions) (*nativeSource, error) {
	dir, err := os.MkdirTemp(tempDir, s3.ScratchPrefix+"verify-native-*")
	if err != nil {
		return nil, err
	}
	n := &nativeSource{dir: dir}
	dst, err := s3.NewLocal(filepath.Join(dir, "canonical"))
	if err != nil {
		return n, err
	}
	d := NewDigest()
	if o.TTL.TTLMillis > 0 {
		d.Live = NewDigest()
	}
	// States per native operator, from the handles' meta-state headers.
	var mu sync.Mutex
	states := map[string]map[string]StateInfo{}
	var h digest.Hasher
	observe := func(op *savepoint.OperatorState, nh *rescale.NativeHandle) func(*keyed.Entry) error {
		id := op.ID.String()
		mu.Lock()
		ss := states[id]
		if ss == nil {
			ss = map[string]StateInfo{}
			states[id] = ss
		}
		if nh.Header != nil {
			for _, s := range nh.Header.States {
				if _, ok := ss[s.Name]; !ok {
					ss[s.Name] = StateInfo{Name: s.Name, Kind: s.Kind, TTL: s.TTL}
				}
			}
		}
		mu.Unlock()
		from, to := o.Shard.Range(int(op.MaxParallelism))
		return func(e *keyed.Entry) error {
			if e.KeyGroup < from || e.KeyGroup > to || e.State == nil {
				return nil
			}
			mu.Lock()
			h.Add(d, GroupKey{Operator: id, State: e.State.Name, KeyGroup: e.KeyGroup}, e.State, e, o.TTL)
			mu.Unlock()
			return nil
		}
	}
	_, err = convert.Run(ctx, convert.Request{Src: src, Dst: dst, Concurrency: max(1, o.Concurrency), TempDir: dir, OnNative: observe})
	if err != nil {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if errors.Is(err, convert.ErrNoRocksDB) || errors.Is(err, rescale.ErrUnsupported) {
			return n, fmt.Errorf("%w: %w: %w", ErrUnreadable, savepoint.ErrNativeLayout, err)
		}
		return n, errNativeSource{err}
	}
	conv, err := savepoint.Open(ctx, dst, savepoint.MetadataName)
	if err != nil {
		return n, errNativeSource{fmt.Errorf("verify: reading the canonical conversion: %w", err)}
	}
	n.conv = conv
	// Operators in the source's order: native ones described by their
	// headers, any canonical ones digested from the source as usual.
	for _, op := range src.Meta.Operators {
		id := op.ID.String()
		if k, err := rescale.Classify(op); err != nil || k != rescale.KindNative {
			sub, err := ComputeDigest(ctx, src, DigestOptions{Operator: id, Shard: o.Shard, TTL: o.TTL, Concurrency: o.Concurrency, ReadAhead: o.ReadAhead})
			if err != nil {
				return n, errNativeSource{err}
			}
			d.Operators = append(d.Operators, sub.Operators...)
			d.Merge(sub)
			continue
		}
		info := OperatorInfo{ID: id, UID: op.UID, Name: op.Name, Parallelism: int(op.Parallelism), MaxParallelism: int(op.MaxParallelism)}
		info.KeyGroupFrom, info.KeyGroupTo = o.Shard.Range(int(op.MaxParallelism))
		for _, s := range states[id] {
			info.States = append(info.States, s)
		}
		sort.Slice(info.States, func(i, j int) bool { return info.States[i].Name < info.States[j].Name })
		d.Operators = append(d.Operators, info)
	}
	n.digest = d
	return n, nil
}
