//go:build cgo

package migrate

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/s3"
)

// GenConfig describes a synthetic native checkpoint whose join state uses
// the bucket layout (for benchmarks and command tests).
type GenConfig struct {
	// Subtasks and MaxParallelism shape the checkpoint (defaults 2, 128).
	Subtasks, MaxParallelism int
	// Keys is the number of join keys per side; Rows the total number of
	// distinct rows over both sides.
	Keys, Rows int
	// Skewed draws the rows' keys from a Zipf distribution (s = 1.2, v = 50)
	// instead of uniformly.
	Skewed bool
	// Payload is the padding bytes of each row (rows carry an 8-byte id
	// before it).
	Payload int
	// OtherEntries is the size of an untouched value state beside the join.
	OtherEntries int
	// TTL of the join state (default 1 h); rows get timestamps spread over
	// the last TTL, so some have expired at generation time.
	TTL time.Duration
	// Seed makes the content reproducible.
	Seed uint64
	// WorkDir holds the RocksDB directories while generating.
	WorkDir string
}

// GenStats describes a generated checkpoint.
type GenStats struct {
	ID                 int64
	Buckets, Rows      int64
	BucketBytes        int64 // stored key and value bytes of the bucket state
	RecordBytes        int64 // key and value bytes the records will take
	CheckpointBytes    int64 // bytes of every object of the checkpoint
	BucketFileBytes    int64 // bytes of the bucket state's SST files
	Generate, Snapshot time.Duration
}

// GenOtherState is the name of the untouched state in generated checkpoints.
const GenOtherState = "orders"

