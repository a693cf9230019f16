package canonical

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// TestRawMapValues: user values carried raw keep Flink's bytes and NULL
// flag in both directions, with and without TTL; malformed flags fail.
func TestRawMapValues(t *testing.T) {
	raw := engine.Type{Kind: engine.TypeRaw, Snapshot: flinkwrite.RawSnapshot{}}
	for _, ttl := range []bool{false, true} {
		s := engine.StateSchema{Name: "m", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: engine.StringType, Value: raw}
		if ttl {
			s.TTL = joinTTL
		}
		c, err := newStateCodec(engine.LongType, s)
		if err != nil {
			t.Fatal(err)
		}
		ts := []byte{0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0}
		vals := [][]byte{{1}, {0, 1}, {0, 0xde, 0xad, 0xbe, 0xef}, {0}}
		for _, v := range vals {
			fv := v
			if ttl && v[0] == 0 {
				fv = append(append([]byte{0}, ts...), v[1:]...)
			}
			ev, err := c.engineValue(nil, fv)
			if err != nil {
				t.Fatalf("ttl %v % x: %v", ttl, fv, err)
			}
			back, err := c.flinkValue(nil, int64FromBE(ev[:8]), ev[8:])
			if err != nil || !bytes.Equal(back, fv) {
				t.Fatalf("ttl %v: % x → % x → % x (%v)", ttl, fv, ev, back, err)
			}
		}
		for _, bad := range [][]byte{{}, {2, 0}, {1, 0}} {
			if _, err := c.engineValue(nil, bad); !errors.Is(err, ErrConvert) {
				t.Errorf("ttl %v: % x: %v", ttl, bad, err)
			}
		}
	}
	// A typed user value still refuses NULL, with an error saying so.
	c, _ := newStateCodec(engine.LongType, engine.StateSchema{Name: "m", Kind: engine.KindMap, Namespace: engine.VoidType, UserKey: engine.StringType, Value: engine.LongType})
	if _, err := c.engineValue(nil, []byte{1}); !errors.Is(err, ErrConvert) {
		t.Errorf("typed NULL map value: %v", err)
	}
}

func int64FromBE(b []byte) int64 {
	var v int64
	for _, x := range b {
		v = v<<8 | int64(x)
	}
	return v
}
