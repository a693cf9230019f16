//go:build cgo

package recordstore

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/keygroups"
)

// TestRecordPrefixExtractorMatchesKeyLayout checks the native extractor
// against the Go key layout: the prefix of every record key (and of every
// group prefix) is exactly its group prefix; keys without a complete group
// prefix are outside the domain.
func TestRecordPrefixExtractorMatchesKeyLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, w := range []int{1, 2} {
		for _, klen := range []int{0, 1, 7, 16, 17, 127, 128, 300, 20000} {
			key := make([]byte, klen)
			for i := range key {
				key[i] = byte(rng.Uint32())
			}
			kg := rng.IntN(1 << (8 * w))
			for _, side := range []Side{Left, Right} {
				gp := AppendGroupPrefix(nil, w, kg, side, key)
				for _, row := range [][]byte{nil, {0}, bytes.Repeat([]byte{0xff}, 40)} {
					rk := AppendRecordKey(nil, w, kg, side, key, row)
					if got := engine.RecordPrefixLen(w, rk); got != len(gp) {
						t.Fatalf("w=%d klen=%d row=%d: prefix length %d, want the group prefix's %d", w, klen, len(row), got, len(gp))
					}
				}
				// every proper prefix of a group prefix is outside the domain
				for n := 0; n < len(gp); n += max(1, len(gp)/50) {
					if got := engine.RecordPrefixLen(w, gp[:n]); got != -1 {
						t.Fatalf("w=%d klen=%d: truncated group prefix of %d bytes has prefix length %d", w, klen, n, got)
					}
				}
			}
		}
		// a key-group bound and an unterminated / oversized varint
		bad := [][]byte{
			bytes.Repeat([]byte{7}, w),
			append(bytes.Repeat([]byte{7}, w), 0, 0x80, 0x80),
			append(bytes.Repeat([]byte{7}, w), 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
			binary.AppendUvarint(append(bytes.Repeat([]byte{7}, w), 0), 1<<40),
		}
		for _, b := range bad {
			if got := engine.RecordPrefixLen(w, b); got != -1 {
				t.Fatalf("w=%d key %x: prefix length %d, want -1", w, b, got)
			}
		}
	}
	if _, err := engine.RecordPrefixExtractor(3); err == nil {
		t.Fatal("width 3 accepted")
	}
}

// varKeyStream is randomStream over raw equality keys of many lengths,
// several sharing their first 16 bytes (one fixed-length prefix would not
// tell them apart), with payloads of a few sizes.
func varKeyStream(seed uint64, bundles, perBundle int) stream {
	rng := rand.New(rand.NewPCG(seed, 9))
	var keys [][]byte
	common := bytes.Repeat([]byte{0x5a}, 16)
	for i := 0; i < 30; i++ {
		var k []byte
		switch i % 5 {
		case 0:
			k = []byte{byte(i)}
		case 1:
			k = append(append([]byte(nil), common...), byte(i))
		case 2:
			k = append(append([]byte(nil), common...), bytes.Repeat([]byte{byte(i)}, 150)...)
		case 3:
			k = bytes.Repeat([]byte{byte(i)}, 16)
		default:
			k = nil // the empty key
			if i > 4 {
				k = []byte{0x5a, 0x5a, byte(i)}
			}
		}
		keys = append(keys, k)
	}
	var s stream
	var sent []Input
	for b := 0; b < bundles; b++ {
		var in []Input
		for i := 0; i < perBundle; i++ {
			if len(sent) > 0 && rng.IntN(4) == 0 {
				x := sent[rng.IntN(len(sent))]
				x.Kind = keygroups.Delete
				in = append(in, x)
				continue
			}
			k := keys[rng.IntN(len(keys))]
			if rng.IntN(3) == 0 {
				k = keys[rng.IntN(3)]
			}
			row := bytes.Repeat([]byte{byte(rng.IntN(6))}, []int{1, 3, 30}[rng.IntN(3)])
			x := Input{Side: Side(rng.IntN(2)), Kind: keygroups.Insert, Key: k, Row: row}
			in = append(in, x)
			sent = append(sent, x)
		}
		s.bundles = append(s.bundles, in)
		d := time.Duration(rng.IntN(6)) * time.Millisecond
		if rng.IntN(15) == 0 {
			d = testTTL
		}
		s.advance = append(s.advance, d)
	}
	return s
}

// TestPrefixBloomAcrossReopen writes record state without the prefix bloom,
// flushes it into SST files, reopens the same directory with the bloom
// (the default) and goes on; then reads everything back without it, through
// the record layout and through a plain scan (what checkpoint restore,
// export and verification do). Output and logical content must equal the
// reference model's at every step, whichever files carry prefix filters.
func TestPrefixBloomAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	layout := engine.Layout{MaxParallelism: 128, Range: keygroups.Range{Start: 0, End: 127}}
	clock := engine.NewManualClock(1_000_000)
	states := []engine.StateDesc{StateDesc(LayoutRecord, testTTL)}
	open := func(noBloom bool) (engine.Backend, JoinState) {
		be, err := engine.OpenRocksDB(dir, layout, states, engine.RocksOptions{Clock: clock, WriteBufferSize: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		st, err := Open(LayoutRecord, be, Options{Clock: clock, NoPrefixBloom: noBloom, Pool: engine.NewPool(1 << 20)})
		if err != nil {
			be.Close()
			t.Fatal(err)
		}
		return be, st
	}
	ref := &refJoin{ttl: testTTL.Milliseconds(), rows: map[refKey]*refRow{}}
	s := varKeyStream(21, 120, 30)
	total := 0
	run := func(noBloom bool, from, to int) {
		be, st := open(noBloom)
		defer be.Close()
		j := NewJoin(st, JoinOptions{})
		for b := from; b < to; b++ {
			clock.Advance(s.advance[b])
			want := ref.process(clock.Now(), s.bundles[b])
			got := collect(t, j, s.bundles[b])
			if !slices.Equal(got, want) {
				t.Fatalf("bloom=%v bundle %d: output differs\n got %q\nwant %q", !noBloom, b, got, want)
			}
			total += len(got)
			if b%5 == 4 {
				if err := be.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := be.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, want := dumpLogical(t, st), ref.logical(clock.Now(), 128); !slices.Equal(got, want) {
			t.Fatalf("bloom=%v: logical content differs\n got %q\nwant %q", !noBloom, got, want)
		}
	}
	run(true, 0, 40)
	run(false, 40, 80)
	if !sstNames(t, dir, "sfstate.JoinGroupPrefix.1") {
		t.Fatal("no SST file records the group-prefix extractor")
	}
	run(true, 80, 100)
	run(false, 100, 120)
	if total == 0 {
		t.Fatal("stream produced no output")
	}
	// a plain scan of the reopened files, no recordstore options involved
	be, err := engine.OpenRocksDB(dir, layout, states, engine.RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	live := 0
	now := clock.Now()
	err = be.Scan(0, nil, nil, func(k, v []byte) bool {
		ts, c, _, _, err := DecodeRecordValue(v)
		if err != nil {
			t.Fatalf("record %x: %v", k, err)
		}
		if !expired(ts, now, ref.ttl) && c > 0 {
			live++
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(ref.logical(now, 128)); live != want {
		t.Fatalf("plain scan: %d live records, want %d", live, want)
	}
}

// sstNames reports whether an SST file in dir contains name (the table
// properties block, which holds the prefix extractor's name, is stored
// uncompressed).
func sstNames(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), name) {
			return true
		}
	}
	return false
}
