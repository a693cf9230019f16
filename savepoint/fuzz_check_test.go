package savepoint

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
)

// FuzzCheckKeyedStream feeds mutated keyed-state streams (inline in a V3
// savepoint with the fixture's offsets) to Check, WalkKeyed and
// ScanSummary: they must report problems, never panic or hang.
func FuzzCheckKeyedStream(f *testing.F) {
	type seed struct {
		data    []byte
		offsets []int64
		maxP    int32
	}
	var seeds []seed
	if d := fixtures.Dir(); d != "" {
		for _, name := range []string{fixtureUDF, fixtureSnap} {
			raw, err := os.ReadFile(filepath.Join(d, name, MetadataName))
			if err != nil {
				continue
			}
			md, err := ParseMetadata(raw, name)
			if err != nil {
				continue
			}
			for _, op := range md.Operators {
				for _, st := range op.Subtasks {
					if h, ok := st.ManagedKeyed.(*KeyGroupsHandle); ok && h.Delegate.Tag == TagRelativeFile {
						b, err := os.ReadFile(filepath.Join(d, name, h.Delegate.Path))
						if err == nil {
							seeds = append(seeds, seed{b, h.Offsets, op.MaxParallelism})
						}
					}
				}
			}
		}
	}
	for i, s := range seeds {
		f.Add(s.data, uint8(i))
	}
	if len(seeds) == 0 {
		seeds = append(seeds, seed{[]byte{0}, []int64{0}, 4})
		f.Add([]byte{0, 0, 0, 6}, uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		s := seeds[int(which)%len(seeds)]
		start := 0
		for i, o := range s.offsets {
			if o != 0 {
				start = i
				break
			}
		}
		md := &Metadata{Version: 3, CheckpointID: 1, Operators: []*OperatorState{{
			Parallelism: 1, MaxParallelism: s.maxP,
			Subtasks: []*SubtaskState{{Index: 0, ManagedKeyed: &KeyGroupsHandle{Tag: TagSavepointKeyGroups, StartKeyGroup: int32(start),
				Offsets: s.offsets[start:], Delegate: &StreamHandle{Tag: TagByteStream, Name: "x", Data: data}}}},
		}}}
		b, err := EncodeMetadata(md)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		st := s3.NewMem()
		if err := st.Put(ctx, "sp/_metadata", bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
		sp, err := Open(ctx, st, "sp/_metadata")
		if err != nil {
			t.Fatal(err)
		}
		Check(ctx, sp, CheckOptions{})
		_ = sp.WalkKeyed(ctx, ScanOptions{KeyGroupTo: -1}, func(*KeyedEntry) error { return nil })
		_ = ScanSummary(ctx, sp, Summarize(sp), ScanOptions{KeyGroupTo: -1})
	})
}
