package savepoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/s3"
	"golang.org/x/sync/errgroup"
)

// SumsName is the content-sums file sfstate writes beside `_metadata` of
// every snapshot it publishes (Flink never reads it). With it, Check finds
// bit rot and truncation in any file of the snapshot, not only in the files
// whose structure it can decode.
//
// The file is UTF-8 text, one line per file, sorted by path:
//
//	sfstate-sums 1
//	<size> <sha256> <crc32c> <path>
//
// size is the decimal byte count; sha256 is 64 lower-case hex digits or
// "-" when unknown; crc32c (Castagnoli) is 8 hex digits or "-"; at least
// one of the two is given. path is the rest of the line: the file's key
// relative to the directory holding `_metadata`, slash-separated, with
// leading "../" segments only for files beside that directory (the shared
// files of a native checkpoint). `_metadata` itself is listed. The sums
// file is published before `_metadata`, so a published snapshot always has
// its sums; a file without its line was written by someone else.
const SumsName = "_sfstate_sums"

// sumsHeader is the first line of a sums file.
const sumsHeader = "sfstate-sums 1"

// MaxSumsSize bounds the sums file read by ParseSums.
const MaxSumsSize = 64 << 20

// ProblemChecksum is the Problem kind for content that differs from the
// sums file.
const ProblemChecksum = "checksum"

// Sum is one line of a sums file.
type Sum struct {
	Path string
	Size int64
	// SHA256 is the content hash; HasSHA says it is known.
	SHA256 [32]byte
	HasSHA bool
	// CRC32C is the Castagnoli CRC; HasCRC says it is known.
	CRC32C uint32
	HasCRC bool
}

// EncodeSums writes sums in the SumsName layout, sorted by path.
func EncodeSums(sums []Sum) ([]byte, error) {
	s := append([]Sum(nil), sums...)
	sort.Slice(s, func(i, j int) bool { return s[i].Path < s[j].Path })
	var b bytes.Buffer
	b.WriteString(sumsHeader + "\n")
	for i, e := range s {
		if err := validSumPath(e.Path); err != nil {
			return nil, err
		}
		if i > 0 && s[i-1].Path == e.Path {
			return nil, fmt.Errorf("savepoint: sums: %q listed twice", e.Path)
		}
		if e.Size < 0 || (!e.HasSHA && !e.HasCRC) {
			return nil, fmt.Errorf("savepoint: sums: %q has no size or hash", e.Path)
		}
		sha, crc := "-", "-"
		if e.HasSHA {
			sha = hex.EncodeToString(e.SHA256[:])
		}
		if e.HasCRC {
			crc = fmt.Sprintf("%08x", e.CRC32C)
		}
		fmt.Fprintf(&b, "%d %s %s %s\n", e.Size, sha, crc, e.Path)
	}
	return b.Bytes(), nil
}

func validSumPath(p string) error {
	if p == "" || strings.ContainsAny(p, "\n\r\\") || strings.HasPrefix(p, "/") || len(p) > 4*s3.MaxKeyLen {
		return fmt.Errorf("savepoint: sums: path %q is empty, absolute or has a line break", p)
	}
	up := true
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == ".." && up:
		case seg == "" || seg == "." || seg == "..":
			return fmt.Errorf("savepoint: sums: path %q has a %q segment", p, seg)
		default:
			up = false
		}
	}
	if up {
		return fmt.Errorf("savepoint: sums: path %q names no file", p)
	}
	return nil
}

// ParseSums decodes a sums file; name is used in errors, which give the
// byte offset of the bad line.
func ParseSums(b []byte, name string) ([]Sum, error) {
	if len(b) > MaxSumsSize {
		return nil, fmt.Errorf("%w: %s: %d bytes exceeds the %d-byte limit", ErrFormat, name, len(b), MaxSumsSize)
	}
	var out []Sum
	off := 0
	first := true
	for off < len(b) {
		n := bytes.IndexByte(b[off:], '\n')
		if n < 0 {
			return nil, fmt.Errorf("%w: %w", ErrFormat, errclass.Corruptf(name, int64(off), "last line has no line break (truncated?)"))
		}
		line := string(b[off : off+n])
		if first {
			if line != sumsHeader {
				return nil, fmt.Errorf("%w: %w", ErrFormat, errclass.Corruptf(name, 0, "not a sums file (want %q)", sumsHeader))
			}
			first = false
			off += n + 1
			continue
		}
		e, err := parseSumLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrFormat, errclass.Corruptf(name, int64(off), "%v", err))
		}
		if len(out) > 0 && out[len(out)-1].Path >= e.Path {
			return nil, fmt.Errorf("%w: %w", ErrFormat, errclass.Corruptf(name, int64(off), "%q out of order or listed twice", e.Path))
		}
		out = append(out, e)
		off += n + 1
	}
	if first {
		return nil, fmt.Errorf("%w: %s: empty sums file", ErrFormat, name)
	}
	return out, nil
}

