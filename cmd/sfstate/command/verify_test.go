package command

import (
	"encoding/json"
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/fixtures"
)

func TestVerifySourceOnlyJSONAndJUnit(t *testing.T) {
	sp := fixtures.Path(t, "sql-rocksdb-canonical-join-mapstate", "savepoint")
	junit := filepath.Join(t.TempDir(), "verify.xml")
	out, errOut, code := run(t, "--json", "verify", "--backends", "none", "--junit", junit, sp)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		OK     bool `json:"ok"`
		Digest struct {
			Groups []struct {
				State   string `json:"state"`
				Entries int64  `json:"entries"`
				Counts  int64  `json:"counts"`
			} `json:"groups"`
		} `json:"digest"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	var entries, counts int64
	for _, g := range r.Digest.Groups {
		entries += g.Entries
		counts += g.Counts
	}
	if !r.OK || entries != 10 || counts != 11 {
		t.Fatalf("ok %v, %d entries, counts %d", r.OK, entries, counts)
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var x struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
	}
	if err := xml.Unmarshal(b, &x); err != nil || x.Tests != 1 || x.Failures != 0 {
		t.Fatalf("junit %+v %v:\n%s", x, err, b)
	}
}

func TestVerifyExitCodes(t *testing.T) {
	// RocksDB native state is digested from its RocksDB entries when the
	// build reads RocksDB (cgo); without it, it is valid input this build
	// cannot read. The heap backend's native layout is read like the
	// canonical one.
	native := fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast")
	out, errOut, code := run(t, "verify", "--backends", "none", native)
	if verifyRestorer != nil {
		if code != ExitOK || !strings.Contains(out, "NOTE native RocksDB source: converted to canonical") || !strings.Contains(out, "_timer_state/processing_timer") {
			t.Fatalf("native RocksDB savepoint: exit %d, want %d: %s\n%s", code, ExitOK, errOut, out)
		}
	} else if code != ExitUnsupported || !strings.Contains(errOut, "without RocksDB support") {
		t.Fatalf("native RocksDB savepoint without RocksDB: exit %d, want %d: %s", code, ExitUnsupported, errOut)
	}
	// Truly unsupported: the changelog checkpoint's keyed state lies only
	// in its state-change log, which no backend restores (exit 4).
	if verifyRestorer != nil {
		changelog := fixtures.MorePath(t, "flink1.17-hashmap-changelog-checkpoint", "savepoint")
		if out, errOut, code := run(t, "verify", "--backends", "heap", "--parallelism", "1", changelog); code != ExitUnsupported || !strings.Contains(out, "NOT VERIFIED") {
			t.Fatalf("changelog checkpoint: exit %d, want %d: %s\n%s", code, ExitUnsupported, errOut, out)
		}
	}
	if _, _, code := run(t, "verify", "--backends", "none", fixtures.Path(t, "flink1.20-hashmap-NATIVE-for-contrast")); code != ExitOK {
		t.Fatalf("native heap savepoint: exit %d, want %d", code, ExitOK)
	}
	if _, _, code := run(t, "verify", "--backends", "none", filepath.Join(t.TempDir(), "missing")); code != ExitIO {
		t.Fatalf("missing savepoint: exit %d", code)
	}
	if _, _, code := run(t, "verify", "--backends", "bogus", fixtures.Path(t, "sql-rocksdb-canonical-join-mapstate", "savepoint")); code != ExitUsage {
		t.Fatalf("bad backend: exit %d", code)
	}
	if _, _, code := run(t, "verify", "--shard", "3/3", fixtures.Path(t, "sql-rocksdb-canonical-join-mapstate", "savepoint")); code != ExitUsage {
		t.Fatalf("bad shard: exit %d", code)
	}
	// Different snapshots: exit 1 naming the groups.
	out, _, code = run(t, "verify", "--backends", "none", "--against", fixtures.Path(t, "sql-rocksdb-canonical-groupagg-valuestate", "savepoint"), fixtures.Path(t, "sql-rocksdb-canonical-join-mapstate", "savepoint"))
	if code != ExitCheckFailed || !strings.Contains(out, "FAIL") || !strings.Contains(out, "key group") {
		t.Fatalf("different snapshots: exit %d:\n%s", code, out)
	}
}

func TestVerifyShardsMerge(t *testing.T) {
	sp := fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")
	dir := t.TempDir()
	var files []string
	for _, s := range []string{"0/2", "1/2"} {
		f := filepath.Join(dir, strings.ReplaceAll(s, "/", "-")+".json")
		if _, errOut, code := run(t, "-q", "verify", "--backends", "none", "--shard", s, "--digest-out", f, sp); code != ExitOK {
			t.Fatalf("shard %s: exit %d: %s", s, code, errOut)
		}
		files = append(files, f)
	}
	out, errOut, code := run(t, append([]string{"verify", "--merge"}, files...)...)
	if code != ExitOK || !strings.Contains(out, "OK") {
		t.Fatalf("merge: exit %d: %s %s", code, out, errOut)
	}
	if _, _, code := run(t, "verify", "--merge", files[0]); code == ExitOK {
		t.Fatal("merge of one of two shards succeeded")
	}
}

func TestVerifyTTLReportsExpired(t *testing.T) {
	sp := fixtures.Path(t, "sql-rocksdb-canonical-groupagg-ttl-valuestate", "savepoint")
	// Far in the future every TTL entry is expired; at the epoch none is.
	for _, tc := range []struct {
		now     string
		expired bool
	}{{"2100-01-01T00:00:00Z", true}, {"0", false}} {
		out, errOut, code := run(t, "--json", "verify", "--backends", "none", "--ttl", "24h", "--now", tc.now, sp)
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var r struct {
			TTL *struct {
				TTLMillis int64 `json:"ttlMillis"`
			} `json:"ttl"`
			Digest struct {
				Groups []struct {
					TTLEntries int64 `json:"ttlEntries"`
					Expired    int64 `json:"expired"`
				} `json:"groups"`
			} `json:"digest"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		var ttl, exp int64
		for _, g := range r.Digest.Groups {
			ttl += g.TTLEntries
			exp += g.Expired
		}
		if r.TTL == nil || r.TTL.TTLMillis != 86_400_000 || ttl == 0 || (exp == ttl) != tc.expired || (exp == 0) == tc.expired {
			t.Fatalf("now %s: ttl %+v, %d of %d expired", tc.now, r.TTL, exp, ttl)
		}
	}
	if _, _, code := run(t, "verify", "--backends", "none", "--now", "0", sp); code != ExitUsage {
		t.Fatalf("--now without --ttl: exit %d", code)
	}
}

