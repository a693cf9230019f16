package savepoint

import (
	"bytes"
	"testing"
)

// TestSavepointTrailerMatchesFixtures rebuilds every V4 fixture's trailer
// from its decoded properties: the bytes must be identical.
func TestSavepointTrailerMatchesFixtures(t *testing.T) {
	n := 0
	for _, name := range allFixtures(t) {
		md, err := ParseMetadata(readFixtureMetadata(t, name), name)
		if err != nil {
			t.Fatal(err)
		}
		if md.Version < 4 {
			continue
		}
		p, err := md.Properties()
		if err != nil {
			t.Fatal(err)
		}
		b, err := SavepointTrailer(*p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(b, md.Trailer) {
			i := 0
			for i < len(b) && i < len(md.Trailer) && b[i] == md.Trailer[i] {
				i++
			}
			t.Fatalf("%s: trailer differs at byte %d (len %d vs %d)", name, i, len(b), len(md.Trailer))
		}
		n++
	}
	if n == 0 {
		t.Fatal("no V4 fixtures")
	}
	if _, err := SavepointTrailer(Properties{FormatType: "OTHER", PostCheckpointAction: "NONE"}); err == nil {
		t.Fatal("bad format accepted")
	}
}

// TestWriteV4FromScratch builds a V4 file from a V3 model plus a generated
// trailer; it must parse with the intended properties.
func TestWriteV4FromScratch(t *testing.T) {
	md, err := ParseMetadata(readFixtureMetadata(t, "flink1.15-rocksdb-canonical-metadata-v3"), "v3")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := SavepointTrailer(Properties{Forced: true, FormatType: FormatCanonical, Name: "Suspend Savepoint", PostCheckpointAction: "SUSPEND"})
	if err != nil {
		t.Fatal(err)
	}
	md.Version, md.Trailer = 4, tr
	b, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	md2, err := ParseMetadata(b, "v4")
	if err != nil {
		t.Fatal(err)
	}
	p, err := md2.Properties()
	if err != nil || p.FormatType != FormatCanonical || p.Name != "Suspend Savepoint" || p.PostCheckpointAction != "SUSPEND" || !p.Forced || !p.IsSavepoint() {
		t.Fatalf("%+v %v", p, err)
	}
}