func parseSumLine(line string) (Sum, error) {
	f := strings.SplitN(line, " ", 4)
	if len(f) != 4 {
		return Sum{}, fmt.Errorf("want \"<size> <sha256> <crc32c> <path>\"")
	}
	var e Sum
	var err error
	if e.Size, err = strconv.ParseInt(f[0], 10, 64); err != nil || e.Size < 0 {
		return Sum{}, fmt.Errorf("bad size %q", f[0])
	}
	if f[1] != "-" {
		h, err := hex.DecodeString(f[1])
		if err != nil || len(h) != sha256.Size {
			return Sum{}, fmt.Errorf("bad sha256 %q", f[1])
		}
		copy(e.SHA256[:], h)
		e.HasSHA = true
	}
	if f[2] != "-" {
		c, err := strconv.ParseUint(f[2], 16, 32)
		if err != nil || len(f[2]) != 8 {
			return Sum{}, fmt.Errorf("bad crc32c %q", f[2])
		}
		e.CRC32C, e.HasCRC = uint32(c), true
	}
	if !e.HasSHA && !e.HasCRC {
		return Sum{}, fmt.Errorf("no hash")
	}
	if err := validSumPath(f[3]); err != nil {
		return Sum{}, err
	}
	e.Path = f[3]
	return e, nil
}

// relSumPath returns key relative to dir ("" = the store root) in the
// sums path form.
func relSumPath(dir, key string) string {
	if dir == "" {
		return key
	}
	if strings.HasPrefix(key, dir+"/") {
		return key[len(dir)+1:]
	}
	d, k := strings.Split(dir, "/"), strings.Split(key, "/")
	i := 0
	for i < len(d) && i < len(k)-1 && d[i] == k[i] {
		i++
	}
	return strings.Repeat("../", len(d)-i) + strings.Join(k[i:], "/")
}

// sumKey maps a sums path back to a store key; ok is false when the path
// leads above the store root (the store cannot reach the file).
func sumKey(dir, p string) (string, bool) {
	k := path.Join(dir, p)
	if k == ".." || strings.HasPrefix(k, "../") || strings.HasPrefix(k, "/") {
		return "", false
	}
	return k, true
}

// snapshotDir is the directory holding metadataKey ("" = the store root).
func snapshotDir(metadataKey string) string {
	d := path.Dir(metadataKey)
	if d == "." || d == "/" {
		return ""
	}
	return d
}

// hashObject reads key once, returning its size, SHA-256 and CRC-32C.
func hashObject(ctx context.Context, st s3.Storage, key string) (int64, [32]byte, uint32, error) {
	var sum [32]byte
	rc, err := st.Get(ctx, key)
	if err != nil {
		return 0, sum, 0, err
	}
	defer rc.Close()
	sh := sha256.New()
	crc := crc32.New(s3.Castagnoli)
	n, err := io.Copy(io.MultiWriter(sh, crc), rc)
	if err != nil {
		return n, sum, 0, err
	}
	sh.Sum(sum[:0])
	return n, sum, crc.Sum32(), nil
}