// TestVerifyTextTimesAndSteps: the text table shows TTL timestamps in
// RFC 3339 (the JSON report's epoch millis, formatted), and stderr that is
// not a terminal gets no step lines unless --verbose asks for them.
func TestVerifyTextTimesAndSteps(t *testing.T) {
	sp := fixtures.Path(t, "sql-rocksdb-canonical-groupagg-ttl-valuestate", "savepoint")
	js, errOut, code := run(t, "--json", "verify", "--backends", "none", sp)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Digest struct {
			Groups []struct {
				TTLEntries int64 `json:"ttlEntries"`
				TTLMin     int64 `json:"ttlMin"`
				TTLMax     int64 `json:"ttlMax"`
			} `json:"groups"`
		} `json:"digest"`
	}
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, g := range r.Digest.Groups {
		if g.TTLEntries > 0 {
			lo, hi = min(lo, g.TTLMin), max(hi, g.TTLMax)
		}
	}
	if lo > hi || lo < 1e12 {
		t.Fatalf("no TTL timestamps in the JSON report:\n%s", js)
	}
	out, errOut, code := run(t, "verify", "--backends", "none", sp)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, ms := range []int64{lo, hi} {
		if want := time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z"); !strings.Contains(out, want) {
			t.Errorf("text report lacks %s (epoch millis %d):\n%s", want, ms, out)
		}
	}
	if regexp.MustCompile(`\b1\d{12}\b`).MatchString(out) {
		t.Errorf("text report prints epoch millis:\n%s", out)
	}
	if strings.Contains(errOut, "verify:") {
		t.Errorf("piped stderr got step lines:\n%s", errOut)
	}
	_, errOut, code = run(t, "--verbose", "verify", "--backends", "none", sp)
	if code != ExitOK || !strings.Contains(errOut, "verify: ") {
		t.Errorf("--verbose: exit %d, no step lines on stderr:\n%s", code, errOut)
	}
}
