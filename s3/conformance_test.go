package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sfstate/sfstate/s3"
)

// detReader yields a deterministic pseudo-random byte stream of n bytes
// (xorshift64*), cheap enough to generate hundreds of MiB in tests.
type detReader struct {
	state uint64
	n     int64
	buf   [8]byte
	bi    int
}

func newDetReader(seed uint64, n int64) *detReader {
	return &detReader{state: seed*0x9E3779B97F4A7C15 + 1, n: n, bi: 8}
}

func (d *detReader) Read(p []byte) (int, error) {
	if d.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > d.n {
		p = p[:d.n]
	}
	for i := range p {
		if d.bi == 8 {
			d.state ^= d.state >> 12
			d.state ^= d.state << 25
			d.state ^= d.state >> 27
			v := d.state * 2685821657736338717
			for j := 0; j < 8; j++ {
				d.buf[j] = byte(v >> (8 * j))
			}
			d.bi = 0
		}
		p[i] = d.buf[d.bi]
		d.bi++
	}
	d.n -= int64(len(p))
	return len(p), nil
}

func detBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	io.ReadFull(newDetReader(seed, int64(n)), b)
	return b
}

func detCRC(t testing.TB, seed uint64, n int64) uint32 {
	h := s3.NewHashingReader(newDetReader(seed, n))
	if _, err := io.Copy(io.Discard, h); err != nil {
		t.Fatal(err)
	}
	return h.Sum()
}

// hideSize hides io.Seeker/WriterTo so stores see a plain stream.
type hideSize struct{ r io.Reader }

func (h hideSize) Read(p []byte) (int, error) { return h.r.Read(p) }

