package savepoint

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

func header(version int32) *binfmt.Encbuf {
	e := &binfmt.Encbuf{}
	e.PutI32(int32(uint32(MetadataMagic)))
	e.PutI32(version)
	return e
}

func TestHostileMetadata(t *testing.T) {
	op := func(e *binfmt.Encbuf) {
		e.PutBytes(make([]byte, 16)) // id
		e.PutI32(1)                  // parallelism
		e.PutI32(128)                // max parallelism
		e.PutU8(TagNull)             // coordinator
	}
	cases := []struct {
		name string
		b    func() []byte
		want string
	}{
		{"empty", func() []byte { return nil }, "unexpected end"},
		{"bad magic", func() []byte { return []byte{1, 2, 3, 4, 0, 0, 0, 3} }, "bad magic"},
		{"version 1", func() []byte { return header(1).B }, "unsupported metadata version 1"},
		{"version 99", func() []byte { return header(99).B }, "unsupported metadata version 99"},
		{"negative checkpoint", func() []byte { e := header(3); e.PutI64(-5); return e.B }, "negative checkpoint id"},
		{"huge master count", func() []byte { e := header(3); e.PutI64(1); e.PutI32(0x7fffffff); return e.B }, "master state count"},
		{"negative operator count", func() []byte { e := header(3); e.PutI64(1); e.PutI32(0); e.PutI32(-1); return e.B }, "operator state count -1"},
		{"huge operator count", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(1 << 20)
			return e.B
		}, "operator state count"},
		{"bad subtask count", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(1)
			op(e)
			e.PutI32(-7)
			return e.B
		}, "subtask count -7"},
		{"unknown keyed tag", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(1)
			op(e)
			e.PutI32(1)
			e.PutI32(0)
			e.PutI32(0)
			e.PutI32(0)
			e.PutU8(42)
			return e.B
		}, "unknown keyed state handle tag 42"},
		{"nested changelog", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(1)
			op(e)
			e.PutI32(1)
			e.PutI32(0)
			e.PutI32(0)
			e.PutI32(0)
			e.PutU8(TagChangelogV2)
			e.PutI32(0) // key groups 0+1
			e.PutI32(1)
			e.PutI64(0) // checkpointed size
			e.PutI32(1) // one materialized handle: another changelog handle
			e.PutU8(TagChangelog)
			return e.B
		}, "changelog handle (tag 8) nested inside a changelog handle"},
		{"huge key-group count", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(1)
			op(e)
			e.PutI32(1)
			e.PutI32(0)
			e.PutI32(0)
			e.PutI32(0)
			e.PutU8(TagSavepointKeyGroups)
			e.PutI32(0)
			e.PutI32(1 << 30)
			return e.B
		}, "key group count"},
		{"negative inline length", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(1)
			op(e)
			e.PutI32(1)
			e.PutI32(0)
			e.PutI32(0)
			e.PutI32(0)
			e.PutU8(TagSavepointKeyGroups)
			e.PutI32(0)
			e.PutI32(1)
			e.PutI64(0)
			e.PutU8(TagByteStream)
			_ = e.PutUTF("x")
			e.PutI32(-1)
			return e.B
		}, "inline state bytes count -1"},
		{"negative offset", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(1)
			op(e)
			e.PutI32(1)
			e.PutI32(0)
			e.PutI32(0)
			e.PutI32(0)
			e.PutU8(TagSavepointKeyGroups)
			e.PutI32(0)
			e.PutI32(1)
			e.PutI64(-9)
			e.PutU8(TagNull)
			return e.B
		}, "negative offset -9"},
		{"unknown stream tag", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(1)
			op(e)
			e.B[len(e.B)-1] = 99
			e.PutI32(0)
			return e.B
		}, "unknown stream state handle tag 99"},
		{"v3 trailing bytes", func() []byte {
			e := header(3)
			e.PutI64(1)
			e.PutI32(0)
			e.PutI32(0)
			e.PutU8(7)
			return e.B
		}, "trailing bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMetadata(c.b(), "hostile/_metadata")
			if err == nil {
				t.Fatal("no error")
			}
			// Valid input of an unsupported version or feature is not
			// "invalid metadata": it carries ErrUnsupported instead.
			unsupported := strings.Contains(c.want, "unsupported") || c.want == "changelog"
			if errors.Is(err, ErrFormat) == unsupported || errors.Is(err, ErrUnsupported) != unsupported {
				t.Fatalf("error %q: ErrFormat %v, ErrUnsupported %v", err, errors.Is(err, ErrFormat), errors.Is(err, ErrUnsupported))
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "hostile/_metadata") {
				t.Fatalf("error %q, want %q naming the file", err, c.want)
			}
			if c.name != "empty" && !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error %q does not name an offset", err)
			}
		})
	}
}

// TestTruncatedFixtures cuts every fixture at many points: each prefix must
// fail cleanly (V3) or parse with a shorter trailer (V4 cut in the trailer).
func TestTruncatedFixtures(t *testing.T) {
	for _, name := range allFixtures(t) {
		raw := readFixtureMetadata(t, name)
		md, err := ParseMetadata(raw, name)
		if err != nil {
			t.Fatal(err)
		}
		body := len(raw) - len(md.Trailer)
		step := 1
		if body > 4000 {
			step = 7
		}
		for n := 0; n < body; n += step {
			if _, err := ParseMetadata(raw[:n], name); err == nil {
				t.Fatalf("%s: prefix of %d bytes (body %d) parsed", name, n, body)
			}
		}
	}
}

func TestCountBoundsDoNotAllocate(t *testing.T) {
	// A subtask list claiming 32768 entries in a tiny file.
	e := header(3)
	e.PutI64(1)
	e.PutI32(0)
	e.PutI32(1)
	e.PutBytes(make([]byte, 16))
	e.PutI32(4)
	e.PutI32(4)
	e.PutU8(TagNull)
	e.PutI32(32768)
	b := e.B
	if _, err := ParseMetadata(b, "m"); err == nil {
		t.Fatal("accepted")
	}
	binary.BigEndian.PutUint32(b[len(b)-4:], 0)
	if md, err := ParseMetadata(b, "m"); err != nil || len(md.Operators[0].Subtasks) != 0 {
		t.Fatalf("%v %v", md, err)
	}
}

func FuzzParseMetadata(f *testing.F) {
	if d := fixturesDirOrEmpty(); d != "" {
		for _, b := range fixtureMetadataFiles(d) {
			f.Add(b)
		}
	}
	f.Add(header(3).B)
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := ParseMetadata(b, "fuzz")
		if err != nil {
			return
		}
		out, err := EncodeMetadata(md)
		if err != nil {
			if md.Version >= 4 && len(md.Trailer) == 0 {
				return
			}
			t.Fatalf("encode of parsed metadata failed: %v", err)
		}
		if string(out) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}
