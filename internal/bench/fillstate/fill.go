// Package fillstate generates a keyed value state in RocksDB backends and
// checkpoints it: the input of the rescale tests and benchmarks.
package fillstate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// Config describes the generated state: Keys keys "key-%010d" (Flink
// Integer key-group hashing of the key number) with ValueSize random bytes
// each, in one value state "values" of Parallelism subtasks.
type Config struct {
	MaxParallelism, Parallelism int
	Keys                        int
	ValueSize                   int
	// KeyGroupFiles opens the backends with one SST file per key group.
	KeyGroupFiles bool
	// Parallel bounds the checkpoint's concurrent uploads (0: 1).
	Parallel int
	// OnProgress, when set, is called every 4096 keys with the count done.
	OnProgress func(done int)
}

// Checkpointed writes cfg.Keys keys of cfg.ValueSize random bytes into
// cfg.Parallelism RocksDB backends under dir (task-<i>), compacts them and
// takes checkpoint 1 into store; it returns the checkpoint id. key, when
// set, is called with every stored key.
func Checkpointed(ctx context.Context, cfg Config, dir string, store s3.Storage, key func([]byte)) (int64, error) {
	open := engine.OpenRocksDB
	if cfg.KeyGroupFiles {
		open = engine.OpenRocksDBKeyGroupFiles
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	states := []engine.StateDesc{{Name: "values", Kind: engine.KindValue}}
	var bs []engine.Backend
	defer func() {
		for _, b := range bs {
			b.Close()
		}
	}()
	for i, r := range keygroups.Ranges(cfg.MaxParallelism, cfg.Parallelism) {
		b, err := open(filepath.Join(dir, fmt.Sprint("task-", i)), engine.Layout{MaxParallelism: cfg.MaxParallelism, Range: r}, states, engine.RocksOptions{})
		if err != nil {
			return 0, err
		}
		bs = append(bs, b)
	}
	batches := make([]engine.Batch, len(bs))
	for i, b := range bs {
		batches[i] = b.NewBatch()
	}
	defer func() {
		for _, bt := range batches {
			bt.Close()
		}
	}()
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, cfg.ValueSize)
	var kb []byte
	for k := 0; k < cfg.Keys; k++ {
		if k%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if cfg.OnProgress != nil {
				cfg.OnProgress(k)
			}
		}
		kg := keygroups.KeyGroupFor(keygroups.HashInt(int32(k)), cfg.MaxParallelism)
		sub := keygroups.SubtaskForKeyGroup(cfg.MaxParallelism, cfg.Parallelism, kg)
		for j := 0; j+8 <= len(val); j += 8 {
			v := rng.Uint64()
			for x := 0; x < 8; x++ {
				val[j+x] = byte(v >> (8 * x))
			}
		}
		kb = bs[sub].Layout().Key(kb[:0], kg, fmt.Appendf(nil, "key-%010d", k), nil)
		if key != nil {
			key(kb)
		}
		batches[sub].Put(0, kb, val)
		if batches[sub].Len() >= 2000 {
			if err := batches[sub].Commit(); err != nil {
				return 0, err
			}
		}
	}
	for _, bt := range batches {
		if err := bt.Commit(); err != nil {
			return 0, err
		}
	}
	for _, b := range bs {
		if err := b.Flush(); err != nil {
			return 0, err
		}
		if err := engine.CompactNative(b); err != nil {
			return 0, err
		}
	}
	cp := checkpoint.New(store, checkpoint.Options{Parallel: max(1, cfg.Parallel), LocalDir: dir})
	p, err := cp.Take(ctx, bs, 1)
	if err != nil {
		return 0, err
	}
	if _, err := p.Wait(ctx); err != nil {
		return 0, err
	}
	return 1, nil
}
