package canonical

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// joinHeader is a meta-state stream with a value state and the join-record
// state d described as edit leaves its meta info (nil: Describe's output).
func joinHeader(t *testing.T, d engine.StateDesc, sides *engine.JoinSides, edit func(*flinkwrite.StateMetaInfo)) *keyed.Header {
	t.Helper()
	b := flinkwrite.BytesSnapshot
	m := flinkwrite.KeyedStateMeta(d.Name, flinkwrite.KindValue, b, b)
	if d.Kind == engine.KindMap {
		m = flinkwrite.KeyedStateMeta(d.Name, flinkwrite.KindMap, b, flinkwrite.MapSnapshot(b, b))
	}
	if sides != nil {
		var err error
		if m, err = sides.Describe(m); err != nil {
			t.Fatal(err)
		}
	}
	if edit != nil {
		edit(&m)
	}
	key, _ := engine.RowType(keygroups.TypeBigInt).FlinkSnapshot()
	h := flinkwrite.Header{KeySerializer: key, States: []flinkwrite.StateMetaInfo{
		flinkwrite.KeyedStateMeta("counts", flinkwrite.KindValue, flinkwrite.VoidNamespaceSnapshot, flinkwrite.LongSnapshot), m}}
	raw, err := flinkwrite.AppendHeader(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	hdr, _, err := keyed.ReadHeader(bytes.NewReader(raw), "meta")
	if err != nil {
		t.Fatal(err)
	}
	return hdr
}

// TestSchemaOfHeaderJoinDescription: the join description a native
// checkpoint carries for a join-record state (engine.JoinSides.Describe)
// comes back as the same join sides — row field types and nullability,
// Flink names, outer flags — in both layouts; a description of another
// version, a malformed one and a join-record state without one are
// refused with errors naming the state.
func TestSchemaOfHeaderJoinDescription(t *testing.T) {
	left := engine.Type{Kind: engine.TypeRow, Fields: []keygroups.FieldType{keygroups.TypeInt, keygroups.TypeString}, Nullable: []bool{false, true}}
	right := engine.RowType(keygroups.TypeBigInt, keygroups.TypeDecimal(10, 2), keygroups.TypeTimestamp(3))
	for _, l := range []recordstore.Layout{recordstore.LayoutBucket, recordstore.LayoutRecord} {
		d := recordstore.StateDesc(l, time.Hour)
		descs := []engine.StateDesc{{Name: "counts", Kind: engine.KindValue}, d}
		sides := &engine.JoinSides{Left: left, Right: right, RightName: "bids", RightOuter: true}
		s, err := SchemaOfHeader(joinHeader(t, d, sides, nil), descs)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if err := s.Matches(descs); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		js := s.States[1].Join
		if js == nil {
			t.Fatalf("%s: no join sides in %+v", l, s.States[1])
		}
		if ln, rn := js.Names(); ln != "left-records" || rn != "bids" || js.LeftOuter || !js.RightOuter {
			t.Errorf("%s: names %s/%s, outer %v/%v", l, ln, rn, js.LeftOuter, js.RightOuter)
		}
		for i, pair := range [][2]engine.Type{{left, js.Left}, {right, js.Right}} {
			want, got := pair[0], pair[1]
			wantNull := want.Nullable
			if wantNull == nil {
				wantNull = []bool{true, true, true}
			}
			if got.Kind != engine.TypeRow || !reflect.DeepEqual(got.Fields, want.Fields) || !reflect.DeepEqual(got.Nullable, wantNull) {
				t.Errorf("%s: side %d row %+v, want %+v", l, i, got, want)
			}
		}
		ms, err := s.States[1].FlinkMetas()
		if err != nil || len(ms) != 2 || ms[0].Name != "left-records" || ms[1].Name != "bids" {
			t.Fatalf("%s: Flink metas %+v: %v", l, ms, err)
		}

		setOpt := func(k, v string) func(*flinkwrite.StateMetaInfo) {
			return func(m *flinkwrite.StateMetaInfo) {
				for i := range m.Options {
					if m.Options[i].Key == k {
						m.Options[i].Value = v
					}
				}
			}
		}
		for name, tc := range map[string]struct {
			sides *engine.JoinSides
			edit  func(*flinkwrite.StateMetaInfo)
			want  string
			none  bool
		}{
			"newer version":  {sides, setOpt(engine.JoinOptVersion, "2"), `version "2"`, false},
			"bad outer flag": {sides, setOpt(engine.JoinOptLeftOuter, "yes"), engine.JoinOptLeftOuter, false},
			"no name":        {sides, setOpt(engine.JoinOptRightName, ""), engine.JoinOptRightName, false},
			"row not a row": {sides, func(m *flinkwrite.StateMetaInfo) {
				m.Serializers[len(m.Serializers)-1].Snapshot = flinkwrite.LongSnapshot
			}, engine.JoinSerRightRow, false},
			"no row":              {sides, func(m *flinkwrite.StateMetaInfo) { m.Serializers = m.Serializers[:len(m.Serializers)-1] }, engine.JoinSerRightRow, false},
			"without description": {nil, nil, engine.JoinOptVersion, true},
		} {
			_, err := SchemaOfHeader(joinHeader(t, d, tc.sides, tc.edit), descs)
			if err == nil || !errors.Is(err, errclass.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), d.Name) ||
				errors.Is(err, ErrNoJoinDescription) != tc.none {
				t.Errorf("%s %s: %v", l, name, err)
			}
		}
	}

	// A join description on a state that is none of recordstore's layouts.
	d := engine.StateDesc{Name: "joined", Kind: engine.KindMap}
	_, err := SchemaOfHeader(joinHeader(t, d, &engine.JoinSides{Left: left, Right: right}, nil), []engine.StateDesc{{Name: "counts", Kind: engine.KindValue}, d})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `"joined"`) {
		t.Errorf("join description outside recordstore's layouts: %v", err)
	}
}
