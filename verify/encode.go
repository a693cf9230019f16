package verify

import "github.com/sfstate/sfstate/savepoint/digest"

// appendValue appends the canonical, self-delimiting encoding of a decoded
// value that savepoint digests use (digest.AppendValue): equal logical
// values encode equally whatever bytes they were decoded from, and a map's
// serialized order does not matter.
func appendValue(dst []byte, v any) []byte { return digest.AppendValue(dst, v) }
