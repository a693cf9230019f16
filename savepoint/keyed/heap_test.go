package keyed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// heapTwin is the same generated keyed state written in the canonical and
// in the heap layout.
type heapTwin struct {
	maxPar            int
	rng               keygroups.Range
	canon, heap       []byte
	canonOffs, heapOf []int64
	entries           int // canonical entries
}

// Heap twin states: ids in the header.
const (
	twinValue  = iota // VALUE<Long>, String namespace (ambiguous keys)
	twinList          // LIST<TTL<Long>>, VoidNamespace
	twinMap           // MAP<String, Long> with null values, VoidNamespace
	twinTTL           // VALUE<TTL<String>>, TimeWindow namespace
	twinTimers        // timers of (String key, VoidNamespace)
	twinStates
)

func twinHeader(compressed bool) flinkwrite.Header {
	return flinkwrite.Header{Compressed: compressed, KeySerializer: flinkwrite.StringSnapshot, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("value", flinkwrite.KindValue, flinkwrite.StringSnapshot, flinkwrite.LongSnapshot),
		flinkwrite.KeyedStateMeta("list", flinkwrite.KindList, flinkwrite.VoidNamespaceSnapshot, flinkwrite.ListSnapshot(flinkwrite.TtlSnapshot(flinkwrite.LongSnapshot))),
		flinkwrite.KeyedStateMeta("map", flinkwrite.KindMap, flinkwrite.VoidNamespaceSnapshot, flinkwrite.MapSnapshot(flinkwrite.StringSnapshot, flinkwrite.LongSnapshot)),
		flinkwrite.KeyedStateMeta("ttl", flinkwrite.KindValue, flinkwrite.TimeWindowSnapshot, flinkwrite.TtlSnapshot(flinkwrite.StringSnapshot)),
		flinkwrite.TimerStateMeta("_timer_state/event_timers", flinkwrite.TimerSnapshot(flinkwrite.StringSnapshot, flinkwrite.VoidNamespaceSnapshot)),
	}}
}

