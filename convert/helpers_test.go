package convert

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

func openDir(t *testing.T, dir string) *savepoint.Savepoint {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(context.Background(), st, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// entries decodes every keyed entry of a canonical or heap savepoint into
// one sorted line per entry: operator, state, key group, decoded key,
// namespace, user key, value and TTL timestamp. Processing-time timer
// stamps are wall-clock times of the run that wrote the snapshot and are
// blanked (their key and namespace stay).
func entries(t *testing.T, sp *savepoint.Savepoint) []string {
	t.Helper()
	var out []string
	err := sp.WalkKeyed(context.Background(), savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
		out = append(out, entryLine(e.Operator.ID.String(), e.Entry))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func entryLine(op string, e *keyed.Entry) string {
	v := e.Value
	if tm, ok := v.(*serde.Timer); ok && strings.Contains(e.State.Name, "processing") {
		c := *tm
		c.Timestamp = 0
		v = &c
	}
	ttl := "-"
	if e.TTLTimestamp != nil {
		ttl = fmt.Sprint(*e.TTLTimestamp)
	}
	enc := func(x any) string { return hex.EncodeToString(digest.AppendValue(nil, x)) }
	return strings.Join([]string{op, e.State.Name, fmt.Sprint(e.KeyGroup), enc(e.Key), enc(e.Namespace), enc(e.UserKey), enc(v), ttl}, " ")
}

func sameLines(t *testing.T, what string, want, got []string) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("%s: entry %d differs:\n got  %s\n want %s", what, i, got[i], want[i])
		}
	}
}

// streamBytes reads a whole stream handle of sp.
func streamBytes(t *testing.T, sp *savepoint.Savepoint, h *savepoint.StreamHandle) []byte {
	t.Helper()
	obj, err := sp.OpenStream(context.Background(), h, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.NewSectionReader(obj, 0, obj.Size()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkConverted asserts what every converted savepoint must satisfy:
// format CANONICAL in a V4+ trailer, tag-7 keyed handles over files of the
// output whose layout is canonical, a clean Check, the source's operators
// with their parallelism, and operator state byte for byte as in the
// source (same offsets and modes).
func checkConverted(t *testing.T, src, out *savepoint.Savepoint) {
	t.Helper()
	ctx := context.Background()
	if out.Meta.Version < 4 || out.Props == nil || out.Props.FormatType != savepoint.FormatCanonical || !out.Props.IsSavepoint() {
		t.Fatalf("output metadata v%d props %+v (err %v): want a V4+ CANONICAL savepoint", out.Meta.Version, out.Props, out.PropsErr)
	}
	if probs, _ := savepoint.Check(ctx, out, savepoint.CheckOptions{}); len(probs) > 0 {
		t.Fatalf("check: %d problems, first %v", len(probs), probs[0])
	}
	if len(out.Meta.Operators) != len(src.Meta.Operators) {
		t.Fatalf("%d operators, source has %d", len(out.Meta.Operators), len(src.Meta.Operators))
	}
	keyedHandles := 0
	for i, op := range out.Meta.Operators {
		sop := src.Meta.Operators[i]
		if op.ID != sop.ID || op.Parallelism != sop.Parallelism || op.MaxParallelism != sop.MaxParallelism {
			t.Fatalf("operator %d: %s p%d/%d, source %s p%d/%d", i, op.ID, op.Parallelism, op.MaxParallelism, sop.ID, sop.Parallelism, sop.MaxParallelism)
		}
		for _, st := range op.Subtasks {
			if st.ManagedKeyed != nil {
				h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
				if !ok || h.Tag != savepoint.TagSavepointKeyGroups {
					t.Fatalf("operator %s subtask %d: keyed handle tag %d, want %d", op.ID, st.Index, st.ManagedKeyed.HandleTag(), savepoint.TagSavepointKeyGroups)
				}
				if h.Delegate == nil || h.Delegate.Tag != savepoint.TagRelativeFile {
					t.Fatalf("operator %s subtask %d: keyed delegate %+v, want a relative file", op.ID, st.Index, h.Delegate)
				}
				layout, err := out.KeyedLayout(ctx, h, int(op.MaxParallelism))
				if err != nil || layout != savepoint.LayoutCanonical {
					t.Fatalf("operator %s subtask %d: layout %q (%v)", op.ID, st.Index, layout, err)
				}
				keyedHandles++
			}
			sst := sop.Subtask(st.Index)
			for j, oh := range []*savepoint.OperatorHandle{st.ManagedOperator, st.RawOperator} {
				var so *savepoint.OperatorHandle
				if sst != nil {
					so = []*savepoint.OperatorHandle{sst.ManagedOperator, sst.RawOperator}[j]
				}
				if (oh == nil) != (so == nil) {
					t.Fatalf("operator %s subtask %d: operator handle present %v, in source %v", op.ID, st.Index, oh != nil, so != nil)
				}
				if oh == nil {
					continue
				}
				if fmt.Sprint(oh.States) != fmt.Sprint(so.States) {
					t.Fatalf("operator %s subtask %d: operator state offsets %v, source %v", op.ID, st.Index, oh.States, so.States)
				}
				if oh.Delegate.Tag != savepoint.TagByteStream && oh.Delegate.Tag != savepoint.TagRelativeFile {
					t.Fatalf("operator %s subtask %d: operator state in a tag-%d stream (not inside the output)", op.ID, st.Index, oh.Delegate.Tag)
				}
				if !bytes.Equal(streamBytes(t, out, oh.Delegate), streamBytes(t, src, so.Delegate)) {
					t.Fatalf("operator %s subtask %d: operator state bytes differ from the source", op.ID, st.Index)
				}
			}
		}
	}
	if keyedHandles == 0 {
		t.Fatal("no keyed handles in the output")
	}
}

// keyedHeaders returns the raw keyed-state header of every managed keyed
// handle, by operator and subtask.
func keyedHeaders(t *testing.T, sp *savepoint.Savepoint) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
			if !ok {
				continue
			}
			obj, err := sp.OpenStream(context.Background(), h.Delegate, 0)
			if err != nil {
				t.Fatal(err)
			}
			hdr, _, err := keyed.ReadHeader(io.NewSectionReader(obj, 0, obj.Size()), obj.Loc.Name)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%s/%d", op.ID, st.Index)] = hdr.Raw
		}
	}
	return out
}

// sameHeaders asserts that every keyed file of got starts with the header
// (serializer snapshots and state order) of want's file for the same
// subtask; subtasks want has no file for are skipped.
func sameHeaders(t *testing.T, want, got *savepoint.Savepoint) {
	t.Helper()
	w, g := keyedHeaders(t, want), keyedHeaders(t, got)
	n := 0
	for k, wb := range w {
		gb, ok := g[k]
		if !ok {
			t.Fatalf("%s: no keyed file in the output", k)
		}
		if !bytes.Equal(wb, gb) {
			t.Fatalf("%s: keyed header differs (%d bytes, want %d)", k, len(gb), len(wb))
		}
		n++
	}
	if n == 0 {
		t.Fatal("no headers compared")
	}
}
