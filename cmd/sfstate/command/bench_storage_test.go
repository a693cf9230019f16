package command

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/sfstate/sfstate/internal/bench/s3bench"
	"github.com/sfstate/sfstate/internal/testutil"
)

func TestBenchStorageJSON(t *testing.T) {
	for _, bin := range []string{"versitygw", "toxiproxy-server"} {
		if _, err := testutil.FindBinary(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
	}
	out, errOut, code := run(t, "--json", "bench", "storage", "--quick", "--blob-mib", "8", "--range-time", "100ms")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep s3bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not the JSON report: %v\n%s", err, out)
	}
	if rep.BlobSize != 8<<20 || len(rep.Rows) != 12 {
		t.Fatalf("report: blob %d, %d rows", rep.BlobSize, len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.MiBps <= 0 || r.Bytes <= 0 || r.LoopbackMiBps <= 0 || r.Network == "" {
			t.Fatalf("empty measurement: %+v", r)
		}
	}
	if rep.Counters.BytesWritten != 2*rep.BlobSize || rep.Counters.Requests["get_range"] == 0 {
		t.Fatalf("counters: %+v", rep.Counters)
	}
	if _, _, code := run(t, "bench", "storage", "--blob-mib", "1"); code != ExitUsage {
		t.Fatalf("bad --blob-mib: exit %d", code)
	}
}
