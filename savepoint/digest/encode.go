package digest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/sfstate/sfstate/savepoint/serde"
)

// AppendValue appends the canonical encoding of a decoded value that
// digests hash: equal logical values encode equally whatever bytes they
// were decoded from (map entries sorted), and the encoding delimits itself.
func AppendValue(dst []byte, v any) []byte { return appendCanonical(dst, v, 0) }

// maxDepth bounds the recursion over nested values.
const maxDepth = 64

// appendCanonical encodes a decoded serde value deterministically: a tag
// per type, fixed-width big-endian numbers (floats by their bits),
// length-prefixed strings and sequences, map entries sorted by their
// encoding. Equal logical values encode equally whatever bytes they were
// decoded from. Types without a case are encoded as their type name and
// JSON.
func appendCanonical(dst []byte, v any, depth int) []byte {
	if depth > maxDepth {
		return append(dst, '!')
	}
	seq := func(tag byte, n int, at func(i int) any) []byte {
		dst = append(dst, tag)
		dst = binary.BigEndian.AppendUint32(dst, uint32(n))
		for i := 0; i < n; i++ {
			dst = appendCanonical(dst, at(i), depth+1)
		}
		return dst
	}
	str := func(tag byte, s string) []byte {
		dst = append(dst, tag)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
		return append(dst, s...)
	}
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
	case int:
		return binary.BigEndian.AppendUint64(append(dst, 'l'), uint64(x))
	case float32:
		return binary.BigEndian.AppendUint32(append(dst, 'F'), math.Float32bits(x))
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, 'D'), math.Float64bits(x))
	case string:
		return str('S', x)
	case []byte:
		return str('B', string(x))
	case serde.Void:
		return append(dst, 'V')
	case serde.GlobalWindow:
		return append(dst, 'G')
	case serde.TimeWindow:
		dst = binary.BigEndian.AppendUint64(append(dst, 'W'), uint64(x.Start))
		return binary.BigEndian.AppendUint64(dst, uint64(x.End))
	case serde.CountWindow:
		return binary.BigEndian.AppendUint64(append(dst, 'C'), uint64(x.ID))
	case serde.Timestamp:
		dst = binary.BigEndian.AppendUint64(append(dst, 'T'), uint64(x.Millis))
		return binary.BigEndian.AppendUint32(dst, uint32(x.NanoOfMill))
	case serde.Decimal:
		u := ""
		if x.Unscaled != nil {
			u = x.Unscaled.String()
		}
		dst = binary.BigEndian.AppendUint32(str('d', u), uint32(x.Scale))
		return dst
	case *serde.Row:
		if x == nil {
			return append(dst, 'N')
		}
		dst = append(dst, 'R', byte(x.Kind))
		return seq('r', len(x.Fields), func(i int) any { return x.Fields[i] })
	case serde.Tuple:
		return seq('U', len(x), func(i int) any { return x[i] })
	case serde.List:
		return seq('L', len(x), func(i int) any { return x[i] })
	case []any:
		return seq('L', len(x), func(i int) any { return x[i] })
	case serde.Map:
		entries := make([][]byte, len(x))
		for i, e := range x {
			b := appendCanonical(nil, e.Key, depth+1)
			entries[i] = appendCanonical(b, e.Value, depth+1)
		}
		sort.Slice(entries, func(i, j int) bool { return string(entries[i]) < string(entries[j]) })
		dst = binary.BigEndian.AppendUint32(append(dst, 'M'), uint32(len(entries)))
		for _, e := range entries {
			dst = append(dst, e...)
		}
		return dst
	case *serde.TTLValue:
		if x == nil {
			return append(dst, 'N')
		}
		dst = binary.BigEndian.AppendUint64(append(dst, 'X'), uint64(x.LastAccess))
		return appendCanonical(dst, x.Value, depth+1)
	case *serde.Timer:
		if x == nil {
			return append(dst, 'N')
		}
		dst = binary.BigEndian.AppendUint64(append(dst, 'Z'), uint64(x.Timestamp))
		dst = appendCanonical(dst, x.Key, depth+1)
		return appendCanonical(dst, x.Namespace, depth+1)
	case *serde.Raw:
		if x == nil {
			return append(dst, 'N')
		}
		dst = str('Q', x.Serializer)
		return str('q', string(x.Bytes))
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, "%v", v)
	}
	dst = str('?', fmt.Sprintf("%T", v))
	return str('j', string(b))
}
