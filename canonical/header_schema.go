package canonical

import (
	"fmt"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/savepoint/keyed"
)

// SchemaOfHeader maps the keyed-state header of a stream whose keys and
// values are in the engine's encoding (the meta-state stream of a native
// checkpoint of the engine taken with checkpoint.Options.Schema, which
// describes each state with Flink's serializer snapshots) to the engine
// schema that exports those states: the key and per-state types as Import
// maps them, the serializer snapshots kept verbatim, and the kinds and
// TTLs of descs, the restored backend's declarations (a MAP of Integer
// values declared a multiset stays a multiset). The schema must describe
// exactly descs (engine.Schema.Matches).
func SchemaOfHeader(hdr *keyed.Header, descs []engine.StateDesc) (*engine.Schema, error) {
	kt, err := typeOf(hdr.KeySerializer, "key")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	o := ImportOptions{Multisets: map[string]bool{}}
	byName := map[string]engine.StateDesc{}
	for _, d := range descs {
		byName[d.Name] = d
		if d.Kind == engine.KindMultiset {
			o.Multisets[d.Name] = true
		}
	}
	s := &engine.Schema{Key: kt}
	for _, m := range hdr.States {
		ss, err := stateOf(m, o)
		if err != nil {
			return nil, fmt.Errorf("%w: state %q: %v", ErrUnsupported, m.Name, err)
		}
		d, ok := byName[m.Name]
		if !ok {
			return nil, fmt.Errorf("%w: state %q of the header is not declared by the backend", ErrUnsupported, m.Name)
		}
		ss.TTL = d.TTL
		s.States = append(s.States, ss)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if err := s.Matches(descs); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	return s, nil
}
