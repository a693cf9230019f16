package keyed

// A minimal, test-only _metadata reader (V3/V4) that finds the keyed and
// operator state handles of the canonical fixtures. The real metadata
// parser lives in package savepoint; this one only exists so the stream
// decoders can be tested against the fixtures on their own.

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

type tStream struct {
	name   string // inline handle name or relative path
	inline []byte
	file   string // absolute path for file handles
}

func (s *tStream) bytes(t testing.TB) []byte {
	if s.inline != nil {
		return s.inline
	}
	b, err := os.ReadFile(s.file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type tKeyed struct {
	tag     int
	start   int
	offsets []int64
	stream  *tStream
}

type tOpState struct {
	name    string
	mode    int
	offsets []int64
}

type tOperatorHandle struct {
	states []tOpState
	stream *tStream
}

type tSubtask struct {
	index   int
	managed *tOperatorHandle
	keyed   *tKeyed
}

type tOperator struct {
	id             string
	parallelism    int
	maxParallelism int
	subtasks       []tSubtask
}

type tMetadata struct {
	version   int
	operators []tOperator
}

// metadataPath returns the _metadata of a fixture (SQL fixtures keep it in
// a savepoint/ subdirectory).
func metadataPath(t testing.TB, fixture string) string {
	p := fixtures.Path(t, fixture, "_metadata")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return fixtures.Path(t, fixture, "savepoint", "_metadata")
}

func readTestMetadata(t testing.TB, fixture string) *tMetadata {
	t.Helper()
	path := metadataPath(t, fixture)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseTestMetadata(b, filepath.Dir(path))
	if err != nil {
		t.Fatalf("%s: %v", fixture, err)
	}
	return m
}

func parseTestMetadata(b []byte, dir string) (*tMetadata, error) {
	d := binfmt.New(b, 0)
	if magic := d.I32(); magic != 0x4960672D {
		return nil, fmt.Errorf("bad magic %x", magic)
	}
	m := &tMetadata{version: int(d.I32())}
	if m.version < 3 || m.version > 4 {
		return nil, fmt.Errorf("version %d not handled by the test reader", m.version)
	}
	d.I64() // checkpoint id
	nm := int(d.I32())
	for i := 0; i < nm; i++ {
		d.I32()
		l := d.I32()
		d.Skip(int(l))
	}
	nops := int(d.I32())
	for i := 0; i < nops && d.Err() == nil; i++ {
		var op tOperator
		id := d.Bytes(16)
		op.id = hex.EncodeToString(id)
		op.parallelism = int(d.I32())
		op.maxParallelism = int(d.I32())
		readStream(d, dir) // coordinator state
		ns := int(d.I32())
		for j := 0; j < ns && d.Err() == nil; j++ {
			st := tSubtask{index: int(d.I32())}
			if st.index < 0 {
				continue
			}
			if d.I32() == 1 {
				st.managed = readOpHandle(d, dir)
			}
			if d.I32() == 1 {
				readOpHandle(d, dir)
			}
			st.keyed = readKeyedHandle(d, dir)
			readKeyedHandle(d, dir)
			if n := d.I32(); n != 0 {
				return nil, fmt.Errorf("channel state handles not handled")
			}
			if n := d.I32(); n != 0 {
				return nil, fmt.Errorf("channel state handles not handled")
			}
			op.subtasks = append(op.subtasks, st)
		}
		m.operators = append(m.operators, op)
	}
	return m, d.Err()
}

func readStream(d *binfmt.Decbuf, dir string) *tStream {
	switch tag := d.U8(); tag {
	case 0:
		return nil
	case 1:
		s := &tStream{name: d.UTF()}
		n := d.I32()
		s.inline = d.Bytes(int(n))
		return s
	case 2:
		d.I64()
		p := d.UTF()
		return &tStream{name: p, file: p}
	case 6:
		p := d.UTF()
		d.I64()
		return &tStream{name: p, file: filepath.Join(dir, p)}
	default:
		d.Failf("stream handle tag %d not handled", tag)
		return nil
	}
}

func readOpHandle(d *binfmt.Decbuf, dir string) *tOperatorHandle {
	tag := d.U8()
	if tag == 0 {
		return nil
	}
	if tag != 4 {
		d.Failf("operator handle tag %d not handled", tag)
		return nil
	}
	h := &tOperatorHandle{}
	n := int(d.I32())
	for i := 0; i < n && d.Err() == nil; i++ {
		s := tOpState{name: d.UTF(), mode: int(d.U8())}
		c := int(d.I32())
		for j := 0; j < c && d.Err() == nil; j++ {
			s.offsets = append(s.offsets, d.I64())
		}
		h.states = append(h.states, s)
	}
	h.stream = readStream(d, dir)
	return h
}

func readKeyedHandle(d *binfmt.Decbuf, dir string) *tKeyed {
	tag := d.U8()
	switch tag {
	case 0:
		return nil
	case 3, 7, 12:
		k := &tKeyed{tag: int(tag), start: int(d.I32())}
		n := int(d.I32())
		for i := 0; i < n && d.Err() == nil; i++ {
			k.offsets = append(k.offsets, d.I64())
		}
		k.stream = readStream(d, dir)
		if tag == 12 {
			d.UTF()
		}
		return k
	default:
		d.Failf("keyed handle tag %d not handled", tag)
		return nil
	}
}
