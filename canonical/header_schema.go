package canonical

import (
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/recordstore"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// ErrNoJoinDescription is returned by SchemaOfHeader for recordstore's
// join-record state (declared under a layout's state name and kind) whose
// meta info carries no join description: it was described with byte arrays
// only, as checkpoints taken without a schema (or before join descriptions
// existed) describe it, so its rows have no Flink types.
var ErrNoJoinDescription = errclass.New(errclass.ErrUnsupported, "canonical: no join description")

// SchemaOfHeader maps the keyed-state header of a stream whose keys and
// values are in the engine's encoding (the meta-state stream of a native
// checkpoint of the engine taken with checkpoint.Options.Schema, which
// describes each state with Flink's serializer snapshots) to the engine
// schema that exports those states: the key and per-state types as Import
// maps them, the serializer snapshots kept verbatim, and the kinds and
// TTLs of descs, the restored backend's declarations (a MAP of Integer
// values declared a multiset stays a multiset). The schema must describe
// exactly descs (engine.Schema.Matches).
//
// A join-record state's meta info describes recordstore's stored bytes and
// carries its join description (options and serializers sfstate.join.*,
// format documented at engine.JoinSides.Describe); it becomes a
// StateSchema with Join set, exported as Flink's two join states. A
// description of another version, or a malformed one, fails with
// ErrUnsupported; a join-record state without any fails with
// ErrNoJoinDescription.
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
		d, ok := byName[m.Name]
		if !ok {
			return nil, fmt.Errorf("%w: state %q of the header is not declared by the backend", ErrUnsupported, m.Name)
		}
		js, err := joinSidesOf(m)
		if err != nil {
			return nil, fmt.Errorf("%w: state %q: %v", ErrUnsupported, m.Name, err)
		}
		if js == nil && isJoinDesc(d) {
			return nil, fmt.Errorf("%w: state %q holds recordstore's join records, but its meta info has none (no %s option)", ErrNoJoinDescription, m.Name, engine.JoinOptVersion)
		}
		if js != nil {
			ss := engine.StateSchema{Name: m.Name, Kind: d.Kind, Namespace: engine.VoidType, TTL: d.TTL, Join: js}
			if _, err := joinLayout(ss); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
			}
			s.States = append(s.States, ss)
			continue
		}
		ss, err := stateOf(m, o)
		if err != nil {
			return nil, fmt.Errorf("%w: state %q: %v", ErrUnsupported, m.Name, err)
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

// isJoinDesc reports whether d is the engine state of one of recordstore's
// layouts.
func isJoinDesc(d engine.StateDesc) bool {
	return d == recordstore.StateDesc(recordstore.LayoutRecord, d.TTL) || d == recordstore.StateDesc(recordstore.LayoutBucket, d.TTL)
}

// joinSidesOf reads the join description of a meta info (format at
// engine.JoinSides.Describe); nil without one.
func joinSidesOf(m *keyed.StateMeta) (*engine.JoinSides, error) {
	v, ok := m.OptionMap[engine.JoinOptVersion]
	if !ok {
		return nil, nil
	}
	if v != engine.JoinDescriptionVersion {
		return nil, fmt.Errorf("join description version %q (this sfstate reads version %s)", v, engine.JoinDescriptionVersion)
	}
	js := &engine.JoinSides{}
	for _, f := range []struct {
		key string
		dst *string
	}{{engine.JoinOptLeftName, &js.LeftName}, {engine.JoinOptRightName, &js.RightName}} {
		if *f.dst = m.OptionMap[f.key]; *f.dst == "" {
			return nil, fmt.Errorf("join description without %s", f.key)
		}
	}
	for _, f := range []struct {
		key string
		dst *bool
	}{{engine.JoinOptLeftOuter, &js.LeftOuter}, {engine.JoinOptRightOuter, &js.RightOuter}} {
		switch v := m.OptionMap[f.key]; v {
		case "true":
			*f.dst = true
		case "false":
		default:
			return nil, fmt.Errorf("join description option %s is %q, not true or false", f.key, v)
		}
	}
	for _, f := range []struct {
		key string
		dst *engine.Type
	}{{engine.JoinSerLeftRow, &js.Left}, {engine.JoinSerRightRow, &js.Right}} {
		var snap *serde.Snapshot
		for _, ns := range m.Serializers {
			if ns.Key == f.key {
				snap = ns.Snapshot
			}
		}
		if snap == nil {
			return nil, fmt.Errorf("join description without serializer %s", f.key)
		}
		t, err := typeOf(snap, f.key)
		if err != nil {
			return nil, err
		}
		if t.Kind != engine.TypeRow {
			return nil, errors.New(f.key + " is not a row serializer (" + snap.Class + ")")
		}
		*f.dst = t
	}
	return js, nil
}
