package javaser

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func utf(s string) string {
	var e binfmt.Encbuf
	_ = e.PutUTF(s)
	return hex.EncodeToString(e.B)
}

// arrayListStream is new ArrayList<>(List.of("a", "b")) as ObjectOutputStream
// writes it: default fields (size) followed by writeObject block data
// (capacity) and the elements.
func arrayListStream(t testing.TB) []byte {
	return mustHex(t, "aced0005 7372"+utf("java.util.ArrayList")+"7881d21d99c7619d 03 0001 49"+utf("size")+"78 70"+
		"00000002"+"7704 00000002"+"74"+utf("a")+"74"+utf("b")+"78")
}

func TestArrayListWriteObject(t *testing.T) {
	b := arrayListStream(t)
	s, err := Parse(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := s.First().(*Object)
	if !ok {
		t.Fatalf("first = %T", s.First())
	}
	if o.ClassName() != "java.util.ArrayList" || o.Class.SerialUID != 0x7881d21d99c7619d {
		t.Fatalf("class %s uid %x", o.ClassName(), o.Class.SerialUID)
	}
	if n, ok := o.Int("size"); !ok || n != 2 {
		t.Fatalf("size = %d %v", n, ok)
	}
	ann := o.Annotations("java.util.ArrayList")
	if len(ann) != 3 {
		t.Fatalf("annotations %#v", ann)
	}
	if bd, ok := ann[0].(BlockData); !ok || !bytes.Equal(bd, []byte{0, 0, 0, 2}) {
		t.Fatalf("capacity block %#v", ann[0])
	}
	if ann[1] != "a" || ann[2] != "b" {
		t.Fatalf("elements %#v", ann[1:])
	}
	if !bytes.Equal(s.Raw, b) {
		t.Fatal("raw bytes differ")
	}
	// ParseOne stops after the object and reports its length.
	tail := append(append([]byte{}, b...), 0xde, 0xad)
	s1, n, err := ParseOne(tail, 100)
	if err != nil || n != len(b) || !bytes.Equal(s1.Raw, b) {
		t.Fatalf("ParseOne n=%d err=%v", n, err)
	}
}

func TestClassReferencesAndEnum(t *testing.T) {
	// TC_CLASS String, then an enum whose descriptor is then referenced
	// again by a second enum constant, plus a reset in between.
	enumDesc := "7e72" + utf("p.Color") + "0000000000000000 12 0000 78" +
		"72" + utf("java.lang.Enum") + "0000000000000000 12 0000 78 70"
	b := mustHex(t, "aced0005"+
		"7672"+utf("java.lang.String")+"a0f0a4387a3bb342 02 0000 78 70"+
		enumDesc+"74"+utf("RED")+
		"7e 71007e0002 74"+utf("BLUE")+
		"79"+"74"+utf("after reset")+"71 007e0000")
	s, err := Parse(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Contents) != 5 {
		t.Fatalf("contents %d: %#v", len(s.Contents), s.Contents)
	}
	if c, ok := s.Contents[0].(*Class); !ok || c.Desc.Name != "java.lang.String" {
		t.Fatalf("class %#v", s.Contents[0])
	}
	e1, _ := s.Contents[1].(*Enum)
	e2, _ := s.Contents[2].(*Enum)
	if e1 == nil || e2 == nil || e1.Constant != "RED" || e2.Constant != "BLUE" || e1.Class != e2.Class || e1.Class.Super.Name != "java.lang.Enum" {
		t.Fatalf("enums %#v %#v", e1, e2)
	}
	if s.Contents[3] != "after reset" || s.Contents[4] != "after reset" {
		t.Fatalf("reset handling: %#v", s.Contents[3:])
	}
}

func TestPrimitiveArrayAndFields(t *testing.T) {
	b := mustHex(t, "aced0005 7572"+utf("[I")+"4dba602676eab2a5 02 0000 78 70 00000003 00000001 ffffffff 7fffffff")
	s, err := Parse(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := s.First().(*Array)
	v := a.Values.([]int32)
	if len(v) != 3 || v[1] != -1 || v[2] != 1<<31-1 {
		t.Fatalf("values %v", v)
	}
}

func TestCheckpointPropertiesTrailer(t *testing.T) {
	dir := fixtures.Require(t)
	n := 0
	for _, sp := range fixtures.Savepoints(t) {
		b, err := os.ReadFile(filepath.Join(dir, sp, "_metadata"))
		if err != nil {
			t.Fatal(err)
		}
		if b[7] < 4 {
			continue // V3 has no trailer
		}
		i := bytes.LastIndex(b, []byte{0xac, 0xed, 0x00, 0x05})
		if i < 0 {
			t.Fatalf("%s: no trailer", sp)
		}
		s, err := Parse(b[i:], int64(i))
		if err != nil {
			t.Fatalf("%s: %v", sp, err)
		}
		o, ok := s.First().(*Object)
		if !ok || o.ClassName() != "org.apache.flink.runtime.checkpoint.CheckpointProperties" || o.Class.SerialUID != 2 {
			t.Fatalf("%s: %#v", sp, s.First())
		}
		for _, f := range []string{"discardCancelled", "discardFailed", "discardFinished", "discardSubsumed", "discardSuspended", "forced", "unclaimed"} {
			if _, ok := o.Bool(f); !ok {
				t.Errorf("%s: boolean field %s missing", sp, f)
			}
		}
		ct := o.Object("checkpointType")
		if ct.ClassName() != "org.apache.flink.runtime.checkpoint.SavepointType" || uint64(ct.Class.SerialUID) != 0xa087d308a45814b8 {
			t.Fatalf("%s: checkpointType %s", sp, ct.ClassName())
		}
		fv, _ := ct.Field("formatType")
		ft, _ := fv.(*Enum)
		want := "CANONICAL"
		if strings.Contains(sp, "NATIVE") {
			want = "NATIVE"
		}
		if ft == nil || ft.Constant != want {
			t.Errorf("%s: formatType %#v", sp, fv)
		}
		if name := ct.String("name"); name != "Savepoint" && name != "Suspend Savepoint" {
			t.Errorf("%s: name %q", sp, name)
		}
		n++
	}
	if n < 5 {
		t.Fatalf("only %d V4 trailers checked", n)
	}
}

func TestHostileInput(t *testing.T) {
	// Truncation at every length must be an error, never a panic.
	b := arrayListStream(t)
	for i := 0; i < len(b); i++ {
		if _, err := Parse(b[:i], 0); err == nil && i > 0 {
			// A prefix ending exactly between top-level items is valid.
			if i != 4 {
				t.Errorf("prefix %d parsed without error", i)
			}
		}
		if _, _, err := ParseOne(b[:i], 0); err == nil {
			t.Errorf("ParseOne prefix %d: no error", i)
		}
	}
	// Huge array length.
	huge := mustHex(t, "aced0005 7572"+utf("[J")+"0000000000000000 02 0000 78 70 7fffffff 00")
	_, err := Parse(huge, 10)
	var oe *binfmt.OffsetError
	if !errors.As(err, &oe) || oe.Offset != 10+4+2+2+2+8+1+2+1+1 {
		t.Fatalf("huge array: %v", err)
	}
	// Deep nesting of object arrays.
	var sb strings.Builder
	sb.WriteString("aced0005")
	desc := "7572" + utf("[Ljava.lang.Object;") + "90ce589f1073296c 02 0000 78 70"
	sb.WriteString(desc + "00000001")
	for i := 0; i < 2000; i++ {
		sb.WriteString("75 71007e0000 00000001")
	}
	_, err = Parse(mustHex(t, sb.String()), 0)
	if err == nil || !strings.Contains(err.Error(), "nesting") {
		t.Fatalf("deep nesting: %v", err)
	}
	// Bad magic, unknown type code, dangling reference.
	for _, h := range []string{"aced0004", "aced0005 6f", "aced0005 71 007e0005"} {
		if _, err := Parse(mustHex(t, h), 0); err == nil {
			t.Errorf("%s: no error", h)
		}
	}
}
