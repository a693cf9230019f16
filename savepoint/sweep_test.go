package savepoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
)

// sweepChildEnv marks the child process of TestCorruptionSweep.
const sweepChildEnv = "SFSTATE_SWEEP_CHILD"

const (
	sweepAddressSpace = 1 << 30         // RLIMIT_AS headroom of the child
	sweepSlowDecode   = 2 * time.Second // one decode slower than this is a hang
	sweepChildTimeout = 5 * time.Minute // the whole child
	sweepKeyedCap     = 160             // truncation lengths per keyed stream
	sweepWalkCap      = 64              // full walks after a clean flipped _metadata, per fixture
)

// TestCorruptionSweep damages every fixture savepoint (../flink-fixtures
// and ../flink-fixtures-more) and decodes the result:
//
//   - _metadata truncated at every offset and with one byte flipped (xor
//     0xFF) at every offset: ParseMetadata plus the checkpoint-properties
//     trailer;
//   - where a flipped _metadata still parses, the keyed state it describes
//     is walked too (the first sweepWalkCap such offsets per fixture);
//   - the largest keyed-state file of each fixture (or, where keyed state
//     is inline in _metadata, the largest inline keyed stream, re-encoded
//     into the metadata) truncated at sampled lengths and walked: every
//     length below 64 (the header start), the key-group offsets and their
//     neighbours, then a fixed stride, about sweepKeyedCap lengths in all.
//     The sample is deterministic (the same lengths every run); a walk
//     costs milliseconds, so every length of every stream would not fit
//     the time budget, while metadata decodes are cheap and cover every
//     offset.
//
// A truncated _metadata must not decode cleanly. Every other outcome must
// be a clean decode or a one-line error that contains "offset" and the
// damaged file's name: the _metadata name for metadata errors, the keyed
// file's path for keyed ones, the stream's key in the store for walks
// after a flip. An error identical to the undamaged fixture's own walk
// error (a layout sfstate does not read) also passes the text check. Every
// error must also follow the module's error model (checkSweepErr): class
// errclass.ErrCorrupt or errclass.ErrUnsupported, and a corrupt one an
// *errclass.CorruptionError naming the damaged file (with an offset for
// metadata decodes); the counts per class are logged. sweepFlips adds
// byte flips of a heap keyed file and of a change-log file. No single
// decode may take longer than sweepSlowDecode.
//
// The sweep runs in a child process (the test binary re-executed with
// SFSTATE_SWEEP_CHILD=1) whose address space is capped with RLIMIT_AS at
// 1 GiB above what the Go runtime has reserved at its start, so a decoder
// that allocates what a damaged length says fails the test instead of
// exhausting the machine.
func TestCorruptionSweep(t *testing.T) {
	if os.Getenv(sweepChildEnv) != "" {
		sweepChild(t)
		return
	}
	fixtures.Require(t)
	if testing.Short() {
		t.Skip("corruption sweep skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), sweepChildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestCorruptionSweep$", "-test.v")
	cmd.Env = append(os.Environ(), sweepChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "sweep:") || strings.Contains(l, "FAIL") || strings.Contains(l, "panic") || strings.Contains(l, "fatal") {
			t.Log(strings.TrimSpace(l))
		}
	}
	if err != nil {
		tail := out
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		t.Fatalf("sweep child failed (%v):\n%s", err, tail)
	}
}

type sweepFixture struct {
	name string // fixture directory name
	dir  string // directory holding _metadata
}

func sweepFixtures(t *testing.T) []sweepFixture {
	var out []sweepFixture
	for _, sp := range fixtures.All(t) {
		out = append(out, sweepFixture{sp.Name, sp.Dir})
	}
	more := fixtures.MoreDir()
	if more == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("additional flink fixtures not found; required when CI=true")
		}
		t.Log("sweep: additional fixtures not found, sweeping the main ones only")
		return out
	}
	ents, err := os.ReadDir(more)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "_") {
			continue
		}
		for _, sub := range []string{"", "savepoint"} {
			d := filepath.Join(more, e.Name(), sub)
			if _, err := os.Stat(filepath.Join(d, MetadataName)); err == nil {
				out = append(out, sweepFixture{"more/" + e.Name(), d})
				break
			}
		}
	}
	return out
}