// makeHeapTwin generates keys for every key group of rng with entries in
// every state (random sizes; bigList adds one list of ~2 MiB) and writes
// them in both layouts; the heap layout lists its state streams in order.
func makeHeapTwin(t testing.TB, seed uint64, compressed bool, maxPar int, rng keygroups.Range, order []int, bigList bool) *heapTwin {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	h := twinHeader(compressed)
	var cb, hb bytes.Buffer
	cw, err := flinkwrite.NewKeyedWriter(&cb, h, rng, maxPar)
	if err != nil {
		t.Fatal(err)
	}
	hw, err := flinkwrite.NewHeapWriter(&hb, h, rng, maxPar)
	if err != nil {
		t.Fatal(err)
	}
	if order != nil {
		if err := hw.SetStateOrder(order); err != nil {
			t.Fatal(err)
		}
	}
	tw := &heapTwin{maxPar: maxPar, rng: rng}
	prefix := keygroups.PrefixWidth(maxPar)
	void := flinkwrite.AppendVoidNamespace(nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	stateKey := func(kg int, key, ns, uk []byte, ambiguous bool) []byte {
		k, err := flinkwrite.StateKey{KeyGroup: kg, PrefixLen: prefix, Key: key, Namespace: ns, UserKey: uk, Ambiguous: ambiguous}.Append(nil)
		must(err)
		return k
	}
	big := bigList
	for kg := rng.Start; kg <= rng.End; kg++ {
		if r.IntN(5) == 0 {
			continue // an empty key group
		}
		nkeys := 1 + r.IntN(3)
		keys := make([][]byte, nkeys)
		for i := range keys {
			keys[i] = flinkwrite.AppendStringValue(nil, fmt.Sprintf("k%d-%d-%s", kg, i, string(make([]byte, r.IntN(4)))))
		}
		for st := range twinStates {
			for _, key := range keys {
				if r.IntN(4) == 0 {
					continue
				}
				switch st {
				case twinValue:
					for j := range 1 + r.IntN(2) {
						ns := flinkwrite.AppendStringValue(nil, "window-"+strconv.Itoa(j))
						val := flinkwrite.AppendLong(nil, r.Int64())
						must(cw.Add(kg, st, stateKey(kg, key, ns, nil, true), val))
						must(hw.Add(kg, st, ns, key, val))
						tw.entries++
					}
				case twinList:
					n := 1 + r.IntN(4)
					if big {
						n, big = 70_000, false
					}
					elems := make([][]byte, n)
					for i := range elems {
						elems[i] = flinkwrite.AppendTtlValue(nil, 1_700_000_000_000+int64(i), flinkwrite.AppendLong(nil, r.Int64()))
					}
					lv, err := flinkwrite.AppendListValue(nil, elems...)
					must(err)
					must(cw.Add(kg, st, stateKey(kg, key, void, nil, false), lv))
					must(hw.Add(kg, st, void, key, flinkwrite.AppendListSerializer(nil, elems...)))
					tw.entries++
				case twinMap:
					var ents []flinkwrite.MapSerializerEntry
					for i := range r.IntN(4) { // sometimes an empty map
						uk := flinkwrite.AppendStringValue(nil, "uk"+strconv.Itoa(i))
						var v []byte
						if r.IntN(3) > 0 {
							v = flinkwrite.AppendLong(nil, int64(i))
						}
						ents = append(ents, flinkwrite.MapSerializerEntry{Key: uk, Value: v})
						must(cw.Add(kg, st, stateKey(kg, key, void, uk, false), flinkwrite.AppendMapEntryValue(nil, v, v == nil)))
						tw.entries++
					}
					must(hw.Add(kg, st, void, key, flinkwrite.AppendMapSerializer(nil, ents...)))
				case twinTTL:
					ns := flinkwrite.AppendTimeWindow(nil, int64(kg)*1000, int64(kg)*1000+999)
					val := flinkwrite.AppendTtlValue(nil, 1_600_000_000_000+int64(kg), flinkwrite.AppendStringValue(nil, "v"+strconv.Itoa(kg)))
					must(cw.Add(kg, st, stateKey(kg, key, ns, nil, false), val))
					must(hw.Add(kg, st, ns, key, val))
					tw.entries++
				case twinTimers:
					ts := r.Int64N(1<<50) - 1<<49
					ck, err := flinkwrite.AppendTimerKey(nil, kg, prefix, ts, key, void)
					must(err)
					must(cw.Add(kg, st, ck, nil))
					must(hw.AddElement(kg, st, flinkwrite.AppendTimerElement(nil, ts, key, void)))
					tw.entries++
				}
			}
		}
	}
	must(cw.Close())
	must(hw.Close())
	tw.canon, tw.canonOffs = cb.Bytes(), cw.Offsets()
	tw.heap, tw.heapOf = hb.Bytes(), hw.Offsets()
	return tw
}

// twinEntry renders everything an entry carries.
func twinEntry(t testing.TB, e *Entry) string {
	j, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	ttl := "-"
	if e.TTLTimestamp != nil {
		ttl = strconv.FormatInt(*e.TTLTimestamp, 10)
	}
	return fmt.Sprintf("%s %x %x [%x %x %x] %s", j, e.KeyBytes, e.ValueBytes, e.KeyPart, e.NamespaceBytes, e.UserKeyBytes, ttl)
}

// readTwin reads every key group of one layout and returns the rendered
// entries per state, in read order.
func readTwin(t testing.TB, tw *heapTwin, heap bool, o ReadOptions) ([][]string, error) {
	t.Helper()
	data, offs := tw.canon, tw.canonOffs
	if heap {
		data, offs = tw.heap, tw.heapOf
	}
	h, _, err := ReadHeader(bytes.NewReader(data), "twin")
	if err != nil {
		t.Fatal(err)
	}
	o.MaxParallelism, o.Heap = tw.maxPar, heap
	out := make([][]string, len(h.States))
	var br BlockReader
	for i, off := range offs {
		if off == 0 {
			continue
		}
		o.End = int64(len(data))
		for _, next := range offs[i+1:] {
			if next > 0 {
				o.End = next
				break
			}
		}
		err := br.Read(bytes.NewReader(data), int64(len(data)), "twin", h, tw.rng.Start+i, off, o, func(e *Entry) error {
			out[e.State.ID] = append(out[e.State.ID], twinEntry(t, e))
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// TestHeapMatchesCanonical reads the same state written in both layouts and
// requires identical entries (decoded values, canonical key and value
// bytes, split parts, TTL timestamps) in every mode.
func TestHeapMatchesCanonical(t *testing.T) {
	for _, c := range []struct {
		compressed bool
		maxPar     int
		order      []int
		big        bool
	}{
		{false, 100, nil, false},
		{true, 100, []int{4, 2, 0, 3, 1}, false},
		{false, 300, []int{1, 0, 2, 4, 3}, true},
		{true, 300, nil, true},
	} {
		rng := keygroups.Range{Start: 3, End: 60}
		tw := makeHeapTwin(t, uint64(c.maxPar), c.compressed, c.maxPar, rng, c.order, c.big)
		for _, o := range []ReadOptions{{Mode: ModeDecode}, {Mode: ModeDecode, ReuseValues: true}, {Mode: ModeValidate}, {Mode: ModeSplit}, {Mode: ModeRaw}} {
			want, err := readTwin(t, tw, false, o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := readTwin(t, tw, true, o)
			if err != nil {
				t.Fatalf("compressed=%v maxPar=%d mode=%d: %v", c.compressed, c.maxPar, o.Mode, err)
			}
			n := 0
			for st := range want {
				n += len(want[st])
				if o.Mode == ModeRaw || o.Mode == ModeSplit {
					// The canonical reader leaves parts it did not split
					// empty; compare framing only.
					for i := range got[st] {
						if i < len(want[st]) {
							got[st][i], want[st][i] = rawPart(got[st][i]), rawPart(want[st][i])
						}
					}
				}
				if !slices.Equal(got[st], want[st]) {
					for i := range min(len(got[st]), len(want[st])) {
						if got[st][i] != want[st][i] {
							t.Fatalf("compressed=%v maxPar=%d mode=%d state %d entry %d:\n heap  %s\n canon %s", c.compressed, c.maxPar, o.Mode, st, i, got[st][i], want[st][i])
						}
					}
					t.Fatalf("compressed=%v maxPar=%d mode=%d state %d: %d heap entries, %d canonical", c.compressed, c.maxPar, o.Mode, st, len(got[st]), len(want[st]))
				}
			}
			if n != tw.entries || n < 100 {
				t.Fatalf("%d entries read, %d written", n, tw.entries)
			}
		}
	}
}

// rawPart keeps the JSON and the key and value bytes of a rendered entry.
func rawPart(s string) string {
	i := bytes.IndexByte([]byte(s), '[')
	if j := bytes.LastIndexByte([]byte(s[:max(i, 0)]), '}'); i > 0 && j > 0 {
		return s[:i]
	}
	return s
}

// TestHeapDamage truncates and corrupts heap key groups: every read ends
// with an *Error naming the file and key group (or decodes what is left),
// never a panic.
func TestHeapDamage(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		tw := makeHeapTwin(t, 11, compressed, 128, keygroups.Range{Start: 0, End: 7}, nil, false)
		h, _, err := ReadHeader(bytes.NewReader(tw.heap), "twin")
		if err != nil {
			t.Fatal(err)
		}
		kg, off, end := -1, int64(0), int64(0)
		for i := range tw.heapOf {
			if i+1 < len(tw.heapOf) && tw.heapOf[i+1]-tw.heapOf[i] > 40 {
				kg, off, end = i, tw.heapOf[i], tw.heapOf[i+1]
				break
			}
		}
		if kg < 0 {
			t.Fatal("no key group with entries")
		}
		read := func(data []byte, o ReadOptions) error {
			o.MaxParallelism, o.Heap = 128, true
			var br BlockReader
			return br.Read(bytes.NewReader(data), int64(len(data)), "damaged", h, kg, off, o, func(*Entry) error { return nil })
		}
		for _, mode := range []Mode{ModeDecode, ModeValidate, ModeRaw} {
			if err := read(tw.heap, ReadOptions{Mode: mode, End: end}); err != nil {
				t.Fatalf("intact key group: %v", err)
			}
			// The block must end at End.
			if err := read(tw.heap, ReadOptions{Mode: mode, End: end + 1}); err == nil {
				t.Fatal("a byte past the key group went unnoticed")
			}
			for cut := off + 1; cut < end; cut++ {
				err := read(tw.heap[:cut], ReadOptions{Mode: mode})
				var ke *Error
				if !errors.As(err, &ke) || ke.File != "damaged" || ke.KeyGroup != kg {
					t.Fatalf("cut at %d: %v", cut, err)
				}
			}
			for pos := off; pos < end; pos++ {
				data := slices.Clone(tw.heap)
				data[pos] ^= 0x5A
				if err := read(data, ReadOptions{Mode: mode, End: end}); err != nil {
					var ke *Error
					if !errors.As(err, &ke) {
						t.Fatalf("flip at %d: %T %v", pos, err, err)
					}
				}
			}
		}
		// The wrong key-group id.
		if err := read(tw.heap, ReadOptions{End: end, Mode: ModeRaw, MaxParallelism: 128}); err != nil {
			t.Fatal(err)
		}
		var br BlockReader
		err = br.Read(bytes.NewReader(tw.heap), int64(len(tw.heap)), "damaged", h, kg+1, off, ReadOptions{MaxParallelism: 128, Heap: true}, func(*Entry) error { return nil })
		if !errors.Is(err, binfmt.ErrCorrupt) {
			t.Fatalf("wrong key-group id: %v", err)
		}
	}
}

// TestHeapUnsupportedSerializer: entries of a serializer without decoder
// cannot be delimited; the read says so instead of guessing.
func TestHeapUnsupportedSerializer(t *testing.T) {
	unknown := flinkwrite.TableNullSnapshot // parsed, but no data decoder
	h := flinkwrite.Header{KeySerializer: flinkwrite.LongSnapshot, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("s", flinkwrite.KindValue, flinkwrite.VoidNamespaceSnapshot, unknown),
	}}
	var b bytes.Buffer
	w, err := flinkwrite.NewHeapWriter(&b, h, keygroups.Range{Start: 0, End: 0}, 128)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(0, 0, []byte{0}, flinkwrite.AppendLong(nil, 1), []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	hd, _, err := ReadHeader(bytes.NewReader(b.Bytes()), "u")
	if err != nil {
		t.Fatal(err)
	}
	err = ReadKeyGroupWith(bytes.NewReader(b.Bytes()), int64(b.Len()), "u", hd, 0, w.Offsets()[0], ReadOptions{MaxParallelism: 128, Heap: true}, func(*Entry) error { return nil })
	var ke *Error
	if !errors.As(err, &ke) || !bytes.Contains([]byte(err.Error()), []byte("NullSerializer")) {
		t.Fatalf("unsupported value serializer: %v", err)
	}
}

// heapFixtureBlocks returns the heap-layout key groups of the NATIVE
// hashmap fixture: header bytes and block bytes (from their offset to the
// next), with the key group ids.
func heapFixtureBlocks(t testing.TB) (hdrs [][]byte, blocks [][]byte, kgs []int, which []int) {
	if fixtures.Dir() == "" {
		return
	}
	m := readTestMetadata(t, "flink1.20-hashmap-NATIVE-for-contrast")
	for _, op := range m.operators {
		for _, st := range op.subtasks {
			if st.keyed == nil {
				continue
			}
			data := st.keyed.stream.bytes(t)
			_, hl, err := ReadHeader(bytes.NewReader(data), "seed")
			if err != nil {
				continue
			}
			hdrs = append(hdrs, data[:hl])
			for i, off := range st.keyed.offsets {
				end := int64(len(data))
				if i+1 < len(st.keyed.offsets) {
					end = st.keyed.offsets[i+1]
				}
				if off > 0 && end > off {
					blocks, kgs, which = append(blocks, data[off:end]), append(kgs, st.keyed.start+i), append(which, len(hdrs)-1)
				}
			}
		}
	}
	return
}

// FuzzHeapKeyGroup decodes fuzzed heap key groups behind the generated
// twin header and behind the real headers of the NATIVE hashmap fixture.
func FuzzHeapKeyGroup(f *testing.F) {
	var hdrs [][]byte
	for _, comp := range []bool{false, true} {
		tw := makeHeapTwin(f, 5, comp, 128, keygroups.Range{Start: 0, End: 3}, nil, false)
		_, hl, err := ReadHeader(bytes.NewReader(tw.heap), "seed")
		if err != nil {
			f.Fatal(err)
		}
		hdrs = append(hdrs, tw.heap[:hl])
		for i, off := range tw.heapOf {
			end := int64(len(tw.heap))
			if i+1 < len(tw.heapOf) {
				end = tw.heapOf[i+1]
			}
			f.Add(uint8(len(hdrs)-1), uint8(i), tw.heap[off:end])
		}
	}
	fh, fb, fk, fw := heapFixtureBlocks(f)
	base := len(hdrs)
	hdrs = append(hdrs, fh...)
	for i := range fb {
		f.Add(uint8(base+fw[i]), uint8(fk[i]), fb[i])
	}
	var headers []*Header
	for _, hb := range hdrs {
		h, _, err := ParseHeader(hb, "seed")
		if err != nil {
			f.Fatal(err)
		}
		headers = append(headers, h)
	}
	f.Fuzz(func(t *testing.T, which, kg uint8, block []byte) {
		i := int(which) % len(hdrs)
		stream := append(slices.Clone(hdrs[i]), block...)
		for _, mode := range []Mode{ModeRaw, ModeSplit, ModeDecode, ModeValidate} {
			for _, end := range []int64{0, int64(len(stream))} {
				err := ReadKeyGroupWith(bytes.NewReader(stream), int64(len(stream)), "fuzz", headers[i], int(kg&0x7F), int64(len(hdrs[i])),
					ReadOptions{MaxParallelism: 128, Mode: mode, Heap: true, End: end}, func(e *Entry) error {
						if len(e.KeyBytes) == 0 {
							t.Fatal("entry without key bytes")
						}
						return nil
					})
				var ke *Error
				if err != nil && !errors.As(err, &ke) {
					t.Fatalf("error of type %T: %v", err, err)
				}
			}
		}
	})
}
