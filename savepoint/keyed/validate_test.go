package keyed

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

// readBlockModes reads one block in ModeDecode and ModeValidate and returns
// the entry counts and errors of both.
func readBlockModes(stream []byte, h *Header, kg int, off int64, maxPar int) (nd, nv int, ed, ev error) {
	var ttls []int64
	ed = ReadKeyGroupWith(bytes.NewReader(stream), int64(len(stream)), "f", h, kg, off, ReadOptions{MaxParallelism: maxPar, Mode: ModeDecode}, func(e *Entry) error {
		nd++
		if e.TTLTimestamp != nil {
			ttls = append(ttls, *e.TTLTimestamp)
		}
		return nil
	})
	ev = ReadKeyGroupWith(bytes.NewReader(stream), int64(len(stream)), "f", h, kg, off, ReadOptions{MaxParallelism: maxPar, Mode: ModeValidate}, func(e *Entry) error {
		if e.Key != nil || e.Value != nil || e.Namespace != nil || e.UserKey != nil {
			return fmt.Errorf("ModeValidate built a value")
		}
		if e.TTLTimestamp != nil {
			if len(ttls) == 0 || ttls[0] != *e.TTLTimestamp {
				return fmt.Errorf("TTL timestamp %d, decode saw %v", *e.TTLTimestamp, ttls[:min(1, len(ttls))])
			}
			ttls = ttls[1:]
		}
		nv++
		return nil
	})
	if ed == nil && ev == nil && len(ttls) != 0 {
		ev = fmt.Errorf("validate missed %d TTL timestamps", len(ttls))
	}
	return
}

// TestValidateMatchesDecode: on every block of every canonical fixture, and
// on thousands of single-byte mutations of them, ModeValidate accepts and
// rejects exactly what ModeDecode does, with the same error, after the
// same number of entries.
func TestValidateMatchesDecode(t *testing.T) {
	fixtures.Require(t)
	rng := rand.New(rand.NewPCG(3, 4))
	blocks, mutations, rejected := 0, 0, 0
	for _, fx := range canonicalFixtures {
		m := readTestMetadata(t, fx)
		for _, op := range m.operators {
			for _, st := range op.subtasks {
				if st.keyed == nil {
					continue
				}
				data := st.keyed.stream.bytes(t)
				h, hl, err := ReadHeader(bytes.NewReader(data), "f")
				if err != nil {
					continue // heap-native layouts
				}
				for i, off := range st.keyed.offsets {
					if off == 0 {
						continue
					}
					kg := st.keyed.start + i
					nd, nv, ed, ev := readBlockModes(data, h, kg, off, op.maxParallelism)
					if ed != nil || ev != nil || nd != nv || nd == 0 {
						t.Fatalf("%s kg %d: decode %d/%v, validate %d/%v", fx, kg, nd, ed, nv, ev)
					}
					blocks++
					if h.Compressed {
						continue // mutations would only hit the CRC
					}
					for range 40 {
						mut := bytes.Clone(data)
						p := hl + rng.Int64N(int64(len(data))-hl)
						mut[p] ^= byte(1 + rng.IntN(255))
						nd, nv, ed, ev := readBlockModes(mut, h, kg, off, op.maxParallelism)
						mutations++
						if ed != nil {
							rejected++
						}
						if nd != nv || fmt.Sprint(ed) != fmt.Sprint(ev) {
							t.Fatalf("%s kg %d byte %d: decode %d/%v, validate %d/%v", fx, kg, p, nd, ed, nv, ev)
						}
					}
				}
			}
		}
	}
	if blocks == 0 || rejected == 0 {
		t.Fatalf("%d blocks, %d of %d mutations rejected", blocks, rejected, mutations)
	}
	t.Logf("%d blocks, %d of %d mutations rejected identically", blocks, rejected, mutations)
}