func sweepChild(t *testing.T) {
	if lim, err := limitAddressSpace(sweepAddressSpace); err != nil {
		t.Logf("sweep: address space not limited: %v", err)
	} else {
		t.Logf("sweep: address space limited to %d MiB", lim>>20)
	}
	start := time.Now()
	var nMeta, nWalk, nKeyed int
	for _, fx := range sweepFixtures(t) {
		t0 := time.Now()
		m, w, k := sweepOne(t, fx)
		t.Logf("sweep: %s: %d metadata decodes, %d walks, %d keyed in %v", fx.name, m, w, k, time.Since(t0).Round(time.Millisecond))
		nMeta += m
		nWalk += w
		nKeyed += k
	}
	nFlips := sweepFlips(t)
	t.Logf("sweep: %d metadata decodes, %d walks after clean flips, %d truncated keyed walks, %d heap and changelog flips, %d errors checked in %v",
		nMeta, nWalk, nKeyed, nFlips, sweepErrs, time.Since(start).Round(time.Millisecond))
	classes := make([]string, 0, len(sweepClass))
	for c := range sweepClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		t.Logf("sweep: class %s: %d errors", c, sweepClass[c])
	}
}

// sweepStore copies the fixture directory into a memory store under "sp/".
func sweepStore(t *testing.T, dir string) *s3.Mem {
	st := s3.NewMem()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return st.Put(context.Background(), "sp/"+filepath.ToSlash(rel), bytes.NewReader(b), int64(len(b)))
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

const sweepMetaKey = "sp/" + MetadataName

// sweepWalk opens the savepoint in st and walks its keyed state (all
// operators, or only op when it is not "").
func sweepWalk(st s3.Storage, op string) error {
	ctx := context.Background()
	sp, err := Open(ctx, st, sweepMetaKey)
	if err != nil {
		return err
	}
	if sp.PropsErr != nil {
		return sp.PropsErr
	}
	return sp.WalkKeyed(ctx, ScanOptions{Operator: op, SkipNative: true}, func(*KeyedEntry) error { return nil })
}

// timed runs fn and fails when it takes longer than sweepSlowDecode.
func timed(t *testing.T, what string, fn func() error) error {
	t0 := time.Now()
	err := fn()
	if d := time.Since(t0); d > sweepSlowDecode {
		t.Fatalf("%s: decode took %v", what, d)
	}
	return err
}

// sweepErrs counts the errors checkSweepErr saw; sweepClass counts them
// by class ("corrupt, offset known", "corrupt, offset unknown", "corrupt,
// no position", "unsupported", "unclassed").
var (
	sweepErrs  int
	sweepClass = map[string]int{}
)

// sweepAll (SFSTATE_SWEEP_ALL=1) makes the sweep go on after failures and
// report each kind of failure once: for finding every unclassed path.
var sweepAll = os.Getenv("SFSTATE_SWEEP_ALL") != ""

// sweepSeen holds the kinds of failure sweepAll has reported.
var sweepSeen = map[string]bool{}

// sweepErrorf is t.Errorf, or under sweepAll a log line for the first
// failure of each kind (its text from the first ": " on, without digits).
func sweepErrorf(t *testing.T) func(format string, args ...any) {
	if !sweepAll {
		return t.Errorf
	}
	return func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		k := msg
		if i := strings.Index(k, ": "); i >= 0 {
			k = k[i:]
		}
		k = strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return -1
			}
			return r
		}, k)
		if !sweepSeen[k] {
			sweepSeen[k] = true
			t.Logf("sweep: FINDING: %s", msg)
		}
	}
}

