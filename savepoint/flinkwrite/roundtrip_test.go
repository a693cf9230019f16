package flinkwrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// rtEntry is one written entry with the JSON the reader's decoded values
// must marshal to.
type rtEntry struct {
	kg, state       int
	key, value      []byte
	wantKey, wantNS string
	wantUK, wantVal string
	wantTTL         *int64
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRoundTripWithReader writes a SQL-style operator's state (row keys,
// TTL rows, LIST with TimeWindow namespace, MAP, timers) and a
// DataStream-style one with ambiguous String/String keys, reads both back
// with the keyed package's reader, and compares every decoded entry.
func TestRoundTripWithReader(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sql/compressed=%v", compressed), func(t *testing.T) { roundTripSQL(t, compressed) })
		t.Run(fmt.Sprintf("ambiguous/compressed=%v", compressed), func(t *testing.T) { roundTripAmbiguous(t, compressed) })
	}
}

func roundTripSQL(t *testing.T, compressed bool) {
	const maxP = 256
	rng := rand.New(rand.NewPCG(7, 9))
	keyTypes := []LogicalType{BigIntType{true}, VarCharType{true, math.MaxInt32}}
	keyRow := []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString}
	accTypes := []LogicalType{BigIntType{false}, DoubleType{true}, VarCharType{true, math.MaxInt32}, TimestampType{true, 3, ""}, IntType{true}, BooleanType{true}}
	accRow := []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeDouble, keygroups.TypeString, keygroups.TypeTimestamp(3), keygroups.TypeInt, keygroups.TypeBoolean}
	keySer := RowDataSnapshot{Types: keyTypes}
	h := Header{
		Compressed:    compressed,
		KeySerializer: keySer,
		States: []StateMetaInfo{
			KeyedStateMeta("accState", KindValue, VoidNamespaceSnapshot, TtlSnapshot(RowDataSnapshot{Types: accTypes})),
			KeyedStateMeta("window-list", KindList, TimeWindowSnapshot, ListSnapshot(LongSnapshot)),
			KeyedStateMeta("seen", KindMap, VoidNamespaceSnapshot, MapSnapshot(StringSnapshot, IntSnapshot)),
			TimerStateMeta("_timer_state/event_user-timers", TimerSnapshot(keySer, VoidNamespaceSnapshot)),
		},
	}
	prefix := keygroups.PrefixWidth(maxP)
	var es []rtEntry
	for i := range 60 {
		name := fmt.Sprintf("user-%d-%s", i, string(rune('a'+rng.IntN(26))))
		var keyVals []any
		if i%13 == 0 {
			keyVals = []any{nil, name} // NULL key field
		} else {
			keyVals = []any{int64(i * 1000), name}
		}
		row, err := keygroups.BuildRow(keyRow, keyVals)
		if err != nil {
			t.Fatal(err)
		}
		kg := keygroups.KeyGroupFor(keygroups.HashRow(row), maxP)
		keyBytes, _ := AppendRowData(nil, row)
		wantKey := mustJSON(t, []any{"+I", keyVals})
		void := AppendVoidNamespace(nil)

		// VALUE with TTL.
		ts := int64(1700000000000 + i)
		accVals := []any{int64(i), rng.Float64(), fmt.Sprintf("acc%d", i), keygroups.Timestamp{Millis: ts}, int64(i % 7), i%2 == 0}
		if i%5 == 0 {
			accVals[2] = nil
		}
		acc, err := keygroups.BuildRow(accRow, accVals)
		if err != nil {
			t.Fatal(err)
		}
		accBytes, _ := AppendRowData(nil, acc)
		k, _ := StateKey{KeyGroup: kg, PrefixLen: prefix, Key: keyBytes, Namespace: void}.Append(nil)
		last := ts - 5
		wantAcc := []any{"+I", []any{accVals[0], accVals[1], accVals[2], []any{"ts_millis", ts}, accVals[4], accVals[5]}}
		es = append(es, rtEntry{kg: kg, state: 0, key: k, value: AppendTtlValue(nil, last, accBytes),
			wantKey: wantKey, wantNS: `["void",0]`, wantVal: mustJSON(t, []any{"TtlValue", map[string]any{"lastAccess": last, "value": wantAcc}}), wantTTL: &last})

		// LIST in a window.
		if i%3 == 0 {
			ns := AppendTimeWindow(nil, 1000, 2000)
			k, _ := StateKey{KeyGroup: kg, PrefixLen: prefix, Key: keyBytes, Namespace: ns}.Append(nil)
			var elems [][]byte
			var want []int64
			for j := range 1 + i%4 {
				elems = append(elems, AppendLong(nil, int64(j*i)))
				want = append(want, int64(j*i))
			}
			v, _ := AppendListValue(nil, elems...)
			es = append(es, rtEntry{kg: kg, state: 1, key: k, value: v, wantKey: wantKey,
				wantNS: `["TimeWindow",{"end":2000,"start":1000}]`, wantVal: mustJSON(t, want)})
		}
		// MAP entries, one of them null.
		for j := range i % 3 {
			uk := fmt.Sprintf("k%d", j)
			k, _ := StateKey{KeyGroup: kg, PrefixLen: prefix, Key: keyBytes, Namespace: void, UserKey: AppendStringValue(nil, uk)}.Append(nil)
			var v []byte
			want := "null"
			if j == 1 {
				v = AppendMapEntryValue(nil, nil, true)
			} else {
				v = AppendMapEntryValue(nil, AppendInt(nil, int32(j+i)), false)
				want = fmt.Sprint(j + i)
			}
			es = append(es, rtEntry{kg: kg, state: 2, key: k, value: v, wantKey: wantKey,
				wantNS: `["void",0]`, wantUK: mustJSON(t, uk), wantVal: want})
		}
		// A timer.
		tk, _ := AppendTimerKey(nil, kg, prefix, ts+60000, keyBytes, void)
		es = append(es, rtEntry{kg: kg, state: 3, key: tk, wantVal: mustJSON(t, []any{"Timer", map[string]any{"ts": ts + 60000, "key": []any{"+I", keyVals}, "ns": []any{"void", 0}}})})
	}
	checkRoundTrip(t, h, maxP, keygroups.Range{Start: 0, End: maxP - 1}, es)
}

