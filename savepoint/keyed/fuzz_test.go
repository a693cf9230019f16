package keyed

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

func fuzzSeedsFromFixtures(f *testing.F, add func(header []byte, blocks [][]byte, maxPar int)) {
	if fixtures.Dir() == "" {
		return
	}
	for _, fx := range []string{"sql-rocksdb-canonical-join-mapstate", "flink1.19-rocksdb-canonical-snappy-compressed", "sql-rocksdb-canonical-windowjoin-liststate-timers",
		"sql-rocksdb-canonical-groupagg-ttl-valuestate", "sql-rocksdb-canonical-deduplicate-valuestate"} {
		m := readTestMetadata(f, fx)
		for _, op := range m.operators {
			for _, st := range op.subtasks {
				if st.keyed == nil {
					continue
				}
				data := st.keyed.stream.bytes(f)
				_, hl, err := ReadHeader(bytes.NewReader(data), "seed")
				if err != nil {
					continue
				}
				var blocks [][]byte
				for _, off := range st.keyed.offsets {
					if off > 0 {
						blocks = append(blocks, data[off:])
					}
				}
				add(data[:hl], blocks, op.maxParallelism)
			}
		}
	}
}

func FuzzHeader(f *testing.F) {
	data, _, _ := sqlStream(false, 128, 1, 1)
	f.Add(data)
	fuzzSeedsFromFixtures(f, func(h []byte, _ [][]byte, _ int) { f.Add(h) })
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := ParseHeader(b, "fuzz")
		if err == nil && (n > len(b) || len(h.Raw) != n) {
			t.Fatal("bad header length")
		}
		_, _, _ = ParseOperatorHeader(b, "fuzz")
	})
}

// FuzzKeyGroup decodes a fuzzed block behind a fixed header.
func FuzzKeyGroup(f *testing.F) {
	plainHdr, _, _ := sqlStream(false, 128, 1, 1)
	compHdr, _, _ := sqlStream(true, 128, 1, 1)
	hp, hpl, _ := ReadHeader(bytes.NewReader(plainHdr), "h")
	hc, hcl, _ := ReadHeader(bytes.NewReader(compHdr), "h")
	for _, c := range []struct {
		data []byte
		hl   int64
		comp bool
	}{{plainHdr, hpl, false}, {compHdr, hcl, true}} {
		f.Add(c.data[c.hl:], c.comp, uint8(0))
	}
	// Blocks of the TTL row stream behind the plain header (its columnar
	// state differs; errors must still agree).
	if ttl, offs, _ := ttlStream(false, 128, 1, 3); len(offs) > 0 {
		for _, off := range offs {
			f.Add(ttl[off:], false, uint8(0))
		}
	}
	f.Fuzz(func(t *testing.T, block []byte, comp bool, kg uint8) {
		h, hdrBytes := hp, plainHdr[:hpl]
		if comp {
			h, hdrBytes = hc, compHdr[:hcl]
		}
		stream := append(append([]byte{}, hdrBytes...), block...)
		for _, mode := range []Mode{ModeRaw, ModeSplit, ModeDecode, ModeValidate} {
			_ = ReadKeyGroupWith(bytes.NewReader(stream), int64(len(stream)), "fuzz", h, int(kg&0x7F), int64(len(hdrBytes)), ReadOptions{MaxParallelism: 128, Mode: mode}, func(*Entry) error { return nil })
		}
		// The columnar read fails exactly when the generic decode does,
		// with the same error.
		blocks := [][2]int64{{int64(kg & 0x7F), int64(len(hdrBytes))}}
		_, gerr := readGeneric(stream, "fuzz", h, 128, blocks)
		_, _, cerr := readColumnar(stream, "fuzz", h, 128, 3, blocks)
		if fmt.Sprint(gerr) != fmt.Sprint(cerr) {
			t.Fatalf("generic: %v\ncolumnar: %v", gerr, cerr)
		}
	})
}

// FuzzFixtureBlocks mutates real blocks decoded with their real headers.
func FuzzFixtureBlocks(f *testing.F) {
	type seed struct {
		h      *Header
		hdr    []byte
		maxPar int
	}
	var seeds []seed
	fuzzSeedsFromFixtures(f, func(hb []byte, blocks [][]byte, maxPar int) {
		h, _, err := ParseHeader(hb, "seed")
		if err != nil {
			return
		}
		seeds = append(seeds, seed{h, hb, maxPar})
		for _, b := range blocks {
			f.Add(uint8(len(seeds)-1), b)
		}
	})
	if len(seeds) == 0 {
		f.Skip("fixtures not available")
	}
	f.Fuzz(func(t *testing.T, which uint8, block []byte) {
		s := seeds[int(which)%len(seeds)]
		stream := append(append([]byte{}, s.hdr...), block...)
		for kg := 0; kg < 128; kg += 37 {
			_ = ReadKeyGroup(bytes.NewReader(stream), int64(len(stream)), "fuzz", s.h, kg, int64(len(s.hdr)), s.maxPar, func(*Entry) error { return nil })
		}
		// Columnar reads (timers and SQL rows of the real headers) fail
		// exactly as the generic decode does.
		// The key group of the block's first entry (state id, key length,
		// then the key-group prefix), so that entries get decoded.
		kg := int64(0)
		if len(block) >= 8 {
			kg = int64(block[6] & 0x7F)
			if keygroups.PrefixWidth(s.maxPar) == 2 {
				kg = int64(block[6]&0x7F)<<8 | int64(block[7])
			}
		}
		blocks := [][2]int64{{kg, int64(len(s.hdr))}}
		_, gerr := readGeneric(stream, "fuzz", s.h, s.maxPar, blocks)
		_, _, cerr := readColumnar(stream, "fuzz", s.h, s.maxPar, 5, blocks)
		if fmt.Sprint(gerr) != fmt.Sprint(cerr) {
			t.Fatalf("generic: %v\ncolumnar: %v", gerr, cerr)
		}
	})
}

func FuzzSnappy(f *testing.F) {
	f.Add(flinkwrite.AppendSnappyFramed(nil, []byte("hello hello hello hello hello")))
	f.Add(flinkwrite.AppendSnappyFramed(nil, bytes.Repeat([]byte{1, 2, 3}, 30000)))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewSnappyReader(bytes.NewReader(b), 0)
		n, _ := io.Copy(io.Discard, r)
		// Output is bounded by 64 KiB per chunk, and a chunk needs at least
		// 4 header bytes + 4 CRC bytes + 1 payload byte.
		if n > int64(len(b)/9+1)*65536 {
			t.Fatalf("%d bytes out of %d in", n, len(b))
		}
	})
}