// checkSweepErr enforces the error contract: one line naming the file and
// an offset, and the module's error model (package errclass): the error
// is of class ErrCorrupt or ErrUnsupported, and a corrupt one carries its
// position as an *errclass.CorruptionError whose File names the damaged
// file (file is a substring of it) and, when wantOff is set (the decoder
// sees the whole damaged file), whose Offset is known. An error identical
// to the undamaged fixture's own walk error (a layout sfstate does not
// read) passes the text checks but not the class checks.
func checkSweepErr(t *testing.T, what string, err error, file, baseline string, wantOff bool) {
	t.Helper()
	errorf := sweepErrorf(t)
	if err == nil {
		return
	}
	sweepErrs++
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		errorf("%s: error takes more than one line: %q", what, msg)
	}
	if baseline == "" || msg != baseline {
		if !strings.Contains(msg, "offset") || !strings.Contains(msg, file) {
			errorf("%s: error must be one line naming %q and an offset: %s", what, file, msg)
		}
	}
	unsupported := errors.Is(err, errclass.ErrUnsupported)
	corrupt := errors.Is(err, errclass.ErrCorrupt)
	switch {
	case unsupported && corrupt:
		errorf("%s: error is both corrupt and unsupported (%T): %s", what, err, msg)
	case unsupported:
		sweepClass["unsupported"]++
		return
	case !corrupt:
		sweepClass["unclassed"]++
		errorf("%s: error is neither errclass.ErrCorrupt nor errclass.ErrUnsupported (%T): %s", what, err, msg)
		return
	}
	var ce *errclass.CorruptionError
	if !errors.As(err, &ce) {
		sweepClass["corrupt, no position"]++
		errorf("%s: corrupt error carries no *errclass.CorruptionError (%T): %s", what, err, msg)
		return
	}
	if !strings.Contains(ce.File, file) {
		errorf("%s: position names file %q, want %q: %s", what, ce.File, file, msg)
	}
	if ce.Offset >= 0 {
		sweepClass["corrupt, offset known"]++
	} else {
		sweepClass["corrupt, offset unknown"]++
		if wantOff {
			errorf("%s: position in %q has no offset: %s", what, ce.File, msg)
		}
	}
}

func sweepOne(t *testing.T, fx sweepFixture) (nMeta, nWalk, nKeyed int) {
	orig, err := os.ReadFile(filepath.Join(fx.dir, MetadataName))
	if err != nil {
		t.Fatal(err)
	}
	st := sweepStore(t, fx.dir)
	baseErr := sweepWalk(st, "")
	baseline := ""
	if baseErr != nil {
		baseline = baseErr.Error()
		t.Logf("sweep: %s: undamaged walk fails: %v", fx.name, baseErr)
	}
	metaName := fx.name + "/" + MetadataName
	decodeMeta := func(b []byte) error {
		md, err := ParseMetadata(b, metaName)
		if err != nil {
			return err
		}
		_, err = md.properties(metaName)
		return err
	}
	errs := 0
	fail := func() bool { errs++; return errs > 20 }
	for n := 0; n < len(orig); n++ {
		what := fmt.Sprintf("%s truncated to %d bytes", metaName, n)
		err := timed(t, what, func() error { return decodeMeta(orig[:n]) })
		nMeta++
		if err == nil {
			t.Errorf("%s: decodes without an error", what)
			continue
		}
		checkSweepErr(t, what, err, metaName, "", true)
		if t.Failed() && fail() {
			t.Fatal("too many failures")
		}
	}
	flipped := append([]byte(nil), orig...)
	for i := 0; i < len(orig); i++ {
		flipped[i] ^= 0xFF
		what := fmt.Sprintf("%s with byte %d flipped", metaName, i)
		err := timed(t, what, func() error { return decodeMeta(flipped) })
		nMeta++
		if err != nil {
			checkSweepErr(t, what, err, metaName, "", true)
		} else if nWalk < sweepWalkCap {
			mustPut(t, st, sweepMetaKey, flipped)
			err := timed(t, what, func() error { return sweepWalk(st, "") })
			nWalk++
			if err != nil && !strings.Contains(err.Error(), metaName) {
				// Walk errors name the stream they read: the keyed file
				// or, for inline state, the _metadata key in the store.
				checkSweepErr(t, what, err, "sp/", baseline, false)
			}
		}
		flipped[i] ^= 0xFF
		if t.Failed() && fail() {
			t.Fatal("too many failures")
		}
	}
	mustPut(t, st, sweepMetaKey, orig)
	nKeyed = sweepKeyedFile(t, fx, st, baseline)
	return nMeta, nWalk, nKeyed
}

