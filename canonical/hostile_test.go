package canonical

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// TestImportCorruptStreams: truncated and bit-flipped stream files give
// errors (naming the file) or, when the damage hits a value that still
// decodes, a successful import — never a panic.
func TestImportCorruptStreams(t *testing.T) {
	ctx := context.Background()
	op, _ := genOperator(t, "heap", 128, 1, 60)
	dir := t.TempDir()
	store, _ := s3.NewLocal(dir)
	md, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "sp", InlineThreshold: -1, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "sp", md.Operators[0].Subtasks[0].ManagedKeyed.(*savepoint.KeyGroupsHandle).Delegate.Path)
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	try := func(data []byte) error {
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sp, err := savepoint.Open(ctx, store, "sp/_metadata")
		if err != nil {
			return err
		}
		res, err := Import(ctx, sp, func(_ savepoint.OperatorID, _ int, l engine.Layout, d []engine.StateDesc) (engine.Backend, error) {
			return engine.OpenHeap(l, d)
		}, ImportOptions{Parallelism: 2, Workers: 2})
		if err == nil {
			res.Close()
		}
		return err
	}
	if err := try(orig); err != nil {
		t.Fatalf("intact stream: %v", err)
	}
	failures := 0
	for _, n := range []int{0, 3, 20, len(orig) / 2, len(orig) - 1} {
		if err := try(orig[:n]); err == nil {
			t.Errorf("stream truncated to %d bytes imported", n)
		} else {
			failures++
		}
	}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 300; i++ {
		data := bytes.Clone(orig)
		pos := rng.Intn(len(data))
		data[pos] ^= byte(1 << rng.Intn(8))
		if i%10 == 0 {
			pos = rng.Intn(len(data) - 4)
			copy(data[pos:], []byte{0x7f, 0xff, 0xff, 0xf0})
		}
		if try(data) != nil {
			failures++
		}
	}
	if failures < 50 {
		t.Fatalf("only %d of 305 damaged streams were rejected", failures)
	}
}

func TestStringValueConversion(t *testing.T) {
	for _, s := range []string{"", "key", "grüße", "日本語", "emoji 😀 pair", string(make([]byte, 300))} {
		fb := flinkwrite.AppendStringValue(nil, s)
		back, err := appendStringValueUTF8(nil, fb, "k")
		if err != nil || string(back) != s {
			t.Errorf("%q: back %q, %v", s, back, err)
		}
		fb2, err := appendFlinkPart(nil, engine.StringType, []byte(s), "k")
		if err != nil || !bytes.Equal(fb, fb2) {
			t.Errorf("%q: % x vs % x (%v)", s, fb2, fb, err)
		}
	}
	for _, bad := range [][]byte{{0}, {5, 'a'}, {2, 0xed, 0xa0, 0x80}, {3, 0x80, 0xb8, 0x03, 'x'}, {2, 'a', 'b'}} {
		if _, err := appendStringValueUTF8(nil, bad, "k"); err == nil {
			t.Errorf("% x accepted", bad)
		}
	}
	if _, err := appendFlinkPart(nil, engine.StringType, []byte{0xff}, "k"); err == nil {
		t.Error("invalid UTF-8 accepted")
	}
}