func mustGet(t testing.TB, st s3.Storage, key string) []byte {
	t.Helper()
	rc, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func mustPut(t testing.TB, st s3.Storage, key string, b []byte) {
	t.Helper()
	if err := st.Put(context.Background(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// conformance lists the behaviours every Storage must share.
type conformance struct {
	// large is the size of the streamed upload (>= 64 MiB for multipart).
	large int64
	// listN is how many keys the listing test writes.
	listN int
}

func defaultConformance() conformance { return conformance{large: 64 << 20, listN: 1100} }

func runConformance(t *testing.T, st s3.Storage, c conformance) {
	ctx := context.Background()
	t.Run("PutGetStat", func(t *testing.T) {
		data := []byte("hello, state")
		mustPut(t, st, "basic/a.bin", data)
		if got := mustGet(t, st, "basic/a.bin"); !bytes.Equal(got, data) {
			t.Fatalf("get = %q, want %q", got, data)
		}
		info, err := st.Stat(ctx, "basic/a.bin")
		if err != nil || info.Size != int64(len(data)) || info.Key != "basic/a.bin" {
			t.Fatalf("stat = %+v, %v", info, err)
		}
		// Overwrite replaces.
		mustPut(t, st, "basic/a.bin", []byte("v2"))
		if got := mustGet(t, st, "basic/a.bin"); string(got) != "v2" {
			t.Fatalf("after overwrite get = %q", got)
		}
		// Empty object, unknown size.
		if err := st.Put(ctx, "basic/empty", hideSize{bytes.NewReader(nil)}, -1); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, st, "basic/empty"); len(got) != 0 {
			t.Fatalf("empty object read %d bytes", len(got))
		}
		// Unknown sizes around buffer-growth boundaries.
		for _, n := range []int{1, 64<<10 - 1, 64 << 10, 64<<10 + 1, 5<<20 + 3} {
			data := detBytes(uint64(n), n)
			if err := st.Put(ctx, "basic/unknown", hideSize{bytes.NewReader(data)}, -1); err != nil {
				t.Fatalf("unknown-size put of %d bytes: %v", n, err)
			}
			if got := mustGet(t, st, "basic/unknown"); !bytes.Equal(got, data) {
				t.Fatalf("unknown-size put of %d bytes read back %d bytes", n, len(got))
			}
		}
	})

	t.Run("LargeStreamed", func(t *testing.T) {
		want := detCRC(t, 7, c.large)
		if err := st.Put(ctx, "large/blob", hideSize{newDetReader(7, c.large)}, -1); err != nil {
			t.Fatalf("put: %v", err)
		}
		info, err := st.Stat(ctx, "large/blob")
		if err != nil || info.Size != c.large {
			t.Fatalf("stat = %+v, %v; want size %d", info, err, c.large)
		}
		rc, err := st.Get(ctx, "large/blob")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		if _, err := io.Copy(io.Discard, s3.VerifyingReader(rc, c.large, want)); err != nil {
			t.Fatalf("verify: %v", err)
		}
		// A known-size put of the same stream must land identically.
		if err := st.Put(ctx, "large/blob2", newDetReader(7, c.large), c.large); err != nil {
			t.Fatal(err)
		}
		rc2, err := st.Get(ctx, "large/blob2")
		if err != nil {
			t.Fatal(err)
		}
		defer rc2.Close()
		if _, err := io.Copy(io.Discard, s3.VerifyingReader(rc2, c.large, want)); err != nil {
			t.Fatalf("verify known size: %v", err)
		}
	})

	t.Run("RangeReads", func(t *testing.T) {
		size := 1<<20 + 7
		data := detBytes(3, size)
		mustPut(t, st, "range/obj", data)
		cases := []struct{ off, n int64 }{
			{0, 1}, {1, 13}, {4095, 4097}, {333, 65537}, {int64(size) - 1, 1},
			{int64(size) - 5, -1}, {17, -1}, {0, int64(size)}, {int64(size), 0}, {int64(size), -1}, {5, 0},
		}
		for _, tc := range cases {
			rc, err := st.GetRange(ctx, "range/obj", tc.off, tc.n)
			if err != nil {
				t.Fatalf("range(%d,%d): %v", tc.off, tc.n, err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatalf("range(%d,%d) read: %v", tc.off, tc.n, err)
			}
			end := int64(size)
			if tc.n >= 0 {
				end = tc.off + tc.n
			}
			if !bytes.Equal(got, data[tc.off:end]) {
				t.Fatalf("range(%d,%d): got %d bytes, mismatch", tc.off, tc.n, len(got))
			}
		}
		bad := []struct{ off, n int64 }{
			{int64(size) - 3, 10}, {int64(size) + 1, 1}, {int64(size) + 1, -1}, {-1, 1}, {0, int64(size) + 1},
		}
		for _, tc := range bad {
			rc, err := st.GetRange(ctx, "range/obj", tc.off, tc.n)
			if err == nil {
				// An error may also surface while reading, never silently.
				_, err = io.ReadAll(rc)
				rc.Close()
			}
			if err == nil || !s3.IsPermanent(err) || s3.IsNotExist(err) {
				t.Fatalf("range(%d,%d) past end: err = %v, want permanent range error", tc.off, tc.n, err)
			}
		}
	})

	t.Run("PutIfAbsentRace", func(t *testing.T) {
		const n = 8
		for round := 0; round < 3; round++ {
			key := fmt.Sprintf("race/%d/_metadata", round)
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					body := bytes.Repeat([]byte{byte('A' + i)}, 1000+i)
					errs[i] = st.PutIfAbsent(ctx, key, bytes.NewReader(body), int64(len(body)))
				}(i)
			}
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil:
					if winner >= 0 {
						t.Fatalf("round %d: writers %d and %d both won", round, winner, i)
					}
					winner = i
				case !s3.IsExist(err):
					t.Fatalf("round %d: writer %d: %v, want ErrExists", round, i, err)
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: nobody won", round)
			}
			got := mustGet(t, st, key)
			if !bytes.Equal(got, bytes.Repeat([]byte{byte('A' + winner)}, 1000+winner)) {
				t.Fatalf("round %d: stored object is not the winner's", round)
			}
			if err := st.PutIfAbsent(ctx, key, strings.NewReader("late"), 4); !s3.IsExist(err) || !s3.IsPermanent(err) {
				t.Fatalf("late put-if-absent: %v", err)
			}
		}
	})

	t.Run("ListMany", func(t *testing.T) {
		var want []string
		var mu sync.Mutex
		var firstErr error
		sem := make(chan struct{}, 16)
		var wg sync.WaitGroup
		for i := 0; i < c.listN; i++ {
			key := fmt.Sprintf("list/d%d/k%05d", i%3, i)
			want = append(want, key)
			wg.Add(1)
			sem <- struct{}{}
			go func(key string, i int) {
				defer func() { <-sem; wg.Done() }()
				b := []byte(key)[:i%len(key)]
				if err := st.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}(key, i)
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		mustPut(t, st, "listx", []byte("outside"))
		mustPut(t, st, "list-other/x", []byte("outside"))
		sort.Strings(want)
		got, err := st.List(ctx, "list/")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("list returned %d keys, want %d", len(got), len(want))
		}
		for i, o := range got {
			if o.Key != want[i] {
				t.Fatalf("list[%d] = %q, want %q", i, o.Key, want[i])
			}
			var idx int
			fmt.Sscanf(o.Key[len("list/d0/k"):], "%d", &idx)
			if o.Size != int64(idx%len(o.Key)) {
				t.Fatalf("list[%d] %s size %d, want %d", i, o.Key, o.Size, idx%len(o.Key))
			}
		}
		// Prefix that is not a directory boundary.
		got, err = st.List(ctx, "list/d1/k0001")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range want {
			if strings.HasPrefix(k, "list/d1/k0001") {
				n++
			}
		}
		if len(got) != n || n == 0 {
			t.Fatalf("partial prefix: %d keys, want %d", len(got), n)
		}
		got, err = st.List(ctx, "nothing-here/")
		if err != nil || len(got) != 0 {
			t.Fatalf("list of missing prefix = %v, %v", got, err)
		}
	})

	t.Run("ConcurrentReaders", func(t *testing.T) {
		size := 4<<20 + 123
		data := detBytes(11, size)
		mustPut(t, st, "conc/obj", data)
		var wg sync.WaitGroup
		errc := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rnd := rand.New(rand.NewSource(int64(g)))
				for i := 0; i < 12; i++ {
					off := rnd.Int63n(int64(size))
					n := rnd.Int63n(int64(size)-off) % (300 << 10)
					rc, err := st.GetRange(ctx, "conc/obj", off, n)
					if err != nil {
						errc <- err
						return
					}
					got, err := io.ReadAll(rc)
					rc.Close()
					if err != nil {
						errc <- err
						return
					}
					if !bytes.Equal(got, data[off:off+n]) {
						errc <- fmt.Errorf("reader %d: range(%d,%d) mismatch", g, off, n)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		if _, err := st.Get(ctx, "missing/x"); !s3.IsNotExist(err) || !s3.IsPermanent(err) {
			t.Fatalf("get missing: %v", err)
		}
		if _, err := st.GetRange(ctx, "missing/x", 3, 4); !s3.IsNotExist(err) {
			t.Fatalf("getrange missing: %v", err)
		}
		if _, err := st.Stat(ctx, "missing/x"); !s3.IsNotExist(err) {
			t.Fatalf("stat missing: %v", err)
		}
		if err := st.Copy(ctx, "missing/x", "missing/y"); !s3.IsNotExist(err) {
			t.Fatalf("copy missing: %v", err)
		}
		mustPut(t, st, "nf/dir/file", []byte("x"))
		// A "directory" is not an object.
		if _, err := st.Stat(ctx, "nf/dir"); !s3.IsNotExist(err) {
			t.Fatalf("stat of directory prefix: %v", err)
		}
		if _, err := st.Get(ctx, "nf/dir"); !s3.IsNotExist(err) {
			t.Fatalf("get of directory prefix: %v", err)
		}
		if _, err := st.GetRange(ctx, "nf/dir", 0, 1); !s3.IsNotExist(err) {
			t.Fatalf("range of directory prefix: %v", err)
		}
	})

	t.Run("DeleteIdempotent", func(t *testing.T) {
		mustPut(t, st, "del/x", []byte("x"))
		for i := 0; i < 2; i++ {
			if err := st.Delete(ctx, "del/x"); err != nil {
				t.Fatalf("delete #%d: %v", i, err)
			}
		}
		if _, err := st.Get(ctx, "del/x"); !s3.IsNotExist(err) {
			t.Fatalf("get after delete: %v", err)
		}
		if err := st.Delete(ctx, "del/never"); err != nil {
			t.Fatalf("delete never-existing: %v", err)
		}
	})

	t.Run("Copy", func(t *testing.T) {
		data := detBytes(5, 300<<10)
		mustPut(t, st, "copy/src", data)
		mustPut(t, st, "copy/dst", []byte("old"))
		if err := st.Copy(ctx, "copy/src", "copy/dst"); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, st, "copy/dst"); !bytes.Equal(got, data) {
			t.Fatal("copy content mismatch")
		}
		if got := mustGet(t, st, "copy/src"); !bytes.Equal(got, data) {
			t.Fatal("copy changed the source")
		}
	})

	t.Run("SizeMismatchAndFailingReader", func(t *testing.T) {
		if err := st.Put(ctx, "bad/short", strings.NewReader("abc"), 10); err == nil {
			t.Fatal("put with short reader succeeded")
		}
		if _, err := st.Stat(ctx, "bad/short"); !s3.IsNotExist(err) {
			t.Fatalf("short put left an object: %v", err)
		}
		boom := errors.New("boom")
		r := io.MultiReader(strings.NewReader("partial"), errReader{boom})
		if err := st.Put(ctx, "bad/fail", r, -1); !errors.Is(err, boom) {
			t.Fatalf("put with failing reader: %v, want boom", err)
		}
		if _, err := st.Stat(ctx, "bad/fail"); !s3.IsNotExist(err) {
			t.Fatalf("failed put left an object: %v", err)
		}
		if err := st.PutIfAbsent(ctx, "bad/fail", io.MultiReader(strings.NewReader("x"), errReader{boom}), -1); !errors.Is(err, boom) {
			t.Fatalf("put-if-absent with failing reader: %v", err)
		}
		if _, err := st.Stat(ctx, "bad/fail"); !s3.IsNotExist(err) {
			t.Fatalf("failed put-if-absent left an object: %v", err)
		}
	})

	t.Run("OddButValidKeys", func(t *testing.T) {
		for i, k := range []string{"odd/a b+c%20d=é.bin", "odd/~!$&'()*,;:@", "odd/ключ/值", "odd/.hidden", "odd/x..y"} {
			data := []byte(fmt.Sprintf("v%d:%s", i, k))
			mustPut(t, st, k, data)
			if got := mustGet(t, st, k); !bytes.Equal(got, data) {
				t.Fatalf("%q: got %q", k, got)
			}
			if err := st.Copy(ctx, k, k+".copy"); err != nil {
				t.Fatalf("copy %q: %v", k, err)
			}
			if got := mustGet(t, st, k+".copy"); !bytes.Equal(got, data) {
				t.Fatalf("copy of %q: got %q", k, got)
			}
		}
		got, err := st.List(ctx, "odd/")
		if err != nil || len(got) != 10 {
			t.Fatalf("list odd/: %d keys, %v", len(got), err)
		}
	})

	t.Run("HostileKeys", func(t *testing.T) {
		hostile := []string{"", "/abs", "../x", "a/../../b", "a/..", "..", ".", "a//b", "a/./b", "a\\..\\b",
			"a\x00b", "dir/", "a/.sfstate-tmp-123", strings.Repeat("k", 2000)}
		for _, k := range hostile {
			if err := st.Put(ctx, k, strings.NewReader("x"), 1); !errors.Is(err, s3.ErrBadKey) {
				t.Errorf("put %q: %v, want ErrBadKey", k, err)
			}
			if err := st.PutIfAbsent(ctx, k, strings.NewReader("x"), 1); !errors.Is(err, s3.ErrBadKey) {
				t.Errorf("put-if-absent %q: %v", k, err)
			}
			if _, err := st.Get(ctx, k); !errors.Is(err, s3.ErrBadKey) {
				t.Errorf("get %q: %v", k, err)
			}
			if _, err := st.Stat(ctx, k); !errors.Is(err, s3.ErrBadKey) {
				t.Errorf("stat %q: %v", k, err)
			}
			if err := st.Delete(ctx, k); !errors.Is(err, s3.ErrBadKey) {
				t.Errorf("delete %q: %v", k, err)
			}
			if err := st.Copy(ctx, "basic/a.bin", k); !errors.Is(err, s3.ErrBadKey) {
				t.Errorf("copy to %q: %v", k, err)
			}
			if !s3.IsPermanent(s3.ValidateKey(k)) {
				t.Errorf("ValidateKey(%q) not permanent", k)
			}
		}
		if _, err := st.List(ctx, "../"); !errors.Is(err, s3.ErrBadKey) {
			t.Errorf("list ../: %v", err)
		}
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestConformanceMem(t *testing.T) {
	runConformance(t, s3.NewMem(), defaultConformance())
}

func TestConformanceLocal(t *testing.T) {
	dir := t.TempDir()
	st, err := s3.NewLocal(dir + "/root")
	if err != nil {
		t.Fatal(err)
	}
	runConformance(t, st, defaultConformance())
	// Nothing escaped the root, and no temporary file was left behind.
	if ents, _ := readDirNames(dir); len(ents) != 1 || ents[0] != "root" {
		t.Fatalf("files outside the root: %v", ents)
	}
	if tmps := findTemps(t, dir); len(tmps) > 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
}
