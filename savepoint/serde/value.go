package serde

import (
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"unicode/utf16"

	"github.com/sfstate/sfstate/keygroups"
)

// Value is a decoded datum. Its dynamic type is one of:
//
//	nil                        null
//	bool, int8, int16, int32, int64, float32, float64, string
//	Char                       Java char (UTF-16 code unit)
//	[]byte                     byte arrays (JSON: base64)
//	Void, GlobalWindow, TimeWindow, CountWindow
//	Tuple, List, Map
//	*Row                       SQL row (BinaryRowData)
//	*TTLValue, *Timer
//	Timestamp, Decimal
//	*Raw                       bytes of a serializer without a decoder
type Value = any

// Char is a Java char.
type Char uint16

// MarshalJSON renders the char as a one-character string.
func (c Char) MarshalJSON() ([]byte, error) {
	return json.Marshal(string(utf16.Decode([]uint16{uint16(c)})))
}

// Void is the VoidNamespace singleton. JSON: ["void", 0].
type Void struct{}

// MarshalJSON implements json.Marshaler.
func (Void) MarshalJSON() ([]byte, error) { return []byte(`["void",0]`), nil }

// GlobalWindow is the GlobalWindow singleton. JSON: ["GlobalWindow"].
type GlobalWindow struct{}

// MarshalJSON implements json.Marshaler.
func (GlobalWindow) MarshalJSON() ([]byte, error) { return []byte(`["GlobalWindow"]`), nil }

// TimeWindow is a [Start, End) window in epoch millis.
type TimeWindow struct{ Start, End int64 }

// MarshalJSON renders ["TimeWindow", {"start": s, "end": e}].
func (w TimeWindow) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{"TimeWindow", map[string]int64{"start": w.Start, "end": w.End}})
}

// CountWindow is a table-runtime count window id.
type CountWindow struct{ ID int64 }

// MarshalJSON renders ["CountWindow", id].
func (w CountWindow) MarshalJSON() ([]byte, error) { return json.Marshal([]any{"CountWindow", w.ID}) }

// Tuple is a Flink TupleN. JSON: array of fields.
type Tuple []Value

// List is a list value. JSON: array.
type List []Value

// MapEntry is one key/value pair of a Map.
type MapEntry struct {
	Key   Value `json:"key"`
	Value Value `json:"value"`
}

// Map is a map value in serialized order. JSON: array of {"key","value"}.
type Map []MapEntry

// Row is a SQL row. JSON: ["+I", [field, ...]].
type Row struct {
	Kind   keygroups.RowKind // +I, -U, +U or -D
	Fields []Value
}

// MarshalJSON implements json.Marshaler.
func (r *Row) MarshalJSON() ([]byte, error) {
	f := r.Fields
	if f == nil {
		f = []Value{}
	}
	return json.Marshal([]any{r.Kind.String(), f})
}

// TTLValue is a value wrapped by state TTL.
// JSON: ["TtlValue", {"lastAccess": ms, "value": v}].
type TTLValue struct {
	LastAccess int64
	Value      Value
}

// MarshalJSON implements json.Marshaler.
func (t *TTLValue) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{"TtlValue", map[string]any{"lastAccess": t.LastAccess, "value": t.Value}})
}

// Timer is a TimerHeapInternalTimer. Timestamp is the real (un-flipped)
// timestamp. JSON: ["Timer", {"ts": ms, "key": k, "ns": n}].
type Timer struct {
	Timestamp int64
	Key       Value
	Namespace Value
}

// MarshalJSON implements json.Marshaler.
func (t *Timer) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{"Timer", map[string]any{"ts": t.Timestamp, "key": t.Key, "ns": t.Namespace}})
}

// Timestamp is a SQL TimestampData: epoch millis plus nanos within the
// millisecond. JSON for precision <= 3: ["ts_millis", ms]; otherwise
// ["ts", ms, nanoOfMillisecond].
type Timestamp struct {
	Millis     int64
	NanoOfMill int32
	Precision  int
}

// MarshalJSON implements json.Marshaler.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	if t.Precision <= 3 {
		return json.Marshal([]any{"ts_millis", t.Millis})
	}
	return json.Marshal([]any{"ts", t.Millis, t.NanoOfMill})
}

// Decimal is a SQL DECIMAL: Unscaled * 10^-Scale. JSON: ["decimal", "1.23"].
type Decimal struct {
	Unscaled *big.Int
	Scale    int
}

// String renders the decimal in plain notation.
func (d Decimal) String() string {
	if d.Unscaled == nil {
		return "0"
	}
	s := d.Unscaled.String()
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if d.Scale > 0 {
		for len(s) <= d.Scale {
			s = "0" + s
		}
		s = s[:len(s)-d.Scale] + "." + s[len(s)-d.Scale:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// MarshalJSON implements json.Marshaler.
func (d Decimal) MarshalJSON() ([]byte, error) { return json.Marshal([]any{"decimal", d.String()}) }

// Raw holds bytes that no decoder interpreted, with the serializer (or
// structure) that wrote them. JSON: {"decoded": false, "raw": base64,
// "serializer": class}.
type Raw struct {
	Serializer string
	Bytes      []byte
}

// MarshalJSON implements json.Marshaler.
func (r *Raw) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"decoded": false, "serializer": r.Serializer, "raw": base64.StdEncoding.EncodeToString(r.Bytes)})
}

// Pojo is a POJO decoded field by field. JSON: an object with "@class" and
// the fields in declaration order.
type Pojo struct {
	Class  string
	Fields []PojoField
}

// PojoField is one POJO field.
type PojoField struct {
	Name  string
	Value Value
}

// MarshalJSON implements json.Marshaler.
func (p *Pojo) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	cls, _ := json.Marshal(p.Class)
	b.WriteString(`{"@class":`)
	b.Write(cls)
	for _, f := range p.Fields {
		k, _ := json.Marshal(f.Name)
		v, err := json.Marshal(f.Value)
		if err != nil {
			return nil, err
		}
		b.WriteByte(',')
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}