func roundTripAmbiguous(t *testing.T, compressed bool) {
	const maxP = 128
	h := Header{
		Compressed:    compressed,
		KeySerializer: StringSnapshot,
		States: []StateMetaInfo{
			KeyedStateMeta("by-name", KindValue, StringSnapshot, StringSnapshot),
		},
	}
	var es []rtEntry
	for i := range 40 {
		key := fmt.Sprintf("key-%d-%s", i, bytes.Repeat([]byte{'x'}, i*10)) // some keys over 255 bytes: 2-byte markers
		ns := fmt.Sprintf("ns%d", i%4)
		kg := i % maxP
		k, err := StateKey{KeyGroup: kg, PrefixLen: 1, Key: AppendStringValue(nil, key), Namespace: AppendStringValue(nil, ns), Ambiguous: true}.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		val := fmt.Sprintf("välue €%d", i)
		es = append(es, rtEntry{kg: kg, state: 0, key: k, value: AppendStringValue(nil, val),
			wantKey: mustJSON(t, key), wantNS: mustJSON(t, ns), wantVal: mustJSON(t, val)})
	}
	checkRoundTrip(t, h, maxP, keygroups.Range{Start: 0, End: maxP - 1}, es)
}

func checkRoundTrip(t *testing.T, h Header, maxP int, rng keygroups.Range, es []rtEntry) {
	t.Helper()
	slices.SortStableFunc(es, func(a, b rtEntry) int {
		if a.kg != b.kg {
			return a.kg - b.kg
		}
		return a.state - b.state
	})
	var buf bytes.Buffer
	w, err := NewKeyedWriter(&buf, h, rng, maxP)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if err := w.Add(e.kg, e.state, e.key, e.value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	stream := buf.Bytes()
	rh, n, err := keyed.ParseHeader(stream, "roundtrip")
	if err != nil {
		t.Fatal(err)
	}
	wantHdr, _ := AppendHeader(nil, h)
	if n != len(wantHdr) || rh.Compressed != h.Compressed || len(rh.States) != len(h.States) {
		t.Fatalf("header: %d bytes (want %d), compressed %v, %d states", n, len(wantHdr), rh.Compressed, len(rh.States))
	}
	for i, s := range rh.States {
		if s.Name != h.States[i].Name {
			t.Fatalf("state %d named %q", i, s.Name)
		}
	}
	var got []*rtEntry
	for i, off := range w.Offsets() {
		if off == 0 {
			continue
		}
		kg := rng.Start + i
		err := keyed.ReadKeyGroup(bytes.NewReader(stream), int64(len(stream)), "roundtrip", rh, kg, off, maxP, func(e *keyed.Entry) error {
			g := &rtEntry{kg: e.KeyGroup, state: e.State.ID, key: slices.Clone(e.KeyBytes), value: slices.Clone(e.ValueBytes)}
			if e.State.Type == keyed.BackendStateType(PriorityQueueState) {
				g.wantVal = mustJSON(t, e.Value)
			} else {
				g.wantKey, g.wantNS, g.wantVal = mustJSON(t, e.Key), mustJSON(t, e.Namespace), mustJSON(t, e.Value)
				if e.UserKey != nil {
					g.wantUK = mustJSON(t, e.UserKey)
				}
				if e.TTLTimestamp != nil { // points into the reused entry
					v := *e.TTLTimestamp
					g.wantTTL = &v
				}
			}
			got = append(got, g)
			return nil
		})
		if err != nil {
			t.Fatalf("key group %d: %v", kg, err)
		}
	}
	if len(got) != len(es) {
		t.Fatalf("read %d entries, wrote %d", len(got), len(es))
	}
	for i, g := range got {
		e := es[i]
		if g.kg != e.kg || g.state != e.state || !bytes.Equal(g.key, e.key) || !bytes.Equal(g.value, e.value) {
			t.Fatalf("entry %d: bytes differ (kg %d/%d state %d/%d)", i, g.kg, e.kg, g.state, e.state)
		}
		if g.wantKey != e.wantKey || g.wantNS != e.wantNS || g.wantUK != e.wantUK || g.wantVal != e.wantVal {
			t.Fatalf("entry %d decoded\n key %s ns %s uk %s val %s\nwant key %s ns %s uk %s val %s", i,
				g.wantKey, g.wantNS, g.wantUK, g.wantVal, e.wantKey, e.wantNS, e.wantUK, e.wantVal)
		}
		// The reader reports TTL values wrapped (checked through wantVal);
		// when it also fills TTLTimestamp, that must agree.
		if g.wantTTL != nil && (e.wantTTL == nil || *g.wantTTL != *e.wantTTL) {
			t.Fatalf("entry %d: TTL %d, want %v", i, *g.wantTTL, e.wantTTL)
		}
	}
}
