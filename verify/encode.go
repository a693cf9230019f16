package verify

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/sfstate/sfstate/savepoint/serde"
)

// appendValue appends a canonical, self-delimiting encoding of a decoded
// value: a tag byte per type, fixed-width numbers, length-prefixed strings
// and sequences. Equal logical values encode equally whatever bytes they
// were decoded from; map entries are sorted, so a map's serialized order
// does not matter. Types without a case here are encoded as their JSON.
func appendValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, 'N')
	case bool:
		if x {
			return append(dst, 't')
		}
		return append(dst, 'f')
	case int8:
		return append(dst, 'b', byte(x))
	case int16:
		return binary.BigEndian.AppendUint16(append(dst, 's'), uint16(x))
	case serde.Char:
		return binary.BigEndian.AppendUint16(append(dst, 'c'), uint16(x))
	case int32:
		return binary.BigEndian.AppendUint32(append(dst, 'i'), uint32(x))
	case int64:
		return binary.BigEndian.AppendUint64(append(dst, 'l'), uint64(x))
	case float32:
		return binary.BigEndian.AppendUint32(append(dst, 'F'), math.Float32bits(x))
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, 'D'), math.Float64bits(x))
	case string:
		dst = binary.BigEndian.AppendUint32(append(dst, 'S'), uint32(len(x)))
		return append(dst, x...)
	case []byte:
		dst = binary.BigEndian.AppendUint32(append(dst, 'B'), uint32(len(x)))
		return append(dst, x...)
	case *serde.Row:
		if x == nil {
			return append(dst, 'N')
		}
		dst = append(dst, 'R', byte(x.Kind))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(x.Fields)))
		for _, f := range x.Fields {
			dst = appendValue(dst, f)
		}
		return dst
	case serde.Tuple:
		return appendSeq(append(dst, 'U'), x)
	case serde.List:
		return appendSeq(append(dst, 'L'), x)
	case *serde.TTLValue:
		if x == nil {
			return append(dst, 'N')
		}
		dst = binary.BigEndian.AppendUint64(append(dst, 'X'), uint64(x.LastAccess))
		return appendValue(dst, x.Value)
	case serde.Void:
		return append(dst, 'v')
	case serde.GlobalWindow:
		return append(dst, 'g')
	case serde.TimeWindow:
		dst = binary.BigEndian.AppendUint64(append(dst, 'W'), uint64(x.Start))
		return binary.BigEndian.AppendUint64(dst, uint64(x.End))
	case serde.CountWindow:
		return binary.BigEndian.AppendUint64(append(dst, 'C'), uint64(x.ID))
	case serde.Timestamp:
		dst = binary.BigEndian.AppendUint64(append(dst, 'Z'), uint64(x.Millis))
		return binary.BigEndian.AppendUint32(dst, uint32(x.NanoOfMill))
	case serde.Decimal:
		if x.Unscaled == nil {
			break
		}
		dst = binary.BigEndian.AppendUint32(append(dst, 'd'), uint32(x.Scale))
		dst = append(dst, byte(x.Unscaled.Sign()+1))
		b := x.Unscaled.Bytes()
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
		return append(dst, b...)
	case *serde.Timer:
		if x == nil {
			return append(dst, 'N')
		}
		dst = binary.BigEndian.AppendUint64(append(dst, 'E'), uint64(x.Timestamp))
		return appendValue(appendValue(dst, x.Key), x.Namespace)
	case serde.Map:
		parts := make([][]byte, len(x))
		for i, e := range x {
			parts[i] = appendValue(appendValue(nil, e.Key), e.Value)
		}
		sort.Slice(parts, func(i, j int) bool { return bytes.Compare(parts[i], parts[j]) < 0 })
		dst = binary.BigEndian.AppendUint32(append(dst, 'M'), uint32(len(x)))
		for _, p := range parts {
			dst = append(dst, p...)
		}
		return dst
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, "%T:%#v", v, v)
	}
	dst = binary.BigEndian.AppendUint32(append(dst, 'J'), uint32(len(b)))
	return append(dst, b...)
}

func appendSeq[T any](dst []byte, xs []T) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(xs)))
	for _, x := range xs {
		dst = appendValue(dst, x)
	}
	return dst
}
