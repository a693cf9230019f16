package statediff

import (
	"context"
	"io"
	"reflect"
	"sync"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// readLog is a store that records where its objects are read: every
// GetRange by key and offset, every Stat by key.
type readLog struct {
	s3.Storage
	mu     sync.Mutex
	ranges map[rangeAt]int
	stats  map[string]int
}

type rangeAt struct {
	key string
	off int64
}

func newReadLog(st s3.Storage) *readLog {
	return &readLog{Storage: st, ranges: map[rangeAt]int{}, stats: map[string]int{}}
}

func (l *readLog) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	l.mu.Lock()
	l.ranges[rangeAt{key, off}]++
	l.mu.Unlock()
	return l.Storage.GetRange(ctx, key, off, n)
}

func (l *readLog) Stat(ctx context.Context, key string) (s3.ObjectInfo, error) {
	l.mu.Lock()
	l.stats[key]++
	l.mu.Unlock()
	return l.Storage.Stat(ctx, key)
}

func (l *readLog) reset() {
	l.mu.Lock()
	clear(l.ranges)
	clear(l.stats)
	l.mu.Unlock()
}

// totals returns the number of GetRange and Stat calls recorded.
func (l *readLog) totals() (gets, stats int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.ranges {
		gets += n
	}
	for _, n := range l.stats {
		stats += n
	}
	return gets, stats
}

// openLogged opens the savepoint in dir through a readLog.
func openLogged(t *testing.T, dir string) (*savepoint.Savepoint, *readLog) {
	t.Helper()
	st, err := s3.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := newReadLog(st)
	sp, err := savepoint.Open(context.Background(), l, savepoint.MetadataName)
	if err != nil {
		t.Fatal(err)
	}
	return sp, l
}

// keyedStreams returns the file-backed streams of sp's key-groups handles.
func keyedStreams(t *testing.T, sp *savepoint.Savepoint) []savepoint.Location {
	t.Helper()
	var out []savepoint.Location
	for _, op := range sp.Meta.Operators {
		for _, st := range op.Subtasks {
			h, ok := st.ManagedKeyed.(*savepoint.KeyGroupsHandle)
			if !ok || h.Delegate == nil {
				continue
			}
			loc, err := sp.Resolve(h.Delegate)
			if err != nil {
				t.Fatal(err)
			}
			if !loc.IsInline() {
				out = append(out, loc)
			}
		}
	}
	return out
}

// TestDiffReadsEachHeaderOnce: a diff reads the header of every keyed
// stream once — the range read at the stream's start — and asks the size
// of each stream's object once, although planning, the key-group digests
// and each pass of the comparison open the stream again. Checked on the
// generated pair (the digest path compares in several passes) and on
// fixtures diffed with themselves, with and without the digest path.
func TestDiffReadsEachHeaderOnce(t *testing.T) {
	da, db := genPair(t, 2000)
	type pair struct{ name, a, b string }
	pairs := []pair{{"generated", da, db}}
	for _, fx := range fixtures.All(t) {
		pairs = append(pairs, pair{fx.Name, fx.Dir, fx.Dir})
	}
	for _, p := range pairs {
		for _, noDigest := range []bool{false, true} {
			a, la := openLogged(t, p.a)
			b, lb := openLogged(t, p.b)
			ref := diff(t, open(t, p.a), open(t, p.b), Options{Limit: 2, NoDigest: noDigest})
			la.reset()
			lb.reset()
			r := diff(t, a, b, Options{Limit: 2, NoDigest: noDigest})
			if !reflect.DeepEqual(r, ref) {
				t.Fatalf("%s noDigest=%v: logged diff %s differs from %s", p.name, noDigest, mustJSON(r), mustJSON(ref))
			}
			for _, side := range []struct {
				sp *savepoint.Savepoint
				l  *readLog
			}{{a, la}, {b, lb}} {
				streams := keyedStreams(t, side.sp)
				// Keyed state in the heap backend's native layout is
				// not compared, so not read.
				want := 1
				if side.sp.FormatType() == savepoint.FormatNative {
					want = 0
				}
				for _, loc := range streams {
					if n := side.l.ranges[rangeAt{loc.Key, loc.Start}]; n != want {
						t.Errorf("%s noDigest=%v: header of %s read %d times, want %d", p.name, noDigest, loc.Name, n, want)
					}
					if n := side.l.stats[loc.Key]; n != want {
						t.Errorf("%s noDigest=%v: size of %s asked %d times, want %d", p.name, noDigest, loc.Name, n, want)
					}
				}
			}
			ga, sa := la.totals()
			gb, sb := lb.totals()
			t.Logf("%s noDigest=%v: %d streams, %d range reads, %d stats", p.name, noDigest, len(keyedStreams(t, a))+len(keyedStreams(t, b)), ga+gb, sa+sb)
		}
	}
}
