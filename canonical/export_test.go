package canonical

import (
	"context"
	"testing"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/sfstate/sfstate/savepoint/serde"
)

func TestExportReadBack(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		kind       string
		maxP, par  int
		n          int
		inline     int
		wantInline bool
		flink      string
		compress   bool
	}{
		{"heap", 128, 3, 3000, 0, false, "", false},
		{"rocksdb", 256, 2, 2000, 0, false, "1.20", true},
		{"heap", 128, 4, 40, 0, true, "1.18", false},
	} {
		op, counts := genOperator(t, tc.kind, tc.maxP, tc.par, tc.n)
		store, err := s3.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		md, stats, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "sp", FlinkVersion: tc.flink, Compress: tc.compress, TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("%s: export: %v", tc.kind, err)
		}
		var want int64
		for _, c := range counts {
			want += c
		}
		if stats.Entries != want {
			t.Fatalf("%s: exported %d entries, generated %d", tc.kind, stats.Entries, want)
		}
		if tc.wantInline != (stats.Inline == tc.par) {
			t.Errorf("%s: %d inline streams of %d", tc.kind, stats.Inline, tc.par)
		}
		if wantV := map[bool]int{true: 4, false: 3}[tc.flink != ""]; md.Version != wantV {
			t.Errorf("metadata version %d, want %d", md.Version, wantV)
		}
		sp, err := savepoint.Open(ctx, store, "sp/_metadata")
		if err != nil {
			t.Fatal(err)
		}
		if sp.Meta.Operators[0].ID != savepoint.OperatorIDFromUID("generated-join") {
			t.Errorf("operator id %s", sp.Meta.Operators[0].ID)
		}
		if tc.flink != "" {
			p, err := sp.Meta.Properties()
			if err != nil || !p.IsSavepoint() {
				t.Errorf("properties %+v, %v", p, err)
			}
		}
		probs, cst := savepoint.Check(ctx, sp, savepoint.CheckOptions{})
		if len(probs) != 0 {
			t.Fatalf("%s: check: %v", tc.kind, probs)
		}
		_ = cst
		got := genCounts{}
		err = sp.WalkKeyed(ctx, savepoint.ScanOptions{KeyGroupTo: -1, Mode: keyed.ModeDecode}, func(e *savepoint.KeyedEntry) error {
			got[e.State.Name]++
			switch e.State.Name {
			case "accState", "left-records":
				if e.TTLTimestamp == nil || *e.TTLTimestamp > testNow || *e.TTLTimestamp < testNow-1010 {
					t.Fatalf("%s: TTL timestamp %v", e.State.Name, e.TTLTimestamp)
				}
			}
			if e.State.Name == "accState" {
				tv, _ := e.Value.(*serde.TTLValue)
				if tv == nil {
					t.Fatalf("accState value %#v is not a TtlValue", e.Value)
				}
				r, ok := tv.Value.(*serde.Row)
				k, ok2 := e.Key.(*serde.Row)
				if !ok || !ok2 || len(r.Fields) != 5 {
					t.Fatalf("accState value %#v", e.Value)
				}
				if r.Fields[0] != k.Fields[0].(int64)*3 {
					t.Fatalf("accState value %v for key %v", r.Fields, k.Fields)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range counts {
			if got[name] != c {
				t.Errorf("%s: state %s: read %d entries, wrote %d", tc.kind, name, got[name], c)
			}
		}
		d, err := digest.Compute(ctx, sp, digest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if tot := d.Total("", ""); tot.Entries != want {
			t.Errorf("digest counts %d entries", tot.Entries)
		}
		// _metadata is never overwritten.
		if _, _, err := Export(ctx, []Operator{op}, store, ExportOptions{Dir: "sp"}); !s3.IsExist(err) {
			t.Errorf("second export into the same directory: %v", err)
		}
	}
}

// TestExportRejectsBadInput: invalid operator descriptions fail before
// anything is written.
func TestExportRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	op, _ := genOperator(t, "heap", 128, 2, 20)
	bad := map[string]func(o *Operator){
		"no id":            func(o *Operator) { o.UID = "" },
		"wrong range":      func(o *Operator) { o.Subtasks[0].Index, o.Subtasks[1].Index = 1, 0 },
		"parallelism":      func(o *Operator) { o.Parallelism = 3 },
		"max parallelism":  func(o *Operator) { o.MaxParallelism = 256 },
		"repeated subtask": func(o *Operator) { o.Subtasks[1].Index = 0 },
		"schema mismatch": func(o *Operator) {
			s := *o.Subtasks[0].Schema
			s.States = s.States[1:]
			o.Subtasks[0].Schema = &s
		},
		"bad version": func(o *Operator) {},
	}
	for name, mutate := range bad {
		o := op
		o.Subtasks = append([]Subtask(nil), op.Subtasks...)
		mutate(&o)
		dir := t.TempDir()
		store, _ := s3.NewLocal(dir)
		eo := ExportOptions{Dir: "sp"}
		if name == "bad version" {
			eo.FlinkVersion = "1.14"
		}
		if _, _, err := Export(ctx, []Operator{o}, store, eo); err == nil {
			t.Errorf("%s: exported", name)
		}
		if objs, _ := store.List(ctx, ""); len(objs) != 0 {
			t.Errorf("%s: %d objects written", name, len(objs))
		}
	}
}
