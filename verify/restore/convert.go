//go:build cgo

package restore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sfstate/sfstate/canonical"
	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
)

// IsNative reports whether checkpoint id in st is a native checkpoint of
// the engine (chk-<id>/manifest.json beside its `_metadata`).
func IsNative(ctx context.Context, st s3.Storage, id int64) bool {
	_, err := st.Stat(ctx, checkpoint.ManifestKey(id))
	return err == nil
}

// ConvertNative converts native checkpoint id of the engine (package
// checkpoint; st is the store root holding shared/ and chk-<id>/) into a
// canonical savepoint at the root of dst, which Flink restores into any
// state backend.
//
// The checkpoint's meta-state stream must describe the states with Flink's
// serializers (checkpoint.Options.Schema): canonical.SchemaOfHeader maps it,
// with the states the manifest declares, to the engine schema that converts
// the engine's encodings (key rows, compact value rows, primitives, TTL
// timestamps, multisets, timers) to Flink's, as canonical.Export does. A
// join-record state (recordstore's bucket or record layout) is described by
// the join description its meta info carries (engine.JoinSides.Describe)
// and becomes Flink's two join states, outer sides with their association
// counts. A checkpoint taken without a schema, or whose join-record state
// has no join description, fails with ErrNoSchema before anything is
// restored.
//
// Every subtask is restored in turn, at the checkpoint's parallelism, into
// a scratch RocksDB backend (checkpoint.Restore; nothing expires, so every
// stored entry is written, TTL timestamps included), its canonical stream
// staged in the scratch directory (canonical.WriteStream) and the backend
// closed and removed; per state and key group its entries are counted (a
// join-record state's rows per side, from recordstore's stored layout). The
// staged savepoint is then read back with the savepoint reader (every entry
// decoded) and its counts compared with the backends' before anything is
// published. Streams of at most canonical.DefaultInlineThreshold bytes are
// inlined; the others are uploaded first, `_metadata` (with its sums file,
// savepoint.CommitMetadata) last and only if absent. A failure or
// cancellation deletes what was uploaded and leaves no `_metadata`; the
// scratch directory (s3.ScratchPrefix + "convert-*") is removed in every
// case. The source is only read.
func ConvertNative(ctx context.Context, st s3.Storage, id int64, dst s3.Storage, o ConvertOptions) (res *ConvertResult, err error) {
	start := time.Now()
	if o.FlinkVersion == "" {
		o.FlinkVersion = "1.20"
	}
	version, err := canonical.MetadataVersionFor(o.FlinkVersion)
	if err != nil {
		return nil, err
	}
	var trailer []byte
	if version >= 4 {
		if trailer, err = canonical.CheckpointPropertiesTrailer(o.FlinkVersion); err != nil {
			return nil, err
		}
	}
	if _, err := dst.Stat(ctx, savepoint.MetadataName); err == nil {
		return nil, fmt.Errorf("%w: %s/%s", s3.ErrExists, dst, savepoint.MetadataName)
	} else if !s3.IsNotExist(err) {
		return nil, err
	}
	m, sp, err := openNative(ctx, st, id)
	if err != nil {
		return nil, err
	}
	op := sp.Meta.Operators[0]
	par, maxP := len(m.Subtasks), m.MaxParallelism
	if err := keygroups.CheckParallelism(maxP, par); err != nil {
		return nil, fmt.Errorf("%s: %w", checkpoint.ManifestKey(id), err)
	}
	hdr, err := checkpoint.MetaHeader(op, sp.Name())
	if err != nil {
		return nil, err
	}
	if hdr.KeySerializer != nil && strings.Contains(hdr.KeySerializer.Class, "BytePrimitiveArraySerializer") {
		return nil, fmt.Errorf("%s: %w", sp.Name(), ErrNoSchema)
	}
	descs, err := checkpoint.StateDescs(m.States)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", checkpoint.ManifestKey(id), err)
	}
	schema, err := canonical.SchemaOfHeader(hdr, descs)
	if errors.Is(err, canonical.ErrNoJoinDescription) {
		return nil, fmt.Errorf("%s: %w (%w)", sp.Name(), ErrNoSchema, err)
	} else if err != nil {
		return nil, fmt.Errorf("%s (meta-state stream): %w", sp.Name(), err)
	}
	subs := make([]*checkpoint.Subtask, par)
	for i := range m.Subtasks {
		sub := &m.Subtasks[i]
		if sub.Index < 0 || sub.Index >= par || subs[sub.Index] != nil {
			return nil, fmt.Errorf("%s: subtask index %d invalid or repeated", checkpoint.ManifestKey(id), sub.Index)
		}
		want := keygroups.RangeForSubtask(maxP, par, sub.Index)
		if sub.StartKeyGroup != want.Start || sub.EndKeyGroup != want.End {
			return nil, fmt.Errorf("%s: subtask %d holds key groups %d-%d, not Flink's %d-%d of parallelism %d", checkpoint.ManifestKey(id), sub.Index, sub.StartKeyGroup, sub.EndKeyGroup, want.Start, want.End, par)
		}
		subs[sub.Index] = sub
	}

	tmp, err := os.MkdirTemp(o.TempDir, s3.ScratchPrefix+"convert-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	stage := filepath.Join(tmp, "out")
	if err := os.Mkdir(stage, 0o755); err != nil {
		return nil, err
	}
	res = &ConvertResult{Destination: dst.String(), Checkpoint: id, Operator: op.ID.String(), Parallelism: par, MaxParallelism: maxP}
	// Nothing expires: every stored entry is converted.
	clock := engine.NewManualClock(0)
	want := map[digest.GroupKey]int64{}
	out := &savepoint.OperatorState{ID: op.ID, Parallelism: int32(par), MaxParallelism: int32(maxP)}
	if version >= 5 {
		out.Name, out.UID = op.Name, op.UID
	}
	type staged struct{ name, path string }
	var files []staged
	for i, sub := range subs {
		rng := keygroups.Range{Start: sub.StartKeyGroup, End: sub.EndKeyGroup}
		be, stats, err := checkpoint.Restore(ctx, st, id, rng, filepath.Join(tmp, fmt.Sprint("db-", i)), checkpoint.RestoreOptions{Rocks: engine.RocksOptions{Clock: clock, WriteBufferSize: 8 << 20}})
		if err != nil {
			return nil, fmt.Errorf("restore subtask %d (key groups %d-%d): %w", i, rng.Start, rng.End, err)
		}
		if stats != nil {
			res.BytesDownloaded += stats.BytesDownloaded
		}
		h, name, path, n, err := stageSubtask(ctx, be, clock, schema, op.ID.String(), stage, want, o)
		be.Close()
		os.RemoveAll(filepath.Join(tmp, fmt.Sprint("db-", i)))
		if err != nil {
			return nil, fmt.Errorf("subtask %d: %w", i, err)
		}
		res.Entries += n
		res.StreamBytes += h.Delegate.Len()
		if path != "" {
			files = append(files, staged{name, path})
			res.Files++
		} else {
			res.Inline++
		}
		out.Subtasks = append(out.Subtasks, &savepoint.SubtaskState{Index: i, ManagedKeyed: h})
	}
	for _, s := range schema.States {
		if s.Join != nil {
			l, r := s.Join.Names()
			res.States = append(res.States, l, r)
			continue
		}
		res.States = append(res.States, s.Name)
	}
	md := &savepoint.Metadata{Version: version, CheckpointID: id, Trailer: trailer, Operators: []*savepoint.OperatorState{out}}
	b, err := savepoint.EncodeMetadata(md)
	if err != nil {
		return nil, err
	}
	res.MetadataBytes = int64(len(b))

	// Read the staged savepoint back and compare it with the backends.
	if err := os.WriteFile(filepath.Join(stage, savepoint.MetadataName), b, 0o644); err != nil {
		return nil, err
	}
	if err := checkStaged(ctx, stage, want); err != nil {
		return nil, fmt.Errorf("convert: the written savepoint does not match the checkpoint: %w", err)
	}
	res.Verified = true

	// Publish: data files first, `_metadata` last.
	var written []s3.Written
	defer func() {
		if err != nil {
			dctx := context.WithoutCancel(ctx)
			for _, w := range written {
				_ = dst.Delete(dctx, w.Key)
			}
			if !errors.Is(err, s3.ErrExists) {
				// The sums file goes up just before `_metadata`; another
				// writer's (ErrExists) is left alone.
				if _, serr := dst.Stat(dctx, savepoint.MetadataName); s3.IsNotExist(serr) {
					_ = dst.Delete(dctx, savepoint.SumsName)
				}
			}
		}
	}()
	for _, f := range files {
		w, err := putFile(ctx, dst, f.name, f.path)
		if err != nil {
			return nil, err
		}
		written = append(written, w)
	}
	if err := savepoint.CommitMetadata(ctx, dst, written, savepoint.MetadataName, b); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// stageSubtask counts the entries of one restored backend per state and
// key group into want (a join-record state's rows per Flink side state)
// and writes its canonical stream into stage (or returns it inline). path
// is "" for inline streams.
func stageSubtask(ctx context.Context, be engine.Backend, clock *engine.Clock, schema *engine.Schema, op, stage string, want map[digest.GroupKey]int64, o ConvertOptions) (*savepoint.KeyGroupsHandle, string, string, int64, error) {
	if err := schema.Matches(be.States()); err != nil {
		return nil, "", "", 0, err
	}
	l := be.Layout()
	for i, d := range be.States() {
		var ferr error
		count := func(key, _ []byte) bool {
			kg, err := l.KeyGroupOf(key)
			if err != nil {
				ferr = fmt.Errorf("state %q: %w", d.Name, err)
				return false
			}
			want[digest.GroupKey{Operator: op, State: d.Name, KeyGroup: kg}]++
			return true
		}
		if j := schema.States[i].Join; j != nil {
			count = joinCounter(j, d, l.Width(), op, want, &ferr)
		}
		err := be.Scan(i, nil, nil, count)
		if err == nil {
			err = ferr
		}
		if err != nil {
			return nil, "", "", 0, err
		}
	}
	f, err := os.CreateTemp(stage, "stream-*")
	if err != nil {
		return nil, "", "", 0, err
	}
	path := f.Name()
	keep := false
	defer func() {
		f.Close()
		if !keep {
			os.Remove(path)
		}
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	offsets, n, err := canonical.WriteStream(ctx, bw, engine.NewOperator(be, clock), schema, false)
	if err != nil {
		return nil, "", "", 0, err
	}
	if err := bw.Flush(); err != nil {
		return nil, "", "", 0, err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, "", "", 0, err
	}
	if o.Progress != nil {
		o.Progress.Add(size)
	}
	h := &savepoint.KeyGroupsHandle{Tag: savepoint.TagSavepointKeyGroups, StartKeyGroup: int32(l.Range.Start), Offsets: offsets}
	name := filepath.Base(path)
	if size <= canonical.DefaultInlineThreshold {
		data := make([]byte, size)
		if _, err := f.ReadAt(data, 0); err != nil {
			return nil, "", "", 0, err
		}
		h.Delegate = &savepoint.StreamHandle{Tag: savepoint.TagByteStream, Name: name, Data: data}
		return h, name, "", n, nil
	}
	h.Delegate = &savepoint.StreamHandle{Tag: savepoint.TagRelativeFile, Path: name, Size: size}
	keep = true
	return h, name, path, n, nil
}

// joinCounter counts the rows of a join-record state's stored entries
// (recordstore's layout: one row per record, a bucket's rows per bucket)
// per side and key group, under the Flink state name of each side.
func joinCounter(j *engine.JoinSides, d engine.StateDesc, width int, op string, want map[digest.GroupKey]int64, ferr *error) func(key, v []byte) bool {
	var names [2]string
	names[0], names[1] = j.Names()
	bucket := d == recordstore.StateDesc(recordstore.LayoutBucket, d.TTL)
	return func(key, v []byte) bool {
		kg, side, _, _, off, err := recordstore.DecodeGroupKey(key, width)
		if err != nil {
			*ferr = fmt.Errorf("state %q: stored key % x, byte %d: %w", d.Name, key, off, err)
			return false
		}
		n := int64(1)
		if bucket {
			n = 0
			if off, err := recordstore.DecodeBucketValue(v, func(recordstore.LogicalRow) error { n++; return nil }); err != nil {
				*ferr = fmt.Errorf("state %q: bucket of stored key % x, value byte %d: %w", d.Name, key, off, err)
				return false
			}
		}
		want[digest.GroupKey{Operator: op, State: names[side], KeyGroup: kg}] += n
		return true
	}
}

// checkStaged opens the staged savepoint in dir, decodes every entry and
// compares the entries per state and key group with want.
func checkStaged(ctx context.Context, dir string, want map[digest.GroupKey]int64) error {
	store, err := s3.NewLocal(dir)
	if err != nil {
		return err
	}
	sp, err := savepoint.Open(ctx, store, savepoint.MetadataName)
	if err != nil {
		return err
	}
	d, err := digest.Compute(ctx, sp, digest.Options{})
	if err != nil {
		return err
	}
	for k, n := range want {
		g := d.Groups[k]
		if g == nil || g.Entries != n {
			got := int64(0)
			if g != nil {
				got = g.Entries
			}
			return fmt.Errorf("state %q key group %d: %d entries written, the checkpoint holds %d", k.State, k.KeyGroup, got, n)
		}
	}
	for k, g := range d.Groups {
		if want[k] == 0 {
			return fmt.Errorf("state %q key group %d: %d entries written, the checkpoint holds none", k.State, k.KeyGroup, g.Entries)
		}
	}
	return nil
}

// putFile uploads a staged file as key.
func putFile(ctx context.Context, dst s3.Storage, key, path string) (s3.Written, error) {
	f, err := os.Open(path)
	if err != nil {
		return s3.Written{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return s3.Written{}, err
	}
	return s3.PutHashed(ctx, dst, key, f, fi.Size())
}
