package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

func TestSchemaValidate(t *testing.T) {
	row := RowType(keygroups.TypeBigInt, keygroups.TypeString)
	good := Schema{Key: row, States: []StateSchema{
		{Name: "v", Kind: KindValue, Namespace: VoidType, Value: row, TTL: time.Hour},
		{Name: "m", Kind: KindMap, Namespace: LongType, UserKey: IntType, Value: StringType},
		{Name: "l", Kind: KindList, Namespace: TimeWindowType, Value: row},
		{Name: "ms", Kind: KindMultiset, Namespace: VoidType, UserKey: row},
		{Name: "t", Kind: KindPriorityQueue, Value: Type{Kind: TypeRaw, Snapshot: flinkwrite.LongSnapshot}},
		{Name: "join-records", Kind: KindMap, TTL: time.Hour, Join: &JoinSides{Left: row, Right: row}},
	}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	h, err := good.FlinkHeader(false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range h.States {
		names = append(names, m.Name)
	}
	if got := strings.Join(names, ","); got != "v,m,l,ms,t,left-records,right-records" {
		t.Fatalf("header states %s", got)
	}
	if descs := good.Descs(); len(descs) != 6 || descs[0].TTL != time.Hour || descs[5].Kind != KindMap {
		t.Fatalf("descs %+v", descs)
	}
	for name, mutate := range map[string]func(s *Schema){
		"raw key":           func(s *Schema) { s.Key = Type{Kind: TypeRaw} },
		"void key":          func(s *Schema) { s.Key = VoidType },
		"no states":         func(s *Schema) { s.States = nil },
		"duplicate":         func(s *Schema) { s.States[1].Name = "v" },
		"join name clash":   func(s *Schema) { s.States[0].Name = "left-records" },
		"string namespace":  func(s *Schema) { s.States[0].Namespace = StringType },
		"map without key":   func(s *Schema) { s.States[1].UserKey = Type{} },
		"raw value":         func(s *Schema) { s.States[0].Value = Type{Kind: TypeRaw} }, // raw needs its snapshot
		"queue not raw":     func(s *Schema) { s.States[4].Value = LongType },
		"bad row field":     func(s *Schema) { s.States[0].Value = RowType(keygroups.FieldType{}) },
		"nullable mismatch": func(s *Schema) { s.States[0].Value = Type{Kind: TypeRow, Fields: row.Fields, Nullable: []bool{true}} },
		"join non-row":      func(s *Schema) { s.States[5].Join = &JoinSides{Left: row, Right: LongType} },
		"join kind":         func(s *Schema) { s.States[5].Kind = KindList },
		"join long key":     func(s *Schema) { s.Key = LongType },
	} {
		s := good
		s.States = append([]StateSchema(nil), good.States...)
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := good.Matches(good.Descs()); err != nil {
		t.Fatal(err)
	}
	d := good.Descs()
	d[2].TTL = time.Minute
	if err := good.Matches(d); err == nil {
		t.Error("TTL mismatch accepted")
	}
}

func TestRowTypeArrow(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64},
		{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "c", Type: &arrow.TimestampType{Unit: arrow.Microsecond}},
		{Name: "d", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "e", Type: &arrow.Decimal128Type{Precision: 20, Scale: 3}},
	}, nil)
	rt, err := RowTypeFromArrow(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString, keygroups.TypeTimestamp(6), keygroups.TypeTimestampLTZ(3), keygroups.TypeDecimal(20, 3)}
	for i, f := range rt.Fields {
		if f != want[i] {
			t.Errorf("field %d: %v, want %v", i, f, want[i])
		}
	}
	back, err := rt.ArrowSchema()
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(s) {
		t.Errorf("arrow round trip: %v vs %v", back, s)
	}
	if _, err := RowTypeFromArrow(arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}, nil)); err == nil {
		t.Error("list field accepted")
	}
	if _, err := (Type{Kind: TypeRow, Fields: []keygroups.FieldType{keygroups.TypeBigInt}, Tuple: Tuple1Class}).FlinkSnapshot(); err == nil {
		t.Error("tuple of a row accepted")
	}
	if _, err := (Type{Kind: TypeLong, Tuple: Tuple1Class}).FlinkSnapshot(); err != nil {
		t.Error(err)
	}
}
