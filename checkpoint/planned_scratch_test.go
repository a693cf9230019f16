package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/sfstate/sfstate/checkpoint"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// listOperand is one stored list value: the 8-byte timestamp prefix, then
// the length-prefixed element.
func listOperand(ts int64, el string) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(ts))
	b = binary.AppendUvarint(b, uint64(len(el)))
	return append(b, el...)
}

// TestLazyRestoreListOperands: list appends left as merge operands in
// several files of the checkpoint (flushed apart, never compacted) are
// folded with the engine's list operator by the lazy adoption: every key
// reads as one list of all its elements, in append order, with the newest
// timestamp.
func TestLazyRestoreListOperands(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store, err := s3.NewLocal(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	const maxP, oldP, newP, keys, rounds = 16, 2, 3, 60, 3
	states := []engine.StateDesc{{Name: "lists", Kind: engine.KindList}}
	var bs []engine.Backend
	defer func() {
		for _, b := range bs {
			b.Close()
		}
	}()
	for i, r := range keygroups.Ranges(maxP, oldP) {
		b, err := engine.OpenRocksDBKeyGroupFiles(filepath.Join(root, fmt.Sprint("old-", i)), engine.Layout{MaxParallelism: maxP, Range: r}, states, engine.RocksOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	type merger interface{ Merge(st int, key, val []byte) }
	want := map[string][]byte{}
	for round := 0; round < rounds; round++ {
		batches := make([]engine.Batch, oldP)
		for i, b := range bs {
			batches[i] = b.NewBatch()
		}
		for k := 0; k < keys; k++ {
			kg := keygroups.KeyGroupFor(keygroups.HashInt(int32(k)), maxP)
			sub := keygroups.SubtaskForKeyGroup(maxP, oldP, kg)
			key := string(bs[sub].Layout().Key(nil, kg, fmt.Appendf(nil, "k%d", k), nil))
			m, ok := batches[sub].(merger)
			if !ok {
				t.Skip("the RocksDB batch has no Merge")
			}
			ts := int64(1000*round + k)
			el := fmt.Sprintf("e%d-%d", k, round)
			m.Merge(0, []byte(key), listOperand(ts, el))
			w := want[key]
			if w == nil {
				w = make([]byte, 8)
			}
			binary.BigEndian.PutUint64(w, uint64(ts))
			w = binary.AppendUvarint(w, uint64(len(el)))
			want[key] = append(w, el...)
		}
		for _, bt := range batches {
			if err := bt.Commit(); err != nil {
				t.Fatal(err)
			}
			bt.Close()
		}
		for _, b := range bs {
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cp := checkpoint.New(store, checkpoint.Options{LocalDir: root})
	p, err := cp.Take(ctx, bs, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	plan := planFor(t, store, newP)
	seen := 0
	for i := 0; i < newP; i++ {
		lz, err := checkpoint.RestoreLazy(ctx, store, plan, i, filepath.Join(root, fmt.Sprint("new-", i)), checkpoint.LazyOptions{KeyGroupFiles: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := lz.WaitLocal(ctx); err != nil {
			lz.Close()
			t.Fatal(err)
		}
		l := lz.Layout()
		lower, upper := l.RangeBounds(l.Range.Start, l.Range.End)
		err = lz.Scan(0, lower, upper, func(k, v []byte) bool {
			seen++
			if w, ok := want[string(k)]; !ok || !bytes.Equal(v, w) {
				t.Errorf("subtask %d: key %q = %x, want %x (known %v)", i, k, v, w, ok)
			}
			return true
		})
		lz.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen != len(want) {
		t.Fatalf("%d keys restored, want %d", seen, len(want))
	}
}
