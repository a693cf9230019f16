//go:build cgo

package restore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/digest"
	"github.com/sfstate/sfstate/verify"
)

// TestVerifyRocksDBNativeSource verifies Flink 1.20's native (incremental
// RocksDB) savepoint on both backends at parallelism 1 and 2 and compares
// its source digest, taken from the RocksDB entries, with the digest of the
// canonical savepoint Flink took of the same job: the same operators,
// states and key groups, every group equal except the hashes of
// processing-time timers, whose timestamps are wall-clock times of the run
// that wrote each snapshot (their counts still agree). The scratch
// directory of the conversion is gone afterwards.
func TestVerifyRocksDBNativeSource(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	sp, err := savepoint.Open(ctx, mustLocal(t, fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast")), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"rocksdb", "heap"}, 1, 2), Restorer: &Restorer{}, TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || r.Unsupported {
		t.Fatalf("ok %v unsupported %v:\n%s", r.OK, r.Unsupported, strings.Join(r.Failures(), "\n"))
	}
	if !slices.Contains(r.Notes, verify.NoteNativeSource) {
		t.Fatalf("notes %q lack %q", r.Notes, verify.NoteNativeSource)
	}
	if len(r.Targets) != 4 {
		t.Fatalf("%d targets", len(r.Targets))
	}
	for _, tr := range r.Targets {
		if tr.Digest == nil || tr.Digest.Total("", "") != r.Digest.Total("", "") {
			t.Fatalf("%s: digest totals differ from the source's", tr.Name)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("scratch left behind: %v", left)
	}

	twinSP, err := savepoint.Open(ctx, mustLocal(t, fixtures.Path(t, "flink1.20-rocksdb-canonical-valuestate-timers")), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	twin, err := verify.ComputeDigest(ctx, twinSP, verify.DigestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameDigestTimersAside(t, twin, r.Digest, 32)
}

// sameDigestTimersAside asserts that got has want's operators (id,
// parallelism, states) and groups, equal except the hashes of
// processing-time timer groups, and entries in all.
func sameDigestTimersAside(t *testing.T, want, got *verify.Digest, entries int64) {
	t.Helper()
	if len(got.Operators) != len(want.Operators) {
		t.Fatalf("%d operators, want %d", len(got.Operators), len(want.Operators))
	}
	for i, w := range want.Operators {
		g := got.Operators[i]
		if g.ID != w.ID || g.Parallelism != w.Parallelism || g.MaxParallelism != w.MaxParallelism || !slices.Equal(g.States, w.States) ||
			g.KeyGroupFrom != w.KeyGroupFrom || g.KeyGroupTo != w.KeyGroupTo {
			t.Fatalf("operator %d: %+v, want %+v", i, g, w)
		}
	}
	if len(got.Groups) != len(want.Groups) {
		t.Fatalf("%d groups, want %d", len(got.Groups), len(want.Groups))
	}
	timers, exact := 0, 0
	for _, k := range want.Keys() {
		w, g := *want.Groups[k], got.Groups[k]
		if g == nil {
			t.Fatalf("%s missing", k)
		}
		gg := *g
		if strings.Contains(k.State, "processing") {
			timers++
			w.Hash, gg.Hash = digest.Hash{}, digest.Hash{}
		} else {
			exact++
		}
		if gg != w {
			t.Fatalf("%s: %+v, want %+v", k, gg, w)
		}
	}
	if timers == 0 || exact == 0 {
		t.Fatalf("%d processing-timer groups and %d others compared", timers, exact)
	}
	if n := got.Total("", "").Entries; n != entries {
		t.Fatalf("%d entries, want %d", n, entries)
	}
}

// TestVerifyRocksDBNativeShards: the shard digests of the native source
// merge into the whole one, and a run cancelled after the conversion
// leaves no scratch directory behind.
func TestVerifyRocksDBNativeShards(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	sp, err := savepoint.Open(ctx, mustLocal(t, fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast")), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := verify.Run(ctx, sp, verify.Options{TempDir: tmp})
	if err != nil || !whole.OK {
		t.Fatalf("whole: %v %v", err, whole.Failures())
	}
	var rs []*verify.Report
	for i := 0; i < 2; i++ {
		r, err := verify.Run(ctx, sp, verify.Options{Shard: verify.Shard{Index: i, Count: 2}, Targets: targets([]string{"heap"}, 1), Restorer: &Restorer{}, TempDir: tmp})
		if err != nil || !r.OK {
			t.Fatalf("shard %d: %v %v", i, err, r.Failures())
		}
		if n := r.Digest.Total("", "").Entries; n == 0 || n == whole.Digest.Total("", "").Entries {
			t.Fatalf("shard %d has %d entries of %d", i, n, whole.Digest.Total("", "").Entries)
		}
		rs = append(rs, r)
	}
	m, err := verify.Merge(rs)
	if err != nil || !m.OK {
		t.Fatalf("merge: %v %v", err, m.Failures())
	}
	if len(m.Digest.Groups) != len(whole.Digest.Groups) {
		t.Fatalf("merged %d groups, whole %d", len(m.Digest.Groups), len(whole.Digest.Groups))
	}
	for k, g := range whole.Digest.Groups {
		if mg := m.Digest.Groups[k]; mg == nil || *mg != *g {
			t.Fatalf("%s: merged %+v, whole %+v", k, mg, g)
		}
	}
	if !slices.Contains(m.Notes, verify.NoteNativeSource) {
		t.Fatalf("merged notes %q", m.Notes)
	}

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	restoring := false
	_, err = verify.Run(cctx, sp, verify.Options{Targets: targets([]string{"rocksdb"}, 1), Restorer: &Restorer{}, TempDir: tmp,
		Log: func(format string, _ ...any) {
			if strings.HasPrefix(format, "restoring") {
				restoring = true
				cancel()
			}
		}})
	if !restoring || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: restoring %v, err %v", restoring, err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("scratch left behind: %v", left)
	}
}

// TestVerifyRocksDBNativeTruncated: a native savepoint whose largest state
// file is cut in half fails verification with the problem in the report
// (not an error of Run), and the scratch directory is removed.
func TestVerifyRocksDBNativeTruncated(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := fixtures.Path(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast")
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	var big string
	var bigSize int64
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if de.Name() != savepoint.MetadataName && int64(len(b)) > bigSize {
			big, bigSize = de.Name(), int64(len(b))
		}
		if err := os.WriteFile(filepath.Join(dir, de.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(filepath.Join(dir, big), bigSize/2); err != nil {
		t.Fatal(err)
	}
	sp, err := savepoint.Open(ctx, mustLocal(t, dir), savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	r, err := verify.Run(ctx, sp, verify.Options{Targets: targets([]string{"heap"}, 1), Restorer: &Restorer{}, TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.SourceError == "" {
		t.Fatalf("ok %v, source error %q", r.OK, r.SourceError)
	}
	t.Logf("source error: %s", r.SourceError)
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("scratch left behind: %v", left)
	}
}
