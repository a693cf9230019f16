//go:build cgo

package command

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/checkpointbench"
	"github.com/sfstate/sfstate/internal/testutil"
)

func TestBenchCheckpointJSON(t *testing.T) {
	if _, err := testutil.FindBinary("versitygw"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	out, errOut, code := run(t, "--json", "bench", "checkpoint", "--keys", "20000", "--value-bytes", "64", "--dir", t.TempDir())
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep checkpointbench.BenchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not the JSON report: %v\n%s", err, out)
	}
	if rep.Config.Keys != 20000 || len(rep.Rows) != 10 || rep.StateBytes <= 20000*64/2 {
		t.Fatalf("report: %+v", rep)
	}
	canon := map[string]checkpointbench.BenchRow{}
	for _, r := range rep.Rows {
		if r.ID != "" {
			canon[r.ID] = r
		}
		if r.Seconds <= 0 || r.Bytes <= 0 || r.Files <= 0 {
			t.Fatalf("empty measurement: %+v", r)
		}
		if strings.HasPrefix(r.Name, "incremental") && r.Bytes*5 > rep.StateBytes {
			t.Errorf("incremental checkpoint after 1%% updates uploaded %d of %d bytes", r.Bytes, rep.StateBytes)
		}
		if strings.HasPrefix(r.Name, "restore, same") && (r.Amplification < 0.99 || r.Amplification > 1.01) {
			t.Errorf("same-parallelism restore fetched x%.2f the checkpoint", r.Amplification)
		}
	}
	for _, id := range []string{checkpointbench.BenchCanonicalWrite, checkpointbench.BenchCanonicalRead} {
		r, ok := canon[id]
		if !ok {
			t.Fatalf("no %s row in %+v", id, rep.Rows)
		}
		// One value entry per key; the streams hold at least the values.
		if r.Entries != 20000 || r.EntriesPerSec <= 0 || r.Bytes < 20000*64 || r.PlainSeconds <= 0 || r.PlainMiBps <= 0 {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if canon[checkpointbench.BenchCanonicalWrite].Bytes != canon[checkpointbench.BenchCanonicalRead].Bytes {
		t.Errorf("canonical write and read measured different bytes")
	}
	if _, _, code := run(t, "bench", "checkpoint", "--keys", "5"); code != ExitUsage {
		t.Fatalf("bad --keys: exit %d", code)
	}
}
