//go:build cgo

package native_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/native"
	"github.com/sfstate/sfstate/savepoint/serde"
)

const (
	nativeFixture    = "flink1.20-rocksdb-NATIVE-incremental-for-contrast"
	canonicalFixture = "flink1.20-rocksdb-canonical-valuestate-timers"
)

func openDir(t *testing.T, dir string) *savepoint.Savepoint {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// normalize turns one reference-shaped entry into a comparable string:
// processing-time timer timestamps depend on the wall clock of the run
// that took the savepoint, so they are dropped.
func normalize(t *testing.T, b []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if st, _ := m["state"].(string); strings.HasPrefix(st, "_timer_state/processing") {
		if tm, ok := m["timer"].([]any); ok && len(tm) == 2 {
			if obj, ok := tm[1].(map[string]any); ok {
				delete(obj, "ts")
			}
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func walkAll(t *testing.T, sp *savepoint.Savepoint, o savepoint.ScanOptions, tmp string) (*native.Snapshot, []string) {
	t.Helper()
	snap, err := native.Open(context.Background(), sp, o)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = snap.Walk(context.Background(), sp, engine.ReadNativeDir, native.WalkOptions{KeyGroupTo: -1, TempDir: tmp}, func(h *native.Handle, e *keyed.Entry) error {
		b, err := e.MarshalJSON()
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		m["op"] = h.Operator.ID.String()
		m["subtask"] = h.Subtask
		b, _ = json.Marshal(m)
		got = append(got, normalize(t, b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap, got
}

func TestFlinkNativeMatchesCanonicalTwin(t *testing.T) {
	sp := openDir(t, fixtures.Path(t, nativeFixture))
	tmp := t.TempDir()
	snap, err := native.Open(context.Background(), sp, savepoint.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Layout != native.LayoutFlink {
		t.Fatalf("layout %s, want %s", snap.Layout, native.LayoutFlink)
	}
	if len(snap.Handles) == 0 {
		t.Fatal("no native handles")
	}
	_, got := walkAll(t, sp, savepoint.ScanOptions{}, tmp)
	ents, err := os.ReadDir(tmp)
	if err != nil || len(ents) != 0 {
		t.Fatalf("temporary files left: %v %v", ents, err)
	}

	f, err := os.Open(fixtures.Path(t, "_expected", canonicalFixture+".entries.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		want = append(want, normalize(t, sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	sort.Strings(want)
	t.Logf("%d native entries, %d canonical", len(got), len(want))
	if len(got) != len(want) {
		t.Errorf("native decodes %d entries, canonical twin has %d", len(got), len(want))
	}
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("entry %d differs:\n native    %s\n canonical %s", i, g, w)
			break
		}
	}
}

// engineEntry renders one decoded engine entry (or one written) for
// comparison.
func engineEntry(state string, kg int, key, ns, uk []byte, value string, ttl int64) string {
	return fmt.Sprintf("%s kg=%d key=%x ns=%x uk=%x value=%s ttl=%d", state, kg, key, ns, uk, value, ttl)
}

func rawHex(v any) string {
	switch x := v.(type) {
	case *serde.Raw:
		return hex.EncodeToString(x.Bytes)
	case serde.List:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = rawHex(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case int64:
		return fmt.Sprintf("#%d", x)
	case nil:
		return ""
	}
	return fmt.Sprintf("?%T", v)
}

// takeEngineCheckpoint writes known entries into two engine RocksDB
// backends (value with TTL, list, map, priority queue) and checkpoints
// them into root as checkpoint 1. It returns the entries written.
func takeEngineCheckpoint(t *testing.T, root string) []string {
	t.Helper()
	const maxPar = 128
	states := []engine.StateDesc{
		{Name: "last", Kind: engine.KindValue, TTL: time.Hour},
		{Name: "events", Kind: engine.KindList},
		{Name: "rows", Kind: engine.KindMap},
		{Name: "timers", Kind: engine.KindPriorityQueue},
	}
	now := time.Now().UnixMilli()
	var want []string
	var backends []engine.Backend
	for i, r := range keygroups.Ranges(maxPar, 2) {
		l := engine.Layout{MaxParallelism: maxPar, Range: r}
		b, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), fmt.Sprintf("task-%d", i)), l, states, engine.RocksOptions{WriteBufferSize: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		backends = append(backends, b)
		bt := b.NewBatch()
		for k := 0; k < 40; k++ {
			kg := (k*37 + i*64) % maxPar
			if !l.Range.Contains(kg) {
				continue
			}
			key := []byte(fmt.Sprintf("user-%d-%d", i, k))
			ns := []byte{byte(k % 3)}
			ts := now - int64(k)*1000
			stored := l.Key(nil, kg, key, ns)
			val := binary.BigEndian.AppendUint64(nil, uint64(ts))
			val = append(val, fmt.Sprintf("v%d", k)...)
			bt.Put(0, stored, val)
			want = append(want, engineEntry("last", kg, key, ns, nil, hex.EncodeToString(val[8:]), ts))

			lv := binary.BigEndian.AppendUint64(nil, uint64(ts))
			var elems []string
			for e := 0; e <= k%3; e++ {
				el := []byte(fmt.Sprintf("e%d.%d", k, e))
				lv = binary.AppendUvarint(lv, uint64(len(el)))
				lv = append(lv, el...)
				elems = append(elems, hex.EncodeToString(el))
			}
			bt.Put(1, stored, lv)
			want = append(want, engineEntry("events", kg, key, ns, nil, "["+strings.Join(elems, ",")+"]", ts))

			for u := 0; u < 2; u++ {
				uk := []byte{'k', byte('a' + u)}
				mv := binary.BigEndian.AppendUint64(nil, uint64(ts))
				mv = append(mv, byte(u), byte(k))
				bt.Put(2, append(append([]byte(nil), stored...), uk...), mv)
				want = append(want, engineEntry("rows", kg, key, ns, uk, hex.EncodeToString(mv[8:]), ts))
			}

			prio := int64(k*100 - 500)
			elem := []byte(fmt.Sprintf("timer-%d", k))
			pk := l.AppendKeyGroup(nil, kg)
			pk = binary.BigEndian.AppendUint64(pk, uint64(prio)^(1<<63))
			pk = append(pk, elem...)
			bt.Put(3, pk, nil)
			want = append(want, engineEntry("timers", kg, nil, nil, nil, fmt.Sprintf("%d:%x", prio, elem), -1))
		}
		if err := bt.Commit(); err != nil {
			t.Fatal(err)
		}
		bt.Close()
		if err := b.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s3.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.New(st, checkpoint.Options{}).TakeSync(context.Background(), backends, 1); err != nil {
		t.Fatal(err)
	}
	if len(want) < 100 {
		t.Fatalf("only %d entries written", len(want))
	}
	return want
}

func TestEngineNativeCheckpointDecodes(t *testing.T) {
	root := t.TempDir()
	want := takeEngineCheckpoint(t, root)
	st, err := s3.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, checkpoint.MetadataKey(1))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := native.Open(context.Background(), sp, savepoint.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Layout != native.LayoutEngine {
		t.Fatalf("layout %s, want %s", snap.Layout, native.LayoutEngine)
	}
	tmp := t.TempDir()
	var got []string
	err = snap.Walk(context.Background(), sp, engine.ReadNativeDir, native.WalkOptions{KeyGroupTo: -1, TempDir: tmp}, func(h *native.Handle, e *keyed.Entry) error {
		if e.State.Name == "timers" {
			got = append(got, engineEntry("timers", e.KeyGroup, nil, nil, nil, fmt.Sprintf("%d:%s", e.Key, rawHex(e.Value)), -1))
			return nil
		}
		ttl := int64(-1)
		if e.TTLTimestamp != nil {
			ttl = *e.TTLTimestamp
		}
		var uk []byte
		if r, ok := e.UserKey.(*serde.Raw); ok {
			uk = r.Bytes
		}
		got = append(got, engineEntry(e.State.Name, e.KeyGroup, e.Key.(*serde.Raw).Bytes, e.Namespace.(*serde.Raw).Bytes, uk, rawHex(e.Value), ttl))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temporary files left: %v", ents)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("decoded entries differ from those written:\n got %d: %.600s\nwant %d: %.600s", len(got), strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}

	// Filters: one state, a key-group range.
	var n int
	err = snap.Walk(context.Background(), sp, engine.ReadNativeDir, native.WalkOptions{State: "rows", KeyGroupFrom: 0, KeyGroupTo: 63, TempDir: tmp}, func(h *native.Handle, e *keyed.Entry) error {
		if e.State.Name != "rows" || e.KeyGroup > 63 {
			t.Errorf("filtered walk returned %s kg %d", e.State.Name, e.KeyGroup)
		}
		n++
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("filtered walk: %d entries, %v", n, err)
	}
}

// A flipped byte in a shared SST of an engine checkpoint fails the
// manifest's CRC-32C check, naming the object.
func TestEngineNativeCorruptSSTNamed(t *testing.T) {
	root := t.TempDir()
	takeEngineCheckpoint(t, root)
	ssts, _ := filepath.Glob(filepath.Join(root, "shared", "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no shared SST files")
	}
	b, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x5A
	if err := os.WriteFile(ssts[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := s3.NewLocal(root)
	sp, err := savepoint.Open(context.Background(), st, checkpoint.MetadataKey(1))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := native.Open(context.Background(), sp, savepoint.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	err = snap.Walk(context.Background(), sp, engine.ReadNativeDir, native.WalkOptions{KeyGroupTo: -1, TempDir: tmp}, func(*native.Handle, *keyed.Entry) error { return nil })
	if err == nil || !errors.Is(err, native.ErrFormat) || !strings.Contains(err.Error(), filepath.Base(ssts[0])) {
		t.Fatalf("err = %v, want a format error naming %s", err, filepath.Base(ssts[0]))
	}
	t.Logf("error: %v", err)
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temporary files left after the error: %v", ents)
	}
}

// A corrupted data block in an SST of Flink's native savepoint (no CRC
// recorded) is caught by RocksDB's block checksums; the error names the
// savepoint file, not the download directory.
func TestFlinkNativeCorruptSSTNamed(t *testing.T) {
	src := fixtures.Path(t, nativeFixture)
	dir := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sp := openDir(t, dir)
	snap, err := native.Open(context.Background(), sp, savepoint.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var victim, victimName string
	for _, h := range snap.Handles {
		for _, f := range h.Files {
			if strings.HasSuffix(f.Name, ".sst") && victim == "" {
				victim, victimName = f.Loc.Key, f.Loc.Name
			}
		}
	}
	if victim == "" {
		t.Fatal("no SST file in the fixture's handles")
	}
	p := filepath.Join(dir, victim)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// The first data block starts at offset 0 of the SST.
	for i := 8; i < 24 && i < len(b); i++ {
		b[i] ^= 0xFF
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	err = snap.Walk(context.Background(), sp, engine.ReadNativeDir, native.WalkOptions{KeyGroupTo: -1, TempDir: tmp}, func(*native.Handle, *keyed.Entry) error { return nil })
	if err == nil || !strings.Contains(err.Error(), victim) || strings.Contains(err.Error(), tmp) {
		t.Fatalf("err = %v, want an error naming %s and not the download directory", err, victim)
	}
	t.Logf("error: %v", err)
	var fe *native.FileError
	if !errors.As(err, &fe) || len(fe.Files) == 0 {
		t.Errorf("err %T does not list the files: %v", err, err)
	}
	// RocksDB's Corruption status is of the corrupt class, positioned at
	// the savepoint file and the damaged (first) data block.
	var ce *errclass.CorruptionError
	if !errors.Is(err, errclass.ErrCorrupt) || !errors.As(err, &ce) || ce.File != victimName || ce.Offset != 0 {
		t.Errorf("err is not a corruption of %s: %v (position %+v)", victimName, err, ce)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temporary files left after the error: %v", ents)
	}
}

// BenchmarkWalkEngineCheckpoint measures a whole deep read of a native
// checkpoint: download to a temporary directory, RocksDB read-only open and
// iteration, and decoding (entries/s reported).
func BenchmarkWalkEngineCheckpoint(b *testing.B) {
	const maxPar, entries = 128, 50000
	states := []engine.StateDesc{{Name: "v", Kind: engine.KindValue}}
	l := engine.Layout{MaxParallelism: maxPar, Range: keygroups.Range{Start: 0, End: maxPar - 1}}
	be, err := engine.OpenRocksDB(filepath.Join(b.TempDir(), "db"), l, states, engine.RocksOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	bt := be.NewBatch()
	for i := 0; i < entries; i++ {
		v := binary.BigEndian.AppendUint64(nil, uint64(i))
		bt.Put(0, l.Key(nil, i%maxPar, []byte(fmt.Sprintf("key-%08d", i)), nil), append(v, "some-value-bytes"...))
	}
	if err := bt.Commit(); err != nil {
		b.Fatal(err)
	}
	bt.Close()
	if err := be.Flush(); err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	st, _ := s3.NewLocal(root)
	if _, err := checkpoint.New(st, checkpoint.Options{}).TakeSync(context.Background(), []engine.Backend{be}, 1); err != nil {
		b.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, checkpoint.MetadataKey(1))
	if err != nil {
		b.Fatal(err)
	}
	snap, err := native.Open(context.Background(), sp, savepoint.ScanOptions{})
	if err != nil {
		b.Fatal(err)
	}
	tmp := b.TempDir()
	b.ResetTimer()
	for b.Loop() {
		n := 0
		err := snap.Walk(context.Background(), sp, engine.ReadNativeDir, native.WalkOptions{KeyGroupTo: -1, TempDir: tmp}, func(*native.Handle, *keyed.Entry) error {
			n++
			return nil
		})
		if err != nil || n != entries {
			b.Fatalf("%d entries, %v", n, err)
		}
	}
	b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// takeEngineListCheckpoint appends to a TTL list state and a list state
// in three bundles (the first flushed, the others still in the memtable
// when the checkpoint flushes): the checkpoint holds list merge records no
// compaction has folded. It returns the elements per state and key group
// with their expected timestamps.
func takeEngineListCheckpoint(t *testing.T, root string) map[string][]string {
	t.Helper()
	const maxPar = 128
	states := []engine.StateDesc{
		{Name: "tl", Kind: engine.KindList, TTL: time.Hour},
		{Name: "l", Kind: engine.KindList},
	}
	l := engine.Layout{MaxParallelism: maxPar, Range: keygroups.Range{Start: 0, End: maxPar - 1}}
	clock := engine.NewManualClock(1_700_000_000_000)
	be, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), "task"), l, states, engine.RocksOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	op := engine.NewOperator(be, clock)
	tl, err := op.State("tl")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := op.State("l")
	if err != nil {
		t.Fatal(err)
	}
	b := op.NewBundle()
	defer b.Close()
	want := map[string][]string{}
	for round := 0; round < 3; round++ {
		if err := b.Begin(nil); err != nil {
			t.Fatal(err)
		}
		now := clock.Now()
		for k := 0; k < 5; k++ {
			kg := k * 25
			key := tl.Key(nil, kg, []byte(fmt.Sprint("user-", k)), nil)
			e1, e2 := fmt.Sprintf("t%d,%d", k, round), fmt.Sprintf("u%d,%d", k, round)
			if err := b.ListAddAll(tl, key, [][]byte{[]byte(e1), []byte(e2)}); err != nil {
				t.Fatal(err)
			}
			if err := b.ListAdd(ls, key, []byte(e1)); err != nil {
				t.Fatal(err)
			}
			tk, lk := fmt.Sprintf("tl kg=%d %x", kg, key), fmt.Sprintf("l kg=%d %x", kg, key)
			want[tk] = append(want[tk], fmt.Sprintf("%x@%d", e1, now), fmt.Sprintf("%x@%d", e2, now))
			want[lk] = append(want[lk], fmt.Sprintf("%x", e1))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if err := be.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Second)
	}
	st, err := s3.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.New(st, checkpoint.Options{}).TakeSync(context.Background(), []engine.Backend{be}, 1); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestEngineNativeCheckpointListMerges walks an engine checkpoint holding
// uncompacted list appends (the inspect --deep path): list values merge
// with the engine's list operator, TTL lists decode as Flink's per-element
// TtlValue lists with each element's own time and the value's TTL is the
// newest element's.
func TestEngineNativeCheckpointListMerges(t *testing.T) {
	root := t.TempDir()
	want := takeEngineListCheckpoint(t, root)
	st, err := s3.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, checkpoint.MetadataKey(1))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := native.Open(context.Background(), sp, savepoint.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	ttls := map[string]int64{}
	err = snap.Walk(context.Background(), sp, engine.ReadNativeDir, native.WalkOptions{KeyGroupTo: -1, TempDir: t.TempDir()}, func(h *native.Handle, e *keyed.Entry) error {
		id := fmt.Sprintf("%s kg=%d %x", e.State.Name, e.KeyGroup, e.KeyBytes)
		list, ok := e.Value.(serde.List)
		if !ok {
			return fmt.Errorf("%s: value %T", id, e.Value)
		}
		if e.TTLTimestamp == nil {
			return fmt.Errorf("%s: no TTL timestamp", id)
		}
		ttls[id] = *e.TTLTimestamp
		for _, el := range list {
			switch x := el.(type) {
			case *serde.TTLValue:
				r, ok := x.Value.(*serde.Raw)
				if !ok || e.State.Name != "tl" {
					return fmt.Errorf("%s: TTL element %T", id, x.Value)
				}
				got[id] = append(got[id], fmt.Sprintf("%x@%d", r.Bytes, x.LastAccess))
			case *serde.Raw:
				if e.State.Name != "l" {
					return fmt.Errorf("%s: plain element in a TTL list", id)
				}
				got[id] = append(got[id], fmt.Sprintf("%x", x.Bytes))
			default:
				return fmt.Errorf("%s: element %T", id, el)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) != 10 {
		t.Fatalf("%d lists decoded, want %d: %v", len(got), len(want), got)
	}
	for id, w := range want {
		if strings.Join(got[id], " ") != strings.Join(w, " ") {
			t.Errorf("%s:\n got %v\nwant %v", id, got[id], w)
		}
		if strings.HasPrefix(id, "tl ") && ttls[id] != 1_700_000_002_000 {
			t.Errorf("%s: TTL timestamp %d, want the newest element's", id, ttls[id])
		}
	}
}
