//go:build cgo

package restore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// VerifyNative verifies a native checkpoint of the engine (package
// checkpoint): checkpoint id in store st (the store root holding
// shared/ and chk-<id>/). The source digest is read from a restore at the
// checkpoint's own parallelism into RocksDB; every target restores the key
// groups of each of its subtasks (checkpoint.Restore, the partial SST
// download included) at its parallelism, into RocksDB or — copied entry
// by entry — into the heap backend, and is digested from what the backend
// returns (live entries only when o.TTL is set). Native entries are
// digested from their stored bytes: entry count, multiset counts, TTL
// timestamps and a hash of key and value bytes per state and key group.
// The operator, key groups and TTLs come from the checkpoint's manifest.
// A target parallelism of 0 is the checkpoint's, -1 one more.
func VerifyNative(ctx context.Context, st s3.Storage, id int64, o verify.Options) (*verify.Report, error) {
	m, sp, err := openNative(ctx, st, id)
	if err != nil {
		return nil, err
	}
	op := sp.Meta.Operators[0]
	var check *verify.CheckResult
	if !o.SkipCheck {
		check = checkNative(ctx, st, m, op.ID.String())
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	n := &native{st: st, id: id, m: m, op: op.ID.String(), o: o}
	src, err := n.digest(ctx, verify.Target{Backend: "rocksdb", Parallelism: len(m.Subtasks)}, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if check == nil {
			check = &verify.CheckResult{}
		}
		check.Problems = append(check.Problems, savepoint.Problem{Kind: "restore", File: checkpoint.ManifestKey(id), Offset: -1, Operator: n.op, KeyGroup: -1, Message: err.Error()})
		return verify.BuildReport(sp.Name(), o, check, verify.NewDigest(), nil), nil
	}
	var targets []verify.TargetDigest
	for _, t := range o.Targets {
		switch p := len(m.Subtasks); {
		case t.Parallelism == 0:
			t.Parallelism = p
		case t.Parallelism < 0: // one more than the checkpoint's (or one less)
			t.Parallelism = p + 1
			if t.Parallelism > m.MaxParallelism {
				t.Parallelism = max(1, p-1)
			}
		}
		d, err := n.digest(ctx, t, false)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		targets = append(targets, verify.TargetDigest{Target: t, Digest: d, Err: err})
	}
	return verify.BuildReport(sp.Name(), o, check, src, targets), nil
}

type native struct {
	st s3.Storage
	id int64
	m  *checkpoint.Manifest
	op string
	o  verify.Options
}

// ttlOf is the TTL check of state s: the state's own TTL at o.TTL's time.
func (n *native) ttlOf(s checkpoint.StateInfo) verify.TTLCheck {
	t := verify.TTLCheck{TTLMillis: s.TTLMillis, NowMillis: n.o.TTL.NowMillis}
	if t.TTLMillis <= 0 {
		t.TTLMillis = n.o.TTL.TTLMillis
	}
	return t
}

// digest restores the checkpoint at t and digests it. source digests every
// stored entry (and the live part when a TTL is given); targets digest what
// the backend returns.
func (n *native) digest(ctx context.Context, t verify.Target, source bool) (*verify.Digest, error) {
	maxP := n.m.MaxParallelism
	if t.Parallelism < 1 || t.Parallelism > maxP {
		return nil, fmt.Errorf("parallelism %d not in [1, %d]", t.Parallelism, maxP)
	}
	if t.Backend != "rocksdb" && t.Backend != "heap" {
		return nil, fmt.Errorf("unknown backend %q", t.Backend)
	}
	tmp, err := os.MkdirTemp(n.o.TempDir, s3.ScratchPrefix+"verify-native-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	d := verify.NewDigest()
	if source && n.o.TTL.TTLMillis > 0 {
		d.Live = verify.NewDigest()
	}
	info := verify.OperatorInfo{ID: n.op, Parallelism: t.Parallelism, MaxParallelism: maxP}
	from, to := n.o.Shard.Range(maxP)
	info.KeyGroupFrom, info.KeyGroupTo = from, to
	for _, s := range n.m.States {
		if s.Name == recordstore.RecordStateName || s.Name == recordstore.BucketStateName {
			for _, side := range []string{"join-left", "join-right"} {
				info.States = append(info.States, verify.StateInfo{Name: side, Kind: "JOIN " + strings.TrimPrefix(s.Name, "join-"), TTL: s.TTLMillis > 0})
			}
			continue
		}
		info.States = append(info.States, verify.StateInfo{Name: s.Name, Kind: "native " + strings.ToUpper(s.Kind), TTL: s.TTLMillis > 0})
	}
	d.Operators = []verify.OperatorInfo{info}
	// Nothing expires while the source is read, or targets without a TTL
	// check; targets with one read at its time.
	clock := engine.NewManualClock(0)
	live := !source && n.o.TTL.TTLMillis > 0
	if live {
		clock = engine.NewManualClock(n.o.TTL.NowMillis)
	}
	for i := 0; i < t.Parallelism; i++ {
		r := keygroups.RangeForSubtask(maxP, t.Parallelism, i)
		rng := keygroups.Range{Start: max(r.Start, from), End: min(r.End, to)}
		if rng.Start > rng.End {
			continue
		}
		be, _, err := checkpoint.Restore(ctx, n.st, n.id, rng, filepath.Join(tmp, fmt.Sprint(i)), checkpoint.RestoreOptions{Rocks: engine.RocksOptions{Clock: clock, WriteBufferSize: 8 << 20}})
		if err != nil {
			return nil, fmt.Errorf("restore subtask %d of %d (key groups %d-%d): %w", i, t.Parallelism, rng.Start, rng.End, err)
		}
		if t.Backend == "heap" {
			hb, err := copyToHeap(be)
			be.Close()
			if err != nil {
				return nil, err
			}
			be = hb
		}
		err = n.scan(be, d, clock, live)
		be.Close()
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (n *native) scan(be engine.Backend, d *verify.Digest, clock *engine.Clock, live bool) error {
	l := be.Layout()
	descs := be.States()
	var states []*engine.State
	if live {
		states = engine.NewOperator(be, clock).States()
	}
	for i, desc := range descs {
		var si checkpoint.StateInfo
		for _, s := range n.m.States {
			if s.Name == desc.Name {
				si = s
			}
		}
		ttl := n.ttlOf(si)
		if desc.Name == recordstore.RecordStateName || desc.Name == recordstore.BucketStateName {
			if err := n.scanJoin(be, desc, d, clock, ttl); err != nil {
				return err
			}
			continue
		}
		hasTTL := desc.TTL > 0 || si.TTLMillis > 0
		var ferr error
		var lbuf []byte
		visit := func(key, val []byte) bool {
			kg, err := l.KeyGroupOf(key)
			if err != nil {
				ferr = fmt.Errorf("state %q: %w", desc.Name, err)
				return false
			}
			e := verify.RawEntry{Key: key, Value: val}
			if len(val) >= engine.TTLPrefix {
				if hasTTL {
					// Per-element lists flag bit 63; the rest is the
					// newest element's time.
					ts, _ := engine.StoredTimestamp(val)
					e.TTL = &ts
				}
				if desc.Kind == engine.KindMultiset && len(val) == engine.TTLPrefix+8 {
					e.Count = int64(binary.BigEndian.Uint64(val[engine.TTLPrefix:]))
				}
			}
			gk := verify.GroupKey{Operator: n.op, State: desc.Name, KeyGroup: kg}
			if states == nil && d.Live != nil && desc.Kind == engine.KindList && hasTTL {
				// A list's elements expire one by one: its live part is
				// what a read returns (live elements, newest live time),
				// as the targets digest it.
				liveD := d.Live
				d.Live = nil
				d.AddRaw(gk, e, ttl)
				d.Live = liveD
				var live bool
				var err error
				lbuf, live, err = engine.LiveValue(lbuf[:0], desc.Kind, time.Duration(ttl.TTLMillis)*time.Millisecond, val, ttl.NowMillis)
				if err != nil {
					ferr = fmt.Errorf("state %q: %w", desc.Name, err)
					return false
				}
				if !live {
					d.Groups[gk].Expired++
					return true
				}
				ts, _ := engine.StoredTimestamp(lbuf)
				liveD.AddRaw(gk, verify.RawEntry{Key: key, Value: lbuf, TTL: &ts}, verify.TTLCheck{})
				return true
			}
			d.AddRaw(gk, e, ttl)
			return true
		}
		var err error
		if states != nil {
			var buf []byte
			err = states[i].ScanKeyGroups(l.Range.Start, l.Range.End, func(key []byte, ts int64, payload []byte) bool {
				buf = binary.BigEndian.AppendUint64(buf[:0], uint64(ts))
				buf = append(buf, payload...)
				return visit(key, buf)
			})
		} else {
			err = be.Scan(i, nil, nil, visit)
		}
		if err == nil {
			err = ferr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Join state (package recordstore) is digested from its logical content,
// the same for the record and the bucket layout, so a checkpoint migrated
// from one layout to the other compares equal: per side ("join-left",
// "join-right") and key group one entry per distinct row with its count,
// association count and timestamp.
func (n *native) scanJoin(be engine.Backend, desc engine.StateDesc, d *verify.Digest, clock *engine.Clock, ttl verify.TTLCheck) error {
	l := recordstore.LayoutRecord
	if desc.Name == recordstore.BucketStateName {
		l = recordstore.LayoutBucket
	}
	js, err := recordstore.Open(l, be, recordstore.Options{Clock: clock})
	if err != nil {
		return err
	}
	var key, val []byte
	return js.Logical(func(g *recordstore.LogicalGroup) error {
		name := "join-left"
		if g.Side == recordstore.Right {
			name = "join-right"
		}
		k := verify.GroupKey{Operator: n.op, State: name, KeyGroup: g.KeyGroup}
		for _, r := range g.Rows {
			key = binary.BigEndian.AppendUint32(key[:0], uint32(len(g.Key)))
			key = append(append(key, g.Key...), r.Row...)
			val = binary.BigEndian.AppendUint64(val[:0], uint64(r.Count))
			val = binary.BigEndian.AppendUint64(val, uint64(r.Assoc))
			ts := r.TS
			d.AddRaw(k, verify.RawEntry{Key: key, Value: val, Count: r.Count, Assoc: r.Assoc, TTL: &ts}, ttl)
		}
		return nil
	})
}

// openNative reads checkpoint id's manifest and `_metadata`, which must
// hold one operator; failures wrap verify.ErrUnreadable.
func openNative(ctx context.Context, st s3.Storage, id int64) (*checkpoint.Manifest, *savepoint.Savepoint, error) {
	m, err := checkpoint.ReadManifest(ctx, st, id)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", verify.ErrUnreadable, err)
	}
	sp, err := savepoint.Open(ctx, st, checkpoint.MetadataKey(id))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", verify.ErrUnreadable, err)
	}
	if len(sp.Meta.Operators) != 1 {
		return nil, nil, fmt.Errorf("%w: native checkpoint with %d operators", verify.ErrUnreadable, len(sp.Meta.Operators))
	}
	return m, sp, nil
}

// DigestNative digests checkpoint id of st as VerifyNative digests its
// source (for comparing two checkpoints, e.g. before and after a join-state
// layout migration).
func DigestNative(ctx context.Context, st s3.Storage, id int64, o verify.Options) (*verify.Digest, error) {
	m, sp, err := openNative(ctx, st, id)
	if err != nil {
		return nil, err
	}
	n := &native{st: st, id: id, m: m, op: sp.Meta.Operators[0].ID.String(), o: o}
	return n.digest(ctx, verify.Target{Backend: "rocksdb", Parallelism: len(m.Subtasks)}, true)
}

// copyToHeap copies every stored entry of be into a new heap backend.
func copyToHeap(be engine.Backend) (engine.Backend, error) {
	hb, err := engine.OpenHeap(be.Layout(), be.States())
	if err != nil {
		return nil, err
	}
	b := hb.NewBatch()
	defer b.Close()
	for i := range be.States() {
		var cerr error
		err := be.Scan(i, nil, nil, func(k, v []byte) bool {
			b.Put(i, k, v)
			if b.Len() >= 4096 {
				cerr = b.Commit()
			}
			return cerr == nil
		})
		if err == nil {
			err = cerr
		}
		if err != nil {
			hb.Close()
			return nil, err
		}
	}
	if err := b.Commit(); err != nil {
		hb.Close()
		return nil, err
	}
	return hb, nil
}

// checkNative checks that every object the manifest lists exists with its
// recorded size (the CRC-32C is checked by every restore). Shared SST
// objects live outside chk-<id>/, which the savepoint check refuses for
// savepoints, so native checkpoints are checked from their manifest.
func checkNative(ctx context.Context, st s3.Storage, m *checkpoint.Manifest, op string) *verify.CheckResult {
	c := &verify.CheckResult{}
	seen := map[string]bool{}
	for _, sub := range m.Subtasks {
		objs := append([]checkpoint.Object{}, sub.Private...)
		for _, s := range sub.Shared {
			objs = append(objs, s.Object)
		}
		for _, obj := range objs {
			if seen[obj.Key] {
				continue
			}
			seen[obj.Key] = true
			c.Stats.Files++
			info, err := st.Stat(ctx, obj.Key)
			switch {
			case err != nil:
				c.Problems = append(c.Problems, savepoint.Problem{Kind: "file", File: obj.Key, Offset: -1, Operator: op, Subtask: sub.Index, KeyGroup: -1, Message: err.Error()})
			case info.Size != obj.Size:
				c.Problems = append(c.Problems, savepoint.Problem{Kind: "size", File: obj.Key, Offset: info.Size, Operator: op, Subtask: sub.Index, KeyGroup: -1,
					Message: fmt.Sprintf("object has %d bytes, the manifest records %d", info.Size, obj.Size)})
			}
		}
		c.Stats.KeyGroups += sub.EndKeyGroup - sub.StartKeyGroup + 1
	}
	c.Stats.NativeHandles = len(m.Subtasks)
	savepoint.SortProblems(c.Problems)
	return c
}

// CompareNative compares the logical digests of two native checkpoints
// (checkpoint id of st against checkpoint aid of ast), e.g. a join state
// before and after its bucket → record migration. The report's source is
// the first; the second is its one target.
func CompareNative(ctx context.Context, st s3.Storage, id int64, ast s3.Storage, aid int64, o verify.Options) (*verify.Report, error) {
	o.TTL = verify.TTLCheck{}
	src, err := DigestNative(ctx, st, id, o)
	if err != nil {
		return nil, err
	}
	var check *verify.CheckResult
	if !o.SkipCheck {
		m, err := checkpoint.ReadManifest(ctx, st, id)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", verify.ErrUnreadable, err)
		}
		check = checkNative(ctx, st, m, src.Operators[0].ID)
	}
	td := verify.TargetDigest{Name: fmt.Sprintf("against %s", checkpoint.Dir(aid))}
	td.Digest, td.Err = DigestNative(ctx, ast, aid, o)
	if errors.Is(td.Err, verify.ErrUnreadable) {
		return nil, td.Err
	}
	// Operator ids may differ between the two jobs; compare by position.
	if td.Digest != nil && len(td.Digest.Operators) == 1 && td.Digest.Operators[0].ID != src.Operators[0].ID {
		td.Digest = renameOperator(td.Digest, src.Operators[0].ID)
	}
	return verify.BuildReport(fmt.Sprintf("%s/%s", st, checkpoint.Dir(id)), o, check, src, []verify.TargetDigest{td}), nil
}

func renameOperator(d *verify.Digest, id string) *verify.Digest {
	out := verify.NewDigest()
	out.Operators = append(out.Operators, d.Operators...)
	out.Operators[0].ID = id
	for k, g := range d.Groups {
		k.Operator = id
		out.Groups[k] = g
	}
	return out
}
