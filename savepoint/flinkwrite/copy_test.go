package flinkwrite

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// copyStream re-writes a keyed stream entry by entry: the header kept raw
// (compression flag set as asked), entries read with the keyed package's
// reader in raw mode.
func copyStream(t *testing.T, stream []byte, h *jhandle, maxP int, compress bool) ([]byte, []int64) {
	t.Helper()
	rh, _, err := keyed.ParseHeader(stream, "copy")
	if err != nil {
		t.Fatal(err)
	}
	offs, err := originalOffsets(stream, len(rh.Raw), rh.Compressed, h)
	if err != nil {
		t.Fatal(err)
	}
	rng := keygroups.Range{Start: h.KeyGroups[0], End: h.KeyGroups[1]}
	var buf bytes.Buffer
	w, err := NewKeyedWriter(&buf, Header{Compressed: compress, Raw: rh.Raw, RawNumStates: len(rh.States)}, rng, maxP)
	if err != nil {
		t.Fatal(err)
	}
	for i, off := range offs {
		if off == 0 {
			continue
		}
		err := keyed.ReadKeyGroupWith(bytes.NewReader(stream), int64(len(stream)), "copy", rh, rng.Start+i, off,
			keyed.ReadOptions{MaxParallelism: maxP, Mode: keyed.ModeRaw}, func(e *keyed.Entry) error {
				return w.Add(e.KeyGroup, e.State.ID, e.KeyBytes, e.ValueBytes)
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.Offsets()
}

// originalOffsets recovers the block offsets of a fixture stream from its
// non-empty key groups: blocks follow the header back to back, so each
// starts where the previous one's end mark (or framed stream) ends.
func originalOffsets(stream []byte, headerLen int, compressed bool, h *jhandle) ([]int64, error) {
	offs := make([]int64, h.KeyGroups[1]-h.KeyGroups[0]+1)
	pos := int64(headerLen)
	for _, g := range h.NonEmptyKeyGroups {
		offs[g-h.KeyGroups[0]] = pos
		if compressed {
			p := int(pos) + len(binfmt.SnappyStreamHeader)
			for p+4 <= len(stream) && stream[p] != 0xFF {
				p += 4 + (int(stream[p+1]) | int(stream[p+2])<<8 | int(stream[p+3])<<16)
			}
			pos = int64(p)
			continue
		}
		end, err := plainBlockEnd(stream, int(pos))
		if err != nil {
			return nil, err
		}
		pos = int64(end)
	}
	if pos != int64(len(stream)) {
		return nil, fmt.Errorf("blocks end at %d, stream has %d bytes", pos, len(stream))
	}
	return offs, nil
}

func plainBlockEnd(b []byte, pos int) (int, error) {
	pos += 2
	for pos+4 <= len(b) {
		kl := int(uint32(b[pos])<<24 | uint32(b[pos+1])<<16 | uint32(b[pos+2])<<8 | uint32(b[pos+3]))
		if kl < 1 || pos+4+kl+4 > len(b) {
			return 0, fmt.Errorf("bad key length at %d", pos)
		}
		flag := b[pos+4]&0x80 != 0
		pos += 4 + kl
		vl := int(uint32(b[pos])<<24 | uint32(b[pos+1])<<16 | uint32(b[pos+2])<<8 | uint32(b[pos+3]))
		pos += 4 + vl
		if flag {
			if pos+2 > len(b) {
				return 0, fmt.Errorf("truncated mark at %d", pos)
			}
			mark := int(b[pos])<<8 | int(b[pos+1])
			pos += 2
			if mark == 0xFFFF {
				return pos, nil
			}
		}
	}
	return 0, fmt.Errorf("block runs off the end")
}

// TestCopyFixtureStreams copies every canonical fixture keyed stream
// through the reader and this writer: uncompressed streams come out
// byte-identical; compressed ones decompress to the same blocks; toggling
// compression twice restores the original bytes.
func TestCopyFixtureStreams(t *testing.T) {
	names := []string{
		"flink1.20-rocksdb-canonical-valuestate-timers",
		"flink1.20-hashmap-canonical-valuestate-timers",
		"flink1.15-rocksdb-canonical-metadata-v3",
		"flink1.19-rocksdb-canonical-snappy-compressed",
		"flink1.20-hashmap-canonical-liststate-window-inline",
		"flink1.20-rocksdb-canonical-broadcast-operator-state",
		"sql-rocksdb-canonical-groupagg-valuestate",
		"sql-rocksdb-canonical-groupagg-ttl-valuestate",
		"sql-rocksdb-canonical-join-mapstate",
		"sql-rocksdb-canonical-join-ttl-valuestate",
		"sql-rocksdb-canonical-udagg-liststate-mapstate",
		"sql-rocksdb-canonical-windowjoin-liststate-timers",
		"sql-rocksdb-canonical-deduplicate-valuestate",
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			meta, _ := loadExpected(t, name)
			metaPath := fixtures.Path(t, name, "_metadata")
			if len(name) > 4 && name[:4] == "sql-" {
				metaPath = fixtures.Path(t, name, "savepoint", "_metadata")
			}
			n := 0
			for _, op := range meta.Operators {
				for sub, st := range op.Subtasks {
					h := st.ManagedKeyedState
					if h == nil {
						continue
					}
					label := fmt.Sprintf("op %s subtask %s", op.OperatorID, sub)
					orig := originalStream(t, name, metaPath, h)
					rh, _, err := keyed.ParseHeader(orig, name)
					if err != nil {
						t.Fatalf("%s: %v", label, err)
					}
					origOffs, err := originalOffsets(orig, len(rh.Raw), rh.Compressed, h)
					if err != nil {
						t.Fatalf("%s: %v", label, err)
					}
					same, offs := copyStream(t, orig, h, op.MaxParallelism, rh.Compressed)
					if !rh.Compressed {
						if !bytes.Equal(same, orig) {
							t.Fatalf("%s: copy differs at byte %d", label, firstDiff(same, orig))
						}
						if !slices.Equal(offs, origOffs) {
							t.Fatalf("%s: offsets %v, original %v", label, offs, origOffs)
						}
					} else {
						a := decompressBlocks(t, same, offs)
						b := decompressBlocks(t, orig, origOffs)
						for i := range a {
							if !bytes.Equal(a[i], b[i]) {
								t.Fatalf("%s: block %d differs after decompression", label, i)
							}
						}
					}
					toggled, _ := copyStream(t, orig, h, op.MaxParallelism, !rh.Compressed)
					back, _ := copyStream(t, toggled, h, op.MaxParallelism, rh.Compressed)
					if !bytes.Equal(back, same) {
						t.Fatalf("%s: compression toggled twice does not restore the stream", label)
					}
					n++
				}
			}
			t.Logf("%d keyed streams copied", n)
		})
	}
}