func mustPut(t *testing.T, st *s3.Mem, key string, b []byte) {
	if err := st.Put(context.Background(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

// sweepKeyedFile truncates the fixture's largest keyed-state file (a
// key-groups handle whose stream is a whole file of the savepoint) at
// sampled offsets and walks its operator each time.
func sweepKeyedFile(t *testing.T, fx sweepFixture, st *s3.Mem, baseline string) int {
	sp, err := Open(context.Background(), st, sweepMetaKey)
	if err != nil {
		t.Fatal(err)
	}
	best, bestOp, bestKey, orig := sweepLargestKeyed(t, sp, st)
	if best == nil {
		return sweepInlineKeyed(t, fx, st, sp.Meta, baseline)
	}
	file := strings.TrimPrefix(bestKey, "sp/")
	opID := bestOp.ID.String()
	n := 0
	for _, l := range sweepOffsets(len(orig), best.Offsets) {
		mustPut(t, st, bestKey, orig[:l])
		what := fmt.Sprintf("%s: %s truncated to %d bytes", fx.name, file, l)
		err := timed(t, what, func() error { return sweepWalk(st, opID) })
		n++
		checkSweepErr(t, what, err, file, baseline, false)
		if t.Failed() {
			break
		}
	}
	mustPut(t, st, bestKey, orig)
	return n
}

// sweepLargestKeyed finds the largest keyed-state file of sp (a
// key-groups handle whose stream is a whole file of st): the handle, its
// operator, its key in st and its bytes (nil handle when there is none).
func sweepLargestKeyed(t *testing.T, sp *Savepoint, st *s3.Mem) (best *KeyGroupsHandle, bestOp *OperatorState, bestKey string, orig []byte) {
	ctx := context.Background()
	for _, op := range sp.Meta.Operators {
		for _, sub := range op.Subtasks {
			for _, kh := range append([]KeyedHandle{sub.ManagedKeyed}, MaterializedKeyed(sub.ManagedKeyed)...) {
				h, ok := kh.(*KeyGroupsHandle)
				if !ok || h.Delegate == nil {
					continue
				}
				loc, err := sp.Resolve(h.Delegate)
				if err != nil || loc.Key == "" || loc.Start != 0 || loc.Segment {
					continue
				}
				b, err := sweepRead(ctx, st, loc.Key)
				if err == nil && len(b) > len(orig) {
					best, bestOp, bestKey, orig = h, op, loc.Key, b
				}
			}
		}
	}
	return best, bestOp, bestKey, orig
}

// sweepInlineKeyed is sweepKeyedFile for fixtures whose keyed state is
// inline in _metadata: it truncates the largest inline keyed stream,
// re-encodes the metadata around it and walks its operator.
func sweepInlineKeyed(t *testing.T, fx sweepFixture, st *s3.Mem, md *Metadata, baseline string) int {
	var best *KeyGroupsHandle
	var bestOp *OperatorState
	for _, op := range md.Operators {
		for _, sub := range op.Subtasks {
			for _, kh := range append([]KeyedHandle{sub.ManagedKeyed}, MaterializedKeyed(sub.ManagedKeyed)...) {
				h, ok := kh.(*KeyGroupsHandle)
				if ok && h.Delegate != nil && h.Delegate.Tag == TagByteStream && (best == nil || len(h.Delegate.Data) > len(best.Delegate.Data)) {
					best, bestOp = h, op
				}
			}
		}
	}
	if best == nil {
		t.Logf("sweep: %s: no keyed-state file or inline keyed stream", fx.name)
		return 0
	}
	orig := best.Delegate.Data
	defer func() { best.Delegate.Data = orig }()
	opID := bestOp.ID.String()
	n := 0
	for _, l := range sweepOffsets(len(orig), best.Offsets) {
		best.Delegate.Data = orig[:l]
		b, err := EncodeMetadata(md)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, st, sweepMetaKey, b)
		what := fmt.Sprintf("%s: inline keyed stream %q truncated to %d bytes", fx.name, best.Delegate.Name, l)
		err = timed(t, what, func() error { return sweepWalk(st, opID) })
		n++
		checkSweepErr(t, what, err, sweepMetaKey, baseline, false)
		if t.Failed() {
			break
		}
	}
	return n
}

func sweepRead(ctx context.Context, st s3.Storage, key string) ([]byte, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// sweepOffsets returns the truncation lengths tried for a keyed file of
// size bytes with the given key-group offsets: every length below 64,
// each key-group offset and its neighbours (until half the budget is
// used), and a deterministic stride over the rest so that about
// sweepKeyedCap lengths are tried.
func sweepOffsets(size int, kgOffsets []int64) []int {
	seen := map[int]bool{}
	var out []int
	add := func(l int) {
		if l >= 0 && l < size && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	for l := 0; l < 64; l++ {
		add(l)
	}
	for _, o := range kgOffsets {
		if o > 0 && len(out) < sweepKeyedCap/2 {
			for d := -1; d <= 1; d++ {
				add(int(o) + d)
			}
		}
	}
	if rest := sweepKeyedCap - len(out); rest > 0 {
		stride := max(1, size/rest)
		for l := 64; l < size; l += stride {
			add(l)
		}
	}
	add(size - 1)
	return out
}

// TestSweepChildLimitIsHard checks that the child's address-space cap
// stops a runaway allocation: a child that allocates twice the headroom
// must die with the runtime's out-of-memory error.
func TestSweepChildLimitIsHard(t *testing.T) {
	if os.Getenv(sweepChildEnv) == "oom" {
		if _, err := limitAddressSpace(sweepAddressSpace); err != nil {
			t.Skip(err)
		}
		b := make([]byte, 2*sweepAddressSpace)
		b[len(b)-1] = 1
		t.Log("allocated", len(b), b[len(b)-1])
		return
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: address space is not limited here")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSweepChildLimitIsHard$", "-test.v")
	cmd.Env = append(os.Environ(), sweepChildEnv+"=oom")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "out of memory") {
		t.Fatalf("child was not stopped by the limit (err %v):\n%.2000s", err, out)
	}
}

// Fixtures of sweepFlips: a heap key-group layout with files beside
// _metadata, and the changelog-backend checkpoint whose real state changes
// toFileLogs moves into change-log files.
const (
	sweepHeapFixture      = "flink1.15-hashmap-checkpoint"
	sweepChangelogFixture = fixtureChangelog
)

// sweepFlips flips (xor 0xFF) every byte of the heap fixture's largest
// keyed file and walks its operator, then every byte of the first
// change-log file made from the changelog fixture (plain and Snappy-framed)
// and reads every change of every changelog handle (WalkStateChanges and
// ParseStateChange). Every error must be classed and name the file; a flip
// the decoders cannot notice (a value byte) decodes cleanly. It returns
// the number of decodes.
func sweepFlips(t *testing.T) (n int) {
	more := fixtures.MoreDir()
	if more == "" {
		t.Log("sweep: additional fixtures not found, no heap or changelog flips")
		return 0
	}
	ctx := context.Background()
	t0 := time.Now()
	st := sweepStore(t, filepath.Join(more, sweepHeapFixture, "savepoint"))
	sp, err := Open(ctx, st, sweepMetaKey)
	if err != nil {
		t.Fatal(err)
	}
	h, op, key, orig := sweepLargestKeyed(t, sp, st)
	if h == nil {
		t.Fatalf("%s: no keyed-state file", sweepHeapFixture)
	}
	file := strings.TrimPrefix(key, "sp/")
	// The savepoint opened once: the keyed file is read at each walk.
	walk := func() error {
		return sp.WalkKeyed(ctx, ScanOptions{Operator: op.ID.String(), SkipNative: true}, func(*KeyedEntry) error { return nil })
	}
	baseline := ""
	if err := walk(); err != nil {
		baseline = err.Error()
	}
	flipped := append([]byte(nil), orig...)
	for i := range flipped {
		flipped[i] ^= 0xFF
		mustPut(t, st, key, flipped)
		what := fmt.Sprintf("%s: %s with byte %d flipped", sweepHeapFixture, file, i)
		err := timed(t, what, walk)
		n++
		checkSweepErr(t, what, err, file, baseline, false)
		flipped[i] ^= 0xFF
		if t.Failed() && !sweepAll {
			return n
		}
	}
	t.Logf("sweep: %s: %d flips of %s in %v", sweepHeapFixture, len(orig), file, time.Since(t0).Round(time.Millisecond))

	raw, err := os.ReadFile(filepath.Join(more, sweepChangelogFixture, "savepoint", MetadataName))
	if err != nil {
		t.Fatal(err)
	}
	for _, compress := range []bool{false, true} {
		t0 := time.Now()
		md, err := ParseMetadata(raw, sweepChangelogFixture)
		if err != nil {
			t.Fatal(err)
		}
		st := s3.NewMem()
		toFileLogs(t, md, st, compress)
		// The first operator with changelog handles names the first file.
		var file string
		var orig []byte
		for i := range md.Operators {
			file = fmt.Sprintf("changelog-%d", i)
			if orig, err = sweepRead(ctx, st, file); err == nil {
				break
			}
		}
		if orig == nil {
			t.Fatalf("%s: no change-log file made", sweepChangelogFixture)
		}
		sp, err := Open(ctx, st, MetadataName)
		if err != nil {
			t.Fatal(err)
		}
		if perr, err := sweepChanges(sp); err != nil || perr != nil {
			t.Fatalf("%s: undamaged change-log files: %v, %v", sweepChangelogFixture, err, perr)
		}
		flipped := append([]byte(nil), orig...)
		for i := range flipped {
			flipped[i] ^= 0xFF
			mustPut(t, st, file, flipped)
			what := fmt.Sprintf("%s: %s (compressed %v) with byte %d flipped", sweepChangelogFixture, file, compress, i)
			var perr error
			err := timed(t, what, func() (err error) { perr, err = sweepChanges(sp); return err })
			n++
			// Offsets of a compressed file count decompressed bytes, which
			// the position leaves unknown (see ChangeSetError).
			checkSweepErr(t, what, err, file, "", !compress)
			// A change's frame is decoded from its bytes alone: the
			// offset is the change's own, the file is not known to it.
			checkSweepErr(t, what+" (change frame)", perr, "", "", true)
			flipped[i] ^= 0xFF
			if t.Failed() && !sweepAll {
				return n
			}
		}
		t.Logf("sweep: %s: %d flips of %s (compressed %v) in %v", sweepChangelogFixture, len(orig), file, compress, time.Since(t0).Round(time.Millisecond))
	}
	return n
}

// sweepChanges reads every state change of sp's changelog handles
// (WalkStateChanges: the error err) and decodes each change's frame
// (ParseStateChange: the first error perr, which does not stop the walk).
func sweepChanges(sp *Savepoint) (perr, err error) {
	ctx := context.Background()
	for _, op := range sp.Meta.Operators {
		for _, sub := range op.Subtasks {
			h, ok := sub.ManagedKeyed.(*ChangelogHandle)
			if !ok {
				continue
			}
			err := sp.WalkStateChanges(ctx, h, true, func(c StateChange) error {
				if _, err := ParseStateChange(c); err != nil && perr == nil {
					perr = err
				}
				return nil
			})
			if err != nil {
				return perr, err
			}
		}
	}
	return perr, nil
}