// PublishSums writes the sums file of the snapshot whose `_metadata` goes
// to metadataKey: one line per written object and one for metadata (the
// bytes about to be published). Objects the writer hashed while sending
// (s3.PutHashed) are taken as recorded; objects with only a CRC-32C keep
// that; objects with neither (server-side copies) are read back once and
// hashed. Call it right before s3.CommitMetadata (or use CommitMetadata).
func PublishSums(ctx context.Context, st s3.Storage, metadataKey string, written []s3.Written, metadata []byte) error {
	dir := snapshotDir(metadataKey)
	sums := make([]Sum, 0, len(written)+1)
	seen := map[string]bool{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, w := range written {
		if seen[w.Key] || w.Key == metadataKey {
			continue
		}
		seen[w.Key] = true
		e := Sum{Path: relSumPath(dir, w.Key), Size: w.Size, SHA256: w.SHA256, HasSHA: w.SHA256 != [32]byte{}, CRC32C: w.CRC, HasCRC: w.CRC != 0}
		if e.HasSHA || e.HasCRC {
			sums = append(sums, e)
			continue
		}
		g.Go(func() error {
			n, sha, crc, err := hashObject(gctx, st, w.Key)
			if err != nil {
				return fmt.Errorf("savepoint: sums: reading back %s: %w", w.Key, err)
			}
			if n != w.Size {
				return fmt.Errorf("%w: savepoint: sums: %s has %d bytes, wrote %d", s3.ErrIntegrity, w.Key, n, w.Size)
			}
			e.SHA256, e.HasSHA, e.CRC32C, e.HasCRC = sha, true, crc, true
			mu.Lock()
			sums = append(sums, e)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	sums = append(sums, Sum{Path: relSumPath(dir, metadataKey), Size: int64(len(metadata)), SHA256: sha256.Sum256(metadata), HasSHA: true, CRC32C: s3.CRC32C(metadata), HasCRC: true})
	b, err := EncodeSums(sums)
	if err != nil {
		return err
	}
	key := s3.JoinKey(dir, SumsName)
	if err := st.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
		return fmt.Errorf("savepoint: writing %s: %w", key, err)
	}
	return nil
}

// CommitMetadata publishes a snapshot's sums file (PublishSums), then its
// metadata as s3.CommitMetadata does. Every sfstate writer publishes
// through it. An existing `_metadata` fails with s3.ErrExists before the
// sums file is touched, so a published snapshot keeps its sums (two
// writers racing for the same directory between that look and the
// PutIfAbsent of `_metadata` can still leave the loser's sums).
func CommitMetadata(ctx context.Context, st s3.Storage, written []s3.Written, metadataKey string, metadata []byte) error {
	if err := sumsBeforeMetadata(ctx, st, metadataKey, written, metadata); err != nil {
		return fmt.Errorf("publish %s: %w", metadataKey, err)
	}
	return s3.CommitMetadata(ctx, st, written, metadataKey, metadata)
}

func sumsBeforeMetadata(ctx context.Context, st s3.Storage, metadataKey string, written []s3.Written, metadata []byte) error {
	if _, err := st.Stat(ctx, metadataKey); err == nil {
		return fmt.Errorf("%w: %s", s3.ErrExists, joinName(st.String(), metadataKey))
	} else if !s3.IsNotExist(err) {
		return err
	}
	return PublishSums(ctx, st, metadataKey, written, metadata)
}

// ErrSumsExist is returned by RecordSums when the snapshot already has a
// sums file and overwriting was not asked for.
var ErrSumsExist = errors.New("savepoint: the snapshot already has a sums file")

// RecordSums hashes every object in sp's directory (the directory holding
// `_metadata`, `_metadata` included) and writes the sums file, so that a
// later Check finds bit rot in a savepoint sfstate did not write. Nothing
// else is modified; an existing sums file is kept (ErrSumsExist) unless
// overwrite. Objects outside the directory (the shared files of a
// checkpoint) are not recorded. It returns the number of files recorded.
func RecordSums(ctx context.Context, sp *Savepoint, overwrite bool) (int, error) {
	st, dir := sp.Store, snapshotDir(sp.MetadataKey)
	key := s3.JoinKey(dir, SumsName)
	if _, err := st.Stat(ctx, key); err == nil && !overwrite {
		return 0, fmt.Errorf("%w: %s", ErrSumsExist, joinName(st.String(), key))
	} else if err != nil && !s3.IsNotExist(err) {
		return 0, fmt.Errorf("savepoint: %s: %w", joinName(st.String(), key), err)
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	objs, err := st.List(ctx, prefix)
	if err != nil {
		return 0, fmt.Errorf("savepoint: listing %s: %w", sp.Name(), err)
	}
	var sums []Sum
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, o := range objs {
		if o.Key == key {
			continue
		}
		g.Go(func() error {
			n, sha, crc, err := hashObject(gctx, st, o.Key)
			if err != nil {
				return fmt.Errorf("savepoint: reading %s: %w", joinName(st.String(), o.Key), err)
			}
			mu.Lock()
			sums = append(sums, Sum{Path: relSumPath(dir, o.Key), Size: n, SHA256: sha, HasSHA: true, CRC32C: crc, HasCRC: true})
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	b, err := EncodeSums(sums)
	if err != nil {
		return 0, err
	}
	put := st.PutIfAbsent
	if overwrite {
		put = st.Put
	}
	if err := put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
		if s3.IsExist(err) {
			return 0, fmt.Errorf("%w: %s", ErrSumsExist, joinName(st.String(), key))
		}
		return 0, fmt.Errorf("savepoint: writing %s: %w", joinName(st.String(), key), err)
	}
	return len(sums), nil
}

// SumsOptions says how much content Check verifies against the sums file.
// Sizes are always compared when the snapshot has one.
type SumsOptions struct {
	// ReadData reads every listed file and compares its hashes.
	ReadData bool
	// SubsetN/SubsetOf read only the files of subset N of SubsetOf
	// (1-based): those whose SHA-256 of the path, read as a big-endian
	// uint32, is N-1 modulo SubsetOf. The choice depends on the path only,
	// so checking subsets 1/k..k/k reads every file exactly once.
	SubsetN, SubsetOf int
}

// ParseSubset parses "n/t" as in restic's --read-data-subset.
func ParseSubset(s string) (n, t int, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		n, err = strconv.Atoi(a)
		if err == nil {
			t, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || t < 1 || n < 1 || n > t {
		return 0, 0, fmt.Errorf("subset %q: want n/t with 1 <= n <= t", s)
	}
	return n, t, nil
}

// InSubset reports whether the file at p belongs to subset n of t.
func InSubset(p string, n, t int) bool {
	h := sha256.Sum256([]byte(p))
	return int(binary.BigEndian.Uint32(h[:4])%uint32(t)) == n-1
}

// SumsStats says what the sums check did.
type SumsStats struct {
	// Listed is the number of files in the sums file.
	Listed int `json:"listed"`
	// SizesChecked and HashesChecked count files verified.
	SizesChecked  int   `json:"sizesChecked"`
	HashesChecked int   `json:"hashesChecked"`
	BytesRead     int64 `json:"bytesRead"`
	// Unreachable counts listed files outside the store this snapshot was
	// opened in (a checkpoint opened at its chk-N directory).
	Unreachable int `json:"unreachable,omitempty"`
}

// checkSums verifies the snapshot against its sums file (absent: nothing
// to do, nil stats).
func (c *checker) checkSums() error {
	st, dir := c.sp.Store, snapshotDir(c.sp.MetadataKey)
	key := s3.JoinKey(dir, SumsName)
	name := joinName(st.String(), key)
	rc, err := st.Get(c.ctx, key)
	if s3.IsNotExist(err) {
		return nil
	}
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(rc, MaxSumsSize+1))
		rc.Close()
	}
	stats := &SumsStats{}
	c.stat(func(s *CheckStats) { s.Sums = stats })
	if err != nil {
		return c.add(Problem{Kind: ProblemRead, File: name, Offset: -1, KeyGroup: -1, Message: err.Error()})
	}
	sums, err := ParseSums(b, name)
	if err != nil {
		return c.add(Problem{Kind: ProblemChecksum, File: name, Offset: -1, KeyGroup: -1, Message: err.Error()})
	}
	stats.Listed = len(sums)
	o := c.o.Sums
	g, gctx := errgroup.WithContext(c.ctx)
	g.SetLimit(c.o.Concurrency)
	for _, e := range sums {
		k, ok := sumKey(dir, e.Path)
		if !ok {
			c.stat(func(*CheckStats) { stats.Unreachable++ })
			continue
		}
		read := o.ReadData || (o.SubsetOf > 0 && InSubset(e.Path, o.SubsetN, o.SubsetOf))
		g.Go(func() error { return c.checkSum(gctx, stats, k, e, read) })
	}
	return g.Wait()
}

func (c *checker) checkSum(ctx context.Context, stats *SumsStats, key string, e Sum, read bool) error {
	st := c.sp.Store
	file := joinName(st.String(), key)
	prob := func(kind, msg string) error {
		return c.add(Problem{Kind: kind, File: file, Offset: -1, KeyGroup: -1, Message: msg})
	}
	info, err := st.Stat(ctx, key)
	switch {
	case s3.IsNotExist(err):
		return prob(ProblemMissing, "listed in "+SumsName+" but missing")
	case err != nil:
		return prob(ProblemRead, err.Error())
	}
	c.stat(func(*CheckStats) { stats.SizesChecked++ })
	if info.Size != e.Size {
		return prob(ProblemSize, fmt.Sprintf("%d bytes, %s records %d", info.Size, SumsName, e.Size))
	}
	if !read {
		return nil
	}
	n, sha, crc, err := hashObject(ctx, st, key)
	c.stat(func(*CheckStats) { stats.BytesRead += n })
	if err != nil {
		return prob(ProblemRead, err.Error())
	}
	c.stat(func(*CheckStats) { stats.HashesChecked++ })
	switch {
	case n != e.Size:
		return prob(ProblemSize, fmt.Sprintf("read %d bytes, %s records %d", n, SumsName, e.Size))
	case e.HasSHA && sha != e.SHA256:
		return prob(ProblemChecksum, fmt.Sprintf("content changed: SHA-256 %x, %s records %x", sha, SumsName, e.SHA256))
	case e.HasCRC && crc != e.CRC32C:
		return prob(ProblemChecksum, fmt.Sprintf("content changed: CRC-32C %08x, %s records %08x", crc, SumsName, e.CRC32C))
	}
	return nil
}
