//go:build cgo

package command

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/joinbench"
)

func TestBenchJoinTinyJSON(t *testing.T) {
	out, errOut, code := run(t, "--json", "bench", "join", "--inputs", "320", "--group-rows", "200", "--trials", "1", "--warmup", "0", "--dir", t.TempDir())
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res joinbench.JoinBenchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(res.Rows) != 8 || len(res.Original) != 8 {
		t.Fatalf("%d rows, %d original rows", len(res.Rows), len(res.Original))
	}
	seen := map[string]bool{}
	for _, r := range res.Rows {
		seen[r.Shape] = true
		for _, v := range []float64{r.Bucket, r.RecordNoReuse, r.Record8MiB, r.Record64MiB, r.RecordPool} {
			if v <= 0 {
				t.Fatalf("%s/%d: non-positive time in %+v", r.Shape, r.Payload, r)
			}
		}
		if r.OutputRows <= 0 {
			t.Fatalf("%s/%d: no output", r.Shape, r.Payload)
		}
	}
	for _, s := range []string{"unique", "repeated", "skewed", "group50k"} {
		if !seen[s] {
			t.Fatalf("shape %s missing", s)
		}
	}
}

func TestBenchJoinShapesFilter(t *testing.T) {
	out, errOut, code := run(t, "--json", "bench", "join", "--shapes", "unique/256,skewed", "--prefix-bloom", "--inputs", "320", "--group-rows", "200", "--trials", "1", "--warmup", "0", "--dir", t.TempDir())
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res joinbench.JoinBenchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	var got []string
	for _, r := range res.Rows {
		got = append(got, r.Shape+"/"+strconv.Itoa(r.Payload))
		if r.OutputRows <= 0 || r.RecordPool <= 0 {
			t.Fatalf("%s/%d: %+v", r.Shape, r.Payload, r)
		}
	}
	if strings.Join(got, " ") != "unique/256 skewed/0 skewed/256" {
		t.Fatalf("shapes run: %v", got)
	}
	if _, errOut, code := run(t, "bench", "join", "--shapes", "unique/7", "--dir", t.TempDir()); code != ExitUsage || !strings.Contains(errOut, "unique/7") {
		t.Fatalf("--shapes unique/7: exit %d (%s), want %d", code, errOut, ExitUsage)
	}
}

func TestBenchJoinTable(t *testing.T) {
	var buf bytes.Buffer
	res := &joinbench.JoinBenchResult{
		Rows:     []joinbench.JoinBenchRow{{Shape: "skewed", Payload: 256, Inputs: 10, OutputRows: 5, Bucket: 2, RecordNoReuse: 0.5, Record8MiB: 0.2, Record64MiB: 0.1, RecordPool: 0.1}},
		Original: joinbench.OriginalJoinMedians,
	}
	if err := printJoinBench(&buf, res, 5); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"skewed/256", "record pool", "orig bucket", "0.05x", "2.0976"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	if _, _, code := run(t, "bench", "join", "--trials", "0"); code != ExitUsage {
		t.Fatalf("--trials 0: exit %d, want %d", code, ExitUsage)
	}
}