// GenerateCheckpoint writes checkpoint 1 into st: Subtasks RocksDB
// backends with an untouched value state and the join's bucket state,
// written with the SST writer and ingested, then checkpointed.
func GenerateCheckpoint(ctx context.Context, st s3.Storage, cfg GenConfig) (*GenStats, error) {
	if cfg.Subtasks <= 0 {
		cfg.Subtasks = 2
	}
	if cfg.MaxParallelism <= 0 {
		cfg.MaxParallelism = 128
	}
	if cfg.Keys <= 0 || cfg.Rows <= 0 || cfg.Payload < 0 || cfg.Subtasks > cfg.MaxParallelism {
		return nil, fmt.Errorf("migrate: generator: bad config %+v", cfg)
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Hour
	}
	start := time.Now()
	gs := &GenStats{ID: 1}
	now := time.Now().UnixMilli()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5f))
	kb, err := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeBigInt})
	if err != nil {
		return nil, err
	}
	// rows per (side, key)
	perKey := make([]int, 2*cfg.Keys)
	if cfg.Skewed {
		z := rand.NewZipf(rng, 1.2, 50, uint64(2*cfg.Keys-1))
		for i := 0; i < cfg.Rows; i++ {
			perKey[z.Uint64()]++
		}
	} else {
		for i := 0; i < cfg.Rows; i++ {
			perKey[i%len(perKey)]++
		}
	}
	type bkey struct {
		stored []byte
		idx    int
	}
	width := keygroups.PrefixWidth(cfg.MaxParallelism)
	byTask := make([][]bkey, cfg.Subtasks)
	ranges := make([]keygroups.Range, cfg.Subtasks)
	for i := range ranges {
		r := keygroups.RangeForSubtask(cfg.MaxParallelism, cfg.Subtasks, i)
		ranges[i] = r
	}
	taskOf := func(kg int) int { return keygroups.SubtaskForKeyGroup(cfg.MaxParallelism, cfg.Subtasks, kg) }
	for i, n := range perKey {
		if n == 0 {
			continue
		}
		key, err := kb.Build([]any{int64(i / 2)})
		if err != nil {
			return nil, err
		}
		kg := recordstore.KeyGroupOf(key, cfg.MaxParallelism)
		sk := recordstore.AppendGroupPrefix(nil, width, kg, recordstore.Side(i%2), key)
		t := taskOf(kg)
		byTask[t] = append(byTask[t], bkey{sk, i})
	}
	work, err := os.MkdirTemp(cfg.WorkDir, s3.ScratchPrefix+"migrate-gen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	states := []engine.StateDesc{{Name: GenOtherState, Kind: engine.KindValue}, recordstore.StateDesc(recordstore.LayoutBucket, cfg.TTL)}
	var backends []engine.Backend
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	w := engine.NewSSTWriter(engine.SSTOptions{Compression: engine.CompressionSnappy})
	defer w.Close()
	var rows []recordstore.LogicalRow
	var arena, val []byte
	rowID := int64(0)
	for t := 0; t < cfg.Subtasks; t++ {
		be, err := engine.OpenRocksDB(filepath.Join(work, fmt.Sprintf("db-%d", t)), engine.Layout{MaxParallelism: cfg.MaxParallelism, Range: ranges[t]}, states, engine.RocksOptions{})
		if err != nil {
			return nil, err
		}
		backends = append(backends, be)
		nat, ok := engine.NativeOf(be)
		if !ok {
			return nil, fmt.Errorf("migrate: generator needs a RocksDB backend")
		}
		keys := byTask[t]
		sort.Slice(keys, func(a, b int) bool { return string(keys[a].stored) < string(keys[b].stored) })
		var files []string
		var open bool
		var cur int64
		for _, k := range keys {
			if !open || cur > 256<<20 {
				if open {
					if err := w.Finish(); err != nil {
						return nil, err
					}
				}
				p := filepath.Join(work, fmt.Sprintf("gen-%d-%d.sst", t, len(files)))
				if err := w.Open(p); err != nil {
					return nil, err
				}
				open = true
				files = append(files, p)
				cur = 0
			}
			n := perKey[k.idx]
			rows, arena = rows[:0], arena[:0]
			for j := 0; j < n; j++ {
				rowID++
				s := len(arena)
				arena = binary.BigEndian.AppendUint64(arena, uint64(rowID))
				for p := 0; p < cfg.Payload; p++ {
					arena = append(arena, byte(rowID+int64(p)))
				}
				rows = append(rows, recordstore.LogicalRow{Row: arena[s:len(arena):len(arena)], Count: 1 + int64(rng.IntN(3)),
					Assoc: int64(rng.IntN(2)), TS: now - rng.Int64N(cfg.TTL.Milliseconds()*5/4+1)})
			}
			// arena may have moved: re-slice rows
			off := 0
			for j := range rows {
				l := 8 + cfg.Payload
				rows[j].Row = arena[off : off+l : off+l]
				off += l
			}
			val = recordstore.AppendBucketValue(val[:0], rows)
			if err := w.Put(k.stored, val); err != nil {
				return nil, err
			}
			cur += int64(len(k.stored) + len(val))
			gs.Buckets++
			gs.Rows += int64(n)
			gs.BucketBytes += int64(len(k.stored) + len(val))
			gs.RecordBytes += int64(n)*int64(len(k.stored)+8+cfg.Payload) + int64(n)*recordstore.RecordValueSize
		}
		if open {
			if err := w.Finish(); err != nil {
				return nil, err
			}
			if err := nat.Ingest(1, files, true); err != nil {
				return nil, fmt.Errorf("migrate: generator: ingest: %w", err)
			}
		}
		b := be.NewBatch()
		for j := 0; j < cfg.OtherEntries/cfg.Subtasks; j++ {
			kg := ranges[t].Start + rng.IntN(ranges[t].End-ranges[t].Start+1)
			b.Put(0, be.Layout().Key(nil, kg, binary.BigEndian.AppendUint64(nil, uint64(j)), nil), binary.BigEndian.AppendUint64(make([]byte, 8), uint64(j)))
			if b.Len() >= 4096 {
				if err := b.Commit(); err != nil {
					return nil, err
				}
			}
		}
		err = b.Commit()
		b.Close()
		if err != nil {
			return nil, err
		}
	}
	gs.Generate = time.Since(start)
	start = time.Now()
	res, err := checkpoint.New(st, checkpoint.Options{}).TakeSync(ctx, backends, gs.ID)
	if err != nil {
		return nil, err
	}
	gs.Snapshot = time.Since(start)
	for _, s := range res.Manifest.Subtasks {
		for _, f := range s.Shared {
			gs.CheckpointBytes += f.Size
			if f.ColumnFamily == recordstore.BucketStateName {
				gs.BucketFileBytes += f.Size
			}
		}
		for _, f := range s.Private {
			gs.CheckpointBytes += f.Size
		}
	}
	return gs, nil
}
