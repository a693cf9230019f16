package statediff

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// jsonRaw is pre-encoded JSON.
type jsonRaw = json.RawMessage

// maxJSONDepth bounds the nesting of rendered values.
const maxJSONDepth = 64

// EntryJSON renders a decoded entry for reports, with camelCase keys and
// 64-bit integers as strings (JSON numbers lose precision beyond 2^53):
//
//	{"keyGroup": 93, "key": ..., "namespace": ..., "userKey": ..., "value": ..., "ttlTimestamp": "1706683111489"}
//
// Timers give {"keyGroup", "timer": {"timestamp", "key", "namespace"}}.
// Rows render as {"kind": "+I", "fields": [...]}, tuples and lists as
// arrays, maps as [{"key", "value"}], timestamps as {"millis",
// "nanoOfMillisecond"}, decimals as their plain string, bytes as base64,
// values no decoder typed as {"serializer", "bytes"}.
func EntryJSON(e *savepoint.KeyedEntry) (Entry, error) {
	m := map[string]any{"keyGroup": e.KeyGroup}
	if e.State.Type == keyed.PriorityQueue {
		m["timer"] = jsonValue(e.Value, 0)
	} else {
		m["key"] = jsonValue(e.Key, 0)
		if _, void := e.Namespace.(serde.Void); !void && e.Namespace != nil {
			m["namespace"] = jsonValue(e.Namespace, 0)
		}
		if e.State.Kind == "MAP" {
			m["userKey"] = jsonValue(e.UserKey, 0)
		}
		v := e.Value
		if t, ok := v.(*serde.TTLValue); ok {
			v = t.Value
		}
		m["value"] = jsonValue(v, 0)
		if e.TTLTimestamp != nil {
			m["ttlTimestamp"] = strconv.FormatInt(*e.TTLTimestamp, 10)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("statediff: state %q key group %d: %w", e.State.Name, e.KeyGroup, err)
	}
	return b, nil
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

// jsonValue maps a decoded value to a JSON-marshalable tree.
func jsonValue(v serde.Value, depth int) any {
	if depth > maxJSONDepth {
		return "…"
	}
	sub := func(x serde.Value) any { return jsonValue(x, depth+1) }
	list := func(xs []serde.Value) []any {
		out := make([]any, len(xs))
		for i, x := range xs {
			out[i] = sub(x)
		}
		return out
	}
	switch x := v.(type) {
	case nil:
		return nil
	case bool, int8, int16, int32, string:
		return x
	case int64:
		return i64(x)
	case int:
		return i64(int64(x))
	case float32:
		return floatJSON(float64(x))
	case float64:
		return floatJSON(x)
	case serde.Char:
		return string(utf16.Decode([]uint16{uint16(x)}))
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case serde.Void:
		return nil
	case serde.GlobalWindow:
		return "GlobalWindow"
	case serde.TimeWindow:
		return map[string]any{"start": i64(x.Start), "end": i64(x.End)}
	case serde.CountWindow:
		return map[string]any{"countWindow": i64(x.ID)}
	case serde.Tuple:
		return list(x)
	case serde.List:
		return list(x)
	case []any:
		return list(x)
	case serde.Map:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = map[string]any{"key": sub(e.Key), "value": sub(e.Value)}
		}
		return out
	case *serde.Row:
		if x == nil {
			return nil
		}
		return map[string]any{"kind": x.Kind.String(), "fields": list(x.Fields)}
	case *serde.TTLValue:
		if x == nil {
			return nil
		}
		return map[string]any{"lastAccess": i64(x.LastAccess), "value": sub(x.Value)}
	case *serde.Timer:
		if x == nil {
			return nil
		}
		return map[string]any{"timestamp": i64(x.Timestamp), "key": sub(x.Key), "namespace": sub(x.Namespace)}
	case serde.Timestamp:
		return map[string]any{"millis": i64(x.Millis), "nanoOfMillisecond": x.NanoOfMill}
	case serde.Decimal:
		return x.String()
	case *serde.Pojo:
		if x == nil {
			return nil
		}
		fs := map[string]any{}
		for _, f := range x.Fields {
			fs[f.Name] = sub(f.Value)
		}
		return map[string]any{"class": x.Class, "fields": fs}
	case *serde.Raw:
		if x == nil {
			return nil
		}
		return map[string]any{"serializer": x.Serializer, "bytes": base64.StdEncoding.EncodeToString(x.Bytes)}
	}
	return fmt.Sprintf("%v", v)
}

// floatJSON keeps NaN and infinities representable.
func floatJSON(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}
