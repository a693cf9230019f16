//go:build cgo

package command

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/checkpoint"
	"github.com/sfstate/sfstate/engine"
	"github.com/sfstate/sfstate/internal/testutil"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/s3"
)

// deepLines parses --dump output into normalized lines; processing-time
// timer timestamps (wall-clock dependent) are dropped.
func deepLines(t *testing.T, out string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("bad line %q: %v", l, err)
		}
		if st, _ := m["state"].(string); strings.HasPrefix(st, "_timer_state/processing") {
			if v, ok := m["value"].([]any); ok && len(v) == 2 {
				if obj, ok := v[1].(map[string]any); ok {
					delete(obj, "ts")
				}
			}
		}
		b, _ := json.Marshal(m)
		lines = append(lines, string(b))
	}
	sort.Strings(lines)
	return lines
}

func TestInspectDeepFlinkNativeMatchesCanonical(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	native := inspectCopyDir(t, fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	before := inspectHashTree(t, native)
	out, errOut, code := run(t, "inspect", "--deep", "--dump", native)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	got := deepLines(t, out)
	out, errOut, code = run(t, "inspect", "--dump", fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers"))
	if code != ExitOK {
		t.Fatalf("canonical: exit %d: %s", code, errOut)
	}
	want := deepLines(t, out)
	if len(got) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("native --deep --dump differs from the canonical twin's dump:\n%s\n---\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	out, errOut, code = run(t, "inspect", "--deep", native)
	if code != ExitOK {
		t.Fatalf("summary: exit %d: %s", code, errOut)
	}
	for _, s := range []string{"key layout   flink-rocksdb", "_timer_state/event_timer", "state-name", "4 entries", "key groups: 3 of 4 non-empty"} {
		if !strings.Contains(out, s) {
			t.Errorf("summary lacks %q:\n%s", s, out)
		}
	}
	out, _, code = run(t, "inspect", "--deep", "--dump", "--state", "state-name", "--key-groups", "2", "--limit", "3", native)
	if code != ExitOK || len(deepLines(t, out)) != 3 || strings.Contains(out, "_timer_state") || strings.Contains(out, `"keyGroup":1`) {
		t.Fatalf("filters: exit %d:\n%s", code, out)
	}
	if _, _, code := run(t, "--json", "inspect", "--deep", native); code != ExitOK {
		t.Fatalf("--json: exit %d", code)
	}
	if after := inspectHashTree(t, native); after != before {
		t.Fatal("input directory changed")
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("temporary files left: %v", ents)
	}
	// Canonical savepoints have no native handles.
	if _, errOut, code := run(t, "inspect", "--deep", fixtureSavepoint(t, "flink1.20-rocksdb-canonical-valuestate-timers")); code != ExitUsage || !strings.Contains(errOut, "no native keyed state") {
		t.Fatalf("canonical --deep: exit %d: %s", code, errOut)
	}
}

func TestInspectDeepEngineCheckpoint(t *testing.T) {
	const maxPar = 128
	states := []engine.StateDesc{{Name: "last", Kind: engine.KindValue, TTL: time.Hour}}
	now := time.Now().UnixMilli()
	var backends []engine.Backend
	written := 0
	for i, r := range keygroups.Ranges(maxPar, 2) {
		l := engine.Layout{MaxParallelism: maxPar, Range: r}
		b, err := engine.OpenRocksDB(filepath.Join(t.TempDir(), fmt.Sprintf("task-%d", i)), l, states, engine.RocksOptions{WriteBufferSize: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		backends = append(backends, b)
		bt := b.NewBatch()
		for kg := r.Start; kg <= r.End; kg += 9 {
			v := binary.BigEndian.AppendUint64(nil, uint64(now-int64(kg)))
			bt.Put(0, l.Key(nil, kg, []byte(fmt.Sprintf("k%d", kg)), nil), append(v, 'x'))
			written++
		}
		if err := bt.Commit(); err != nil {
			t.Fatal(err)
		}
		bt.Close()
		if err := b.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	st, err := s3.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.New(st, checkpoint.Options{}).TakeSync(context.Background(), backends, 1); err != nil {
		t.Fatal(err)
	}
	chk := filepath.Join(root, checkpoint.Dir(1))
	out, errOut, code := run(t, "inspect", "--deep", "--dump", chk)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != written {
		t.Fatalf("%d lines, wrote %d entries:\n%s", len(lines), written, out)
	}
	for _, l := range lines {
		var m struct {
			KeyGroup int            `json:"keyGroup"`
			Key      map[string]any `json:"key"`
			TTL      *int64         `json:"ttlTimestamp"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if raw, _ := m.Key["raw"].(string); m.TTL == nil || *m.TTL != now-int64(m.KeyGroup) || raw == "" || m.Key["decoded"] != false {
			t.Fatalf("line %s: want ttlTimestamp %d and raw key", l, now-int64(m.KeyGroup))
		}
	}
	out, errOut, code = run(t, "inspect", "--deep", "--ttl", "1h", chk)
	if code != ExitOK || !strings.Contains(out, "key layout   sfstate-engine") || !strings.Contains(out, fmt.Sprintf("%d entries", written)) || !strings.Contains(out, "ttl last access") {
		t.Fatalf("summary: exit %d: %s\n%s", code, errOut, out)
	}
}

func TestInspectDeepS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 gateway")
	}
	srv := testutil.StartVersitygw(t)
	ctx := context.Background()
	src := fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast")
	st, err := srv.NewStore(ctx, "", s3.S3Options{})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, "native/"+e.Name(), bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("SFSTATE_S3_ENDPOINT", srv.Endpoint)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out, errOut, code := run(t, "inspect", "--deep", "--dump", "s3://"+srv.Bucket+"/native")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	local, _, _ := run(t, "inspect", "--deep", "--dump", src)
	if got, want := deepLines(t, out), deepLines(t, local); len(got) != 32 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("S3 read gives %d entries, local %d", len(got), len(want))
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

func TestInspectDeepCorruptSSTExit3(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir := inspectCopyDir(t, fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	// The fixture's SST files (000010.sst of each subtask) are the objects
	// of 900-1100 bytes; flip bytes in the first data block of one.
	ents, _ := os.ReadDir(dir)
	var victim string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 900 || len(b) > 1100 {
			continue
		}
		for i := 8; i < 24; i++ {
			b[i] ^= 0xFF
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		victim = e.Name()
		break
	}
	if victim == "" {
		t.Skip("no SST-sized file in the fixture")
	}
	_, errOut, code := run(t, "inspect", "--deep", dir)
	if code != ExitIO || !strings.Contains(errOut, victim) {
		t.Fatalf("exit %d, want %d naming %s: %s", code, ExitIO, victim, errOut)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("temporary files left: %v", ents)
	}
}
