package savepoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/s3"
)

const sumsFixture = "flink1.20-hashmap-canonical-valuestate-timers"

func sumsProblems(probs []Problem, kind string) []Problem {
	var out []Problem
	for _, p := range probs {
		if p.Kind == kind {
			out = append(out, p)
		}
	}
	return out
}

func TestSumsRoundTripAndParseErrors(t *testing.T) {
	in := []Sum{
		{Path: "b/x y", Size: 3, SHA256: [32]byte{1, 2}, HasSHA: true},
		{Path: "a", Size: 0, CRC32C: 0xdeadbeef, HasCRC: true},
		{Path: "../shared/s.sst", Size: 7, SHA256: [32]byte{9}, HasSHA: true, CRC32C: 1, HasCRC: true},
	}
	b, err := EncodeSums(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseSums(b, "sums")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || out[0].Path != "../shared/s.sst" || out[1].Path != "a" || out[2] != in[0] || out[1] != in[1] {
		t.Fatalf("round trip: %+v", out)
	}
	for _, bad := range []Sum{{Path: "a/../b", Size: 1, HasCRC: true}, {Path: "x\ny", Size: 1, HasCRC: true}, {Path: "/abs", Size: 1, HasCRC: true}, {Path: "a", Size: 1}, {Path: "..", Size: 1, HasCRC: true}} {
		if _, err := EncodeSums([]Sum{bad}); err == nil {
			t.Errorf("EncodeSums(%+v) accepted", bad)
		}
	}
	lines := strings.SplitAfter(string(b), "\n")
	cases := map[string]string{
		"truncated":  string(b[:len(b)-3]),
		"header":     "sfstate-sums 2\n",
		"size":       lines[0] + "-1 - 00000000 a\n",
		"sha":        lines[0] + "1 abc - a\n",
		"crc":        lines[0] + "1 - 0000 a\n",
		"nohash":     lines[0] + "1 - - a\n",
		"order":      lines[0] + lines[2] + lines[1],
		"dup":        lines[0] + lines[1] + lines[1],
		"dotdot":     lines[0] + "1 - 00000000 a/../../b\n",
		"fields":     lines[0] + "1 -\n",
		"empty":      "",
		"empty-path": lines[0] + "1 - 00000000 \n",
	}
	for name, s := range cases {
		_, err := ParseSums([]byte(s), "f")
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "f") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ParseSums([]byte(cases["order"]), "f"); !strings.Contains(fmt.Sprint(err), fmt.Sprintf("offset %d", len(lines[0])+len(lines[2]))) {
		t.Errorf("order error names no offset: %v", err)
	}
}

func FuzzParseSums(f *testing.F) {
	b, _ := EncodeSums([]Sum{{Path: "a", Size: 1, HasCRC: true, CRC32C: 5}, {Path: "../s/b", Size: 2, HasSHA: true, SHA256: [32]byte{3}}})
	f.Add(b)
	f.Add([]byte(sumsHeader + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSums(b, "f")
		if err != nil {
			return
		}
		again, err := EncodeSums(s)
		if err != nil {
			t.Fatalf("parsed sums do not encode: %v", err)
		}
		if s2, err := ParseSums(again, "f"); err != nil || len(s2) != len(s) {
			t.Fatalf("re-encoded sums: %v", err)
		}
	})
}

func TestSumPaths(t *testing.T) {
	for _, c := range []struct{ dir, key, rel string }{
		{"", "a/b", "a/b"},
		{"sp", "sp/x", "x"},
		{"chk-3", "shared/s.sst", "../shared/s.sst"},
		{"job/chk-3", "job/shared/s.sst", "../shared/s.sst"},
		{"a/b", "c", "../../c"},
	} {
		if got := relSumPath(c.dir, c.key); got != c.rel {
			t.Errorf("relSumPath(%q, %q) = %q, want %q", c.dir, c.key, got, c.rel)
		}
		if k, ok := sumKey(c.dir, c.rel); !ok || k != c.key {
			t.Errorf("sumKey(%q, %q) = %q %v", c.dir, c.rel, k, ok)
		}
	}
	if _, ok := sumKey("chk-3", "../../x"); ok {
		t.Error("path above the store root accepted")
	}
}

// TestSubsetDeterministic: the subsets 1/t..t/t partition the files, the
// same way on every call, and do not all land in one subset.
func TestSubsetDeterministic(t *testing.T) {
	const tot = 10
	counts := make([]int, tot)
	for i := 0; i < 1000; i++ {
		p := fmt.Sprintf("%08x-file", i*7919)
		hits := 0
		for n := 1; n <= tot; n++ {
			if InSubset(p, n, tot) {
				hits++
				counts[n-1]++
				if !InSubset(p, n, tot) {
					t.Fatal("not deterministic")
				}
			}
		}
		if hits != 1 {
			t.Fatalf("%s in %d subsets", p, hits)
		}
	}
	for n, c := range counts {
		if c < 50 || c > 150 {
			t.Errorf("subset %d/%d holds %d of 1000 files", n+1, tot, c)
		}
	}
	for _, bad := range []string{"0/10", "11/10", "1", "a/b", "1/0"} {
		if _, _, err := ParseSubset(bad); err == nil {
			t.Errorf("ParseSubset(%q) accepted", bad)
		}
	}
	if n, tt, err := ParseSubset("3/10"); err != nil || n != 3 || tt != 10 {
		t.Errorf("ParseSubset(3/10) = %d %d %v", n, tt, err)
	}
}

// TestRecordSumsFlinkFixture: sums recorded for a Flink savepoint make a
// flipped byte in any file (that Check's structural pass cannot see)
// visible with ReadData; truncation is found from sizes alone; the subset
// reads only its files.
func TestRecordSumsFlinkFixture(t *testing.T) {
	ctx := context.Background()
	dir := copyFixture(t, sumsFixture)
	sp := openDir(t, dir)
	ents, _ := os.ReadDir(dir)
	n, err := RecordSums(ctx, sp, false)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ents) {
		t.Fatalf("recorded %d files, directory has %d", n, len(ents))
	}
	if _, err := RecordSums(ctx, sp, false); !errors.Is(err, ErrSumsExist) {
		t.Fatalf("second record: %v", err)
	}
	probs, stats := Check(ctx, openDir(t, dir), CheckOptions{Sums: SumsOptions{ReadData: true}})
	if len(probs) != 0 || stats.Sums == nil || stats.Sums.HashesChecked != n || stats.Sums.SizesChecked != n {
		t.Fatalf("clean: %v %+v", probs, stats.Sums)
	}
	// Flip one byte in every file in turn, _metadata included.
	for _, e := range ents {
		if e.Name() == MetadataName {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, _ := os.ReadFile(p)
		off := int64(len(b) - 1)
		orig := b[off]
		patchFile(t, p, off, orig^0x01)
		probs, _ := Check(ctx, openDir(t, dir), CheckOptions{SkipData: true, Sums: SumsOptions{ReadData: true}})
		cs := sumsProblems(probs, ProblemChecksum)
		if len(cs) != 1 || !strings.HasSuffix(cs[0].File, "/"+e.Name()) {
			t.Errorf("flipped byte in %s: %v", e.Name(), probs)
		}
		probs, _ = Check(ctx, openDir(t, dir), CheckOptions{SkipData: true})
		if len(sumsProblems(probs, ProblemChecksum)) != 0 {
			t.Errorf("%s: hashes compared without ReadData", e.Name())
		}
		patchFile(t, p, off, orig)
	}
	// _metadata: flip a byte of an operator id, which still parses.
	mp := filepath.Join(dir, MetadataName)
	mb, _ := os.ReadFile(mp)
	idOff := int64(bytes.Index(mb, sp.Meta.Operators[0].ID[:]))
	if idOff < 0 {
		t.Fatal("operator id not found in _metadata")
	}
	patchFile(t, mp, idOff, mb[idOff]^0x01)
	probs, _ = Check(ctx, openDir(t, dir), CheckOptions{SkipData: true, Sums: SumsOptions{ReadData: true}})
	if cs := sumsProblems(probs, ProblemChecksum); len(cs) != 1 || !strings.HasSuffix(cs[0].File, MetadataName) {
		t.Errorf("flipped byte in _metadata: %v", probs)
	}
	patchFile(t, mp, idOff, mb[idOff])

	// Truncation: found without reading data.
	victim := ""
	for _, e := range ents {
		if e.Name() != MetadataName {
			victim = e.Name()
			break
		}
	}
	vp := filepath.Join(dir, victim)
	vb, _ := os.ReadFile(vp)
	if err := os.WriteFile(vp, append(vb, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	probs, _ = Check(ctx, openDir(t, dir), CheckOptions{SkipData: true})
	var ss []Problem
	for _, p := range sumsProblems(probs, ProblemSize) {
		if strings.Contains(p.Message, SumsName) {
			ss = append(ss, p)
		}
	}
	if len(ss) != 1 || !strings.HasSuffix(ss[0].File, "/"+victim) {
		t.Errorf("grown file: %v", probs)
	}
	os.WriteFile(vp, vb, 0o644)

	// Subsets: each reads only its own files, together all of them.
	total := 0
	for k := 1; k <= 3; k++ {
		_, st := Check(ctx, openDir(t, dir), CheckOptions{SkipData: true, Sums: SumsOptions{SubsetN: k, SubsetOf: 3}})
		want := 0
		for _, e := range ents {
			if InSubset(e.Name(), k, 3) {
				want++
			}
		}
		if st.Sums.HashesChecked != want {
			t.Errorf("subset %d/3 read %d files, want %d", k, st.Sums.HashesChecked, want)
		}
		total += st.Sums.HashesChecked
	}
	if total != n {
		t.Errorf("subsets read %d files in all, want %d", total, n)
	}
	// Overwrite when asked; missing file reported.
	if _, err := RecordSums(ctx, sp, true); err != nil {
		t.Fatal(err)
	}
	os.Remove(vp)
	probs, _ = Check(ctx, openDir(t, dir), CheckOptions{SkipData: true})
	if len(sumsProblems(probs, ProblemMissing)) == 0 {
		t.Errorf("removed file not reported: %v", probs)
	}
}

// TestCommitMetadataWritesSums: a snapshot published through
// CommitMetadata lists every written object and `_metadata`, hashes
// server-side copies by reading them back, and refuses to touch the sums
// of a published snapshot.
func TestCommitMetadataWritesSums(t *testing.T) {
	ctx := context.Background()
	st := mustLocal(t, t.TempDir())
	w1, err := s3.PutHashed(ctx, st, "sp/a", strings.NewReader("hello"), 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "shared/s", strings.NewReader("shared!"), 7); err != nil {
		t.Fatal(err)
	}
	md := []byte("metadata")
	written := []s3.Written{w1, {Key: "shared/s", Size: 7}}
	if err := CommitMetadata(ctx, st, written, "sp/_metadata", md); err != nil {
		t.Fatal(err)
	}
	rc, err := st.Get(ctx, "sp/"+SumsName)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(rc)
	rc.Close()
	sums, err := ParseSums(buf.Bytes(), SumsName)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 3 || sums[0].Path != "../shared/s" || !sums[0].HasSHA || sums[1].Path != MetadataName || sums[2].Path != "a" || sums[2].SHA256 != w1.SHA256 {
		t.Fatalf("sums: %+v", sums)
	}
	before := buf.String()
	if err := CommitMetadata(ctx, st, nil, "sp/_metadata", []byte("other")); !s3.IsExist(err) {
		t.Fatalf("second publish: %v", err)
	}
	rc, _ = st.Get(ctx, "sp/"+SumsName)
	buf.Reset()
	buf.ReadFrom(rc)
	rc.Close()
	if buf.String() != before {
		t.Fatal("losing writer replaced the sums of a published snapshot")
	}
}
