package keyed

import (
	"fmt"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

// ReadStateMetaInfo reads one StateMetaInfoSnapshot at the start of b, in
// the layout of meta-info versions 6 and 7 that keyed headers use:
//
//	UTF name, i32 backend state type, i32 n, n × (UTF key, UTF value)
//	options, i32 m, m × (UTF key, i32 2, versioned serializer snapshot)
//
// base is b's absolute offset (for errors). It returns the state with its
// convenience views (Namespace, Value, Element, ...) filled and the number
// of bytes read. Unlike a header, a lone meta info has no known end, so an
// unknown serializer snapshot class fails the read.
func ReadStateMetaInfo(b []byte, base int64) (*StateMeta, int, error) {
	d := binfmt.New(b, base)
	m := readStateMeta(d)
	if err := d.Err(); err != nil {
		return nil, 0, err
	}
	if m == nil {
		return nil, 0, &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: unreadable state meta info", binfmt.ErrCorrupt)}
	}
	m.prepare()
	return m, d.Pos, nil
}
