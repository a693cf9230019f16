package canonical

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
)

// TestExportMetadataVersions: each target Flink release gets the metadata
// version it writes itself; the bytes parse back to the returned model and
// re-encode byte for byte, V5+ carry the operator name and uid, and every
// version's keyed state reads back to the same digest.
func TestExportMetadataVersions(t *testing.T) {
	ctx := context.Background()
	op, _ := genOperator(t, "heap", 128, 2, 300)
	op.Name = "Join[3] ⨝ ünïcode"
	var first *digest.Digest
	for _, tc := range []struct {
		flink   string
		version int // ExportOptions.MetadataVersion
		want    int
	}{
		{"", 0, 3}, {"1.15", 0, 3}, {"1.17", 0, 4}, {"1.20", 0, 4},
		{"2.0", 0, 5}, {"2.x", 0, 5}, {"2.2", 0, 5}, {"2.4", 0, 5}, {"", 6, 6}, {"1.20", 5, 5},
	} {
		name := fmt.Sprintf("%q/%d", tc.flink, tc.version)
		store, err := s3.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		md, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "sp", FlinkVersion: tc.flink, MetadataVersion: tc.version, TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rc, err := store.Get(ctx, "sp/_metadata")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if v := int(raw[7]); v != tc.want || md.Version != tc.want {
			t.Fatalf("%s: file version %d, model %d, want %d", name, v, md.Version, tc.want)
		}
		parsed, err := savepoint.ParseMetadata(raw, "_metadata")
		if err != nil {
			t.Fatalf("%s: parse: %v", name, err)
		}
		again, err := savepoint.EncodeMetadata(parsed)
		if err != nil {
			t.Fatalf("%s: re-encode: %v", name, err)
		}
		if !bytes.Equal(again, raw) {
			t.Fatalf("%s: write→read→write differs (%d vs %d bytes)", name, len(again), len(raw))
		}
		fromModel, err := savepoint.EncodeMetadata(md)
		if err != nil || !bytes.Equal(fromModel, raw) {
			t.Fatalf("%s: returned model encodes differently (%v)", name, err)
		}
		po := parsed.Operators[0]
		if tc.want >= 5 {
			if po.Name != op.Name || po.UID != op.UID {
				t.Errorf("%s: name %q uid %q", name, po.Name, po.UID)
			}
		} else if po.Name != "" || po.UID != "" {
			t.Errorf("%s: V%d carries name/uid", name, tc.want)
		}
		if (tc.want >= 4) != (len(parsed.Trailer) > 0) {
			t.Errorf("%s: trailer of %d bytes", name, len(parsed.Trailer))
		}
		if tc.want >= 4 {
			p, err := parsed.Properties()
			if err != nil || !p.IsSavepoint() || p.FormatType != savepoint.FormatCanonical {
				t.Errorf("%s: properties %+v, %v", name, p, err)
			}
		}
		sp, err := savepoint.Open(ctx, store, "sp/_metadata")
		if err != nil {
			t.Fatal(err)
		}
		d := mustDigest(t, sp)
		if first == nil {
			first = d
		} else if diff := first.Diff(d, 10); len(diff) != 0 {
			t.Errorf("%s: keyed state differs from V3's: %v", name, diff)
		}
	}
	store, err := s3.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []ExportOptions{{MetadataVersion: 7}, {MetadataVersion: 2}, {FlinkVersion: "1.14"}, {FlinkVersion: "3.0"}, {FlinkVersion: "2."}, {FlinkVersion: "2.1x"}} {
		o.Dir, o.TempDir = "bad", t.TempDir()
		if _, _, err := Export(ctx, []Operator{op}, store, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	long := op
	long.Name = string(bytes.Repeat([]byte("€"), 30000)) // 90000 bytes of modified UTF-8
	if _, _, err := Export(ctx, []Operator{long}, store, ExportOptions{Dir: "long", FlinkVersion: "2.0", TempDir: t.TempDir()}); err == nil {
		t.Error("operator name over 65535 bytes accepted")
	}
	long.Name = "bad \xff byte"
	if _, _, err := Export(ctx, []Operator{long}, store, ExportOptions{Dir: "utf", FlinkVersion: "2.0", TempDir: t.TempDir()}); err == nil {
		t.Error("operator name with invalid UTF-8 accepted")
	}
	if objs, _ := store.List(ctx, ""); len(objs) != 0 {
		t.Errorf("rejected exports wrote %d objects", len(objs))
	}
}

// TestV5NameUIDSurviveImport: a V5 export's operator name and uid come
// back with the import and go out again in the next V5 export.
func TestV5NameUIDSurviveImport(t *testing.T) {
	ctx := context.Background()
	op, _ := genOperator(t, "heap", 128, 2, 100)
	op.Name = "GroupAggregate[7]"
	store, _ := s3.NewLocal(t.TempDir())
	if _, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "a", FlinkVersion: "2.0", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	a, err := savepoint.Open(ctx, store, "a/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(ctx, a, testFactory(t, "heap", nil, nil), ImportOptions{Parallelism: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	iop := res.Operators[0]
	if iop.Name != op.Name || iop.UID != op.UID {
		t.Fatalf("imported name %q uid %q", iop.Name, iop.UID)
	}
	out := Operator{ID: iop.ID, UID: iop.UID, Name: iop.Name, Parallelism: iop.Parallelism, MaxParallelism: iop.MaxParallelism}
	for _, st := range iop.Subtasks {
		out.Subtasks = append(out.Subtasks, Subtask{Index: st.Index, Operator: engine.NewOperator(st.Backend, nil), Schema: st.Schema})
	}
	md, _, err := Export(ctx, []Operator{out}, store, ExportOptions{Dir: "b", FlinkVersion: "2.x", TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if o := md.Operators[0]; o.Name != op.Name || o.UID != op.UID || o.ID != a.Meta.Operators[0].ID {
		t.Fatalf("re-exported %q %q %s", o.Name, o.UID, o.ID)
	}
}
